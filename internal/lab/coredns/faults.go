package coredns

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/khw-dev/khw/internal/lab/fault"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// Faults are lab 09's troubleshooting challenges (texts:
// labs/challenges/09-coredns.md). They change API objects, as a student's
// kubectl edit would.
func Faults() []fault.Fault {
	return []fault.Fault{
		{
			ID: "coredns-scaled-zero", Lab: labid.CoreDNS, Level: 1,
			Source: fault.Source{Title: "kelseyhightower/kubernetes-the-hard-way #725: \"kube-system/kube-dns:dns has no endpoints\", DNS lookups time out",
				URL: "https://github.com/kelseyhightower/kubernetes-the-hard-way/issues/725"},
			Break: func(ctx context.Context, a fault.Actions) error {
				cs, err := a.Kube()
				if err != nil {
					return err
				}
				s, err := cs.AppsV1().Deployments("kube-system").GetScale(ctx, "coredns", metav1.GetOptions{})
				if err != nil {
					return err
				}
				s.Spec.Replicas = 0
				_, err = cs.AppsV1().Deployments("kube-system").UpdateScale(ctx, "coredns", s, metav1.UpdateOptions{})
				return err
			},
			Named: []string{"[09-coredns] cluster: no ready CoreDNS pod stands behind the kube-dns Service"},
		},
		{
			ID: "coredns-zone", Lab: labid.CoreDNS, Level: 2,
			Source: fault.Source{Title: "coredns/coredns #2481: \"Can't find kubernetes.default.svc.cluster.local: No answer\", a mistake in the Corefile's kubernetes zone",
				URL: "https://github.com/coredns/coredns/issues/2481"},
			Break: func(ctx context.Context, a fault.Actions) error {
				cs, err := a.Kube()
				if err != nil {
					return err
				}
				dom := strings.TrimSuffix(a.Cluster().Kubernetes.ClusterDomain, ".")
				cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
				if err != nil {
					return err
				}
				old := "kubernetes " + dom + " "
				if !strings.Contains(cm.Data["Corefile"], old) {
					return fmt.Errorf("the Corefile has no %q line", old)
				}
				cm.Data["Corefile"] = strings.Replace(cm.Data["Corefile"], old, "kubernetes cluster.locl ", 1)
				// kubectl apply's record of the last applied object would
				// still show the right zone: it says the same as the data.
				const last = "kubectl.kubernetes.io/last-applied-configuration"
				if v, ok := cm.Annotations[last]; ok {
					cm.Annotations[last] = strings.Replace(v, old, "kubernetes cluster.locl ", 1)
				}
				if _, err := cs.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
					return err
				}
				// The reload plugin picks the change up within its
				// interval (30 s, plus the kubelet's ConfigMap sync);
				// restarting the pods makes the symptom immediate.
				d, err := cs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
				if err != nil {
					return err
				}
				if d.Spec.Template.Annotations == nil {
					d.Spec.Template.Annotations = map[string]string{}
				}
				d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = metav1.Now().Format("2006-01-02T15:04:05Z07:00")
				_, err = cs.AppsV1().Deployments("kube-system").Update(ctx, d, metav1.UpdateOptions{})
				return err
			},
			Named: []string{"[09-coredns] cluster: the Corefile's kubernetes plugin serves [cluster.locl in-addr.arpa ip6.arpa], not the cluster domain cluster.local"},
		},
	}
}
