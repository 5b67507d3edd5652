package workers

import (
	"testing"

	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labcheck/labchecktest"
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
		{"swap on", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Set("w1", "/proc/swaps", "Filename Type Size Used Priority\n/swap.img file 2097148 0 -2\n")
		}, []labchecktest.Want{{"07-workers", "w1", "swap is on"}}},
		{"br_netfilter not loaded", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Del("w2", "/proc/sys/net/bridge/bridge-nf-call-iptables")
		}, []labchecktest.Want{{"07-workers", "w2", "br_netfilter"}}},
		{"bridge-nf-call-iptables 0", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Set("w1", "/proc/sys/net/bridge/bridge-nf-call-iptables", "0\n")
		}, []labchecktest.Want{{"07-workers", "w1", "bridge-nf-call-iptables is not 1"}}},
		{"ip_forward 0", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Set("w1", "/proc/sys/net/ipv4/ip_forward", "0\n")
		}, []labchecktest.Want{{"07-workers", "w1", "ip_forward is not 1"}}},
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

		{"w3 swap on (07 prepares every worker's host)", "07-workers", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Set("w3", "/proc/swaps", "Filename Type Size Used Priority\n/dev/vda3 partition 1048572 0 -2\n")
		}, []labchecktest.Want{{"07-workers", "w3", "swap is on"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { labchecktest.RunCase(t, Detectors, tc.break_, tc.want) })
	}
}

func TestSwapToleratedWithFailSwapOnFalse(t *testing.T) {
	f := labchecktest.NewFixture(t)
	f.Src.Set("w1", "/proc/swaps", "Filename Type Size Used Priority\n/swap.img file 2097148 0 -2\n")
	f.Src.Edit(t, "w1", "/var/lib/kubelet/kubelet-config.yaml", "registerNode: true", "registerNode: true\nfailSwapOn: false")
	ms, err := f.Check(t, Detectors)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Errorf("swap with failSwapOn: false is allowed, got:\n%s", m)
	}
}
