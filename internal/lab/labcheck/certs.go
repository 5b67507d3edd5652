package labcheck

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/pki"
)

// Groups and users with a meaning to the apiserver
// (k8s.io/apiserver/pkg/authentication/user/user.go; the Node authorizer's
// plugin/pkg/auth/authorizer/node and pkg/auth/nodeidentifier).
const (
	GroupMasters   = "system:masters"
	GroupNodes     = "system:nodes"
	NodeUserPrefix = "system:node:"
)

// sanWant is one SAN a cert needs and who dials it.
type SANWant struct{ Host, Why string }

// CertWant says what a certificate must be for where it is used. The rules
// follow how the apiserver reads a client cert (CN = user, O = groups:
// k8s.io/apiserver/pkg/authentication/request/x509/x509.go) and how a TLS
// client checks a server cert (the dialled name or IP must be a SAN:
// crypto/x509 VerifyHostname).
type CertWant struct {
	Lab  string
	What string // "the apiserver serving cert (--tls-cert-file)"
	// cn is the required common name ("" = any).
	CN string
	// org is a group the cert must carry ("" = none).
	Org string
	// admin and node allow O=system:masters and O=system:nodes.
	Admin, Node bool
	SANs        []SANWant
	Server      bool // needs EKU server auth
	Client      bool // needs EKU client auth
	// ca is the trust anchor the users of this cert check it against (nil:
	// not checked), caWhat names it.
	CA     *x509.Certificate
	CAWhat string
	// fix says how to make a right one, e.g. "reissue it from
	// pki/kubernetes-csr.json (khw lab 02-pki shows the cfssl command) and
	// copy it to /var/lib/kubernetes/kubernetes.pem".
	Fix string
}

// FirstCert parses the first CERTIFICATE block of data (a file may also hold
// its key, as kubelet-client-current.pem does; the key is skipped).
func FirstCert(data []byte) (*x509.Certificate, error) {
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			if len(bytes.TrimSpace(data)) == 0 {
				return nil, errors.New("the file is empty")
			}
			return nil, errors.New("it holds no PEM CERTIFICATE block")
		}
		if b.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("its CERTIFICATE block does not parse: %v", err)
			}
			return c, nil
		}
	}
}

// ParseKey parses the first private key block of data (PKCS#8, SEC 1 or
// PKCS#1). Its error never quotes the key.
func ParseKey(data []byte) (crypto.Signer, error) {
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, errors.New("it holds no PEM private key block")
		}
		switch b.Type {
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
			if err != nil {
				return nil, errors.New("its PRIVATE KEY block does not parse as PKCS#8")
			}
			if s, ok := k.(crypto.Signer); ok {
				return s, nil
			}
			return nil, errors.New("its key type is not supported")
		case "EC PRIVATE KEY":
			k, err := x509.ParseECPrivateKey(b.Bytes)
			if err != nil {
				return nil, errors.New("its EC PRIVATE KEY block does not parse")
			}
			return k, nil
		case "RSA PRIVATE KEY":
			k, err := x509.ParsePKCS1PrivateKey(b.Bytes)
			if err != nil {
				return nil, errors.New("its RSA PRIVATE KEY block does not parse")
			}
			return k, nil
		}
	}
}

// SamePublic reports whether key is the private half of pub.
func SamePublic(key crypto.Signer, pub crypto.PublicKey) bool {
	switch k := key.Public().(type) {
	case *ecdsa.PublicKey:
		return k.Equal(pub)
	case *rsa.PublicKey:
		return k.Equal(pub)
	case ed25519.PublicKey:
		return k.Equal(pub)
	}
	return false
}

// Describe names a cert for evidence: subject, SANs, validity, issuer.
func Describe(c *x509.Certificate) string {
	return fmt.Sprintf("subject %q, SANs [%s], issuer %q, valid %s to %s", c.Subject.String(), strings.Join(sansOf(c), ", "),
		c.Issuer.String(), c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
}

// sansOf lists a cert's DNS and IP SANs.
func sansOf(c *x509.Certificate) []string {
	var out []string
	out = append(out, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

// hasSAN reports whether host (a name or an IP) is a SAN of c.
func hasSAN(c *x509.Certificate, host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return slices.ContainsFunc(c.IPAddresses, func(a net.IP) bool { return a.Equal(ip) })
	}
	return slices.ContainsFunc(c.DNSNames, func(n string) bool { return strings.EqualFold(n, host) })
}

func hasEKU(c *x509.Certificate, u x509.ExtKeyUsage) bool {
	// No EKU extension means any use (RFC 5280 4.2.1.12; crypto/x509).
	return len(c.ExtKeyUsage) == 0 || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny) || slices.Contains(c.ExtKeyUsage, u)
}

// VerifyAgainst checks that ca signed c: issuer name and signature. Time
// is judged separately (checkCert).
func VerifyAgainst(c, ca *x509.Certificate) error {
	if !bytes.Equal(c.RawIssuer, ca.RawSubject) {
		return fmt.Errorf("its issuer is %q", c.Issuer.String())
	}
	if err := c.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("its signature does not verify with that CA's key (%v)", err)
	}
	return nil
}

// CheckCert judges cert (read from path on node) against w.
func (e *Env) CheckCert(node, path string, cert *x509.Certificate, w CertWant) []Mistake {
	var out []Mistake
	mk := func(what, fix string) {
		out = append(out, Mistake{Lab: w.Lab, Node: node, What: what, Evidence: path + ": " + Describe(cert), Fix: fix})
	}
	if w.CN != "" && cert.Subject.CommonName != w.CN {
		mk(fmt.Sprintf("%s has CN=%q, want CN=%q: the apiserver takes the CN as the user name, so RBAC and the Node authorizer see the wrong user", w.What, cert.Subject.CommonName, w.CN),
			"make a new cert with CN "+w.CN+" (the \"CN\" of its CSR JSON), then "+w.Fix)
	}
	orgs := cert.Subject.Organization
	if w.Org != "" && !slices.Contains(orgs, w.Org) {
		mk(fmt.Sprintf("%s has O=%v, want O=%s: the apiserver takes O as the groups, and this identity needs that group", w.What, orgs, w.Org),
			"make a new cert with \"names\": [{\"O\": \""+w.Org+"\"}] in its CSR JSON, then "+w.Fix)
	}
	if !w.Admin && slices.Contains(orgs, GroupMasters) {
		mk(w.What+" has O=system:masters: whoever holds it is cluster-admin and bypasses RBAC",
			"make a new cert without system:masters in O, then "+w.Fix)
	}
	if !w.Node && slices.Contains(orgs, GroupNodes) {
		// The seed's controller-manager cert has O=system:nodes
		// (cluster-facts.md, "Known mistakes"): harmless to RBAC, wrong
		// in meaning.
		mk(w.What+" has O=system:nodes, the kubelets' group, but it is not a node (upstream gives each component its own group, e.g. O=system:kube-controller-manager)",
			"make a new cert with the component's own group in O, then "+w.Fix)
	}
	var miss []string
	var why []string
	for _, s := range w.SANs {
		if !hasSAN(cert, s.Host) {
			miss = append(miss, s.Host)
			why = append(why, s.Host+" ("+s.Why+")")
		}
	}
	if len(miss) > 0 {
		mk(fmt.Sprintf("%s lacks the SANs %s: a client that dials one of them fails with \"x509: certificate is valid for …, not %s\"", w.What, strings.Join(why, "; "), miss[0]),
			"make a new cert with "+strings.Join(miss, ",")+" added to \"hosts\" in its CSR JSON, then "+w.Fix)
	}
	if w.Server && !hasEKU(cert, x509.ExtKeyUsageServerAuth) {
		mk(w.What+" serves TLS but lacks the extended key usage server auth: clients reject it",
			"sign it with a profile that has \"server auth\" (ca-config.json profile kubernetes), then "+w.Fix)
	}
	if w.Client && !hasEKU(cert, x509.ExtKeyUsageClientAuth) {
		mk(w.What+" is a client cert but lacks the extended key usage client auth: servers reject it",
			"sign it with a profile that has \"client auth\", then "+w.Fix)
	}
	switch {
	case e.Now.After(cert.NotAfter):
		mk(w.What+" expired "+cert.NotAfter.UTC().Format(time.RFC3339), "make a new cert, then "+w.Fix)
	case e.Now.Before(cert.NotBefore):
		mk(w.What+" is not valid before "+cert.NotBefore.UTC().Format(time.RFC3339)+" (is the clock of the machine that signed it ahead?)",
			"check the clocks (timedatectl), then make a new cert, then "+w.Fix)
	}
	if w.CA != nil {
		if err := VerifyAgainst(cert, w.CA); err != nil {
			mk(fmt.Sprintf("%s is not signed by %s (subject %q): %v", w.What, w.CAWhat, w.CA.Subject.String(), err),
				"sign it with that CA (cfssl gencert -ca=ca.pem -ca-key=ca-key.pem …), then "+w.Fix)
		}
	}
	return out
}

// LoadCert reads the cert at path on node; a missing or unreadable file is
// a Mistake.
func (e *Env) LoadCert(lab, node, path, what, fix string) (*x509.Certificate, []Mistake, error) {
	data, ok, err := e.Read(node, path)
	if err != nil || !ok {
		if err != nil {
			return nil, nil, err
		}
		return nil, []Mistake{Missing(lab, node, path, what, fix)}, nil
	}
	c, perr := FirstCert(data)
	if perr != nil {
		return nil, []Mistake{{Lab: lab, Node: node, What: path + " (" + what + ") is not a certificate", Evidence: path + ": " + perr.Error(), Fix: fix}}, nil
	}
	return c, nil, nil
}

// CheckKey reads the key at keyPath on node and checks it is cert's.
func (e *Env) CheckKey(lab, node, certPath, keyPath string, cert *x509.Certificate, fix string) ([]Mistake, error) {
	data, ok, err := e.Read(node, keyPath)
	if err != nil {
		return nil, err
	}
	if !ok {
		return []Mistake{Missing(lab, node, keyPath, "the private key of "+certPath, fix)}, nil
	}
	key, perr := ParseKey(data)
	if perr != nil {
		return []Mistake{{Lab: lab, Node: node, What: keyPath + " is not a private key", Evidence: keyPath + ": " + perr.Error(), Fix: fix}}, nil
	}
	if !SamePublic(key, cert.PublicKey) {
		return []Mistake{{Lab: lab, Node: node, What: keyPath + " is not the key of " + certPath + ": TLS with this pair fails (\"private key does not match public key\")",
			Evidence: fmt.Sprintf("%s holds a %s key whose public half differs from the one in %s (%s)", keyPath, pki.KeyDesc(key.Public()), certPath, Describe(cert)),
			Fix:      "copy the key that was made with the cert (cfssljson -bare writes <name>.pem and <name>-key.pem together): " + fix}}, nil
	}
	return nil, nil
}

// ClusterCA returns the cluster CA: D/pki/ca.pem on the jumpbox, else the
// first control plane's /var/lib/kubernetes/ca.pem; nil when neither
// parses (the file detectors report that).
func (e *Env) ClusterCA() (*x509.Certificate, string, error) {
	if e.caDone {
		return e.ca, e.caWhat, nil
	}
	try := []struct{ node, path string }{{Jumpbox, "pki/ca.pem"}}
	if cps := e.Cluster.ControlPlanes(); len(cps) > 0 {
		try = append(try, struct{ node, path string }{cps[0].Name, "/var/lib/kubernetes/ca.pem"})
	}
	for _, t := range try {
		data, ok, err := e.Read(t.node, t.path)
		if err != nil {
			return nil, "", err
		}
		if !ok {
			continue
		}
		if c, err := FirstCert(data); err == nil {
			e.ca, e.caWhat = c, "the cluster CA ("+t.node+":"+t.path+")"
			break
		}
	}
	e.caDone = true
	return e.ca, e.caWhat, nil
}

// CheckCAFile checks that path on node holds the cluster CA itself.
func (e *Env) CheckCAFile(lab, node, path, usedBy string) ([]Mistake, error) {
	ca, caWhat, err := e.ClusterCA()
	if err != nil {
		return nil, err
	}
	fix := "copy the cluster CA there: scp $KHW_STATE_DIR/$KHW_CLUSTER/pki/ca.pem " + node + ":" + path
	c, ms, err := e.LoadCert(lab, node, path, "the CA that "+usedBy+" trusts", fix)
	if c == nil || err != nil {
		return ms, err
	}
	if ca != nil && !c.Equal(ca) {
		return []Mistake{{Lab: lab, Node: node, What: path + " is not the cluster CA: " + usedBy + " rejects every cert the cluster CA signed",
			Evidence: path + ": " + Describe(c) + "; " + caWhat + " has subject " + fmt.Sprintf("%q", ca.Subject.String()), Fix: fix}}, nil
	}
	if !c.IsCA {
		return []Mistake{{Lab: lab, Node: node, What: path + " is not a CA certificate (basic constraints CA:false)", Evidence: path + ": " + Describe(c), Fix: fix}}, nil
	}
	return nil, nil
}

// apiserverSANs are the SANs the apiserver serving cert of node needs, with
// who dials each (cluster-facts.md, "PKI"): the `kubernetes` Service IP,
// 127.0.0.1, the LB name and IP, node's own IP, and the in-cluster DNS names
// of the `kubernetes` Service. node "" means the cert is shared by every
// control plane (one file in D/pki): every control-plane IP then.
func APIServerSANs(c *config.Cluster, node string) []SANWant {
	var out []SANWant
	if a := c.APIServerServiceIP(); a.IsValid() {
		out = append(out, SANWant{a.String(), "the `kubernetes` Service ClusterIP, first IP of " + c.Kubernetes.ServiceCIDR + ": pods reach the apiserver there"})
	}
	out = append(out, SANWant{"127.0.0.1", "controller-manager and scheduler on a control plane dial https://127.0.0.1"})
	if lb, ok := c.LB(); ok {
		out = append(out, SANWant{lb.Name, "workers and kubectl dial https://" + lb.Name + ":" + fmt.Sprint(c.Kubernetes.APIServerPort) + "; HAProxy passes TLS through"},
			SANWant{lb.IP, "the load balancer's IP"})
	}
	for _, cp := range c.ControlPlanes() {
		if node == "" || cp.Name == node {
			out = append(out, SANWant{cp.IP, cp.Name + "'s IP, dialled by HAProxy, etcd peers and the other components"})
		}
	}
	dom := strings.TrimSuffix(c.Kubernetes.ClusterDomain, ".")
	for _, n := range []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + dom} {
		out = append(out, SANWant{n, "in-cluster name of the `kubernetes` Service"})
	}
	return out
}
