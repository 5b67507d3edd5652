package kubeconfig

import (
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// kubeconfigWant is one kubeconfig of the state directory (D/kubeconfigs),
// cluster-facts.md "kubeconfigs".
type kubeconfigWant struct {
	name     string // admin → kubeconfigs/admin.kubeconfig
	cn, org  string
	admin    bool
	node     bool
	rule     labcheck.ServerRule
	certName string // the pki cert it embeds
}

// stateKubeconfigs checks D/kubeconfigs: each one's current context, server
// URL, CA and client cert identity (the user the apiserver will see).
// Upstream: https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/
// and the identities of https://kubernetes.io/docs/setup/best-practices/certificates/.
func stateKubeconfigs(e *labcheck.Env) ([]labcheck.Mistake, error) {
	const lab = labid.Kubeconfig
	wants := []kubeconfigWant{{name: "admin", cn: "admin", org: labcheck.GroupMasters, admin: true, rule: labcheck.ViaLB, certName: "admin"}}
	for _, n := range e.Cluster.Workers() {
		if !n.TLSBootstrap {
			wants = append(wants, kubeconfigWant{name: n.Name, cn: labcheck.NodeUserPrefix + n.Name, org: labcheck.GroupNodes, node: true, rule: labcheck.ViaLB, certName: n.Name})
		}
	}
	wants = append(wants,
		kubeconfigWant{name: "kube-proxy", cn: "system:kube-proxy", rule: labcheck.ViaLB, certName: "kube-proxy"},
		kubeconfigWant{name: "kube-controller-manager", cn: "system:kube-controller-manager", rule: labcheck.OnCP, certName: "kube-controller-manager"},
		kubeconfigWant{name: "kube-scheduler", cn: "system:kube-scheduler", rule: labcheck.OnCP, certName: "kube-scheduler"},
	)
	var out []labcheck.Mistake
	for _, w := range wants {
		path := "kubeconfigs/" + w.name + ".kubeconfig"
		fix := "; khw lab " + labid.Kubeconfig + " shows the kubectl config commands"
		k, ms, err := e.LoadKubeconfig(lab, labcheck.Jumpbox, path, "the "+w.name+" kubeconfig", "make it with kubectl config set-cluster/set-credentials/set-context/use-context"+fix)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
		if k == nil {
			continue
		}
		out = append(out, e.CheckServer(lab, labcheck.Jumpbox, k, w.rule, fix)...)
		ms, err = e.KubeconfigCA(lab, labcheck.Jumpbox, k, fix)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
		cert, where, ms, err := e.KubeconfigCert(lab, labcheck.Jumpbox, k, "embed pki/"+w.certName+".pem and its key"+fix)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
		if cert == nil {
			if len(ms) == 0 && k.User.ClientCertificate == "" {
				out = append(out, labcheck.Mistake{Lab: lab, Node: labcheck.Jumpbox, What: path + " has no client cert: the apiserver will not know who " + w.name + " is",
					Evidence: path + ": user has no client-certificate(-data)", Fix: "kubectl config set-credentials " + w.cn + " --client-certificate=pki/" + w.certName + ".pem --client-key=pki/" + w.certName + "-key.pem --embed-certs=true --kubeconfig=" + path})
			}
			continue
		}
		cw := labcheck.CertWant{Lab: lab, What: "the client cert in " + path, CN: w.cn, Org: w.org, Admin: w.admin, Node: w.node, Client: true,
			Fix: "embed a right one (kubectl config set-credentials … --embed-certs=true)"}
		if ca, caWhat, _ := e.ClusterCA(); ca != nil {
			cw.CA, cw.CAWhat = ca, caWhat
		}
		out = append(out, e.CheckCert(labcheck.Jumpbox, where, cert, cw)...)
	}
	return out, nil
}

// kubeconfigDetectors are the detectors of lab Kubeconfig, in the order they run.
var Detectors = []labcheck.Detector{
	{Name: "kubeconfigs", Lab: labid.Kubeconfig, Doc: "the state directory's kubeconfigs/: current context, server URL (lb for workers, 127.0.0.1 on cps), CA, client cert identity and key", Run: stateKubeconfigs},
}
