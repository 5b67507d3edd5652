package etcd

import (
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/lab/labcheck/labchecktest"
)

// TestDetectorsEtcd breaks one thing at a time in a good cluster and
// expects lab 04-etcd's detectors to name it.
func TestDetectorsEtcd(t *testing.T) {
	cases := []struct {
		name   string
		lab    string
		break_ func(t *testing.T, f *labchecktest.Fixture)
		want   []labchecktest.Want
	}{
		{"etcd name not in initial-cluster", "04-etcd", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp2", "/etc/systemd/system/etcd.service", "--name=cp2", "--name=etcd-2")
		}, []labchecktest.Want{{"04-etcd", "cp2", `--name "etcd-2" is not in --initial-cluster`}}},
		{"initial-cluster with a member the cluster does not have", "04-etcd", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp1", "/etc/systemd/system/etcd.service", "cp3=https://192.168.122.13:2380", "cp3=https://192.168.122.13:2380,cp4=https://192.168.122.14:2380")
		}, []labchecktest.Want{{"04-etcd", "cp1", `lists member "cp4"`}, {"04-etcd", "cp1", "different --initial-cluster"}}},
		{"initial-cluster with a wrong IP", "04-etcd", func(t *testing.T, f *labchecktest.Fixture) {
			for _, n := range []string{"cp1", "cp2", "cp3"} {
				f.Src.Edit(t, n, "/etc/systemd/system/etcd.service", "cp2=https://192.168.122.12:2380", "cp2=https://192.168.122.22:2380")
			}
		}, []labchecktest.Want{{"04-etcd", "cp1", "gives member cp2 the address 192.168.122.22"}, {"04-etcd", "cp2", "--initial-advertise-peer-urls differs"}}},
		{"peer cert without the member's IP", "04-etcd", func(t *testing.T, f *labchecktest.Fixture) {
			dns, ips := f.KubernetesSANs()
			f.ReplaceCert(t, "cp3", "/etc/etcd/kubernetes.pem", "/etc/etcd/kubernetes-key.pem", labchecktest.CertSpec{CN: "kubernetes", DNS: dns, IPs: labchecktest.Without(ips, "192.168.122.13"), Server: true, Client: true})
		}, []labchecktest.Want{{"02-pki", "cp3", "etcd server and peer cert /etc/etcd/kubernetes.pem lacks the SANs 192.168.122.13"}}},
		{"no client cert auth", "04-etcd", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp1", "/etc/systemd/system/etcd.service", "  --client-cert-auth \\\n", "")
		}, []labchecktest.Want{{"04-etcd", "cp1", "without --client-cert-auth"}}},
		{"etcd trusting every CA cert as a client", "04-etcd", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp2", "/etc/systemd/system/etcd.service", "  --client-cert-allowed-hostname=kubernetes \\\n", "")
		}, []labchecktest.Want{{"04-etcd", "cp2", "etcd trusts every client cert the cluster CA signs (--client-cert-auth only checks the chain): pki/admin.pem (admin), pki/w1.pem (system:node:w1)"}}},
		{"etcd trusting every CA cert as a peer", "04-etcd", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp3", "/etc/systemd/system/etcd.service", " \\\n  --peer-cert-allowed-cn=kubernetes\n", "\n")
		}, []labchecktest.Want{{"04-etcd", "cp3", "etcd trusts every peer cert the cluster CA signs (--peer-client-cert-auth only checks the chain)"}}},
		{"etcd client allowlist admitting a kubelet", "04-etcd", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp1", "/etc/systemd/system/etcd.service", "--client-cert-allowed-hostname=kubernetes \\", "--client-cert-allowed-hostname=kubernetes,w1 \\")
		}, []labchecktest.Want{{"04-etcd", "cp1", "etcd's client allowlist also admits pki/w1.pem (system:node:w1), which can then read and write every key"}}},
		{"etcd peer allowlist admitting the bootstrap kubelet", "04-etcd", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp1", "/etc/systemd/system/etcd.service", "--peer-cert-allowed-cn=kubernetes\nRestart", "--peer-cert-allowed-cn=kubernetes,system:node:w3\nRestart")
		}, []labchecktest.Want{{"04-etcd", "cp1", "etcd's peer allowlist also admits w3's kubelet client cert from its bootstrap token"}}},
		{"etcd allowlist refusing the apiserver", "04-etcd", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp2", "/etc/systemd/system/etcd.service", "--client-cert-allowed-hostname=kubernetes \\", "--client-cert-allowed-hostname=etcd-client \\")
		}, []labchecktest.Want{{"04-etcd", "cp2", "etcd refuses the apiserver's cert (pki/kubernetes.pem) as a client"}}},
		{"etcd with the client CN flag of older etcd", "04-etcd", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp1", "/etc/systemd/system/etcd.service", "--client-cert-allowed-hostname=kubernetes \\", "--client-cert-allowed-cn=kubernetes \\")
		}, []labchecktest.Want{{"04-etcd", "cp1", "etcd 3.7 has no --client-cert-allowed-cn"}, {"04-etcd", "cp1", "etcd trusts every client cert the cluster CA signs"}}},
		{"etcd trusting another CA", "04-etcd", func(t *testing.T, f *labchecktest.Fixture) {
			c, _ := f.Issue(t, labchecktest.CertSpec{CN: "other-ca", SelfSigned: true})
			f.Src.Set("cp2", "/etc/etcd/ca.pem", string(c))
		}, []labchecktest.Want{{"04-etcd", "cp2", "/etc/etcd/ca.pem is not the cluster CA"}}},
		{"etcd unit missing", "04-etcd", func(t *testing.T, f *labchecktest.Fixture) { f.Src.Del("cp3", "/etc/systemd/system/etcd.service") },
			[]labchecktest.Want{{"04-etcd", "cp3", "etcd.service is not known"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { labchecktest.RunCase(t, Detectors, tc.break_, tc.want) })
	}
}

// etcd started from a config file (--config-file) is read like flags.
func TestEtcdConfigFile(t *testing.T) {
	f := labchecktest.NewFixture(t)
	conf := `name: cp1
data-dir: /var/lib/etcd
initial-cluster: cp1=https://192.168.122.11:2380,cp2=https://192.168.122.12:2380,cp3=https://192.168.122.13:2380
initial-cluster-state: new
initial-advertise-peer-urls: https://192.168.122.11:2380
listen-peer-urls: https://192.168.122.11:2380
listen-client-urls: https://192.168.122.11:2379,https://127.0.0.1:2379
advertise-client-urls: https://192.168.122.11:2379
client-transport-security:
  cert-file: /etc/etcd/kubernetes.pem
  key-file: /etc/etcd/kubernetes-key.pem
  trusted-ca-file: /etc/etcd/ca.pem
  allowed-hostname: [kubernetes]
  client-cert-auth: true
peer-transport-security:
  cert-file: /etc/etcd/kubernetes.pem
  key-file: /etc/etcd/kubernetes-key.pem
  trusted-ca-file: /etc/etcd/ca.pem
  allowed-cn: [kubernetes]
  client-cert-auth: true
`
	f.Src.Set("cp1", "/etc/systemd/system/etcd.service", "[Service]\nType=notify\nExecStart=/usr/local/bin/etcd --config-file=/etc/etcd/etcd.yaml\n")
	f.Src.Set("cp1", "/etc/etcd/etcd.yaml", conf)
	ms, err := f.Check(t, Detectors)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Errorf("etcd from a right config file flagged:\n%s", m)
	}
	f.Src.Set("cp1", "/etc/etcd/etcd.yaml", strings.Replace(strings.Replace(conf, "name: cp1", "name: one", 1), "  client-cert-auth: true\npeer", "  client-cert-auth: false\npeer", 1))
	ms, err = f.Check(t, Detectors)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.What+" | "+m.Evidence)
	}
	all := strings.Join(got, "\n")
	for _, w := range []string{`--name "one" is not in --initial-cluster`, "without --client-cert-auth", "client-transport-security.client-cert-auth=false"} {
		if !strings.Contains(all, w) {
			t.Errorf("want %q in:\n%s", w, all)
		}
	}

	// The allowlists of a config file: lists under the transport sections.
	f.Src.Set("cp1", "/etc/etcd/etcd.yaml", strings.Replace(strings.Replace(conf, "  allowed-hostname: [kubernetes]\n", "", 1), "allowed-cn: [kubernetes]", "allowed-cn: [kubernetes, system:kube-proxy]", 1))
	ms, err = f.Check(t, Detectors)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, m := range ms {
		got = append(got, m.What+" | "+m.Evidence+" | "+m.Fix)
	}
	all = strings.Join(got, "\n")
	for _, w := range []string{"etcd trusts every client cert the cluster CA signs", "/etc/etcd/etcd.yaml: no client-transport-security.allowed-hostname",
		"add client-transport-security.allowed-hostname: [kubernetes] in /etc/etcd/etcd.yaml", "etcd's peer allowlist also admits pki/kube-proxy.pem (system:kube-proxy)",
		"/etc/etcd/etcd.yaml: peer-transport-security.allowed-cn=kubernetes,system:kube-proxy"} {
		if !strings.Contains(all, w) {
			t.Errorf("want %q in:\n%s", w, all)
		}
	}
	if len(ms) != 2 {
		t.Errorf("want 2 mistakes, got:\n%s", all)
	}
}
