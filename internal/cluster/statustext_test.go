package cluster

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
)

// A cluster with no node running prints the nodes and the notice, and no
// health section.
func TestPrintStatusNotUp(t *testing.T) {
	c := config.Default("st", config.ArchAMD64, config.ProviderNspawn)
	rep := StatusReport{Errors: map[string]string{"cluster": NotUp}}
	for _, n := range c.Nodes {
		st := "absent"
		if n.Name == "cp1" {
			st = "stopped"
		}
		rep.Nodes = append(rep.Nodes, NodeRow{Name: n.Name, Role: n.Role, State: st, IP: n.IP})
	}
	var out bytes.Buffer
	if err := WriteStatusText(&out, c, rep, time.Now()); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if !strings.Contains(text, "NODES\nNODE  ROLE") || !strings.Contains(text, "cp1   controlplane  stopped  192.168.122.11  -") ||
		!strings.Contains(text, NotUp) || strings.Contains(text, "ETCD") || strings.Contains(text, "UNITS") {
		t.Errorf("text:\n%s", text)
	}
}

func TestPrintStatus(t *testing.T) {
	c := config.Default("st", config.ArchAMD64, config.ProviderNspawn)
	now := time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)
	rep := StatusReport{
		Nodes: []NodeRow{{Name: "lb", Role: config.RoleLoadBalancer, State: "running", IP: "192.168.122.10", PID: 42}},
		Units: map[string][]health.Unit{
			"cp1": {
				{Name: "etcd.service", Load: "loaded", Active: "active", Sub: "running", Enabled: "enabled", Started: now.Add(-5*time.Minute - 3*time.Second)},
				{Name: "kube-scheduler.service", Load: "not-found", Active: "inactive", Sub: "dead"},
				{Name: "kube-apiserver.service", Load: "loaded", Active: "activating", Sub: "auto-restart", Enabled: "enabled", Restarts: 12, Since: "weird"},
			},
			"lb": {{Name: "haproxy.service", Load: "loaded", Active: "active", Sub: "running", Enabled: "enabled", Started: now.Add(-26 * time.Hour)}},
		},
		Etcd: &health.EtcdReport{
			Members: []health.EtcdMember{{ID: "a1", Name: "cp1"}, {ID: "b2", Name: "cp2"}, {ID: "c3"}},
			Endpoints: []health.EtcdEndpoint{
				{Node: "cp1", Endpoint: "https://192.168.122.11:2379", OK: true, LeaderID: "b2", RaftTerm: 7, RaftIndex: 1234, DBSizeBytes: 2202009, Version: "3.6.5", Latency: 12300 * time.Microsecond},
				{Node: "cp2", Endpoint: "https://192.168.122.12:2379", OK: true, LeaderID: "b2", IsLeader: true, RaftTerm: 7, RaftIndex: 1234, DBSizeBytes: 512, Version: "3.6.5", Latency: time.Millisecond},
				{Node: "cp3", Endpoint: "https://192.168.122.13:2379", Err: "connect: connection refused"},
			},
			Leader: "cp2", RaftTerm: 7, Healthy: 2, Size: 3, QuorumSize: 2, Quorum: true,
		},
		APIServers: []health.Readyz{
			{Target: "cp1", URL: "https://cp1:6443", OK: true, HTTPStatus: 200, Latency: 8 * time.Millisecond},
			{Target: "cp2", URL: "https://cp2:6443", HTTPStatus: 500, Failed: []string{"etcd failed: reason withheld"}, Latency: 9 * time.Millisecond},
			{Target: "cp3", URL: "https://cp3:6443", Err: "dial tcp 192.168.122.13:6443: connect: connection refused"},
		},
		Leases: []health.Lease{
			{Name: "kube-controller-manager", Found: true, HolderNode: "cp2", RenewTime: now.Add(-3 * time.Second), Transitions: 4, DurationSeconds: 15, Fresh: true},
			{Name: "kube-scheduler"},
		},
		KubeNodes: []health.KubeNode{
			{Name: "w1", Ready: "True", PodCIDR: "10.200.0.0/24", KubeletVersion: "v1.34.1", Created: now.Add(-2 * time.Hour)},
			{Name: "w2", Ready: "False", Reason: "KubeletNotReady", Message: "container runtime network not ready", Problems: []string{"DiskPressure"}, Created: now.Add(-90 * time.Second)},
		},
		Errors: map[string]string{"units": "node w1: connect: timeout\nsecond line"},
	}
	var out bytes.Buffer
	if err := WriteStatusText(&out, c, rep, now); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"NODES\nNODE  ROLE          STATE    IP              PID\nlb    loadbalancer  running  192.168.122.10  42\n",
		"lb    haproxy.service         active/running           enabled  0         1d2h ago",
		"cp1   etcd.service            active/running           enabled  0         5m3s ago",
		"cp1   kube-scheduler.service  not-found                -        0         -",
		"cp1   kube-apiserver.service  activating/auto-restart  enabled  12        weird",
		"error: node w1: connect: timeout\n  second line\n",
		"members: cp1 a1, cp2 b2, (not started) c3",
		"cp2   https://192.168.122.12:2379  yes  *",
		"7     1234   2.1 MiB  3.6.5    12.3ms",
		"cp3   https://192.168.122.13:2379  no   -",
		"connect: connection refused",
		"leader cp2, term 7, quorum 2/3 healthy (2 needed)",
		"cp2     https://cp2:6443  no     500   9.0ms    etcd failed: reason withheld",
		"cp3     https://cp3:6443  no     -     -        dial tcp",
		"kube-controller-manager  cp2                        3s ago   4            yes",
		"kube-scheduler           (no Lease: never elected)  -        -            no",
		"KUBE NODES\nNAME  STATUS                                   POD CIDR         VERSION  AGE\n",
		"w1    Ready                                    10.200.0.0/24    v1.34.1  2h0m\n",
		"w2    NotReady (KubeletNotReady),DiskPressure  10.200.1.0/24 *  -        1m30s\n",
		"* from cluster.yaml",
		"w2: container runtime network not ready\n",
		"not registered: w3 (no kubelet has registered the Node yet)\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Sections in order.
	last := -1
	for _, s := range []string{"NODES\n", "\nUNITS\n", "\nETCD\n", "\nAPISERVER\n", "\nLEASES\n", "\nKUBE NODES\n"} {
		i := strings.Index(text, s)
		if i <= last {
			t.Errorf("section %q at %d, after %d", s, i, last)
		}
		last = i
	}
	if t.Failed() {
		t.Logf("output:\n%s", text)
	}
}

func TestEtcdSummary(t *testing.T) {
	for _, tc := range []struct {
		rep  health.EtcdReport
		want string
	}{
		{health.EtcdReport{Leader: "cp2", RaftTerm: 7, Healthy: 3, Size: 3, QuorumSize: 2, Quorum: true}, "leader cp2, term 7, quorum 3/3 healthy (2 needed)"},
		{health.EtcdReport{RaftTerm: 9, Healthy: 0, Size: 3, QuorumSize: 2}, "no leader, term 9, NO QUORUM: 0/3 members answer, 0 healthy, 2 needed; writes and linearizable reads block until enough members are back"},
		// One member survives two stopped ones: it answers, but knows no leader.
		{health.EtcdReport{RaftTerm: 11, Healthy: 0, Size: 3, QuorumSize: 2, Endpoints: []health.EtcdEndpoint{{OK: true}, {}, {}}},
			"no leader, term 11, NO QUORUM: 1/3 members answer, 0 healthy, 2 needed; writes and linearizable reads block until enough members are back"},
		{health.EtcdReport{Leader: "cp1", RaftTerm: 2, Healthy: 3, Size: 5, QuorumSize: 3, Quorum: true}, "leader cp1, term 2, quorum 3/5 healthy (3 needed)"},
	} {
		if got := etcdSummary(&tc.rep); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
}

func TestStatusHelpers(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", -time.Second: "0s", 59 * time.Second: "59s", 61 * time.Second: "1m1s", 2*time.Hour + 7*time.Minute: "2h7m", 76 * time.Hour: "3d4h"} {
		if got := age(d); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 2202009: "2.1 MiB", 3 << 30: "3.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// CERTIFICATES: one line per node with its soonest expiry, the ones near
// their end listed; --certs lists them all.
func TestPrintStatusCerts(t *testing.T) {
	c := config.Default("st", config.ArchAMD64, config.ProviderNspawn)
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	rep := StatusReport{
		Nodes: []NodeRow{{Name: "cp1", Role: config.RoleControlPlane, State: "running", IP: "192.168.122.11"}},
		Certs: map[string][]health.Cert{
			"w3": {{File: "/var/lib/kubelet/pki/kubelet-client-current.pem", Subject: "CN=system:node:w3,O=system:nodes", NotAfter: now.Add(-49 * time.Hour)}},
			"cp1": {
				{File: "/etc/etcd/ca.pem", Subject: "CN=Kubernetes", NotAfter: now.Add(3650 * 24 * time.Hour), CA: true},
				{File: "/etc/etcd/kubernetes.pem", Subject: "CN=kubernetes", NotAfter: now.Add(364*24*time.Hour + time.Hour)},
				{File: "/var/lib/kubernetes/kube-scheduler.kubeconfig", Subject: "CN=system:kube-scheduler", NotAfter: now.Add(2 * time.Hour)},
				{File: "/var/lib/kubernetes/bad.pem", Err: "no PEM certificate"},
			},
		},
	}
	var out bytes.Buffer
	if err := WriteStatusText(&out, c, rep, now); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"CERTIFICATES (the files on the nodes)",
		"cp1   3      /var/lib/kubernetes/kube-scheduler.kubeconfig    2026-12-04 12:00  0 (expires in 2h0m)",
		"w3    1      /var/lib/kubelet/pki/kubelet-client-current.pem  2026-12-02 09:00  expired 2d1h ago",
		"expiring within 30 days, or unreadable:\n  cp1: /var/lib/kubernetes/kube-scheduler.kubeconfig (CN=system:kube-scheduler) 0 (expires in 2h0m)\n  cp1: /var/lib/kubernetes/bad.pem unreadable: no PEM certificate\n  w3: /var/lib/kubelet/pki/kubelet-client-current.pem",
		"(khw status --certs lists every certificate)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "/etc/etcd/kubernetes.pem") {
		t.Errorf("a certificate with 364 days left is listed without --certs:\n%s", text)
	}
	out.Reset()
	if err := WriteStatusTextWith(&out, c, rep, now, StatusOptions{AllCerts: true}); err != nil {
		t.Fatal(err)
	}
	if all := out.String(); !strings.Contains(all, "cp1   /etc/etcd/kubernetes.pem") || !strings.Contains(all, "CN=kubernetes") || !strings.Contains(all, "364") {
		t.Errorf("--certs text:\n%s", all)
	}
}
