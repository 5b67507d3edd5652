package tlsbootstrap

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/khw-dev/khw/internal/lab/fault"
	"github.com/khw-dev/khw/internal/lab/labid"
	tb "github.com/khw-dev/khw/internal/tlsbootstrap"
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
				if _, err := a.Run(ctx, "w3", `systemctl stop kubelet
rm -f /var/lib/kubelet/pki/kubelet-server-*.pem
systemctl start kubelet`); err != nil {
					return err
				}
				return waitServingCSR(ctx, a, "w3", time.Minute)
			},
			Named: []string{"[10-tls-bootstrap] w3: the kubelet serving CSR", "is Pending"},
		},
	}
}

// waitServingCSR waits until node's kubelet has asked for a serving
// certificate: a Pending kubelet-serving CSR from system:node:<node>, the
// state the challenge's symptom describes.
func waitServingCSR(ctx context.Context, a fault.Actions, node string, limit time.Duration) error {
	cs, err := a.Kube()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(limit)
	for {
		list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range list.Items {
				c := &list.Items[i]
				if st, _ := tb.State(c); st == "Pending" && c.Spec.SignerName == tb.ServingSigner && c.Spec.Username == "system:node:"+node {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the kubelet on %s made no serving CSR within %s (last error: %v)", node, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
