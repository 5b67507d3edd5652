package tlsbootstrap

import (
	"context"

	"github.com/khw-dev/khw/internal/lab/fault"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// Faults are lab 10's troubleshooting challenges (texts:
// labs/challenges/10-tls-bootstrap.md).
func Faults() []fault.Fault {
	return []fault.Fault{
		{
			ID: "kubelet-serving-csr-pending", Lab: labid.TLSBootstrap, Level: 2,
			Source: fault.Source{Title: "kubernetes/kubeadm #591: kubectl logs returns \"remote error: tls: internal error\" while the kubelet's serving CSR is not approved",
				URL: "https://github.com/kubernetes/kubeadm/issues/591"},
			Break: func(ctx context.Context, a fault.Actions) error {
				// A kubelet that lost its serving certificate asks for a
				// new one by a CSR; nothing approves kubelet-serving CSRs.
				_, err := a.Run(ctx, "w3", `systemctl stop kubelet
rm -f /var/lib/kubelet/pki/kubelet-server-*.pem
systemctl start kubelet`)
				return err
			},
			Named: []string{"[10-tls-bootstrap] w3: the kubelet serving CSR", "is Pending"},
		},
	}
}
