package coredns

import (
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/lab/labcheck/labchecktest"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestDetectorsCoreDNS breaks one thing at a time in a good cluster and
// expects lab 09-coredns's detectors to name it.
func TestDetectorsCoreDNS(t *testing.T) {
	cases := []struct {
		name   string
		lab    string
		break_ func(t *testing.T, f *labchecktest.Fixture)
		want   []labchecktest.Want
	}{
		{"CoreDNS scaled to 0", "09-coredns", func(t *testing.T, f *labchecktest.Fixture) {
			f.DropObj(t, func(o runtime.Object) bool { _, ok := o.(*discoveryv1.EndpointSlice); return ok })
		}, []labchecktest.Want{{"09-coredns", "", "no ready CoreDNS pod stands behind the kube-dns Service"}}},
		{"kube-dns Service missing", "09-coredns", func(t *testing.T, f *labchecktest.Fixture) {
			f.DropObj(t, func(o runtime.Object) bool { s, ok := o.(*corev1.Service); return ok && s.Name == "kube-dns" })
		}, []labchecktest.Want{{"09-coredns", "", "there is no Service kube-system/kube-dns"}}},
		{"kube-dns at another IP", "09-coredns", func(t *testing.T, f *labchecktest.Fixture) {
			for _, o := range f.Objs {
				if s, ok := o.(*corev1.Service); ok && s.Name == "kube-dns" {
					s.Spec.ClusterIP = "10.32.0.53"
				}
			}
		}, []labchecktest.Want{{"09-coredns", "", "has ClusterIP 10.32.0.53, but the kubelets give pods 10.32.0.10"}}},
		{"Corefile for another domain", "09-coredns", func(t *testing.T, f *labchecktest.Fixture) {
			for _, o := range f.Objs {
				if c, ok := o.(*corev1.ConfigMap); ok && c.Name == "coredns" {
					if !strings.Contains(c.Data["Corefile"], "kubernetes cluster.local ") {
						t.Fatalf("Corefile: %s", c.Data["Corefile"])
					}
					c.Data["Corefile"] = strings.Replace(c.Data["Corefile"], "kubernetes cluster.local ", "kubernetes k8s.local ", 1)
				}
			}
		}, []labchecktest.Want{{"09-coredns", "", "not the cluster domain cluster.local"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { labchecktest.RunCase(t, Detectors, tc.break_, tc.want) })
	}
}
