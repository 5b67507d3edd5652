package grade

import (
	"regexp"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/render"
)

// clusterFiles renders every node file of c, each as its own reference and
// the node's content, plus one input file per control plane.
func clusterFiles(t *testing.T, c *config.Cluster) []File {
	t.Helper()
	facts, err := render.DefaultFacts(c.Provider)
	if err != nil {
		t.Fatal(err)
	}
	var out []File
	for _, n := range c.Nodes {
		files, err := render.Node(c, n.Name, facts)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			out = append(out, File{Lab: "test", Node: n, Path: f.Path, Ref: f.Data, Got: f.Data})
		}
		if n.Role == config.RoleWorker {
			cert := []byte("CERT OF " + n.Name)
			out = append(out, File{Lab: "test", Node: n, Path: "/var/lib/kubelet/kubelet.pem", Input: true, Ref: cert, Got: cert})
		}
		if n.Role == config.RoleControlPlane {
			key := []byte("-----BEGIN PRIVATE KEY-----\nSECRETSECRET\n-----END PRIVATE KEY-----\n")
			out = append(out, File{Lab: "test", Node: n, Path: "/var/lib/kubernetes/service-account-key.pem", Input: true, Ref: key, Got: key})
		}
	}
	return out
}

// edit changes the node's content of path on node.
func edit(t *testing.T, files []File, node, path string, change func(string) string) {
	t.Helper()
	for i := range files {
		if files[i].Node.Name == node && files[i].Path == path {
			before := string(files[i].Got)
			after := change(before)
			if after == before {
				t.Fatalf("the edit of %s on %s changed nothing", path, node)
			}
			files[i].Got = []byte(after)
			return
		}
	}
	t.Fatalf("no %s on %s", path, node)
}

func replace(old, new string) func(string) string {
	return func(s string) string { return strings.Replace(s, old, new, 1) }
}

func mistakes(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Mistake() {
			out = append(out, f)
		}
	}
	return out
}

func defaultCluster(provider string) *config.Cluster {
	return config.Default("khw", config.ArchAMD64, provider)
}

func TestJudgeCleanClusterFindsNothing(t *testing.T) {
	for _, p := range []string{config.ProviderNspawn, config.ProviderLibvirt} {
		c := defaultCluster(p)
		got, err := Judge(c, clusterFiles(t, c))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range got {
			t.Errorf("%s: clean cluster: %s", p, f)
		}
	}
}

func TestJudgeBreakOneThing(t *testing.T) {
	type edit1 struct{ node, path, old, new string }
	cases := []struct {
		name  string
		edits []edit1
		node  string
		kind  Kind
		what  string // in What
		fix   string // in Fix
	}{
		{"etcd client cert auth off", []edit1{{"cp2", etcdUnit, "  --client-cert-auth \\\n", ""}}, "cp2", Weakens, "--client-cert-auth in etcd.service not set", "--client-cert-auth in " + etcdUnit},
		{"etcd clients on loopback only", []edit1{{"cp1", etcdUnit, "--listen-client-urls=https://192.168.122.11:2379,", "--listen-client-urls="}}, "cp1", Breaks, "nothing listens on https://192.168.122.11:2379", "--listen-client-urls=https://192.168.122.11:2379,https://127.0.0.1:2379"},
		{"etcd clients without TLS", []edit1{{"cp1", etcdUnit, "--listen-client-urls=https://192.168.122.11:2379", "--listen-client-urls=http://192.168.122.11:2379"}}, "cp1", Breaks, "without TLS", ""},
		{"etcd token on one member", []edit1{{"cp3", etcdUnit, "--initial-cluster-token=etcd-khw", "--initial-cluster-token=other"}}, "cp3", Inconsistent, "--initial-cluster-token in etcd.service is other on cp3 but not on its peers (cp1 etcd-khw, cp2 etcd-khw)", "--initial-cluster-token=etcd-khw"},
		{"apiserver allows everything", []edit1{{"cp2", apiserverUnit, "--authorization-mode=Node,RBAC \\", "--authorization-mode=AlwaysAllow \\"}}, "cp2", Weakens, "AlwaysAllow authorizes every request", "--authorization-mode=Node,RBAC"},
		{"apiserver without NodeRestriction", []edit1{{"cp1", apiserverUnit, "NodeRestriction,", ""}}, "cp1", Weakens, "without NodeRestriction", ""},
		{"apiserver on loopback", []edit1{{"cp1", apiserverUnit, "--bind-address=0.0.0.0 \\", "--bind-address=127.0.0.1 \\"}}, "cp1", Breaks, "--bind-address in kube-apiserver.service is 127.0.0.1", "systemctl daemon-reload && systemctl restart kube-apiserver.service"},
		{"apiserver issuer on one cp", []edit1{{"cp3", apiserverUnit, "--service-account-issuer=https://lb:6443", "--service-account-issuer=https://cp3:6443"}}, "cp3", Inconsistent, "is https://cp3:6443 on cp3 but not on its peers", ""},
		{"apiserver without encryption", []edit1{{"cp2", apiserverUnit, "  --encryption-provider-config=/var/lib/kubernetes/encryption-config.yaml \\\n", ""}}, "cp2", Weakens, "--encryption-provider-config in kube-apiserver.service not set", ""},
		{"apiserver advertises another IP", []edit1{{"cp2", apiserverUnit, "--advertise-address=192.168.122.12", "--advertise-address=192.168.122.11"}}, "cp2", Breaks, "not cp2's IP 192.168.122.12", ""},
		{"controllers share one identity", []edit1{{"cp1", cmUnit, "--use-service-account-credentials=true", "--use-service-account-credentials=false"}}, "cp1", Weakens, "is false, want true", ""},
		{"kubelet anonymous", []edit1{{"w1", kubeletYAML, "anonymous:\n    enabled: false", "anonymous:\n    enabled: true"}}, "w1", Weakens, "authentication.anonymous.enabled in kubelet-config.yaml is true, want false", "authentication.anonymous.enabled: false"},
		{"kubelet AlwaysAllow", []edit1{{"w2", kubeletYAML, "mode: Webhook", "mode: AlwaysAllow"}}, "w2", Weakens, "authorization.mode", "systemctl restart kubelet"},
		{"kubelet cgroupfs", []edit1{{"w2", kubeletYAML, "cgroupDriver: systemd", "cgroupDriver: cgroupfs"}}, "w2", Inconsistent, "cgroupDriver is cgroupfs but containerd's SystemdCgroup is true", ""},
		{"kubelet without cgroupDriver", []edit1{{"w1", kubeletYAML, "cgroupDriver: systemd\n", ""}}, "w1", Inconsistent, "cgroupDriver is cgroupfs but containerd's SystemdCgroup is true", "cgroupDriver: systemd"},
		{"containerd cgroupfs", []edit1{{"w1", containerdTOML, "SystemdCgroup = true", "SystemdCgroup = false"}}, "w1", Inconsistent, "SystemdCgroup in config.toml the kubelet's cgroupDriver is systemd but containerd's SystemdCgroup is false", "SystemdCgroup = true in /etc/containerd/config.toml"},
		{"kubelet DNS on one worker", []edit1{{"w3", kubeletYAML, "- 10.32.0.10", "- 10.32.0.53"}}, "w3", Breaks, "clusterDNS in kubelet-config.yaml is 10.32.0.53, want 10.32.0.10", "set clusterDNS: [10.32.0.10] in"},
		{"kubelet read-only port flag", []edit1{{"w1", kubeletUnit, "--v=2", "--v=2 --read-only-port=10255"}}, "w1", Weakens, "--read-only-port in kubelet.service is 10255", ""},
		{"kubelet read-only port", []edit1{{"w2", kubeletYAML, "registerNode: true", "registerNode: true\nreadOnlyPort: 10255"}}, "w2", Weakens, "readOnlyPort in kubelet-config.yaml is 10255", "remove readOnlyPort"},
		{"kubelet anonymous flag", []edit1{{"w1", kubeletUnit, "--v=2", "--v=2 --anonymous-auth=true"}}, "w1", Weakens, "--anonymous-auth in kubelet.service is true", ""},
		{"same wrong etcd members everywhere", []edit1{
			{"cp1", etcdUnit, "cp3=https://192.168.122.13:2380", "cp3=https://192.168.122.31:2380"},
			{"cp2", etcdUnit, "cp3=https://192.168.122.13:2380", "cp3=https://192.168.122.31:2380"},
			{"cp3", etcdUnit, "cp3=https://192.168.122.13:2380", "cp3=https://192.168.122.31:2380"}}, "cp2", Breaks, "has cp3=https://192.168.122.31:2380, want https://192.168.122.13:2380", ""},
		{"AlwaysAllow repeated after Node,RBAC", []edit1{{"cp1", apiserverUnit, "--authorization-mode=Node,RBAC \\", "--authorization-mode=AlwaysAllow --authorization-mode=Node,RBAC \\"}}, "cp1", Weakens, "is AlwaysAllow,Node,RBAC: AlwaysAllow authorizes every request", ""},
		{"a later flag wins", []edit1{{"cp1", etcdUnit, "  --client-cert-auth \\\n", "  --client-cert-auth \\\n  --client-cert-auth=false \\\n"}}, "cp1", Weakens, "--client-cert-auth in etcd.service is false, want true", ""},
		{"no forwarding", []edit1{{"w1", sysctlConf, "net.ipv4.ip_forward = 1", "net.ipv4.ip_forward = 0"}}, "w1", Breaks, "net.ipv4.ip_forward", "sysctl --system"},
		{"kube-proxy pod range", []edit1{{"w2", kubeProxyYAML, "clusterCIDR: 10.200.0.0/16", "clusterCIDR: 10.200.0.0/24"}}, "w2", Breaks, "clusterCIDR", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultCluster(config.ProviderNspawn)
			files := clusterFiles(t, c)
			for _, e := range tc.edits {
				edit(t, files, e.node, e.path, replace(e.old, e.new))
			}
			got, err := Judge(c, files)
			if err != nil {
				t.Fatal(err)
			}
			ms := mistakes(got)
			found := false
			for _, m := range ms {
				if m.Node == tc.node && m.Kind == tc.kind && strings.Contains(m.What, tc.what) && strings.Contains(m.Fix, tc.fix) {
					found = true
				}
			}
			if !found {
				t.Errorf("want a %q mistake on %s with %q (fix %q); got:", tc.kind, tc.node, tc.what, tc.fix)
				for _, m := range got {
					t.Errorf("  %s (kind %q)", m, m.Kind)
				}
			}
			for _, m := range ms {
				if m.Why == "" || m.Evidence == "" || m.Fix == "" || m.Lab == "" {
					t.Errorf("mistake without why, evidence, fix or lab: %+v", m)
				}
			}
		})
	}
}

func TestJudgeResolverStub(t *testing.T) {
	c := defaultCluster(config.ProviderLibvirt)
	files := clusterFiles(t, c)
	edit(t, files, "w1", kubeletYAML, replace("resolvConf: /run/systemd/resolve/resolv.conf", "resolvConf: /etc/resolv.conf"))
	got, err := Judge(c, files)
	if err != nil {
		t.Fatal(err)
	}
	ms := mistakes(got)
	if len(ms) != 1 || ms[0].Kind != Breaks || !strings.Contains(ms[0].What, "stub") || !strings.Contains(ms[0].Why, "loop") {
		t.Fatalf("want one Breaks finding about the stub resolver; got %v", got)
	}
}

// A correct hand-made variant is no mistake, and says what the setting
// does; it is a Variant only when a rule (harmless, or a rule that checks
// the setting and accepts its value) knows that it works, else NotJudged.
func TestJudgeVariants(t *testing.T) {
	cases := []struct {
		name       string
		node, path string
		change     func(string) string
		variants   []string // in the findings' What
		meaning    string   // in one finding's Why
		kind       Kind     // of every finding: Variant (a rule knows it works) or NotJudged
	}{
		{"log level", "cp1", apiserverUnit, replace("--v=2", "--v=4"), []string{"kube-apiserver.service: --v: 2 → 4"}, "", Variant},
		{"bind to own IP", "cp2", apiserverUnit, replace("--bind-address=0.0.0.0 \\", "--bind-address=192.168.122.12 \\"), []string{"--bind-address: 0.0.0.0 → 192.168.122.12"}, "listens on every interface", Variant},
		{"spelling and order", "cp1", etcdUnit, func(s string) string {
			s = strings.Replace(s, "--name=cp1", "--name cp1", 1)
			s = strings.Replace(s, "  --client-cert-auth \\\n", "", 1)
			return strings.Replace(s, "--data-dir=/var/lib/etcd \\\n", "--data-dir=/var/lib/etcd \\\n  --client-cert-auth=true \\\n", 1)
		}, nil, "", Variant},
		{"haproxy connect timeout", "lb", haproxyCfg, replace("timeout connect 1s", "timeout connect 2s"), []string{"defaults: timeout connect: 1s → 2s"}, "a connect that takes longer than 1 s goes to a dead host", Variant},
		{"haproxy timeout 0 (none at all)", "lb", haproxyCfg, replace("timeout connect 1s", "timeout connect 0"), []string{"defaults: timeout connect: 1s → 0"}, "", NotJudged},
		{"a check interval", "lb", haproxyCfg, func(s string) string {
			return regexp.MustCompile(` inter [0-9a-z]+ `).ReplaceAllString(s, " inter 3s ")
		}, []string{"default-server inter: "}, "", Variant},
		{"kubelet timeout", "w1", kubeletYAML, replace("runtimeRequestTimeout: 15m", "runtimeRequestTimeout: 10m"), []string{"runtimeRequestTimeout: 15m → 10m"}, "", NotJudged},
		{"kubelet added address", "w1", kubeletYAML, replace("registerNode: true", "registerNode: true\naddress: 0.0.0.0"), []string{"address: added (0.0.0.0)"}, "", NotJudged},
		{"comments", "cp1", apiserverUnit, replace("[Service]", "[Service]\n# my own note"), nil, "", Variant},
		{"booleans spelt otherwise", "cp1", etcdUnit, replace("  --client-cert-auth \\\n", "  --client-cert-auth=1 \\\n"), nil, "", Variant},
		{"a default left out", "cp1", cmUnit, replace("  --leader-elect=true \\\n", ""), []string{"--leader-elect: missing (reference: true)"}, "", Variant},
		{"kubelet authorization default", "w1", kubeletYAML, replace("authorization:\n  mode: Webhook\n", ""), []string{"authorization.mode: missing (reference: Webhook)"}, "", Variant},
		{"an empty ExecStart= resets", "cp1", etcdUnit, replace("ExecStart=/usr/local/bin/etcd", "ExecStart=\nExecStart=/usr/local/bin/etcd"), nil, "", Variant},
		{"sysctl.d spellings", "w1", sysctlConf, replace("net.ipv4.ip_forward = 1", "-net/ipv4/ip_forward = 1"), nil, "", Variant},
		{"haproxy without indentation", "lb", haproxyCfg, func(s string) string {
			var out []string
			for _, l := range strings.Split(s, "\n") {
				out = append(out, strings.TrimSpace(l))
			}
			return strings.Join(out, "\n")
		}, nil, "", Variant},
		{"stats password", "lb", haproxyCfg, replace("    stats refresh 5s", "    stats refresh 5s\n    stats auth admin:S3cretPassw0rd"), []string{"listen stats: stats auth: added (<hidden: may be a secret>)"}, "", NotJudged},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultCluster(config.ProviderNspawn)
			files := clusterFiles(t, c)
			edit(t, files, tc.node, tc.path, tc.change)
			got, err := Judge(c, files)
			if err != nil {
				t.Fatal(err)
			}
			if ms := mistakes(got); len(ms) > 0 {
				t.Errorf("a correct variant is a mistake: %v", ms)
			}
			if len(got) != len(tc.variants) {
				t.Errorf("want %d variants, got %v", len(tc.variants), got)
			}
			for i, w := range tc.variants {
				if i < len(got) && (got[i].Kind != tc.kind || !strings.Contains(got[i].What, w)) {
					t.Errorf("variant %d: want %q, got %q (%s)", i, w, got[i].What, got[i].Kind)
				}
			}
			if tc.meaning != "" && (len(got) == 0 || !strings.Contains(got[0].Why, tc.meaning)) {
				t.Errorf("want the template's meaning %q; got %v", tc.meaning, got)
			}
		})
	}
}

// The same new value on every peer is a consistent variant.
func TestJudgeConsistentChangeOnEveryPeer(t *testing.T) {
	c := defaultCluster(config.ProviderNspawn)
	files := clusterFiles(t, c)
	for _, n := range []string{"cp1", "cp2", "cp3"} {
		edit(t, files, n, apiserverUnit, replace("--service-account-issuer=https://lb:6443", "--service-account-issuer=https://api.example:6443"))
	}
	got, err := Judge(c, files)
	if err != nil {
		t.Fatal(err)
	}
	if ms := mistakes(got); len(ms) > 0 || len(got) != 3 {
		t.Fatalf("want 3 variants and no mistake; got %v", got)
	}
}

func TestJudgeInputsAndMissing(t *testing.T) {
	c := defaultCluster(config.ProviderNspawn)
	files := clusterFiles(t, c)
	for i := range files {
		f := &files[i]
		if f.Node.Name == "cp2" && f.Input {
			f.Got = []byte("-----BEGIN PRIVATE KEY-----\nOTHERKEY\n-----END PRIVATE KEY-----\n")
		}
		if f.Node.Name == "w2" && f.Path == "/var/lib/kubelet/kubelet.pem" {
			f.Got = []byte("ANOTHER CERT")
		}
		if f.Node.Name == "w1" && f.Path == kubeProxyYAML {
			f.Got, f.Missing = nil, true
		}
	}
	got, err := Judge(c, files)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, f := range got {
		kinds = append(kinds, f.Node+" "+string(f.Kind)+" "+f.What)
		for _, s := range []string{f.What, f.Why, f.Evidence, f.Fix} {
			if strings.Contains(s, "SECRET") || strings.Contains(s, "OTHERKEY") {
				t.Errorf("a finding shows key material: %s", f)
			}
		}
	}
	want := []string{
		"cp2 inconsistent /var/lib/kubernetes/service-account-key.pem is not the file that cp1, cp3 have",
		"w2  /var/lib/kubelet/kubelet.pem is not the state directory's copy",
		"w1 breaks " + kubeProxyYAML + " is missing",
	}
	if strings.Join(kinds, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(kinds, "\n"), strings.Join(want, "\n"))
	}
}

func TestJudgeUnparsable(t *testing.T) {
	c := defaultCluster(config.ProviderNspawn)
	files := clusterFiles(t, c)
	edit(t, files, "w2", kubeletYAML, replace("clusterDNS:\n", "clusterDNS: [\n"))
	got, err := Judge(c, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Kind != Breaks || !strings.Contains(got[0].What, "cannot be read") {
		t.Fatalf("want one Breaks finding for the YAML error; got %v", got)
	}
}

// Upstream's containerd config version 2, which containerd 2.x still reads,
// says SystemdCgroup under another table: no mistake.
func TestJudgeContainerdConfigV2(t *testing.T) {
	c := defaultCluster(config.ProviderNspawn)
	files := clusterFiles(t, c)
	edit(t, files, "w1", containerdTOML, func(string) string {
		return `version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
`
	})
	got, err := Judge(c, files)
	if err != nil {
		t.Fatal(err)
	}
	if ms := mistakes(got); len(ms) > 0 {
		t.Fatalf("a version 2 config with SystemdCgroup = true is a mistake: %v", ms)
	}
}

// etcd's --initial-cluster-token names a cluster; it is no credential and
// is shown.
func TestJudgeShowsClusterToken(t *testing.T) {
	c := defaultCluster(config.ProviderNspawn)
	files := clusterFiles(t, c)
	edit(t, files, "cp2", etcdUnit, replace("--initial-cluster-token=etcd-khw", "--initial-cluster-token=mine"))
	got, err := Judge(c, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.HasSuffix(got[0].Evidence, "--initial-cluster-token=mine") {
		t.Fatalf("got %v", got)
	}
}
