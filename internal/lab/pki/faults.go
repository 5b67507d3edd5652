package pki

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"slices"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/khw-dev/khw/internal/lab/fault"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// Faults are lab 02's troubleshooting challenges (texts:
// labs/challenges/02-pki.md). Each puts on a node a real certificate of
// the cluster CA (fault.Reissue) that says the wrong thing; the checks of
// the labs that use the certificate find it where it is served or
// presented.
func Faults() []fault.Fault {
	return []fault.Fault{
		{
			ID: "apiserver-cert-no-lb", Lab: labid.PKI, Checked: labid.LB, Level: 2,
			Source: fault.Source{Title: "kubernetes/kubernetes #101289: kubectl through a load balancer: x509: certificate is valid for the masters' IPs, not the load balancer's",
				URL: "https://github.com/kubernetes/kubernetes/issues/101289"},
			Break: func(ctx context.Context, a fault.Actions) error {
				lb, _ := a.Cluster().LB()
				pem, err := fault.Reissue(a.State().PKIDir(), "kubernetes", func(c *x509.Certificate) {
					c.DNSNames = slices.DeleteFunc(c.DNSNames, func(n string) bool { return n == lb.Name })
					c.IPAddresses = slices.DeleteFunc(c.IPAddresses, func(ip net.IP) bool { return ip.String() == lb.IP })
				})
				if err != nil {
					return err
				}
				cp := a.Cluster().ControlPlanes()[0].Name
				if err := a.Push(ctx, cp, "/var/lib/kubernetes/kubernetes.pem", pem, 0o644); err != nil {
					return err
				}
				// The fault is in place once the restarted apiserver serves
				// the certificate again and is ready (/readyz answers 200).
				_, err = a.Run(ctx, cp, `systemctl restart kube-apiserver
for i in $(seq 90); do curl -skf -o /dev/null https://127.0.0.1:6443/readyz && exit 0; sleep 1; done
echo "kube-apiserver was not ready again within 90 s" >&2; exit 1`)
				return err
			},
			Named: []string{"[02-pki] cp1: the apiserver on cp1 serves a certificate that does not name lb"},
		},
		{
			ID: "kubelet-cert-other-node", Lab: labid.PKI, Checked: labid.Workers, Level: 2,
			Source: fault.Source{Title: "Kubernetes documentation, Node authorization: a kubelet must use a credential in the system:nodes group with the username system:node:<nodeName>",
				URL: "https://kubernetes.io/docs/reference/access-authn-authz/node/"},
			Break: func(ctx context.Context, a fault.Actions) error {
				return kubeletClientCert(ctx, a, "w2", func(c *x509.Certificate) {
					c.Subject = pkix.Name{CommonName: "system:node:w1", Organization: []string{"system:nodes"}}
				})
			},
			Named: []string{"[07-workers] w2: the kubelet's kubeconfig logs in as \"system:node:w1\", but must be \"system:node:w2\""},
		},
		{
			ID: "kubelet-cert-expired", Lab: labid.PKI, Checked: labid.Workers, Level: 2,
			Source: fault.Source{Title: "Kubernetes documentation, Certificate Management with kubeadm: an expired client certificate is refused by the API server",
				URL: "https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-certs/"},
			Break: func(ctx context.Context, a fault.Actions) error {
				now := time.Now()
				return kubeletClientCert(ctx, a, "w1", func(c *x509.Certificate) {
					c.NotBefore, c.NotAfter = now.Add(-30*24*time.Hour), now.Add(-time.Hour)
				})
			},
			Named: []string{"[02-pki] w1: the client cert of /var/lib/kubelet/kubeconfig expired"},
		},
	}
}

// kubeletClientCert replaces the client certificate embedded in node's
// kubelet kubeconfig (/var/lib/kubelet/kubeconfig, the state directory's
// kubeconfigs/<node>.kubeconfig) with a changed twin of pki/<node>.pem,
// and restarts the kubelet.
func kubeletClientCert(ctx context.Context, a fault.Actions, node string, change func(*x509.Certificate)) error {
	pem, err := fault.Reissue(a.State().PKIDir(), node, change)
	if err != nil {
		return err
	}
	return fault.PushKubeconfig(ctx, a, node, node+".kubeconfig", "/var/lib/kubelet/kubeconfig", "kubelet", func(k *clientcmdapi.Config) {
		for _, u := range k.AuthInfos {
			u.ClientCertificateData = pem
		}
	})
}
