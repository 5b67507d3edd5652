package pki

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cloudflare/cfssl/csr"
	"github.com/cloudflare/cfssl/helpers"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
)

// Option tunes Reconcile.
type Option func(*options)

type options struct {
	log    io.Writer
	dryRun bool
}

// WithLog makes Reconcile write one line per cert to w as it decides
// ("pki: reissued kubernetes sans: missing cp4, 192.168.122.14"). Private
// keys are never written to w.
func WithLog(w io.Writer) Option { return func(o *options) { o.log = w } }

// DryRun makes Reconcile decide without touching the disk: the Report says
// what would be created, reissued or written. A CA that must be regenerated
// is generated in memory only, so the leaf decisions are the real ones.
func DryRun() Option { return func(o *options) { o.dryRun = true } }

// Reconcile makes the pki directory dir match Specs(c) at time now (pass
// time.Now(); tests pass other instants to simulate expiry).
//
// It ensures dir exists with mode 0700, writes ca-config.json and
// <name>-csr.json for every Spec (only when their content changed), then for
// each cert:
//   - keeps it byte for byte (same serial) when cert and key are readable,
//     belong together, are signed by the current CA, are valid at now and do
//     not expire within pki.renewBefore, and have the Spec's CN/O, exact SAN
//     set, key algorithm/size and key usages/EKUs;
//   - otherwise generates a new key and cert with cfssl and reports every
//     reason (ReasonCode) it found.
//
// The CA comes first: if ca.pem or ca-key.pem is missing, unreadable,
// mismatched, not a CA, expired or not yet valid, a new CA (new key) is made
// and, since nothing then verifies against it, every cert is reissued. A CA
// that only expires within pki.renewBefore is re-signed with its own key, so
// the certs it signed stay valid.
//
// Keys are written 0600 and certs 0644, each atomically (fsutil); a key is
// written before its cert, so a crash between the two leaves a new key next
// to the old cert (or no cert), which the next run sees as ReasonKeyMismatch
// (or ReasonMissing) and repairs. The files of different certs, the CA's
// included, are written concurrently (fsync latency dominates a fresh run);
// should a crash leave certs signed by a new CA that never reached the disk,
// the next run finds them not signed by the CA on disk and reissues them.
// A kubelet cert given by nodes[].kubeletCert is verified (chains to ca.pem,
// CN system:node:<name>, O system:nodes, SANs name and IP, client and server
// auth, valid) and copied, never issued; a bad one is a *config.FieldError
// naming the field and the fix. Certs in dir that no Spec asks for are
// reported Stale and left alone.
//
// c is validated first (a *config.ValidationError if it is not valid); a
// zero now means time.Now(). The returned error joins every failure; the
// Report is non-nil whenever dir could be prepared and describes what was
// done.
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
	r.rep = &Report{Dir: dir, DryRun: r.opts.dryRun, Certs: []CertStatus{}, Written: []string{}}
	if !r.opts.dryRun {
		if err := fsutil.EnsureDir(dir); err != nil {
			return nil, fmt.Errorf("pki: %w (fix: make the state directory writable)", err)
		}
	}
	specs := Specs(c)
	if err := checkNames(c, specs); err != nil {
		return r.rep, err
	}
	cfgJSON := caConfigJSON(c)
	policy, err := loadPolicy(cfgJSON)
	if err != nil {
		return r.rep, err
	}
	// Every CSR JSON is parsed back with cfssl, so what is signed is exactly
	// what the files say.
	csrs := make([][]byte, len(specs))
	reqs := make([]*csr.CertificateRequest, len(specs))
	for i, s := range specs {
		csrs[i] = csrJSON(c, s)
		if reqs[i], err = parseCSRJSON(s.Name, csrs[i]); err != nil {
			return r.rep, err
		}
	}
	// The CA is decided (and made, if needed) in memory first; its files are
	// written together with everything else below.
	ca, caKey, caNew, caOut, err := r.reconcileCA(specs[0], reqs[0])
	if err != nil {
		return r.rep, err
	}
	is, err := newIssuer(ca, caKey, policy, c.PKI.CertValidity)
	if err != nil {
		return r.rep, err
	}

	// One concurrent round: ca-config.json, every CSR JSON, the CA pair and
	// every leaf. Outcomes are applied in this fixed order.
	n := len(specs)
	outs := make([]outcome, 1+2*n)
	forEach(len(outs), func(i int) {
		o := &outs[i]
		switch {
		case i == 0:
			o.err = r.put(o, CAConfigFile, cfgJSON, fsutil.PublicMode)
		case i <= n:
			o.err = r.put(o, csrFile(specs[i-1].Name), csrs[i-1], fsutil.PublicMode)
		case i == n+1:
			*o = caOut()
		default:
			switch s := specs[i-n-1]; {
			case s.Import != nil:
				*o = r.importCert(s, ca)
			default:
				*o = r.reconcileLeaf(s, reqs[i-n-1], is, caNew)
			}
		}
	})
	var errs []error
	for _, o := range outs {
		errs = append(errs, r.apply(o))
	}
	r.reportStale(specs)
	return r.rep, errors.Join(errs...)
}

// checkNames rejects a worker whose name is also the name of a component
// cert (a node called "kubernetes" would overwrite kubernetes.pem).
func checkNames(c *config.Cluster, specs []Spec) error {
	component := map[string]bool{}
	for _, s := range specs {
		if s.Node == "" {
			component[s.Name] = true
		}
	}
	for _, s := range specs {
		if s.Node != "" && component[s.Name] {
			i := slices.IndexFunc(c.Nodes, func(n config.Node) bool { return n.Name == s.Node })
			return &config.FieldError{Field: fmt.Sprintf("nodes[%d].name", i), Value: s.Node,
				Problem: "is also the name of a component cert, so " + certFile(s.Name) + " would hold two certs",
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

// outcome is the result of one unit of work, applied to the Report in a
// fixed order so concurrent work still yields a deterministic Report.
type outcome struct {
	st      *CertStatus
	cert    *x509.Certificate
	written []string
	err     error
}

// put stores data at dir/name with perm unless it is already there with that
// mode, and notes the write in o. With DryRun it only notes what would change.
func (r *reconciler) put(o *outcome, name string, data []byte, perm fs.FileMode) error {
	path := filepath.Join(r.dir, name)
	if r.opts.dryRun {
		old, err := os.ReadFile(path)
		st, serr := os.Stat(path)
		if err != nil || serr != nil || !bytes.Equal(old, data) || st.Mode().Perm() != perm {
			o.written = append(o.written, name)
		}
		return nil
	}
	changed, err := fsutil.WriteIfChanged(path, data, perm)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if changed {
		o.written = append(o.written, name)
	}
	return nil
}

// putPair writes the key, then the cert (see Reconcile for why).
func (r *reconciler) putPair(o *outcome, name string, certPEM, keyPEM []byte) error {
	if err := r.put(o, keyFile(name), keyPEM, fsutil.SecretMode); err != nil {
		return err
	}
	return r.put(o, certFile(name), certPEM, fsutil.PublicMode)
}

// apply adds an outcome to the Report (and the log) and returns its error. A
// failed cert gets no status: the error names it.
func (r *reconciler) apply(o outcome) error {
	r.rep.Written = append(r.rep.Written, o.written...)
	if o.st != nil && o.err == nil {
		s := *o.st
		if o.cert != nil {
			s.Serial = formatSerial(o.cert.SerialNumber)
			s.NotAfter = o.cert.NotAfter.UTC()
		}
		r.rep.Certs = append(r.rep.Certs, s)
		if r.opts.log != nil {
			fmt.Fprintf(r.opts.log, "pki: %s\n", s.line())
		}
	}
	return o.err
}

// reconcileCA decides whether the CA is kept, renewed (same key) or
// regenerated (new key), makes the new one in memory, and returns it with its
// key and a function that writes its files and yields its outcome. caNew is
// true when the key is new, so every leaf must be reissued.
func (r *reconciler) reconcileCA(s Spec, req *csr.CertificateRequest) (ca *x509.Certificate, key crypto.Signer, caNew bool, write func() outcome, err error) {
	p := loadPair(r.dir, s.Name)
	var rs []Reason
	renew := false
	switch {
	case p.cert == nil:
		rs = append(rs, fileReason(certFile(s.Name), p.certErr))
	case p.key == nil:
		rs = append(rs, fileReason(keyFile(s.Name), p.keyErr))
	case !sameKey(p.key, p.cert.PublicKey):
		rs = append(rs, Reason{ReasonKeyMismatch, keyFile(s.Name) + " is not the key of " + certFile(s.Name)})
	case !p.cert.IsCA || p.cert.KeyUsage&x509.KeyUsageCertSign == 0:
		rs = append(rs, Reason{ReasonNotCA, certFile(s.Name) + " lacks CA:true or the cert sign key usage"})
	default:
		rs = timeReasons(p.cert, r.now, r.c.PKI.RenewBefore)
		renew = len(rs) == 1 && rs[0].Code == ReasonRenew
		if renew {
			rs[0].Detail += "; re-signed with the same key, so the certs it signed stay valid"
		}
	}
	if len(rs) == 0 {
		return p.cert, p.key, false, func() (o outcome) {
			o.st, o.cert = &CertStatus{Name: s.Name, Action: Kept}, p.cert
			o.err = r.putPair(&o, s.Name, p.certPEM, p.keyPEM) // enforces the file modes only
			return o
		}, nil
	}
	action := Reissued
	if errors.Is(p.certErr, fs.ErrNotExist) {
		action = Created
	}
	var certPEM, keyPEM []byte
	if renew {
		certPEM, keyPEM, err = newCA(req, p.key, p.keyPEM, r.now, r.c.PKI.CAValidity)
	} else {
		certPEM, keyPEM, err = newCA(req, nil, nil, r.now, r.c.PKI.CAValidity)
	}
	if err != nil {
		return nil, nil, false, nil, err
	}
	if ca, err = helpers.ParseCertificatePEM(certPEM); err != nil {
		return nil, nil, false, nil, fmt.Errorf("pki: parse new CA cert: %w", err)
	}
	if key, err = helpers.ParsePrivateKeyPEM(keyPEM); err != nil {
		return nil, nil, false, nil, fmt.Errorf("pki: parse new CA key: %w", err)
	}
	return ca, key, !renew, func() (o outcome) {
		o.st, o.cert = &CertStatus{Name: s.Name, Action: action, Reasons: rs}, ca
		o.err = r.putPair(&o, s.Name, certPEM, keyPEM)
		return o
	}, nil
}

// reconcileLeaf keeps or (re)issues one leaf cert. It runs concurrently with
// the other leaves and touches only its own files.
func (r *reconciler) reconcileLeaf(s Spec, req *csr.CertificateRequest, is *issuer, caNew bool) (o outcome) {
	p := loadPair(r.dir, s.Name)
	rs := checkLeaf(r.c, s, p, is.ca, caNew, r.now)
	if len(rs) == 0 {
		o.st, o.cert = &CertStatus{Name: s.Name, Action: Kept}, p.cert
		o.err = r.putPair(&o, s.Name, p.certPEM, p.keyPEM) // enforces the file modes only
		return o
	}
	action := Reissued
	if errors.Is(p.certErr, fs.ErrNotExist) {
		action = Created
	}
	o.st = &CertStatus{Name: s.Name, Action: action, Reasons: rs}
	if r.opts.dryRun {
		o.written = append(o.written, keyFile(s.Name), certFile(s.Name))
		return o
	}
	certPEM, keyPEM, err := is.issue(s.Name, req, s.Profile, r.now)
	if err != nil {
		o.err = err
		return o
	}
	if o.cert, o.err = helpers.ParseCertificatePEM(certPEM); o.err != nil {
		o.err = fmt.Errorf("pki: %s: parse issued cert: %w", s.Name, o.err)
		return o
	}
	o.err = r.putPair(&o, s.Name, certPEM, keyPEM)
	return o
}

// reportStale flags <name>.pem files in dir that no Spec names.
func (r *reconciler) reportStale(specs []Spec) {
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return
	}
	want := map[string]bool{}
	for _, s := range specs {
		want[s.Name] = true
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		base, ok := strings.CutSuffix(n, ".pem")
		if !ok || e.IsDir() || strings.HasPrefix(n, ".") || strings.HasSuffix(base, "-key") || want[base] {
			continue
		}
		names = append(names, base)
	}
	sort.Strings(names)
	for _, name := range names {
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
		r.apply(outcome{st: &CertStatus{Name: name, Action: Stale, Reasons: []Reason{{ReasonNotInConfig, detail}}}, cert: p.cert})
	}
}
