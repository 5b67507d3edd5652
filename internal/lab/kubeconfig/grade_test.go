package kubeconfig

import (
	"testing"

	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labcheck/labchecktest"
)

// TestDetectorsKubeconfig breaks one thing at a time in a good cluster and
// expects lab 03-kubeconfig's detectors to name it.
func TestDetectorsKubeconfig(t *testing.T) {
	cases := []struct {
		name   string
		lab    string
		break_ func(t *testing.T, f *labchecktest.Fixture)
		want   []labchecktest.Want
	}{
		{"worker kubeconfig pointing at 127.0.0.1", "03-kubeconfig", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, labcheck.Jumpbox, "kubeconfigs/w1.kubeconfig", "server: https://lb:6443", "server: https://127.0.0.1:6443")
		}, []labchecktest.Want{{"03-kubeconfig", labcheck.Jumpbox, "no apiserver runs on jumpbox"}}},
		{"kube-proxy kubeconfig bypassing the lb", "03-kubeconfig", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, labcheck.Jumpbox, "kubeconfigs/kube-proxy.kubeconfig", "server: https://lb:6443", "server: https://192.168.122.11:6443")
		}, []labchecktest.Want{{"03-kubeconfig", labcheck.Jumpbox, "names the control plane cp1 directly"}}},
		{"w2's kubeconfig holding w1's cert", "03-kubeconfig", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Set(labcheck.Jumpbox, "kubeconfigs/w2.kubeconfig", f.Src.Get(t, labcheck.Jumpbox, "kubeconfigs/w1.kubeconfig"))
		}, []labchecktest.Want{{"03-kubeconfig", labcheck.Jumpbox, `has CN="system:node:w1", want CN="system:node:w2"`}}},
		{"wrong port", "03-kubeconfig", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, labcheck.Jumpbox, "kubeconfigs/admin.kubeconfig", "server: https://lb:6443", "server: https://lb:443")
		}, []labchecktest.Want{{"03-kubeconfig", labcheck.Jumpbox, "has port 443"}}},
		{"dangling current-context", "03-kubeconfig", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, labcheck.Jumpbox, "kubeconfigs/kube-scheduler.kubeconfig", "current-context: default", "current-context: nope")
		}, []labchecktest.Want{{"03-kubeconfig", labcheck.Jumpbox, `current-context "nope" names no context`}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { labchecktest.RunCase(t, Detectors, tc.break_, tc.want) })
	}
}
