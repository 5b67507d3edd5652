package labcheck

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/pki"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeconfig is the part of a kubeconfig its current context uses.
type kubeconfig struct {
	path    string
	server  string
	cluster *clientcmdapi.Cluster
	User    *clientcmdapi.AuthInfo
}

// LoadKubeconfig reads and resolves the current context of the kubeconfig
// at path on node; a missing, unparsable or dangling one is a Mistake.
// client-go uses current-context when no --context is given
// (k8s.io/client-go/tools/clientcmd/client_config.go).
func (e *Env) LoadKubeconfig(lab, node, path, what, fix string) (*kubeconfig, []Mistake, error) {
	data, ok, err := e.Read(node, path)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, []Mistake{Missing(lab, node, path, what, fix)}, nil
	}
	bad := func(why string) (*kubeconfig, []Mistake, error) {
		return nil, []Mistake{{Lab: lab, Node: node, What: path + " (" + what + ") is not a usable kubeconfig: " + why, Evidence: path + ": " + why, Fix: fix}}, nil
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		// Not quoting err: a YAML error may echo a line with key data.
		return bad("it does not parse as a kubeconfig (YAML with apiVersion v1, kind Config)")
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if cfg.CurrentContext == "" || !ok {
		return bad(fmt.Sprintf("current-context %q names no context (contexts: %s)", cfg.CurrentContext, strings.Join(SortedKeys(cfg.Contexts), ", ")))
	}
	cl, ok := cfg.Clusters[ctx.Cluster]
	if !ok {
		return bad(fmt.Sprintf("context %q names cluster %q, which is not in clusters", cfg.CurrentContext, ctx.Cluster))
	}
	u, ok := cfg.AuthInfos[ctx.AuthInfo]
	if !ok {
		return bad(fmt.Sprintf("context %q names user %q, which is not in users", cfg.CurrentContext, ctx.AuthInfo))
	}
	return &kubeconfig{path: path, server: cl.Server, cluster: cl, User: u}, nil, nil
}

// ServerRule says which apiserver URLs a kubeconfig may use where it is.
type ServerRule int

const (
	// viaLB: workers and the jumpbox go through the load balancer
	// (cluster-facts.md, "kubeconfigs"), so losing one cp is invisible.
	ViaLB ServerRule = iota
	// onCP: a component on a control plane uses an apiserver of that node
	// (127.0.0.1 or its IP); the load balancer works too.
	OnCP
)

// CheckServer judges the server URL of k on node.
func (e *Env) CheckServer(lab, node string, k *kubeconfig, rule ServerRule, fix string) []Mistake {
	port := strconv.Itoa(e.Cluster.Kubernetes.APIServerPort)
	lb, _ := e.Cluster.LB()
	want := e.Cluster.APIServerURL()
	if rule == OnCP {
		want = e.Cluster.LocalAPIServerURL()
	}
	ev := k.path + ": server: " + k.server
	mk := func(what string) []Mistake {
		return []Mistake{{Lab: lab, Node: node, What: what, Evidence: ev, Fix: "set server: " + want + " (kubectl config set-cluster " + e.Cluster.Kubernetes.ClusterName + " --server=" + want + " --kubeconfig=" + k.path + ")" + fix}}
	}
	u, err := url.Parse(k.server)
	if err != nil || u.Host == "" {
		return mk("the server URL of " + k.path + " does not parse")
	}
	if u.Scheme != "https" {
		return mk(fmt.Sprintf("the server URL of %s uses %s: the apiserver serves only https on :%s", k.path, u.Scheme, port))
	}
	host, p := u.Hostname(), u.Port()
	if p == "" {
		p = "443"
	}
	if p != port {
		return mk(fmt.Sprintf("the server URL of %s has port %s: the apiserver and the load balancer listen on %s", k.path, p, port))
	}
	loopback := host == "localhost" || (net.ParseIP(host) != nil && net.ParseIP(host).IsLoopback())
	isLB := host == lb.Name || host == lb.IP || host == e.Cluster.FQDN(lb)
	cp := ""
	for _, n := range e.Cluster.ControlPlanes() {
		if host == n.Name || host == n.IP || host == e.Cluster.FQDN(n) {
			cp = n.Name
		}
	}
	switch {
	case isLB:
		return nil
	case loopback && rule == OnCP:
		return nil
	case loopback:
		return mk(fmt.Sprintf("the server URL of %s is %s, but no apiserver runs on %s", k.path, k.server, node))
	case cp != "" && rule == OnCP:
		return nil
	case cp != "":
		return mk(fmt.Sprintf("the server URL of %s names the control plane %s directly: it stops working when %s is down; go through the load balancer", k.path, cp, cp))
	}
	return mk(fmt.Sprintf("the server URL of %s names %s, which is neither the load balancer nor a control plane of cluster.yaml", k.path, host))
}

// KubeconfigCA checks that k trusts the cluster CA (embedded or by path on
// node) and does not skip verification.
func (e *Env) KubeconfigCA(lab, node string, k *kubeconfig, fix string) ([]Mistake, error) {
	if k.cluster.InsecureSkipTLSVerify {
		return []Mistake{{Lab: lab, Node: node, What: k.path + " skips TLS verification: anyone in the middle can pose as the apiserver",
			Evidence: k.path + ": insecure-skip-tls-verify: true", Fix: "remove insecure-skip-tls-verify and embed the CA (kubectl config set-cluster … --certificate-authority=ca.pem --embed-certs=true)" + fix}}, nil
	}
	ca, caWhat, err := e.ClusterCA()
	if err != nil || ca == nil {
		return nil, err
	}
	data, where := k.cluster.CertificateAuthorityData, k.path+": certificate-authority-data"
	if len(data) == 0 && k.cluster.CertificateAuthority != "" && node != Jumpbox {
		where = k.cluster.CertificateAuthority
		var ok bool
		data, ok, err = e.Read(node, k.cluster.CertificateAuthority)
		if err != nil {
			return nil, err
		}
		if !ok {
			return []Mistake{Missing(lab, node, k.cluster.CertificateAuthority, "the CA named by "+k.path, "copy ca.pem there, or embed it"+fix)}, nil
		}
	}
	if len(data) == 0 {
		if k.cluster.CertificateAuthority != "" {
			return nil, nil // a path on the jumpbox: not readable through the state directory
		}
		return []Mistake{{Lab: lab, Node: node, What: k.path + " names no CA: the client then trusts the system roots, which never signed the apiserver cert",
			Evidence: k.path + ": no certificate-authority(-data)", Fix: "kubectl config set-cluster … --certificate-authority=ca.pem --embed-certs=true --kubeconfig=" + k.path + fix}}, nil
	}
	c, perr := FirstCert(data)
	if perr != nil {
		return []Mistake{{Lab: lab, Node: node, What: "the CA of " + k.path + " is not a certificate", Evidence: where + ": " + perr.Error(), Fix: "embed ca.pem again" + fix}}, nil
	}
	if !c.Equal(ca) {
		return []Mistake{{Lab: lab, Node: node, What: k.path + " trusts another CA than the cluster CA: the apiserver cert will not verify (x509: certificate signed by unknown authority)",
			Evidence: where + ": " + Describe(c) + "; " + caWhat + " is " + fmt.Sprintf("%q", ca.Subject.String()), Fix: "embed the cluster CA (--certificate-authority=$KHW_STATE_DIR/$KHW_CLUSTER/pki/ca.pem --embed-certs=true)" + fix}}, nil
	}
	return nil, nil
}

// KubeconfigCert returns the client cert of k (embedded, or a path on
// node) and checks its key; nil without a cert (a token user).
func (e *Env) KubeconfigCert(lab, node string, k *kubeconfig, fix string) (*x509.Certificate, string, []Mistake, error) {
	u := k.User
	certData, certWhere := u.ClientCertificateData, k.path+" client-certificate-data"
	if len(certData) == 0 && u.ClientCertificate != "" {
		if node == Jumpbox {
			return nil, "", nil, nil
		}
		certWhere = u.ClientCertificate
		var ok bool
		var err error
		certData, ok, err = e.Read(node, u.ClientCertificate)
		if err != nil {
			return nil, "", nil, err
		}
		if !ok {
			return nil, "", []Mistake{Missing(lab, node, u.ClientCertificate, "the client cert named by "+k.path, fix)}, nil
		}
	}
	if len(certData) == 0 {
		return nil, "", nil, nil
	}
	cert, perr := FirstCert(certData)
	if perr != nil {
		return nil, "", []Mistake{{Lab: lab, Node: node, What: "the client cert of " + k.path + " is not a certificate", Evidence: certWhere + ": " + perr.Error(), Fix: fix}}, nil
	}
	keyData, keyWhere := u.ClientKeyData, k.path+" client-key-data"
	if len(keyData) == 0 && u.ClientKey != "" {
		keyWhere = u.ClientKey
		var ok bool
		var err error
		keyData, ok, err = e.Read(node, u.ClientKey)
		if err != nil {
			return nil, "", nil, err
		}
		if !ok {
			return cert, certWhere, []Mistake{Missing(lab, node, u.ClientKey, "the client key named by "+k.path, fix)}, nil
		}
	}
	if len(keyData) == 0 {
		return cert, certWhere, []Mistake{{Lab: lab, Node: node, What: k.path + " has a client cert but no client key", Evidence: keyWhere + " is empty", Fix: "kubectl config set-credentials … --client-key=<name>-key.pem --embed-certs=true" + fix}}, nil
	}
	key, perr := ParseKey(keyData)
	if perr != nil {
		return cert, certWhere, []Mistake{{Lab: lab, Node: node, What: "the client key of " + k.path + " is not a private key", Evidence: keyWhere + ": " + perr.Error(), Fix: fix}}, nil
	}
	if !SamePublic(key, cert.PublicKey) {
		return cert, certWhere, []Mistake{{Lab: lab, Node: node, What: "the client key of " + k.path + " does not belong to its client cert: TLS fails",
			Evidence: fmt.Sprintf("%s holds a %s key; the cert (%s) has another public key", keyWhere, pki.KeyDesc(key.Public()), Describe(cert)),
			Fix:      "embed the cert and the key made together (--client-certificate=<name>.pem --client-key=<name>-key.pem --embed-certs=true)" + fix}}, nil
	}
	return cert, certWhere, nil, nil
}

// ComponentKubeconfig is nodeKubeconfig with the server rule given.
func (e *Env) ComponentKubeconfig(lab, node, p, what, cn, org, nameEv string, bootstrap bool, rule ServerRule) ([]Mistake, error) {
	if bootstrap {
		if _, ok, err := e.Read(node, p); err != nil || !ok {
			return nil, err
		}
	}
	fix := "; khw lab " + lab + " shows how it is made"
	k, ms, err := e.LoadKubeconfig(lab, node, p, what, "copy the right kubeconfig there"+fix)
	if err != nil || k == nil {
		return ms, err
	}
	out := e.CheckServer(lab, node, k, rule, fix)
	ms, err = e.KubeconfigCA(lab, node, k, fix)
	if err != nil {
		return nil, err
	}
	out = append(out, ms...)
	cert, where, ms, err := e.KubeconfigCert(lab, node, k, "embed the right cert and key"+fix)
	if err != nil {
		return nil, err
	}
	out = append(out, ms...)
	if cert == nil {
		return out, nil
	}
	if cert.Subject.CommonName != cn {
		ev := where + ": " + Describe(cert)
		if nameEv != "" {
			ev += "; " + nameEv
		}
		why := "RBAC gives it the rights of that other user, not of " + cn
		if strings.HasPrefix(cn, NodeUserPrefix) {
			why = "the Node authorizer and NodeRestriction let it touch only the Node named in the cert"
		}
		out = append(out, Mistake{Lab: lab, Node: node, What: fmt.Sprintf("%s logs in as %q, but must be %q: %s", what, cert.Subject.CommonName, cn, why),
			Evidence: ev, Fix: "embed a client cert with CN=" + cn + " in " + p + " ($KHW_STATE_DIR/$KHW_CLUSTER/kubeconfigs has the right kubeconfig for each component)"})
	}
	ca, caWhat, _ := e.ClusterCA()
	out = append(out, e.CheckCert(node, where, cert, CertWant{Lab: labid.PKI, What: "the client cert of " + p, Org: org, Node: org == GroupNodes, Client: true, CA: ca, CAWhat: caWhat,
		Fix: "embed the right cert and key in " + p})...)
	return out, nil
}
