package kubeconfig

import (
	"context"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/khw-dev/khw/internal/lab/fault"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// Faults are lab 03's troubleshooting challenges (texts:
// labs/challenges/03-kubeconfig.md): a kubeconfig on a node that names the
// wrong CA or the wrong user. The labs that install the kubeconfigs grade
// them where they are used.
func Faults() []fault.Fault {
	return []fault.Fault{
		{
			ID: "kubelet-kubeconfig-port", Lab: labid.Kubeconfig, Checked: labid.Workers, Level: 1,
			Source: fault.Source{Title: "kelseyhightower/kubernetes-the-hard-way #247: unable to register worker nodes, \"dial tcp :6443: connection refused\"",
				URL: "https://github.com/kelseyhightower/kubernetes-the-hard-way/issues/247"},
			Break: fault.OnNode("w1", `sed -i 's|^\(\s*server: https://[^:]*\):6443$|\1:6444|' /var/lib/kubelet/kubeconfig
grep -q 'server: https://.*:6444$' /var/lib/kubelet/kubeconfig
systemctl restart kubelet`),
			Named: []string{"[07-workers] w1: the server URL of /var/lib/kubelet/kubeconfig has port 6444"},
		},
		{
			ID: "kube-proxy-kubeconfig-ca", Lab: labid.Kubeconfig, Checked: labid.Workers, Level: 2,
			Source: fault.Source{Title: "mmumshad/kubernetes-the-hard-way #185: \"x509: certificate signed by unknown authority\" from a node's components talking to the API",
				URL: "https://github.com/mmumshad/kubernetes-the-hard-way/issues/185"},
			Break: func(ctx context.Context, a fault.Actions) error {
				ca, err := fault.NewCA("Kubernetes")
				if err != nil {
					return err
				}
				return fault.PushKubeconfig(ctx, a, "w2", "kube-proxy.kubeconfig", "/var/lib/kube-proxy/kubeconfig", "kube-proxy", func(k *clientcmdapi.Config) {
					for _, c := range k.Clusters {
						c.CertificateAuthorityData = ca
					}
				})
			},
			Named: []string{"[07-workers] w2: /var/lib/kube-proxy/kubeconfig trusts another CA than the cluster CA"},
		},
	}
}
