package pki

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/cloudflare/cfssl/helpers"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
)

// plan decides every cert without writing (see Reconcile). It returns one
// unit per Spec after ca-config.json, or the joined planning errors.
func (r *reconciler) plan(specs []Spec) ([]unit, error) {
	cfgJSON := caConfigJSON(r.c)
	policy, err := loadPolicy(cfgJSON)
	if err != nil {
		return nil, err
	}
	units := make([]unit, 1+len(specs))
	units[configUnit] = unit{files: []file{{CAConfigFile, cfgJSON, fsutil.PublicMode}}}
	ca, caKey, caNewKey, u := r.planCA(specs[0], r.certsOnDisk())
	if u.err != nil {
		return nil, u.err
	}
	units[caUnit] = u
	is, err := newIssuer(ca, caKey, policy, r.c.PKI.CertValidity)
	if err != nil {
		return nil, err
	}
	forEach(len(specs)-1, func(i int) {
		s := specs[i+1]
		switch {
		case s.Import != nil:
			units[i+2] = r.importCert(s, ca)
		case s.Profile == ProfileSigning:
			units[i+2] = r.planServiceAccount(s, is, caNewKey)
		default:
			units[i+2] = r.planLeaf(s, is, caNewKey)
		}
	})
	var errs []error
	for _, u := range units {
		if u.err != nil {
			errs = append(errs, u.err)
		}
	}
	// A lost precious key stops everything on its own, so the user is not
	// told to fix other things first.
	for _, e := range errs {
		var pk *PreciousKeyError
		if errors.As(e, &pk) {
			return nil, e
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return units, nil
}

// onDisk is a cert file of the pki directory other than ca.pem.
type onDisk struct {
	name string
	cert *x509.Certificate // nil when it does not parse
}

// certsOnDisk lists the <name>.pem files of dir other than ca.pem (Specs'
// and stale ones alike), sorted by name: the certs the CA may have signed.
func (r *reconciler) certsOnDisk() []onDisk {
	var out []onDisk
	for _, n := range certNames(r.dir) {
		if n == CAName {
			continue
		}
		_, cert, _ := readCertFile(filepath.Join(r.dir, certFile(n)))
		out = append(out, onDisk{n, cert})
	}
	return out
}

// certNames returns the cert names (<name>.pem, keys and hidden temp files
// excluded) in dir, sorted; nil when there are none or dir is unreadable.
func certNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".pem")
		if ok && !e.IsDir() && !strings.HasSuffix(base, config.KeySuffix) && !strings.HasPrefix(base, ".") && base != "" {
			out = append(out, base)
		}
	}
	sort.Strings(out)
	return out
}

// pairUnit is the unit of a cert that ends up on disk as certPEM/keyPEM:
// CSR JSON (csr), key, cert.
func pairUnit(st CertStatus, cert *x509.Certificate, name string, csr, certPEM, keyPEM []byte) unit {
	return unit{st: &st, cert: cert, files: []file{
		{csrFile(name), csr, fsutil.PublicMode},
		{keyFile(name), keyPEM, fsutil.SecretMode},
		{certFile(name), certPEM, fsutil.PublicMode},
	}}
}

// keptUnit keeps p as it is; its CSR JSON describes it.
func (r *reconciler) keptUnit(s Spec, p pair, warnings []Reason) unit {
	return pairUnit(CertStatus{Name: s.Name, Action: Kept, Reasons: warnings}, p.cert, s.Name,
		csrDocFor(r.c, s).describing(p.cert).json(), p.certPEM, p.keyPEM)
}

// signedUnit is the unit of a cert made in this run from csr.
func signedUnit(s Spec, action Action, rs []Reason, csr, certPEM, keyPEM []byte) unit {
	cert, err := helpers.ParseCertificatePEM(certPEM)
	if err != nil {
		return unit{err: fmt.Errorf("pki: %s: the cert cfssl just signed does not parse: %w", certFile(s.Name), plainErr(err))}
	}
	return pairUnit(CertStatus{Name: s.Name, Action: action, Reasons: rs}, cert, s.Name, csr, certPEM, keyPEM)
}

// createdOr is Created when the cert file did not exist, else Reissued.
func createdOr(p pair) Action {
	if errors.Is(p.certErr, fs.ErrNotExist) {
		return Created
	}
	return Reissued
}

// planCA decides the CA (see Reconcile) and makes a new CA cert in memory
// if needed. It returns the CA cert and key leaves are checked against and
// signed with, and newKey when the key is new while certs exist (none of them
// can verify then).
func (r *reconciler) planCA(s Spec, leaves []onDisk) (ca *x509.Certificate, key crypto.Signer, newKey bool, u unit) {
	p := loadPair(r.dir, s.Name)
	f := caFacts{spec: csrDocFor(r.c, s)}
	f.keyPath = filepath.Join(r.dir, keyFile(s.Name))
	f.certExists, f.keyExists = exists(filepath.Join(r.dir, certFile(s.Name))), exists(f.keyPath)
	for _, l := range leaves {
		f.leafNames = append(f.leafNames, certFile(l.name))
	}
	f.newCAHow = fmt.Sprintf("`khw pki --new-ca` to make a new CA, which reissues every cert and breaks every "+
		"kubeconfig and node that trusts the old %s", certFile(s.Name))
	if p.key == nil {
		return r.planCANewKey(s, p, leaves, f)
	}
	return r.planCAKeptKey(s, p, leaves, f)
}

// caFacts are what planCA's two cases share.
type caFacts struct {
	spec                  csrDoc
	keyPath               string
	certExists, keyExists bool
	leafNames             []string
	newCAHow              string
}

// caFail is planCA's result for an error.
func caFail(err error) (*x509.Certificate, crypto.Signer, bool, unit) {
	return nil, nil, false, unit{err: err}
}

// planCANewKey: the CA key is missing or unreadable. A new CA is made,
// unless something the old key signed remains and AllowNewCA was not given
// (*PreciousKeyError).
func (r *reconciler) planCANewKey(s Spec, p pair, leaves []onDisk, f caFacts) (*x509.Certificate, crypto.Signer, bool, unit) {
	fail := caFail
	newKey := false
	var rs []Reason
	if f.keyExists || f.certExists || len(leaves) > 0 {
		if !r.opts.newCA {
			var deps []string
			if f.certExists {
				deps = append(deps, certFile(s.Name))
			}
			if len(leaves) > 0 {
				deps = append(deps, fmt.Sprintf("%d cert(s) it may have signed (%s)", len(leaves), strings.Join(f.leafNames, ", ")))
			}
			problem := fileProblem(p.keyErr)
			if len(deps) > 0 {
				problem += ", but " + strings.Join(deps, " and ") + " still exist"
			}
			return fail(&PreciousKeyError{File: f.keyPath, Problem: problem, Option: "AllowNewCA",
				Fix: "restore " + f.keyPath + " from a backup; or run " + f.newCAHow})
		}
		rs = append(rs, fileReason(keyFile(s.Name), p.keyErr))
		rs[0].Detail += "; a new CA key was made (AllowNewCA): every cert is reissued, and every kubeconfig and node must get the new " + certFile(s.Name)
		newKey = len(leaves) > 0
	} else {
		rs = append(rs, fileReason(certFile(s.Name), p.certErr))
	}
	csrJSON := f.spec.json()
	req, err := parseCSRJSON(s.Name, csrJSON)
	if err != nil {
		return fail(err)
	}
	certPEM, keyPEM, err := newCA(req, nil, nil, r.now, r.c.PKI.CAValidity)
	if err != nil {
		return fail(err)
	}
	key, err := helpers.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return fail(fmt.Errorf("pki: %s: the key cfssl just generated does not parse: %w", keyFile(s.Name), plainErr(err)))
	}
	u := signedUnit(s, createdOr(p), rs, csrJSON, certPEM, keyPEM)
	if u.err != nil {
		return fail(u.err)
	}
	return u.cert, key, newKey, u
}

// planCAKeptKey: the CA key parses and is kept, whatever else is wrong; the
// cert is re-signed from it when it is missing, is not its cert, is not a
// CA, expires, or (with AllowNewCA) names another subject. A key that
// signed none of the certs on disk is another CA's (*PreciousKeyError
// unless AllowNewCA).
func (r *reconciler) planCAKeptKey(s Spec, p pair, leaves []onDisk, f caFacts) (ca *x509.Certificate, key crypto.Signer, newKey bool, u unit) {
	fail := caFail
	// The key parses: it is kept, whatever else is wrong.
	usable := p.cert != nil && sameKey(p.key, p.cert.PublicKey)
	var byKey []*x509.Certificate // certs on disk that ca-key.pem signed
	parsed := 0
	for _, l := range leaves {
		if l.cert != nil {
			parsed++
			if signedWithKey(l.cert, p.key.Public()) {
				byKey = append(byKey, l.cert)
			}
		}
	}
	orphan := !usable && parsed > 0 && len(byKey) == 0
	if orphan && !r.opts.newCA {
		problem := fmt.Sprintf("signed none of the certs in %s (%s)", r.dir, strings.Join(f.leafNames, ", "))
		if p.cert != nil {
			problem += " and is not the key of " + certFile(s.Name)
		} else {
			problem += ", and " + certFile(s.Name) + " " + fileProblem(p.certErr)
		}
		problem += ": it is the key of another CA"
		return fail(&PreciousKeyError{File: f.keyPath, Option: "AllowNewCA", Problem: problem,
			Fix: "restore the " + keyFile(s.Name) + " (and " + certFile(s.Name) + ") that signed these certs from a backup; or run " + f.newCAHow})
	}

	// The subject the CA has now: its own, or the issuer the certs it signed
	// name. A re-signed CA keeps it (unless AllowNewCA), so they still chain.
	var old *pkix.Name
	switch {
	case usable:
		old = &p.cert.Subject
	case len(byKey) > 0:
		old = &byKey[0].Issuer
	}
	var rs, warn []Reason
	switch {
	case p.cert == nil:
		rs = append(rs, fileReason(certFile(s.Name), p.certErr))
	case !usable:
		rs = append(rs, Reason{ReasonKeyMismatch, certFile(s.Name) + " is not the cert of " + keyFile(s.Name)})
	case !p.cert.IsCA || p.cert.KeyUsage&x509.KeyUsageCertSign == 0:
		rs = append(rs, Reason{ReasonNotCA, certFile(s.Name) + " lacks CA:true or the cert sign key usage"})
	default:
		rs = timeReasons(p.cert, r.now, r.c.PKI.RenewBefore)
	}
	if r.renewing(s.Name) {
		how := "same key"
		if r.opts.newKeys {
			how += " (a new CA key is a CA rotation: every cert, kubeconfig and node changes; khw pki renew keeps " + keyFile(s.Name) + ")"
		}
		rs = append(rs, requested(how))
	}
	doc := f.spec.withKey(p.key.Public())
	if old != nil {
		if d := subjectDiff(*old, s); d != "" {
			if r.opts.newCA {
				rs = append(rs, Reason{ReasonSubject, d + "; re-signed with the new subject (AllowNewCA): every cert is " +
					"reissued, and every kubeconfig and node must get the new " + certFile(s.Name)})
			} else {
				doc = doc.withSubject(*old)
				warn = append(warn, Reason{ReasonSubject, d + "; the CA keeps its subject: C, ST, L and OU are informational, " +
					"and a CA cert with another subject is a new CA to every kubeconfig and node that trusts " + certFile(s.Name) +
					" (to re-sign it from the same key with the new subject anyway: `khw pki --new-ca`; every cert is then " +
					"reissued and every kubeconfig and node must get the new " + certFile(s.Name) + ")"})
			}
		}
	}
	if len(rs) == 0 {
		u := r.keptUnit(s, p, warn)
		return p.cert, p.key, false, u
	}
	switch {
	case orphan:
		rs[0].Detail += fmt.Sprintf("; re-signed from %s (AllowNewCA), which signed none of the certs on disk: they are reissued", keyFile(s.Name))
	default:
		rs[0].Detail += fmt.Sprintf("; re-signed from the same key (%s), so the certs it signed stay valid "+
			"(by hand: cfssl gencert -initca -ca-key=%s %s | cfssljson -bare %s)", keyFile(s.Name), keyFile(s.Name), csrFile(s.Name), s.Name)
	}
	csrJSON := doc.json()
	req, err := parseCSRJSON(s.Name, csrJSON)
	if err != nil {
		return fail(err)
	}
	certPEM, keyPEM, err := newCA(req, p.key, p.keyPEM, r.now, r.c.PKI.CAValidity)
	if err != nil {
		return fail(err)
	}
	u = signedUnit(s, Resigned, append(rs, warn...), csrJSON, certPEM, keyPEM)
	if u.err != nil {
		return fail(u.err)
	}
	return u.cert, p.key, false, u
}

// planLeaf keeps or (re)issues one ordinary leaf cert. It runs concurrently
// with the other leaves and reads only its own files.
func (r *reconciler) planLeaf(s Spec, is *issuer, caNewKey bool) unit {
	p := loadPair(r.dir, s.Name)
	rs := checkLeaf(r.c, s, p, is.ca, caNewKey, r.now)
	if r.renewing(s.Name) {
		if !r.opts.newKeys && onlyTime(rs) && p.key != nil && sameKey(p.key, p.cert.PublicKey) {
			rs = append(rs, requested("same key ("+keyFile(s.Name)+")"))
			return r.resignUnit(s, is, p, rs)
		}
		rs = append(rs, requested("new key"))
	}
	if len(rs) == 0 {
		return r.keptUnit(s, p, nil)
	}
	return r.issueUnit(s, is, p, rs)
}

// onlyTime reports whether rs has no reason but the cert's validity window
// (what a renewal mends by itself, keeping the key).
func onlyTime(rs []Reason) bool {
	for _, x := range rs {
		switch x.Code {
		case ReasonRenew, ReasonExpired, ReasonNotYetValid:
		default:
			return false
		}
	}
	return true
}

// resignUnit signs a new cert for s for the key already on disk (p.key),
// for the reasons rs: the key file stays as it is.
func (r *reconciler) resignUnit(s Spec, is *issuer, p pair, rs []Reason) unit {
	csrJSON := csrDocFor(r.c, s).withKey(p.key.Public()).json()
	req, err := parseCSRJSON(s.Name, csrJSON)
	if err != nil {
		return unit{err: err}
	}
	certPEM, err := is.resign(s.Name, req, p.key, s.Profile, r.now)
	if err != nil {
		return unit{err: err}
	}
	return signedUnit(s, Resigned, rs, csrJSON, certPEM, p.keyPEM)
}

// issueUnit issues a new key and cert for s from its CSR JSON, for the
// reasons rs; p is what was there before (its creation time is kept).
func (r *reconciler) issueUnit(s Spec, is *issuer, p pair, rs []Reason) unit {
	csrJSON := csrJSON(r.c, s)
	req, err := parseCSRJSON(s.Name, csrJSON)
	if err != nil {
		return unit{err: err}
	}
	certPEM, keyPEM, err := is.issue(s.Name, req, s.Profile, r.now)
	if err != nil {
		return unit{err: err}
	}
	return signedUnit(s, createdOr(p), rs, csrJSON, certPEM, keyPEM)
}

// planServiceAccount is planLeaf for the service-account cert, whose key is
// precious (see Reconcile and AllowNewServiceAccountKey).
func (r *reconciler) planServiceAccount(s Spec, is *issuer, caNewKey bool) unit {
	p := loadPair(r.dir, s.Name)
	keyPath := filepath.Join(r.dir, keyFile(s.Name))
	certExists, keyExists := exists(filepath.Join(r.dir, certFile(s.Name))), exists(keyPath)
	newKeyWhy := "a new key invalidates every ServiceAccount token signed with the old one"

	issueNew := func(rs []Reason) unit { return r.issueUnit(s, is, p, rs) }

	if p.key == nil {
		if !keyExists && !certExists {
			return issueNew([]Reason{fileReason(certFile(s.Name), p.certErr)})
		}
		if !r.opts.newSAKey {
			problem := fileProblem(p.keyErr)
			if certExists {
				problem += ", but " + certFile(s.Name) + " does: kube-apiserver signs ServiceAccount tokens with this key " +
					"and verifies them with that cert"
			}
			return unit{err: &PreciousKeyError{File: keyPath, Problem: problem, Option: "AllowNewServiceAccountKey",
				Fix: "restore " + keyPath + " from a backup (or copy /var/lib/kubernetes/service-account-key.pem back from a " +
					"control plane); or run `khw pki --new-service-account-key` to make a new key, which invalidates every " +
					"ServiceAccount token issued so far"}}
		}
		rs := []Reason{fileReason(keyFile(s.Name), p.keyErr)}
		rs[0].Detail += "; a new key was made (AllowNewServiceAccountKey): " + newKeyWhy
		return issueNew(rs)
	}

	// The key parses. checkLeaf judges the cert; the key's algorithm is
	// judged here, on the key.
	rs := slices.DeleteFunc(checkLeaf(r.c, s, p, is.ca, caNewKey, r.now), func(x Reason) bool { return x.Code == ReasonKeyAlgorithm })
	var warn []Reason
	if got, want := KeyDesc(p.key.Public()), wantKeyDesc(r.c.PKI); got != want {
		d := fmt.Sprintf("key is %s, want %s", got, want)
		if r.opts.newSAKey {
			return issueNew(append(rs, Reason{ReasonKeyAlgorithm, d + "; a new key was made (AllowNewServiceAccountKey): " + newKeyWhy}))
		}
		warn = append(warn, Reason{ReasonKeyAlgorithm, d + "; the key is kept: " + newKeyWhy +
			" (to replace it anyway: khw pki --new-service-account-key)"})
	}
	if r.renewing(s.Name) {
		how := "same key"
		if r.opts.newKeys {
			how += " (new keys are for the other certs: " + newKeyWhy + "; khw pki --new-service-account-key makes one)"
		}
		rs = append(rs, requested(how))
	}
	if len(rs) == 0 {
		return r.keptUnit(s, p, warn)
	}
	rs[0].Detail += fmt.Sprintf("; re-signed for the same key (%s), so ServiceAccount tokens stay valid", keyFile(s.Name))
	return r.resignUnit(s, is, p, append(rs, warn...))
}
