package labcheck

import (
	"fmt"

	"github.com/khw-dev/khw/internal/labid"
	"github.com/khw-dev/khw/internal/pki"
)

// pkiCerts checks the certs of the state directory (D/pki) against what
// each one is used for, following the cert table of cluster-facts.md
// (pki.Specs): identity (CN = user, O = groups:
// k8s.io/apiserver/pkg/authentication/request/x509/x509.go), the SANs
// clients dial, key usages, validity, the CA's signature and the key pair.
// Upstream: https://kubernetes.io/docs/setup/best-practices/certificates/.
func pkiCerts(e *env) ([]Mistake, error) {
	const lab = labid.PKI
	var out []Mistake
	caFix := "cd $KHW_STATE_DIR/$KHW_CLUSTER/pki && cfssl gencert -initca ca-csr.json | cfssljson -bare ca, then reissue every cert"
	ca, ms, err := e.loadCert(lab, Jumpbox, "pki/ca.pem", "the cluster CA", caFix)
	if err != nil {
		return nil, err
	}
	out = append(out, ms...)
	if ca != nil {
		ev := "pki/ca.pem: " + describe(ca)
		if !ca.IsCA {
			out = append(out, Mistake{Lab: lab, Node: Jumpbox, What: "pki/ca.pem is not a CA certificate (basic constraints CA:false): nothing it signs verifies", Evidence: ev, Fix: caFix})
		} else if err := verifyAgainst(ca, ca); err != nil {
			out = append(out, Mistake{Lab: lab, Node: Jumpbox, What: "pki/ca.pem is not self-signed: " + err.Error() + "; every node must then also trust its issuer", Evidence: ev, Fix: caFix})
		}
		if e.now.After(ca.NotAfter) {
			out = append(out, Mistake{Lab: lab, Node: Jumpbox, What: "the cluster CA expired " + ca.NotAfter.UTC().Format("2006-01-02"), Evidence: ev, Fix: caFix})
		}
		ms, err := e.checkKey(lab, Jumpbox, "pki/ca.pem", "pki/ca-key.pem", ca, caFix)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	for _, s := range pki.Specs(e.c) {
		if s.Profile == pki.ProfileCA {
			continue
		}
		certPath, keyPath := "pki/"+s.Name+".pem", "pki/"+s.Name+"-key.pem"
		fix := "cd $KHW_STATE_DIR/$KHW_CLUSTER/pki && " + s.Recipe()
		cert, ms, err := e.loadCert(lab, Jumpbox, certPath, s.Purpose, fix)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
		if cert == nil {
			continue
		}
		if s.Profile != pki.ProfileSigning {
			out = append(out, e.checkCert(Jumpbox, certPath, cert, specWant(e, s, fix))...)
		}
		ms, err = e.checkKey(lab, Jumpbox, certPath, keyPath, cert, fix)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	return out, nil
}

// specWant is what the cert of spec s must be, by meaning rather than
// byte for byte: the apiserver cert may have any CN (RBAC binds whatever
// its CN is; the 05-control-plane detectors check that), a kubelet cert
// needs its node's IP (the apiserver dials kubelets by InternalIP first,
// --kubelet-preferred-address-types, and verifies them against
// --kubelet-certificate-authority), and O must carry a group only where a
// group grants the access (system:masters for admin, system:nodes for the
// Node authorizer); the controller-manager, scheduler and kube-proxy are
// bound by user name (plugin/pkg/auth/authorizer/rbac/bootstrappolicy).
func specWant(e *env, s pki.Spec, fix string) certWant {
	w := certWant{lab: labid.PKI, fix: fix, client: true}
	if caCert, _, _ := e.clusterCA(); caCert != nil {
		w.ca, w.caWhat = caCert, "the cluster CA (pki/ca.pem)"
	}
	switch {
	case s.Name == "admin":
		w.cn, w.org, w.admin = s.CN, groupMasters, true
	case s.Node != "":
		n, _ := e.c.Node(s.Node)
		w.cn, w.org, w.node, w.server = s.CN, groupNodes, true, true
		w.sans = []sanWant{{n.IP, "the apiserver dials the kubelet on " + n.Name + "'s InternalIP and checks this cert"}}
	case s.Name == "kubernetes":
		w.sans, w.server = apiserverSANs(e.c, ""), true
		w.what = "kubernetes.pem (apiserver serving cert, etcd server and peer cert)"
	default:
		w.cn = s.CN
	}
	if s.Name != "kubernetes" {
		w.what = fmt.Sprintf("%s.pem (%s)", s.Name, s.CN)
	}
	return w
}
