package pki

import (
	"fmt"

	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/pki"
)

// pkiCerts checks the certs of the state directory (D/pki) against what
// each one is used for, following the cert table of cluster-facts.md
// (pki.Specs): identity (CN = user, O = groups:
// k8s.io/apiserver/pkg/authentication/request/x509/x509.go), the SANs
// clients dial, key usages, validity, the CA's signature and the key pair.
// Upstream: https://kubernetes.io/docs/setup/best-practices/certificates/.
func pkiCerts(e *labcheck.Env) ([]labcheck.Mistake, error) {
	const lab = labid.PKI
	var out []labcheck.Mistake
	caFix := "cd $KHW_STATE_DIR/$KHW_CLUSTER/pki && cfssl gencert -initca ca-csr.json | cfssljson -bare ca, then reissue every cert"
	ca, ms, err := e.LoadCert(lab, labcheck.Jumpbox, "pki/ca.pem", "the cluster CA", caFix)
	if err != nil {
		return nil, err
	}
	out = append(out, ms...)
	if ca != nil {
		ev := "pki/ca.pem: " + labcheck.Describe(ca)
		if !ca.IsCA {
			out = append(out, labcheck.Mistake{Lab: lab, Node: labcheck.Jumpbox, What: "pki/ca.pem is not a CA certificate (basic constraints CA:false): nothing it signs verifies", Evidence: ev, Fix: caFix})
		} else if err := labcheck.VerifyAgainst(ca, ca); err != nil {
			out = append(out, labcheck.Mistake{Lab: lab, Node: labcheck.Jumpbox, What: "pki/ca.pem is not self-signed: " + err.Error() + "; every node must then also trust its issuer", Evidence: ev, Fix: caFix})
		}
		if e.Now.After(ca.NotAfter) {
			out = append(out, labcheck.Mistake{Lab: lab, Node: labcheck.Jumpbox, What: "the cluster CA expired " + ca.NotAfter.UTC().Format("2006-01-02"), Evidence: ev, Fix: caFix})
		}
		ms, err := e.CheckKey(lab, labcheck.Jumpbox, "pki/ca.pem", "pki/ca-key.pem", ca, caFix)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	for _, s := range pki.Specs(e.Cluster) {
		if s.Profile == pki.ProfileCA {
			continue
		}
		certPath, keyPath := "pki/"+s.Name+".pem", "pki/"+s.Name+"-key.pem"
		fix := "cd $KHW_STATE_DIR/$KHW_CLUSTER/pki && " + s.Recipe()
		cert, ms, err := e.LoadCert(lab, labcheck.Jumpbox, certPath, s.Purpose, fix)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
		if cert == nil {
			continue
		}
		if s.Profile != pki.ProfileSigning {
			out = append(out, e.CheckCert(labcheck.Jumpbox, certPath, cert, specWant(e, s, fix))...)
		}
		ms, err = e.CheckKey(lab, labcheck.Jumpbox, certPath, keyPath, cert, fix)
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
func specWant(e *labcheck.Env, s pki.Spec, fix string) labcheck.CertWant {
	w := labcheck.CertWant{Lab: labid.PKI, Fix: fix, Client: true}
	if caCert, _, _ := e.ClusterCA(); caCert != nil {
		w.CA, w.CAWhat = caCert, "the cluster CA (pki/ca.pem)"
	}
	switch {
	case s.Name == "admin":
		w.CN, w.Org, w.Admin = s.CN, labcheck.GroupMasters, true
	case s.Node != "":
		n, _ := e.Cluster.Node(s.Node)
		w.CN, w.Org, w.Node, w.Server = s.CN, labcheck.GroupNodes, true, true
		w.SANs = []labcheck.SANWant{{Host: n.IP, Why: "the apiserver dials the kubelet on " + n.Name + "'s InternalIP and checks this cert"}}
	case s.Name == "kubernetes":
		w.SANs, w.Server = labcheck.APIServerSANs(e.Cluster, ""), true
		w.What = "kubernetes.pem (apiserver serving cert, etcd server and peer cert)"
	default:
		w.CN = s.CN
	}
	if s.Name != "kubernetes" {
		w.What = fmt.Sprintf("%s.pem (%s)", s.Name, s.CN)
	}
	return w
}

// pkiDetectors are the detectors of lab PKI, in the order they run.
var Detectors = []labcheck.Detector{
	{Name: "pki-certs", Lab: labid.PKI, Doc: "the state directory's pki/: each cert's CN/O, SANs (service IP, 127.0.0.1, lb), key usages, validity, CA signature, key pair", Run: pkiCerts},
}
