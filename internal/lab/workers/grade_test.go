package workers

import (
	"context"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labcheck/labchecktest"
	"github.com/khw-dev/khw/internal/steps"
	corev1 "k8s.io/api/core/v1"
)

// TestDetectorsWorkers breaks one thing at a time in a good cluster and
// expects lab 07-workers's detectors to name it.
func TestDetectorsWorkers(t *testing.T) {
	cases := []struct {
		name   string
		lab    string
		break_ func(t *testing.T, f *labchecktest.Fixture)
		want   []labchecktest.Want
	}{
		{"no CNI config", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Del("w2", "/etc/cni/net.d/10-bridge.conf")
			f.Src.Del("w2", "/etc/cni/net.d/99-loopback.conf")
		}, []labchecktest.Want{{"07-workers", "w2", "no CNI config in /etc/cni/net.d"}}},
		{"CNI plugin binary missing", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Del("w1", "/opt/cni/bin/host-local")
		}, []labchecktest.Want{{"07-workers", "w1", `names the CNI plugin "host-local"`}}},
		{"CNI plugin not executable", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Noexec[labchecktest.Key("w1", "/opt/cni/bin/bridge")] = true
		}, []labchecktest.Want{{"07-workers", "w1", `names the CNI plugin "bridge"`}}},
		{"CNI subnet of another worker", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "w1", "/etc/cni/net.d/10-bridge.conf", "10.200.0.0/24", "10.200.1.0/24")
		}, []labchecktest.Want{{"07-workers", "w1", "gives pods addresses from 10.200.1.0/24"}}},
		{"clusterDNS not the kube-dns IP", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "w2", "/var/lib/kubelet/kubelet-config.yaml", "- 10.32.0.10", "- 10.96.0.10")
		}, []labchecktest.Want{{"07-workers", "w2", "clusterDNS does not list 10.32.0.10"}}},
		{"kube-dns Service at another IP", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			for _, o := range f.Objs {
				if s, ok := o.(*corev1.Service); ok && s.Name == "kube-dns" {
					s.Spec.ClusterIP = "10.32.0.53"
					return
				}
			}
			t.Fatal("no kube-dns Service")
		}, []labchecktest.Want{{"09-coredns", "w1", "has ClusterIP 10.32.0.53"}}},
		{"pods get systemd-resolved's stub", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "w1", "/var/lib/kubelet/kubelet-config.yaml", "resolvConf: /run/systemd/resolve/resolv.conf", "resolvConf: /etc/resolv.conf")
			f.Src.Set("w1", "/etc/resolv.conf", "nameserver 127.0.0.53\noptions edns0 trust-ad\n")
		}, []labchecktest.Want{{"07-workers", "w1", "nameserver 127.0.0.53 is a loopback address"}}},
		{"resolvConf missing", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Del("w2", "/run/systemd/resolve/resolv.conf")
		}, []labchecktest.Want{{"07-workers", "w2", "resolvConf /run/systemd/resolve/resolv.conf does not exist"}}},
		{"node name differs from the cert CN", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "w1", "/etc/systemd/system/kubelet.service", "--hostname-override=w1", "--hostname-override=w1.kubernetes.local")
		}, []labchecktest.Want{{"07-workers", "w1", `registers as node "w1.kubernetes.local", not "w1": the Node authorizer`}}},
		{"kubelet cert of another node", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Set("w1", "/var/lib/kubelet/kubeconfig", f.Src.Get(t, labcheck.Jumpbox, "kubeconfigs/w2.kubeconfig"))
		}, []labchecktest.Want{{"07-workers", "w1", `logs in as "system:node:w2", but must be "system:node:w1"`}}},
		{"host name used without override", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "w2", "/etc/systemd/system/kubelet.service", "--hostname-override=w2 ", "")
			f.Src.Set("w2", "/proc/sys/kernel/hostname", "worker-2\n")
		}, []labchecktest.Want{{"07-workers", "w2", `registers as node "worker-2"`}}},
		{"kubelet kubeconfig with kube-proxy's cert", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Set("w2", "/var/lib/kubelet/kubeconfig", f.Src.Get(t, "w2", "/var/lib/kube-proxy/kubeconfig"))
		}, []labchecktest.Want{{"07-workers", "w2", `logs in as "system:kube-proxy"`}, {"02-pki", "w2", "want O=system:nodes"}}},
		{"w2's kubelet cert and key copied onto w1", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Set("w1", "/var/lib/kubelet/kubelet.pem", f.Src.Get(t, "w2", "/var/lib/kubelet/kubelet.pem"))
			f.Src.Set("w1", "/var/lib/kubelet/kubelet-key.pem", f.Src.Get(t, "w2", "/var/lib/kubelet/kubelet-key.pem"))
		}, []labchecktest.Want{{"07-workers", "w1", "holds w2's identity (CN=system:node:w2), not w1's"}}},
		{"kubelet serving cert without the node IP", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.ReplaceCert(t, "w1", "/var/lib/kubelet/kubelet.pem", "/var/lib/kubelet/kubelet-key.pem", labchecktest.CertSpec{CN: "system:node:w1", Org: []string{"system:nodes"}, DNS: []string{"w1"}, Server: true, Client: true})
		}, []labchecktest.Want{{"02-pki", "w1", "lacks the SANs 192.168.122.21"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { labchecktest.RunCase(t, Detectors, tc.break_, tc.want) })
	}
}

// Swap on a worker whose kubelet is told to run with it is a variant, not
// a mistake; without that setting, and for any other required setting, it
// is not excused.
func TestExcuseSwapWithFailSwapOnFalse(t *testing.T) {
	f := labchecktest.NewFixture(t)
	ctx := context.Background()
	swap := steps.Diff{Kind: steps.DiffRequired, Node: "w1", Subject: SubjectSwap, What: "swap is on"}
	if _, ok, err := Excuse(ctx, swap, f.Src); ok || err != nil {
		t.Fatalf("default kubelet config: excused %v, %v; want not excused", ok, err)
	}
	f.Src.Edit(t, "w1", "/var/lib/kubelet/kubelet-config.yaml", "registerNode: true", "registerNode: true\nfailSwapOn: false")
	v, ok, err := Excuse(ctx, swap, f.Src)
	if !ok || err != nil || v.Kind != grade.Variant || v.Node != "w1" || !strings.Contains(v.What, "failSwapOn: false") {
		t.Fatalf("failSwapOn false: %+v %v %v; want a variant naming failSwapOn", v, ok, err)
	}
	ipf := steps.Diff{Kind: steps.DiffRequired, Node: "w1", Subject: "sysctl net.ipv4.ip_forward"}
	if _, ok, _ := Excuse(ctx, ipf, f.Src); ok {
		t.Error("ip_forward must never be excused")
	}
}
