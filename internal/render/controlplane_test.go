package render

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/yaml"

	"github.com/khw-dev/khw/internal/config"
)

func addCP4(c *config.Cluster) {
	c.Nodes = append(c.Nodes, config.Node{Name: "cp4", Role: config.RoleControlPlane, IP: "192.168.122.14"})
	c.SetDefaults()
}

// TestEtcdUnit checks every member's flags against cluster-facts.md, for 3
// control planes and after adding a 4th.
func TestEtcdUnit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*config.Cluster)
	}{
		{"3 control planes", nil},
		{"4 control planes", addCP4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultCluster(t, config.ProviderLibvirt, tc.change)
			cps := c.ControlPlanes()
			var want []string
			for _, cp := range cps {
				want = append(want, fmt.Sprintf("%s=https://%s:2380", cp.Name, cp.IP))
			}
			for _, cp := range cps {
				u := parseUnit(t, mustFile(t, nodeFiles(t, c, cp.Name, libvirtFacts()), "/etc/systemd/system/etcd.service"))
				if u.binary != "/usr/local/bin/etcd" {
					t.Errorf("%s: binary %s", cp.Name, u.binary)
				}
				checks := map[string]string{
					"--name":                         cp.Name,
					"--initial-cluster":              strings.Join(want, ","),
					"--initial-cluster-state":        "new",
					"--initial-cluster-token":        "etcd-khw",
					"--initial-advertise-peer-urls":  "https://" + cp.IP + ":2380",
					"--listen-peer-urls":             "https://" + cp.IP + ":2380",
					"--listen-client-urls":           "https://" + cp.IP + ":2379,https://127.0.0.1:2379",
					"--advertise-client-urls":        "https://" + cp.IP + ":2379",
					"--data-dir":                     "/var/lib/etcd",
					"--cert-file":                    "/etc/etcd/kubernetes.pem",
					"--key-file":                     "/etc/etcd/kubernetes-key.pem",
					"--trusted-ca-file":              "/etc/etcd/ca.pem",
					"--peer-cert-file":               "/etc/etcd/kubernetes.pem",
					"--peer-key-file":                "/etc/etcd/kubernetes-key.pem",
					"--peer-trusted-ca-file":         "/etc/etcd/ca.pem",
					"--client-cert-auth":             "",
					"--peer-client-cert-auth":        "",
					"--client-cert-allowed-hostname": "kubernetes",
					"--peer-cert-allowed-cn":         "kubernetes",
				}
				for f, v := range checks {
					if got := u.flag(t, f); got != v {
						t.Errorf("%s: %s=%q, want %q", cp.Name, f, got, v)
					}
				}
				if len(u.flags) != len(checks) {
					t.Errorf("%s: etcd has %d flags, the test knows %d: %v", cp.Name, len(u.flags), len(checks), u.order)
				}
				if got := u.sections["Service"]["Type"]; len(got) != 1 || got[0] != "notify" {
					t.Errorf("%s: etcd Type=%q, want notify (etcd tells systemd when it serves)", cp.Name, got)
				}
			}
		})
	}
}

// TestAPIServerUnit checks the apiserver flags of cluster-facts.md "Control
// plane" and that etcd-servers lists every member.
func TestAPIServerUnit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*config.Cluster)
	}{
		{"3 control planes", nil},
		{"4 control planes", addCP4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultCluster(t, config.ProviderLibvirt, tc.change)
			var etcd []string
			for _, cp := range c.ControlPlanes() {
				etcd = append(etcd, "https://"+cp.IP+":2379")
			}
			for _, cp := range c.ControlPlanes() {
				files := nodeFiles(t, c, cp.Name, libvirtFacts())
				u := parseUnit(t, mustFile(t, files, "/etc/systemd/system/kube-apiserver.service"))
				want := map[string]string{
					"--advertise-address":                cp.IP,
					"--bind-address":                     "0.0.0.0",
					"--secure-port":                      "6443",
					"--allow-privileged":                 "true",
					"--etcd-servers":                     strings.Join(etcd, ","),
					"--etcd-cafile":                      "/var/lib/kubernetes/ca.pem",
					"--etcd-certfile":                    "/var/lib/kubernetes/kubernetes.pem",
					"--etcd-keyfile":                     "/var/lib/kubernetes/kubernetes-key.pem",
					"--client-ca-file":                   "/var/lib/kubernetes/ca.pem",
					"--tls-cert-file":                    "/var/lib/kubernetes/kubernetes.pem",
					"--tls-private-key-file":             "/var/lib/kubernetes/kubernetes-key.pem",
					"--enable-bootstrap-token-auth":      "true",
					"--authorization-mode":               "Node,RBAC",
					"--kubelet-certificate-authority":    "/var/lib/kubernetes/ca.pem",
					"--kubelet-client-certificate":       "/var/lib/kubernetes/kubernetes.pem",
					"--kubelet-client-key":               "/var/lib/kubernetes/kubernetes-key.pem",
					"--service-account-key-file":         "/var/lib/kubernetes/service-account.pem",
					"--service-account-signing-key-file": "/var/lib/kubernetes/service-account-key.pem",
					"--service-account-issuer":           "https://lb:6443",
					"--service-cluster-ip-range":         "10.32.0.0/24",
					"--service-node-port-range":          "30000-32767",
					"--encryption-provider-config":       "/var/lib/kubernetes/encryption-config.yaml",
					"--audit-policy-file":                "/etc/kubernetes/config/audit-policy.yaml",
					"--audit-log-path":                   "/var/log/kubernetes/audit.log",
				}
				for f, v := range want {
					if got := u.flag(t, f); got != v {
						t.Errorf("%s: %s=%q, want %q", cp.Name, f, got, v)
					}
				}
				plugins := strings.Split(u.flag(t, "--enable-admission-plugins"), ",")
				if !contains(plugins, "NodeRestriction") {
					t.Errorf("%s: --enable-admission-plugins %v lacks NodeRestriction", cp.Name, plugins)
				}
				for _, gone := range []string{"--apiserver-count", "--runtime-config"} {
					if u.has(gone) {
						t.Errorf("%s: %s should not be set", cp.Name, gone)
					}
				}
				// The audit policy file the flag names is rendered and is a valid
				// audit.k8s.io/v1 Policy that keeps request bodies out.
				var pol auditv1.Policy
				if err := yaml.UnmarshalStrict([]byte(mustFile(t, files, u.flag(t, "--audit-policy-file"))), &pol); err != nil {
					t.Fatalf("%s: audit policy: %v", cp.Name, err)
				}
				if pol.Kind != "Policy" || pol.APIVersion != "audit.k8s.io/v1" || len(pol.Rules) == 0 {
					t.Fatalf("%s: audit policy %s/%s with %d rules", cp.Name, pol.APIVersion, pol.Kind, len(pol.Rules))
				}
				if last := pol.Rules[len(pol.Rules)-1]; last.Level != auditv1.LevelMetadata || len(last.Resources)+len(last.NonResourceURLs)+len(last.Users) != 0 {
					t.Errorf("%s: last audit rule %+v, want a catch-all at Metadata", cp.Name, last)
				}
				for _, r := range pol.Rules {
					if r.Level == auditv1.LevelRequest || r.Level == auditv1.LevelRequestResponse {
						t.Errorf("%s: audit rule at level %s would log Secret bodies", cp.Name, r.Level)
					}
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestControllerManagerAndScheduler(t *testing.T) {
	c := defaultCluster(t, config.ProviderLibvirt, nil)
	files := nodeFiles(t, c, "cp2", libvirtFacts())
	cm := parseUnit(t, mustFile(t, files, "/etc/systemd/system/kube-controller-manager.service"))
	want := map[string]string{
		"--kubeconfig":                       "/var/lib/kubernetes/kube-controller-manager.kubeconfig",
		"--bind-address":                     "127.0.0.1",
		"--leader-elect":                     "true",
		"--controllers":                      "*,bootstrapsigner,tokencleaner",
		"--use-service-account-credentials":  "true",
		"--cluster-signing-cert-file":        "/var/lib/kubernetes/ca.pem",
		"--cluster-signing-key-file":         "/var/lib/kubernetes/ca-key.pem",
		"--cluster-signing-duration":         "8760h",
		"--root-ca-file":                     "/var/lib/kubernetes/ca.pem",
		"--service-account-private-key-file": "/var/lib/kubernetes/service-account-key.pem",
		"--service-cluster-ip-range":         "10.32.0.0/24",
		"--cluster-cidr":                     "10.200.0.0/16",
		"--allocate-node-cidrs":              "false",
	}
	for f, v := range want {
		if got := cm.flag(t, f); got != v {
			t.Errorf("controller-manager %s=%q, want %q", f, got, v)
		}
	}

	sched := parseUnit(t, mustFile(t, files, "/etc/systemd/system/kube-scheduler.service"))
	cfgPath := sched.flag(t, "--config")
	cfg := yamlMap(t, mustFile(t, files, cfgPath))
	if cfg["apiVersion"] != "kubescheduler.config.k8s.io/v1" || cfg["kind"] != "KubeSchedulerConfiguration" {
		t.Errorf("scheduler config is %v/%v", cfg["apiVersion"], cfg["kind"])
	}
	if v, _ := dig(cfg, "leaderElection", "leaderElect"); v != true {
		t.Errorf("scheduler leaderElection.leaderElect = %v, want true", v)
	}
	if v, _ := dig(cfg, "clientConnection", "kubeconfig"); v != "/var/lib/kubernetes/kube-scheduler.kubeconfig" {
		t.Errorf("scheduler clientConnection.kubeconfig = %v", v)
	}
	for _, f := range []string{"--kubeconfig", "--leader-elect"} {
		if sched.has(f) {
			t.Errorf("scheduler sets %s on the command line; with --config it belongs in the file", f)
		}
	}
}

// TestLeaderElectionTiming: the upstream defaults (no flags, no fields) on
// a cluster that may use KVM; on libvirt.domainType: qemu the same timing in
// both components, with renewDeadline < leaseDuration and retryPeriod <
// renewDeadline, which both components require at start-up.
func TestLeaderElectionTiming(t *testing.T) {
	leFlags := []string{"--leader-elect-lease-duration", "--leader-elect-renew-deadline", "--leader-elect-retry-period"}
	leKeys := []string{"leaseDuration", "renewDeadline", "retryPeriod"}
	read := func(c *config.Cluster) (flags, fields []string) {
		files := nodeFiles(t, c, "cp1", libvirtFacts())
		cm := parseUnit(t, mustFile(t, files, "/etc/systemd/system/kube-controller-manager.service"))
		for _, f := range leFlags {
			if cm.has(f) {
				flags = append(flags, cm.flag(t, f))
			}
		}
		cfg := yamlMap(t, mustFile(t, files, "/etc/kubernetes/config/kube-scheduler.yaml"))
		for _, k := range leKeys {
			if v, ok := dig(cfg, "leaderElection", k); ok {
				fields = append(fields, fmt.Sprint(v))
			}
		}
		return flags, fields
	}
	for _, typ := range []string{"", config.DomainTypeKVM} {
		c := defaultCluster(t, config.ProviderLibvirt, func(c *config.Cluster) { c.Libvirt = &config.Libvirt{DomainType: typ} })
		if flags, fields := read(c); len(flags)+len(fields) != 0 {
			t.Errorf("domainType %q: leader-election timing %v / %v set, want upstream defaults", typ, flags, fields)
		}
	}
	c := defaultCluster(t, config.ProviderLibvirt, func(c *config.Cluster) { c.Libvirt = &config.Libvirt{DomainType: config.DomainTypeQEMU} })
	flags, fields := read(c)
	if len(flags) != 3 || !slices.Equal(flags, fields) {
		t.Fatalf("domainType qemu: controller-manager %v, scheduler %v, want the same three durations", flags, fields)
	}
	var d [3]time.Duration
	for i, s := range flags {
		var err error
		if d[i], err = time.ParseDuration(s); err != nil {
			t.Fatalf("%s=%q: %v", leFlags[i], s, err)
		}
	}
	if !(d[2] < d[1] && d[1] < d[0]) || d[0] <= 15*time.Second {
		t.Errorf("domainType qemu: lease %s, renew %s, retry %s: want retry < renew < lease and lease > upstream's 15s", d[0], d[1], d[2])
	}
}

var (
	serverLineRE = regexp.MustCompile(`(?m)^\s+server (\S+) (\S+) check$`)
	backupLineRE = regexp.MustCompile(`(?m)^\s+server (\S+) (\S+) backup$`)
)

// TestHAProxy checks the backends (every control plane, growing with a 4th),
// the health check of each kind, and, when haproxy is installed, that haproxy
// itself accepts the file.
func TestHAProxy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*config.Cluster)
		https  bool
		inter  string
		fast   string
	}{
		{"default https check", nil, true, "1s", "250ms"},
		{"4 control planes", addCP4, true, "1s", "250ms"},
		{"tcp check, 1500ms", func(c *config.Cluster) {
			c.LoadBalancer.HealthCheck = config.HealthCheckTCP
			c.LoadBalancer.Interval = 1500 * time.Millisecond
			c.LoadBalancer.Fall, c.LoadBalancer.Rise = 4, 1
		}, false, "1500ms", "375ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultCluster(t, config.ProviderLibvirt, tc.change)
			cfg := mustFile(t, nodeFiles(t, c, "lb", libvirtFacts()), "/etc/haproxy/haproxy.cfg")
			var got []string
			for _, m := range serverLineRE.FindAllStringSubmatch(cfg, -1) {
				got = append(got, m[1]+" "+m[2])
			}
			var want []string
			for _, cp := range c.ControlPlanes() {
				want = append(want, cp.Name+" "+cp.IP+":6443")
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("backend servers %q, want %q", got, want)
			}
			var backups []string
			for _, m := range backupLineRE.FindAllStringSubmatch(cfg, -1) {
				backups = append(backups, m[1]+" "+m[2])
			}
			var wantBackups []string
			for _, cp := range c.ControlPlanes() {
				wantBackups = append(wantBackups, cp.Name+"-last-resort "+cp.IP+":6443")
			}
			if strings.Join(backups, ",") != strings.Join(wantBackups, ",") {
				t.Errorf("last-resort backup servers %q, want %q", backups, wantBackups)
			}
			for _, line := range []string{"option allbackups", "option redispatch 1", "timeout connect 1s", "mode tcp", "balance roundrobin", "bind *:6443", "timeout tunnel 1h",
				"stats socket /run/haproxy/admin.sock", "bind 127.0.0.1:8404"} {
				if !strings.Contains(cfg, line) {
					t.Errorf("haproxy.cfg lacks %q", line)
				}
			}
			timing := fmt.Sprintf("inter %s fastinter %s fall %d rise %d on-marked-down shutdown-sessions", tc.inter, tc.fast, c.LoadBalancer.Fall, c.LoadBalancer.Rise)
			if !strings.Contains(cfg, timing) {
				t.Errorf("haproxy.cfg lacks %q", timing)
			}
			https := strings.Contains(cfg, "option httpchk GET /readyz") && strings.Contains(cfg, "check-ssl verify none")
			if https != tc.https {
				t.Errorf("https /readyz check present = %v, want %v", https, tc.https)
			}
			if !tc.https && strings.Contains(cfg, "check-ssl") {
				t.Error("tcp health check must not use check-ssl")
			}
			haproxyCheck(t, cfg)
		})
	}
}

func haproxyCheck(t *testing.T, cfg string) {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Log("haproxy is not installed; skipping `haproxy -c` (apt-get install haproxy to run it)")
		return
	}
	p := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-c", "-f", p).CombinedOutput()
	if err != nil {
		t.Fatalf("haproxy -c rejects the config: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "[WARNING]") {
		t.Errorf("haproxy -c warns:\n%s", out)
	}
}

func TestHostsListsEveryNode(t *testing.T) {
	c := defaultCluster(t, config.ProviderLibvirt, addCP4)
	for _, n := range c.Nodes {
		hosts := mustFile(t, nodeFiles(t, c, n.Name, libvirtFacts()), "/etc/hosts")
		for _, m := range c.Nodes {
			want := m.IP + "\t" + m.Name + ".kubernetes.local " + m.Name + "\n"
			if !strings.Contains(hosts, want) {
				t.Errorf("%s /etc/hosts lacks %q", n.Name, want)
			}
		}
		if !strings.Contains(hosts, "127.0.0.1\tlocalhost\n") {
			t.Errorf("%s /etc/hosts lacks localhost", n.Name)
		}
		for _, l := range strings.Split(hosts, "\n") {
			if strings.HasPrefix(l, "127.0.1.1") {
				t.Errorf("%s /etc/hosts maps a name to 127.0.1.1: %q", n.Name, l)
			}
		}
	}
}
