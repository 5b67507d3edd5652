package pki

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
)

// Option tunes Reconcile.
type Option func(*options)

type options struct {
	log      io.Writer
	dryRun   bool
	newCA    bool
	newSAKey bool
	// renew names the certs renewal was asked for (Renew); newKeys gives
	// the ordinary leaves among them new keys.
	renew   map[string]bool
	newKeys bool
}

// WithLog makes Reconcile write one line per cert to w as it decides
// ("pki: reissued kubernetes sans: missing cp4, 192.168.122.14") and one per
// corrected file mode. Private keys are never written to w.
func WithLog(w io.Writer) Option { return func(o *options) { o.log = w } }

// DryRun makes Reconcile decide without touching the disk: the Report says
// what would be created, reissued, re-signed, written or have its mode
// corrected. Certs that must be made are made in memory only and dropped,
// so every decision is the real one; a Report entry for such a cert carries
// no serial. The same errors as a real run are returned (a
// *PreciousKeyError, a bad kubeletCert).
func DryRun() Option { return func(o *options) { o.dryRun = true } }

// AllowNewCA permits Reconcile to make a new CA where it would otherwise
// return a *PreciousKeyError: ca-key.pem is missing or unreadable while
// ca.pem or certs exist, or it signed none of the certs on disk. A new CA
// key means every cert is reissued and every kubeconfig and node that
// trusts the old ca.pem must get the new one. It also lets Reconcile re-sign
// the CA cert (same key) with the subject of pki.subject when they differ
// (otherwise the CA keeps its subject and the Report warns). It never
// replaces a usable CA key: a damaged ca.pem is re-signed from ca-key.pem
// with or without it. The CLI's `khw pki --new-ca` sets it.
func AllowNewCA() Option { return func(o *options) { o.newCA = true } }

// AllowNewServiceAccountKey permits Reconcile to make a new
// service-account-key.pem where it would otherwise return a
// *PreciousKeyError (the key is missing or unreadable while
// service-account.pem exists) or keep the old key with a warning (the key is
// of another algorithm or size than pki.keyAlgorithm/keySize). A new key
// invalidates every ServiceAccount token signed with the old one. The CLI's
// `khw pki --new-service-account-key` sets it.
func AllowNewServiceAccountKey() Option { return func(o *options) { o.newSAKey = true } }

// Renew makes Reconcile reissue the certs called names (Spec names: ca,
// kubernetes, w1, …) even where nothing is wrong with them, with the
// reason ReasonRequested and a validity of pki.certValidity from now.
// Without newKeys each keeps its key (Resigned): the cert is signed for
// the key on disk, as `cfssl sign` does with a CSR made from the old key.
// With newKeys the ordinary leaves get new keys (Reissued). The precious
// keys are never replaced by a renewal: the CA is re-signed from
// ca-key.pem (same subject and key, so every cert it signed stays valid;
// a new CA key is a CA rotation, AllowNewCA) and the service-account cert
// for service-account-key.pem (its tokens stay valid). A cert whose
// renewal cannot be done by khw is refused before anything is decided
// (*RenewError): a name that is no Spec, an imported kubelet cert
// (nodes[].kubeletCert). A cert that must change anyway (see Reconcile)
// changes as it would without Renew, its reasons with ReasonRequested
// added.
func Renew(names []string, newKeys bool) Option {
	return func(o *options) {
		o.renew = map[string]bool{}
		for _, n := range names {
			o.renew[n] = true
		}
		o.newKeys = newKeys
	}
}

// RenewError is a Renew name khw cannot renew.
type RenewError struct {
	Name string
	// Problem says why; Fix what to do instead.
	Problem, Fix string
}

func (e *RenewError) Error() string {
	return fmt.Sprintf("cannot renew %q: %s (fix: %s)", e.Name, e.Problem, e.Fix)
}

// checkRenew refuses Renew names that are no Spec or name an imported cert.
func (r *reconciler) checkRenew(specs []Spec) error {
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(r.opts.renew)) {
		i := slices.IndexFunc(specs, func(s Spec) bool { return s.Name == n })
		switch {
		case i < 0:
			fix := "use one of: " + strings.Join(names, ", ")
			if nd, ok := r.c.Node(n); ok && nd.TLSBootstrap {
				errs = append(errs, &RenewError{Name: n, Problem: n + " joined by TLS bootstrap: khw issued no cert for it; its kubelet renews its own client cert (rotateCertificates) and asks for a new serving cert with a CSR",
					Fix: "leave it to the kubelet; khw up (step 10) approves its serving CSR after checking it"})
				continue
			}
			errs = append(errs, &RenewError{Name: n, Problem: "no such certificate", Fix: fix})
		case specs[i].Import != nil:
			errs = append(errs, &RenewError{Name: n, Problem: "it is imported from nodes[].kubeletCert (" + specs[i].Import.Cert + "): khw does not issue it",
				Fix: "have it reissued by whoever issued it and point kubeletCert at the new files, then run khw up"})
		}
	}
	return errors.Join(errs...)
}

// renewing reports whether renewal of cert name was asked for (Renew).
func (r *reconciler) renewing(name string) bool { return r.opts.renew[name] }

// requested is the reason of a renewal asked for with Renew.
func requested(how string) Reason {
	return Reason{ReasonRequested, "renewal asked for (khw pki renew); " + how}
}

// Reconcile makes the pki directory dir match Specs(c) at time now (pass
// time.Now(); tests pass other instants to simulate expiry).
//
// It first decides everything without writing: c is validated (a
// *config.ValidationError), worker names are checked against component cert
// names, every CSR JSON is generated and parsed back with cfssl, every
// kubeletCert import is verified, the CA and the precious keys are checked,
// and every cert that must change is made in memory. Any failure there is
// returned with a nil Report and nothing written, not even dir. Only then is
// dir made (0700) and are the files written.
//
// Ordinary leaf certs (admin, kubelets, kube-controller-manager,
// kube-scheduler, kube-proxy, kubernetes):
//   - kept byte for byte (same serial) when cert and key are readable,
//     belong together, are signed by the current CA, are valid at now and do
//     not expire within pki.renewBefore, and have the Spec's subject (CN and
//     O, and the informational OU, L, ST, C of pki.subject), exact SAN set,
//     key algorithm/size and key usages/EKUs;
//   - otherwise a new key and cert are made with cfssl, and every reason
//     (ReasonCode) is reported.
//
// The CA (ca.pem, ca-key.pem) comes first, and its key is precious:
//   - a fresh directory (neither ca.pem, ca-key.pem nor any cert) gets a new
//     CA;
//   - if ca-key.pem parses, the key is kept whatever else is wrong: a
//     missing, unreadable, mismatched, non-CA, expired, not yet valid or
//     expiring ca.pem is re-signed from it (Resigned) with the subject the
//     existing certs name as their issuer, so they stay valid and are kept;
//   - if ca-key.pem is missing or unreadable while ca.pem or any cert
//     exists, or parses but signed none of the certs on disk and is not the
//     key of ca.pem, Reconcile returns a *PreciousKeyError unless AllowNewCA
//     is given (then a new CA is made and every cert reissued);
//   - a usable CA whose subject differs from the Spec (pki.subject was
//     changed) is kept with a ReasonSubject warning, since a CA cert with a
//     new subject is a new CA to everyone who trusts ca.pem; with AllowNewCA
//     it is re-signed from the same key with the new subject.
//
// The service-account key is precious too (it signs every ServiceAccount
// token): an intact key is kept and its cert re-signed when the cert is
// wrong (Resigned); a key of another algorithm than pki.keyAlgorithm is kept
// with a warning; a missing or unreadable key while service-account.pem
// exists is a *PreciousKeyError unless AllowNewServiceAccountKey is given.
//
// A kubelet cert given by nodes[].kubeletCert is verified (chains to the CA,
// CN system:node:<name>, O system:nodes, SANs name and IP, client and server
// auth, valid) and copied, never issued; a bad one is a *config.FieldError
// naming the field and the fix. Certs in dir that no Spec asks for are
// reported Stale and left alone.
//
// <name>-csr.json always describes the cert next to it: it is written with
// a new cert, and for a kept cert only when missing or when it does not
// describe that cert (subject and key as the cert has them). For an
// imported kubelet cert it is the recipe khw's own cert would have (the one
// the FieldError fixes refer to). ca-config.json is written when it changed.
//
// Keys are written 0600 and certs and CSR JSON 0644, each atomically
// (fsutil). The CA's files are written first (key, then cert); then the
// other certs' files concurrently (fsync latency dominates a fresh run),
// each key before its cert, so a crash leaves at worst a new key next to an
// old cert (or no cert), which the next run sees as ReasonKeyMismatch (or
// ReasonMissing) and repairs, and never certs whose CA key is not on disk. A
// file whose content is right but whose mode is not is chmod'ed and listed in
// Report.ModeFixed.
//
// A zero now means time.Now(). Once writing started, the returned error joins
// every write failure and the Report describes what was done.
func Reconcile(c *config.Cluster, dir string, now time.Time, opts ...Option) (*Report, error) {
	if _, err := c.Validate(); err != nil {
		return nil, err
	}
	if now.IsZero() {
		now = time.Now()
	}
	r := &reconciler{c: c, dir: dir, now: now}
	for _, o := range opts {
		o(&r.opts)
	}
	specs := Specs(c)
	if err := checkNames(c, specs); err != nil {
		return nil, err
	}
	if err := r.checkRenew(specs); err != nil {
		return nil, err
	}
	r.snapshotKeys()
	units, err := r.plan(specs)
	if err != nil {
		return nil, err
	}

	r.rep = &Report{Dir: dir, DryRun: r.opts.dryRun, Certs: []CertStatus{}, Written: []string{}, ModeFixed: []ModeFix{}}
	if st, err := os.Stat(dir); err == nil && st.IsDir() && st.Mode().Perm() != fsutil.DirMode {
		r.rep.ModeFixed = append(r.rep.ModeFixed, ModeFix{File: ".", Was: octal(st.Mode()), Now: octal(fsutil.DirMode)})
		r.logf("mode %s", r.rep.ModeFixed[0])
	}
	if !r.opts.dryRun {
		if err := fsutil.EnsureDir(dir); err != nil {
			return nil, fmt.Errorf("pki: %w (fix: make the state directory writable)", err)
		}
	}

	// The CA key first, so no cert reaches the disk before the key that
	// signed it (a lost ca.pem is re-signed from the key; a lost key would be
	// a PreciousKeyError); then everything else concurrently. Outcomes are
	// applied in plan order, so the Report is deterministic.
	outs := make([]outcome, len(units))
	caKeyFile := keyFile(CAName)
	for _, f := range units[caUnit].files {
		if f.name == caKeyFile {
			outs[caUnit].err = r.put(&outs[caUnit], f)
		}
	}
	if outs[caUnit].err == nil {
		forEach(len(units), func(i int) {
			if i != caUnit {
				outs[i] = r.write(units[i], "")
				return
			}
			rest := r.write(units[i], caKeyFile)
			outs[i] = outcome{written: append(outs[i].written, rest.written...), modes: append(outs[i].modes, rest.modes...), err: rest.err}
		})
	}
	var errs []error
	for i, o := range outs {
		if i != caUnit && outs[caUnit].err != nil {
			continue
		}
		errs = append(errs, r.apply(units[i], o))
	}
	r.reportStale(specs)
	return r.rep, errors.Join(errs...)
}

// checkNames rejects a cert table in which two certs (or a cert and
// ca-config.json) would write the same file: a worker "kubernetes" would
// write kubernetes.pem, a worker "ca-key" its cert over ca-key.pem, the CA's
// private key. config.Validate refuses such node names already
// (config.ReservedNodeName); this is the writer's own guard, on the file
// names it is about to write. The error is a FieldError on the worker's
// nodes[i].name.
func checkNames(c *config.Cluster, specs []Spec) error {
	owner := map[string]Spec{CAConfigFile: {Name: config.CAConfigBase}}
	for _, s := range specs {
		for _, f := range []string{csrFile(s.Name), certFile(s.Name), keyFile(s.Name)} {
			o, taken := owner[f]
			if !taken {
				owner[f] = s
				continue
			}
			// Blame the worker; of two workers, the one for which f is not
			// its key file (w1-key, not w1, for w1-key.pem).
			node, other := s, o
			if node.Node == "" || (o.Node != "" && f == keyFile(s.Name)) {
				node, other = o, s
			}
			what := "the files of the " + other.Name + " cert"
			if other.Name == config.CAConfigBase {
				what = "cfssl's signing config"
			}
			i := slices.IndexFunc(c.Nodes, func(n config.Node) bool { return n.Name == node.Node })
			field := "nodes[?].name"
			if i >= 0 {
				field = fmt.Sprintf("nodes[%d].name", i)
			}
			return &config.FieldError{Field: field, Value: node.Name,
				Problem: "would write " + f + ", which is also one of " + what + " (a worker's cert, key and CSR are named after it)",
				Fix:     "rename the worker, e.g. to w" + fmt.Sprint(len(c.Workers())+1)}
		}
	}
	return nil
}

type reconciler struct {
	c    *config.Cluster
	dir  string
	now  time.Time
	opts options
	rep  *Report
	// keysAtStart maps each <name>-key.pem of dir to its content before the
	// run wrote anything (see put).
	keysAtStart map[string][]byte
}

func (r *reconciler) logf(format string, args ...any) {
	if r.opts.log != nil {
		fmt.Fprintf(r.opts.log, "pki: "+format+"\n", args...)
	}
}

// maxParallel bounds concurrent file writes and signings. Writes dominate a
// fresh run (every atomic write fsyncs the file and the directory) and
// concurrent fsyncs share journal commits: on the 2-core build machine a
// fresh default cluster took ~35 ms instead of ~150 ms one file at a time.
const maxParallel = 16

// forEach runs f(0..n-1) concurrently, at most maxParallel at a time.
func forEach(n int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxParallel)
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// file is one file of the plan: its name in dir, content and mode.
type file struct {
	name string
	data []byte
	perm fs.FileMode
}

// unit is the decision for one cert (or ca-config.json): its status, the
// cert that will be on disk, and its files in write order. err is a
// planning failure (nothing is written then).
type unit struct {
	st    *CertStatus
	cert  *x509.Certificate
	files []file
	err   error
}

// outcome is what writing one unit did.
type outcome struct {
	written []string
	modes   []ModeFix
	err     error
}

// Unit indexes of the plan: ca-config.json, the CA, then the other Specs in
// order.
const (
	configUnit = 0
	caUnit     = 1
)

// write stores a unit's files in order, except the one named skip (already
// written), and stops at the first failure. Written and mode fixes are noted
// in the unit's file order.
func (r *reconciler) write(u unit, skip string) (o outcome) {
	for _, f := range u.files {
		if f.name == skip {
			continue
		}
		if o.err = r.put(&o, f); o.err != nil {
			break
		}
	}
	return o
}

// put stores f unless dir already holds exactly its content with its mode.
// Same content with another mode is a chmod, noted in o.modes; other content
// is an atomic write, noted in o.written. With DryRun it only notes.
//
// A file that holds a private key is replaced only by a private key: a cert
// or CSR JSON written over ca-key.pem would lose the CA for good, whatever
// name mix-up led there (checkNames and config.Validate prevent the ones
// known). Such a write is an error and leaves the file as it is. The one
// exception is a file other than a key file that holds an exact copy of a
// <x>-key.pem as it was when this run began (a key pasted over a cert): the
// key is still in its own file, so the cert may be repaired.
func (r *reconciler) put(o *outcome, f file) error {
	path := filepath.Join(r.dir, f.name)
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pki: %s %v (fix: remove it or make it readable)", path, err)
	}
	if err == nil && holdsPrivateKey(old) && !holdsPrivateKey(f.data) && !r.keyCopy(f.name, old) {
		return fmt.Errorf("pki: refusing to replace %s, which holds a private key, with a file that does not (a node or cert name that collides with a key file; fix: rename the node in cluster.yaml, or move %s away if you are sure no cert needs that key)", path, f.name)
	}
	if err == nil && bytes.Equal(old, f.data) {
		st, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("pki: %w", err)
		}
		if st.Mode().Perm() == f.perm {
			return nil
		}
		o.modes = append(o.modes, ModeFix{File: f.name, Was: octal(st.Mode()), Now: octal(f.perm)})
		if r.opts.dryRun {
			return nil
		}
		if err := os.Chmod(path, f.perm); err != nil {
			return fmt.Errorf("pki: set the mode of %s to %s: %w", path, octal(f.perm), err)
		}
		return nil
	}
	o.written = append(o.written, f.name)
	if r.opts.dryRun {
		return nil
	}
	if err := fsutil.WriteFileAtomic(path, f.data, f.perm); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

// apply adds a unit and what writing it did to the Report (and the log) and
// returns the write error. A cert whose files failed gets no status: the
// error names it.
func (r *reconciler) apply(u unit, o outcome) error {
	pos := func(name string) int { return slices.IndexFunc(u.files, func(f file) bool { return f.name == name }) }
	slices.SortStableFunc(o.written, func(a, b string) int { return pos(a) - pos(b) })
	slices.SortStableFunc(o.modes, func(a, b ModeFix) int { return pos(a.File) - pos(b.File) })
	r.rep.Written = append(r.rep.Written, o.written...)
	r.rep.ModeFixed = append(r.rep.ModeFixed, o.modes...)
	for _, m := range o.modes {
		r.logf("mode %s", m)
	}
	if u.st != nil && o.err == nil {
		r.addStatus(*u.st, u.cert, u.st.Action == Kept || u.st.Action == Imported || !r.opts.dryRun)
	}
	return o.err
}

// addStatus appends a cert's status; onDisk says cert is the one on disk
// (its serial and expiry are reported).
func (r *reconciler) addStatus(s CertStatus, cert *x509.Certificate, onDisk bool) {
	if cert != nil && onDisk {
		s.Serial = formatSerial(cert.SerialNumber)
		s.NotAfter = cert.NotAfter.UTC()
	}
	r.rep.Certs = append(r.rep.Certs, s)
	r.logf("%s", s.line())
}

// reportStale flags <name>.pem files in dir that no Spec names.
func (r *reconciler) reportStale(specs []Spec) {
	want := map[string]bool{}
	for _, s := range specs {
		want[s.Name] = true
	}
	for _, name := range certNames(r.dir) {
		if want[name] {
			continue
		}
		p := loadPair(r.dir, name)
		detail := "no cert of that name in the cert table of cluster.yaml"
		if p.cert != nil {
			if node, ok := strings.CutPrefix(p.cert.Subject.CommonName, nodeUserPrefix); ok {
				if n, found := r.c.Node(node); !found {
					detail = "node " + node + " is not in cluster.yaml"
				} else if n.TLSBootstrap {
					detail = "node " + node + " joins by TLS bootstrap now, so khw issues no cert for it"
				}
			}
		}
		detail += fmt.Sprintf("; left in place: remove %s, %s and %s by hand once nothing uses them",
			certFile(name), keyFile(name), csrFile(name))
		r.addStatus(CertStatus{Name: name, Action: Stale, Reasons: []Reason{{ReasonNotInConfig, detail}}}, p.cert, true)
	}
}

// keyCopy reports whether data, about to be replaced in file name, is an
// exact copy of what some <x>-key.pem held when Reconcile began (see put).
// A key file's own name never qualifies.
func (r *reconciler) keyCopy(name string, data []byte) bool {
	if strings.HasSuffix(name, config.KeySuffix+".pem") {
		return false
	}
	for _, k := range r.keysAtStart {
		if bytes.Equal(k, data) {
			return true
		}
	}
	return false
}

// snapshotKeys records the content of every <name>-key.pem in dir (for
// keyCopy), before anything is written.
func (r *reconciler) snapshotKeys() {
	r.keysAtStart = map[string][]byte{}
	entries, _ := os.ReadDir(r.dir)
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), config.KeySuffix+".pem") {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(r.dir, e.Name())); err == nil {
			r.keysAtStart[e.Name()] = b
		}
	}
}

// holdsPrivateKey reports whether data has a PEM block of a private key
// ("PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY", "ENCRYPTED PRIVATE
// KEY", … : RFC 7468 and the OpenSSL legacy labels all end so).
func holdsPrivateKey(data []byte) bool {
	for len(data) > 0 {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return false
		}
		if strings.HasSuffix(b.Type, "PRIVATE KEY") {
			return true
		}
	}
	return false
}
