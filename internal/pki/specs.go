// Package pki is the cluster's certificate authority: it turns cluster.yaml
// into the cert table of "Kubernetes the Hard Way" (Specs), issues and
// re-issues the certs with cfssl used as a library (Reconcile), and explains
// any cert in words, including the identity the apiserver derives from it
// (Inspect).
//
// Files live in one directory (the state dir's pki/, mode 0700), named as the
// guide names them so a student recognises them and can run cfssl by hand
// against the same inputs:
//
//	ca-config.json             cfssl signing config (profiles kubernetes, client, signing)
//	<name>-csr.json            cfssl CSR JSON (CN, key, names, hosts) for every cert
//	<name>.pem                 the cert (0644)
//	<name>-key.pem             its private key (0600)
//
// e.g. `cfssl gencert -ca=ca.pem -ca-key=ca-key.pem -config=ca-config.json
// -profile=client admin-csr.json | cfssljson -bare admin` (Spec.Recipe gives
// the command of every cert).
//
// Two keys are precious: ca-key.pem (every cert, kubeconfig and node trusts
// the CA it belongs to) and service-account-key.pem (it signs every
// ServiceAccount token). Reconcile never replaces either on its own: a damaged
// cert next to an intact key is re-signed from that key, and a lost key is a
// *PreciousKeyError unless AllowNewCA or AllowNewServiceAccountKey is given.
package pki

import (
	"fmt"
	"strings"

	"github.com/khw-dev/khw/internal/config"
)

// Profile names a cfssl signing profile of ca-config.json. The profile fixes
// the key usages and extended key usages (EKUs) of every cert signed with it.
type Profile string

const (
	// ProfileCA is the self-signed root (`cfssl gencert -initca`): CA:true,
	// key usages cert sign + CRL sign, path length 0 (it signs only leaf
	// certs). It is not a profile of ca-config.json.
	ProfileCA Profile = "ca"
	// ProfileKubernetes is for certs that serve TLS and are also clients:
	// EKU server auth + client auth. The apiserver/etcd cert and the kubelet
	// certs use it.
	ProfileKubernetes Profile = "kubernetes"
	// ProfileClient is for pure clients of the apiserver: EKU client auth only,
	// so the cert cannot be used to impersonate a server.
	ProfileClient Profile = "client"
	// ProfileSigning is for a key that only signs data (ServiceAccount JWTs):
	// key usage digital signature, no EKU for TLS.
	ProfileSigning Profile = "signing"
)

// Well-known names, from k8s.io/apiserver/pkg/authentication/user (user.go)
// and plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go.
const (
	groupMasters     = "system:masters"
	groupNodes       = "system:nodes"
	nodeUserPrefix   = "system:node:"
	userKCM          = "system:kube-controller-manager"
	userScheduler    = "system:kube-scheduler"
	userKubeProxy    = "system:kube-proxy"
	groupNodeProxier = "system:node-proxier"
	userAPIServer    = "kubernetes"
	userSigner       = "service-accounts"
	orgKubernetes    = "Kubernetes"
)

// CAName is the file base name of the cluster CA (ca.pem, ca-key.pem).
const CAName = config.CertCA

// Spec is one certificate of the cluster: its identity, its SANs and how it
// is used. Specs returns them; Reconcile makes the files match them.
type Spec struct {
	// Name is the file base name: <Name>.pem, <Name>-key.pem, <Name>-csr.json.
	// A worker's kubelet cert is named after the node (w1).
	Name string `json:"name"`
	// CN is the subject common name, which the apiserver reads as the user
	// name of a client cert.
	CN string `json:"cn"`
	// O is the subject organization, which the apiserver reads as the group.
	O string `json:"o,omitempty"`
	// OU is the informational organizational unit (pki.subject, or "CA").
	OU string `json:"ou,omitempty"`
	// C, ST and L are the informational country, state and locality
	// (pki.subject). Kubernetes ignores them, but they are part of the
	// subject, so a cert whose C/ST/L/OU differ from its Spec is reissued
	// (the CA excepted: see Reconcile).
	C  string `json:"c,omitempty"`
	ST string `json:"st,omitempty"`
	L  string `json:"l,omitempty"`
	// Hosts are the SANs in the order they are written to the CSR JSON: IP
	// addresses and DNS names as strings. Empty for pure client certs.
	Hosts []string `json:"hosts"`
	// Profile fixes the key usages and EKUs (see the Profile constants): the
	// cfssl -profile of ca-config.json the cert is made with (Recipe).
	Profile Profile `json:"profile"`
	// Node is the worker node of a kubelet cert, "" for other certs.
	Node string `json:"node,omitempty"`
	// Import is set when cluster.yaml gives a pre-issued kubelet cert for the
	// node (nodes[].kubeletCert): Reconcile verifies and copies it instead of
	// issuing one.
	Import *config.CertRef `json:"import,omitempty"`
	// Purpose says who uses the cert and how.
	Purpose string `json:"purpose"`
	// Access says what the identity may do in the cluster (Node authorizer,
	// built-in RBAC bindings), or why it is no client identity at all.
	Access []string `json:"access"`
}

// Specs returns the cert table of c, in this order: ca, admin, one kubelet
// cert per worker without tlsBootstrap (file order), kube-controller-manager,
// kube-scheduler, kube-proxy, kubernetes, service-account. A worker with
// tlsBootstrap: true gets no cert: its kubelet asks the cluster for one
// through a CertificateSigningRequest.
//
// Subjects follow upstream (cluster-facts.md): the controller-manager and
// scheduler use O=system:kube-controller-manager and O=system:kube-scheduler,
// not the seed blog's O=system:nodes / O=system:node-proxier. c must be
// validated (config.Validate).
func Specs(c *config.Cluster) []Spec {
	sub := c.PKI.Subject
	mk := func(name, cn, o string, p Profile, hosts []string) Spec {
		s := Spec{Name: name, CN: cn, O: o, OU: sub.OrganizationalUnit, C: sub.Country, ST: sub.State, L: sub.Locality,
			Hosts: hosts, Profile: p}
		if s.Hosts == nil {
			s.Hosts = []string{}
		}
		s.Purpose, s.Access = describe(cn, nonEmpty(o), p == ProfileCA, p == ProfileKubernetes, p == ProfileKubernetes || p == ProfileClient)
		return s
	}
	ca := mk(CAName, "Kubernetes", orgKubernetes, ProfileCA, nil)
	ca.OU = "CA"
	specs := []Spec{ca, mk(config.CertAdmin, "admin", groupMasters, ProfileClient, nil)}
	for _, n := range c.Workers() {
		if n.TLSBootstrap {
			continue
		}
		s := mk(n.Name, nodeUserPrefix+n.Name, groupNodes, ProfileKubernetes, uniq(n.Name, c.FQDN(n), n.IP))
		s.Node = n.Name
		if n.KubeletCert != nil {
			ref := *n.KubeletCert
			s.Import = &ref
		}
		specs = append(specs, s)
	}
	specs = append(specs,
		mk(config.CertControllerManager, userKCM, userKCM, ProfileClient, nil),
		mk(config.CertScheduler, userScheduler, userScheduler, ProfileClient, nil),
		mk(config.CertKubeProxy, userKubeProxy, groupNodeProxier, ProfileClient, nil),
		mk(config.CertAPIServer, userAPIServer, orgKubernetes, ProfileKubernetes, APIServerSANs(c)),
		mk(config.CertServiceAccount, userSigner, orgKubernetes, ProfileSigning, nil),
	)
	return specs
}

// Recipe is the cfssl command that makes this cert by hand from the files of
// the pki directory, run inside it:
//
//	cfssl gencert -ca=ca.pem -ca-key=ca-key.pem -config=ca-config.json -profile=<profile> <name>-csr.json | cfssljson -bare <name>
//
// and for the CA `cfssl gencert -initca ca-csr.json | cfssljson -bare ca`
// (a new key; `-initca -ca-key=ca-key.pem` re-signs the CA from its own key).
// The profile gives exactly the key usages and EKUs khw issues. cfssljson
// -bare writes a new <name>-key.pem too, so for the two precious keys (ca,
// service-account) the command is for a scratch directory, never for the
// pki directory itself (CertInfo.Text says so).
func (s Spec) Recipe() string { return recipe(s.Name, s.Profile) }

// RenewRecipe is the shell equivalent of renewing s in the pki directory
// (Renew). The CA is re-signed from its key (`cfssl gencert -initca
// -ca-key`). A leaf keeps its key unless newKey: `openssl req` makes a CSR
// from the key with the Spec's subject (cfssl 1.2, Debian's, has no
// gencsr), and `cfssl sign` signs it with the Spec's profile and SANs. With
// newKey a leaf is made anew (Recipe); the service-account key is never
// replaced by a renewal.
//
// The subject is OpenSSLSubj of the Spec's, and -utf8 makes openssl read
// it as UTF-8 (without it each byte is a character: Zürich would become
// ZÃ¼rich), so the CSR has exactly the subject khw issues.
func (s Spec) RenewRecipe(newKey bool) string {
	switch {
	case s.Profile == ProfileCA:
		return fmt.Sprintf("cfssl gencert -initca -ca-key=%s %s | cfssljson -bare %s", keyFile(s.Name), csrFile(s.Name), s.Name)
	case newKey && s.Profile != ProfileSigning:
		return s.Recipe()
	}
	subj := OpenSSLSubj([]Attr{{"C", s.C}, {"ST", s.ST}, {"L", s.L}, {"O", s.O}, {"OU", s.OU}, {"CN", s.CN}})
	sign := fmt.Sprintf("cfssl sign -ca=%s -ca-key=%s -config=%s -profile=%s", certFile(CAName), keyFile(CAName), CAConfigFile, s.Profile)
	if len(s.Hosts) > 0 {
		sign += " -hostname=" + strings.Join(s.Hosts, ",")
	}
	return fmt.Sprintf("openssl req -new -utf8 -key %s -subj %s -out %s.csr\n%s %s.csr | cfssljson -bare %s\nrm %s.csr",
		keyFile(s.Name), shellQuote(subj), s.Name, sign, s.Name, s.Name, s.Name)
}

// Attr is one attribute of a certificate subject: Type is its short name
// as openssl knows it (C, ST, L, O, OU, CN), Value its text.
type Attr struct{ Type, Value string }

// OpenSSLSubj returns the -subj argument of `openssl req` for attrs, one
// attribute per RDN, in order: "/C=US/ST=Oregon/CN=admin"; an attribute
// with an empty value is left out. The syntax is openssl-req(1), "-subj
// arg": "/type0=value0/type1=value1", where a "/" starts the next RDN, a
// "+" adds another attribute to the same RDN, and a "\" makes the
// character after it literal. So "/", "+" and "\" in a value are written
// with a "\" before them, and openssl takes each value exactly as given:
// "Oregon+O=system:masters" stays one ST, not ST plus a second O. The
// other characters special in a DN's text form (RFC 4514 section 2.4: , ;
// < > " # = and spaces at either end) mean nothing in -subj and are
// written as they are. The result is not quoted for a shell.
func OpenSSLSubj(attrs []Attr) string {
	var b strings.Builder
	for _, a := range attrs {
		if a.Value == "" {
			continue
		}
		b.WriteString("/" + a.Type + "=")
		for _, r := range a.Value {
			if r == '/' || r == '+' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}

// shellQuote quotes v for a POSIX shell.
func shellQuote(v string) string { return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'" }

func recipe(name string, p Profile) string {
	if p == ProfileCA {
		return fmt.Sprintf("cfssl gencert -initca %s | cfssljson -bare %s", csrFile(name), name)
	}
	return fmt.Sprintf("cfssl gencert -ca=%s -ca-key=%s -config=%s -profile=%s %s | cfssljson -bare %s",
		certFile(CAName), keyFile(CAName), CAConfigFile, p, csrFile(name), name)
}

// IsBootstrapNode reports whether name is a worker of c that joins by TLS
// bootstrap (nodes[].tlsBootstrap: true). Such a node gets no cert from khw,
// so there is no <name>.pem to inspect: its kubelet's cert is issued by the
// cluster through a CertificateSigningRequest and lives on the node
// (/var/lib/kubelet/pki/kubelet-client-current.pem, kubelet --cert-dir).
func IsBootstrapNode(c *config.Cluster, name string) bool {
	n, ok := c.Node(name)
	return ok && n.Role == config.RoleWorker && n.TLSBootstrap
}

// APIServerSANs returns the SANs of the `kubernetes` cert (apiserver serving
// cert and etcd server/peer cert), in this order: the first IP of the service
// CIDR (the `kubernetes` Service ClusterIP), 127.0.0.1, every control-plane
// IP, the LB IP, every control-plane name, the LB name, their FQDNs
// (<name>.<network.domain>), then kubernetes, kubernetes.default,
// kubernetes.default.svc and kubernetes.default.svc.<clusterDomain>. A client
// checks that the name or IP it dialled is among them ("x509: certificate is
// valid for X, not Y" otherwise). The default cluster has 18.
func APIServerSANs(c *config.Cluster) []string {
	var ips, names, fqdns []string
	if a := c.APIServerServiceIP(); a.IsValid() {
		ips = append(ips, a.String())
	}
	ips = append(ips, "127.0.0.1")
	nodes := c.ControlPlanes()
	if lb, ok := c.LB(); ok {
		nodes = append(nodes, lb)
	}
	for _, n := range nodes {
		ips = append(ips, n.IP)
		names = append(names, n.Name)
		fqdns = append(fqdns, c.FQDN(n))
	}
	svc := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc"}
	if d := strings.TrimSuffix(c.Kubernetes.ClusterDomain, "."); d != "" {
		svc = append(svc, "kubernetes.default.svc."+d)
	}
	all := append(append(append(ips, names...), fqdns...), svc...)
	return uniq(all...)
}

// uniq drops empty strings and later duplicates, keeping order.
func uniq(in ...string) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, s := range in {
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	return out
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
