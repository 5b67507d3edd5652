package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
)

// importCert verifies the pre-issued kubelet cert of s.Node
// (nodes[].kubeletCert) against ca and the Spec, and plans to copy cert and
// key into the pki directory under the node's name, next to the CSR JSON of
// the cert khw would issue (the recipe the fixes refer to). Every problem is
// a *config.FieldError; they are joined. It runs before anything is written.
func (r *reconciler) importCert(s Spec, ca *x509.Certificate) unit {
	field := fmt.Sprintf("nodes[%d] (%s).kubeletCert", r.nodeIndex(s.Node), s.Node)
	ref := s.Import
	gencert := s.Recipe()
	ferr := func(sub, value, problem, fix string) error {
		return &config.FieldError{Field: field + "." + sub, Value: value, Problem: problem, Fix: fix}
	}

	fail := func(err error) unit { return unit{err: err} }

	certPEM, err := readPEMFile(ref.Cert)
	if err != nil {
		return fail(ferr("cert", ref.Cert, fileProblem(err), "give the path of the node's PEM cert on the jumpbox"))
	}
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return fail(ferr("cert", ref.Cert, "is not one PEM certificate: it "+err.Error(), "point it at the .pem cfssljson wrote (not the -key.pem or the CSR)"))
	}
	keyPEM, err := readPEMFile(ref.Key)
	if err != nil {
		return fail(ferr("key", ref.Key, fileProblem(err), "give the path of the cert's PEM private key on the jumpbox"))
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return fail(ferr("key", ref.Key, "is not a PEM private key: it "+err.Error(), "point it at the -key.pem cfssljson wrote"))
	}

	var errs []error
	if !sameKey(key, cert.PublicKey) {
		errs = append(errs, ferr("key", ref.Key, "is not the private key of "+ref.Cert,
			"give the key that was generated together with the cert"))
	}
	if !signedBy(cert, ca) {
		errs = append(errs, ferr("cert", ref.Cert, fmt.Sprintf("is not signed by the cluster CA %s (its issuer is %q)",
			r.path(certFile(CAName)), cert.Issuer.String()),
			"sign it with the cluster CA: "+gencert+" (or remove kubeletCert to let khw issue the cert)"))
	}
	if r.now.After(cert.NotAfter) || r.now.Before(cert.NotBefore) {
		errs = append(errs, ferr("cert", ref.Cert, fmt.Sprintf("is not valid now (valid %s to %s)",
			cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339)),
			"issue a new one: "+gencert))
	}
	if cert.Subject.CommonName != s.CN {
		errs = append(errs, ferr("cert", ref.Cert, fmt.Sprintf("has CN=%q; the Node authorizer knows node %s only as CN=%s",
			cert.Subject.CommonName, s.Node, s.CN), fmt.Sprintf("re-issue it with \"CN\": %q in %s", s.CN, csrFile(s.Name))))
	}
	if !slices.Contains(cert.Subject.Organization, groupNodes) {
		errs = append(errs, ferr("cert", ref.Cert, fmt.Sprintf("has O=%q; a kubelet must be in group %s",
			strings.Join(cert.Subject.Organization, "+"), groupNodes),
			fmt.Sprintf("re-issue it with \"O\": %q in %s", groupNodes, csrFile(s.Name))))
	}
	// The apiserver dials a kubelet by the node's host name or IP
	// (--kubelet-preferred-address-types), so both must be SANs; the FQDN is
	// welcome but not required of a hand-made cert.
	node, _ := r.c.Node(s.Node)
	if missing, _ := sanDiff([]string{node.Name, node.IP}, certSANs(cert)); len(missing) > 0 {
		errs = append(errs, ferr("cert", ref.Cert, "lacks the SANs "+strings.Join(missing, ", ")+
			" that the apiserver checks when it calls the kubelet on :10250",
			"re-issue it with -hostname="+strings.Join(s.Hosts, ",")))
	}
	for _, u := range []struct {
		eku  x509.ExtKeyUsage
		name string
		why  string
	}{
		{x509.ExtKeyUsageClientAuth, "client auth", "the kubelet authenticates to the apiserver with it"},
		{x509.ExtKeyUsageServerAuth, "server auth", "the kubelet serves :10250 with it"},
	} {
		if !hasEKU(cert, u.eku) {
			errs = append(errs, ferr("cert", ref.Cert, "has no "+u.name+" EKU, but "+u.why,
				"issue it with the kubernetes profile: "+gencert))
		}
	}
	if len(errs) > 0 {
		return fail(errors.Join(errs...))
	}

	st := CertStatus{Name: s.Name, Action: Imported, Source: ref.Cert}
	if rs := timeReasons(cert, r.now, r.c.PKI.RenewBefore); len(rs) > 0 {
		rs[0].Detail += "; khw cannot renew an imported cert: replace " + ref.Cert
		st.Reasons = rs
	}
	return pairUnit(st, cert, s.Name, csrJSON(r.c, s), certPEM, keyPEM)
}

func (r *reconciler) nodeIndex(name string) int {
	for i, n := range r.c.Nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

func (r *reconciler) path(name string) string { return filepath.Join(r.dir, name) }
