package health

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/khw-dev/khw/internal/config"
)

func defaultCluster(t *testing.T) *config.Cluster {
	t.Helper()
	c := config.Default("hc", config.ArchAMD64, config.ProviderNspawn)
	if _, err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestResolve(t *testing.T) {
	tg := Target{Cluster: defaultCluster(t)}
	for _, tc := range []struct {
		host string
		want string // "" = not resolved
	}{
		{"lb", "192.168.122.10"},
		{"cp1", "192.168.122.11"},
		{"CP2", "192.168.122.12"},
		{"cp3.kubernetes.local", "192.168.122.13"},
		{"w3.kubernetes.local.", "192.168.122.23"},
		{"192.168.122.11", ""},
		{"kubernetes", ""},
		{"cp4", ""},
		{"cp1.example.com", ""},
		{"", ""},
	} {
		got, ok := tg.Resolve(tc.host)
		if tc.want == "" {
			if ok {
				t.Errorf("Resolve(%q) = %s, want not resolved", tc.host, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddr(tc.want) {
			t.Errorf("Resolve(%q) = %s %v, want %s", tc.host, got, ok, tc.want)
		}
	}
	if _, ok := (Target{}).Resolve("cp1"); ok {
		t.Error("Resolve without a cluster resolved cp1")
	}
}

// TestDialerRewritesNames: the Dialer hands the underlying Dial the node's
// IP with the port kept; unknown hosts pass unchanged; a bad addr fails
// without dialing.
func TestDialerRewritesNames(t *testing.T) {
	var mu sync.Mutex
	var got []string
	errFake := errors.New("fake dial")
	tg := Target{Cluster: defaultCluster(t), Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		got = append(got, network+" "+addr)
		mu.Unlock()
		return nil, errFake
	}}
	d := tg.Dialer()
	for _, tc := range []struct{ addr, want string }{
		{"lb:6443", "tcp 192.168.122.10:6443"},
		{"cp1.kubernetes.local:2379", "tcp 192.168.122.11:2379"},
		{"w1:10250", "tcp 192.168.122.21:10250"},
		{"10.0.0.1:443", "tcp 10.0.0.1:443"},
		{"example.com:443", "tcp example.com:443"},
	} {
		got = nil
		if _, err := d(context.Background(), "tcp", tc.addr); !errors.Is(err, errFake) {
			t.Errorf("%s: err %v, want the fake dial's", tc.addr, err)
		}
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: dialed %v, want %q", tc.addr, got, tc.want)
		}
	}
	got = nil
	if _, err := d(context.Background(), "tcp", "cp1"); err == nil || !strings.Contains(err.Error(), "host:port") || len(got) != 0 {
		t.Errorf("addr without port: err %v, dialed %v", err, got)
	}
}

// TestDialerConnects: with no Dial set, a node name reaches a real listener
// on the node's IP.
func TestDialerConnects(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello from cp1"))
			c.Close()
		}
	}()
	c := defaultCluster(t)
	for i := range c.Nodes {
		if c.Nodes[i].Name == "cp1" {
			c.Nodes[i].IP = "127.0.0.1"
		}
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	conn, err := Target{Cluster: c}.Dialer()(context.Background(), "tcp", "cp1.kubernetes.local:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 64)
	n, _ := conn.Read(buf)
	if string(buf[:n]) != "hello from cp1" || conn.RemoteAddr().String() != l.Addr().String() {
		t.Fatalf("read %q from %s, want the listener at %s", buf[:n], conn.RemoteAddr(), l.Addr())
	}
}

func TestParseSystemctlShow(t *testing.T) {
	started := time.Date(2025, 3, 4, 10, 11, 12, 345678000, time.UTC)
	cp := RoleUnits(config.RoleControlPlane)
	for _, tc := range []struct {
		name    string
		out     string
		units   []string
		want    []Unit
		wantErr string
	}{
		{
			name: "running, crash-looping and missing units",
			out: `Id=etcd.service
LoadState=loaded
ActiveState=active
SubState=running
UnitFileState=enabled
ExecMainStartTimestamp=Tue 2025-03-04 10:11:12.345678 UTC
NRestarts=0

Id=kube-apiserver.service
LoadState=loaded
ActiveState=activating
SubState=auto-restart
UnitFileState=enabled
ExecMainStartTimestamp=Tue 2025-03-04 10:11:12 UTC
NRestarts=17

Id=kube-controller-manager.service
LoadState=not-found
ActiveState=inactive
SubState=dead
UnitFileState=
ExecMainStartTimestamp=
NRestarts=0

Id=kube-scheduler.service
LoadState=loaded
ActiveState=failed
SubState=failed
UnitFileState=disabled
ExecMainStartTimestamp=n/a
NRestarts=3
`,
			units: cp,
			want: []Unit{
				{Name: "etcd.service", Load: "loaded", Active: "active", Sub: "running", Enabled: "enabled", Since: "Tue 2025-03-04 10:11:12.345678 UTC", Started: started},
				{Name: "kube-apiserver.service", Load: "loaded", Active: "activating", Sub: "auto-restart", Enabled: "enabled", Since: "Tue 2025-03-04 10:11:12 UTC", Started: started.Truncate(time.Second), Restarts: 17},
				{Name: "kube-controller-manager.service", Load: "not-found", Active: "inactive", Sub: "dead"},
				{Name: "kube-scheduler.service", Load: "loaded", Active: "failed", Sub: "failed", Enabled: "disabled", Restarts: 3},
			},
		},
		{
			name:  "keys in any order, CRLF, extra keys, no trailing newline, Id missing",
			out:   "SubState=running\r\nNRestarts=2\r\nActiveState=active\r\nLoadState=loaded\r\nMainPID=42\r\nUnitFileState=enabled",
			units: []string{"haproxy.service"},
			want:  []Unit{{Name: "haproxy.service", Load: "loaded", Active: "active", Sub: "running", Enabled: "enabled", Restarts: 2}},
		},
		{
			name:  "extra blank lines between blocks",
			out:   "\n\nId=a.service\nActiveState=active\n\n\n\nId=b.service\nActiveState=inactive\n\n",
			units: []string{"a.service", "b.service"},
			want:  []Unit{{Name: "a.service", Active: "active"}, {Name: "b.service", Active: "inactive"}},
		},
		{
			name:    "fewer blocks than units",
			out:     "Id=a.service\nActiveState=active\n",
			units:   []string{"a.service", "b.service"},
			wantErr: "1 unit blocks for 2 units",
		},
		{
			name:    "not Key=Value",
			out:     "Id=a.service\nFailed to connect to bus: No such file or directory\n",
			units:   []string{"a.service"},
			wantErr: `line "Failed to connect to bus: No such file or directory" is not Key=Value`,
		},
		{
			name:    "NRestarts not a number",
			out:     "Id=a.service\nNRestarts=many\n",
			units:   []string{"a.service"},
			wantErr: `unit a.service: NRestarts="many"`,
		},
		{
			name:    "empty output",
			out:     "",
			units:   []string{"a.service"},
			wantErr: "0 unit blocks for 1 units",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSystemctlShow([]byte(tc.out), tc.units)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestRoleUnitsAndCommand(t *testing.T) {
	for role, want := range map[string]string{
		config.RoleControlPlane: "etcd.service kube-apiserver.service kube-controller-manager.service kube-scheduler.service",
		config.RoleLoadBalancer: "haproxy.service",
		config.RoleWorker:       "containerd.service kubelet.service kube-proxy.service",
		"jumpbox":               "",
	} {
		if got := strings.Join(RoleUnits(role), " "); got != want {
			t.Errorf("RoleUnits(%s) = %q, want %q", role, got, want)
		}
	}
	cmd := UnitsCommand(RoleUnits(config.RoleLoadBalancer))
	if cmd != "systemctl show --no-pager --timestamp=us+utc -p Id,LoadState,ActiveState,SubState,UnitFileState,ExecMainStartTimestamp,NRestarts haproxy.service" {
		t.Errorf("UnitsCommand = %q", cmd)
	}
}

func TestUnitsRejectsUnknownNode(t *testing.T) {
	// An unknown node fails before the pool is touched (nil here).
	_, err := Units(context.Background(), nil, defaultCluster(t), []string{"cp1", "cp9"})
	if err == nil || !strings.Contains(err.Error(), `node "cp9" is not in cluster hc`) || !strings.Contains(err.Error(), "lb, cp1") {
		t.Fatalf("err %v", err)
	}
}

func TestSortedNodes(t *testing.T) {
	c := defaultCluster(t)
	got := SortedNodes(c, map[string][]Unit{"w1": nil, "zz": nil, "lb": nil, "cp2": nil, "aa": nil})
	if want := []string{"lb", "cp2", "w1", "aa", "zz"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestFailedChecks(t *testing.T) {
	body := `[+]ping ok
[+]log ok
[-]etcd failed: reason withheld
[+]etcd-readiness ok
[-]poststarthook/rbac/bootstrap-roles failed: reason withheld
[+]shutdown ok
readyz check failed
`
	want := []string{"etcd failed: reason withheld", "poststarthook/rbac/bootstrap-roles failed: reason withheld"}
	if got := FailedChecks([]byte(body)); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := FailedChecks([]byte("[+]ping ok\nreadyz check passed\n")); len(got) != 0 {
		t.Fatalf("passing body: %q", got)
	}
}

func TestHolderHost(t *testing.T) {
	for in, want := range map[string]string{
		"cp2_6f1f0b5e-3c55-4b6a-9d0e-2f9a1c1d7e11":                  "cp2",
		"cp2.kubernetes.local_6f1f0b5e-3c55-4b6a-9d0e-2f9a1c1d7e11": "cp2.kubernetes.local",
		"odd_host_6f1f0b5e-3c55-4b6a-9d0e-2f9a1c1d7e11":             "odd_host",
		"cp3": "cp3",
		"":    "",
	} {
		if got := HolderHost(in); got != want {
			t.Errorf("HolderHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLeaseFrom(t *testing.T) {
	tg := Target{Cluster: defaultCluster(t)}
	now := time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)
	mk := func(holder string, renewAgo time.Duration, dur, trans int32) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler", Namespace: "kube-system"}}
		if holder != "" {
			l.Spec.HolderIdentity = &holder
		}
		if renewAgo >= 0 {
			rt := metav1.NewMicroTime(now.Add(-renewAgo))
			l.Spec.RenewTime = &rt
		}
		l.Spec.LeaseDurationSeconds = &dur
		l.Spec.LeaseTransitions = &trans
		return l
	}
	for _, tc := range []struct {
		name      string
		l         *coordinationv1.Lease
		wantNode  string
		wantFresh bool
	}{
		{"renewed 2s ago, fqdn holder", mk("cp2.kubernetes.local_0b5e", 2*time.Second, 15, 3), "cp2", true},
		{"renewed 14.9s ago", mk("cp1_0b5e", 14900*time.Millisecond, 15, 0), "cp1", true},
		{"renewed 15s ago: expired", mk("cp1_0b5e", 15*time.Second, 15, 0), "cp1", false},
		{"renewed a minute ago", mk("cp3_0b5e", time.Minute, 15, 1), "cp3", false},
		{"holder not a node", mk("laptop_0b5e", time.Second, 15, 0), "laptop", true},
		{"released: no holder", mk("", time.Second, 15, 4), "", false},
		{"never renewed", mk("cp1_0b5e", -1, 15, 0), "cp1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tg.leaseFrom(tc.l, now)
			if got.HolderNode != tc.wantNode || got.Fresh != tc.wantFresh || !got.Found || got.Name != "kube-scheduler" {
				t.Fatalf("got %+v, want node %q fresh %v", got, tc.wantNode, tc.wantFresh)
			}
			if got.Transitions != *tc.l.Spec.LeaseTransitions || got.DurationSeconds != 15 {
				t.Fatalf("transitions/duration: %+v", got)
			}
		})
	}
}

func TestSummarizeEtcd(t *testing.T) {
	members := []EtcdMember{{ID: "a1", Name: "cp1"}, {ID: "b2", Name: "cp2"}, {ID: "c3", Name: "cp3"}}
	ok := func(node, id, leader string, term uint64) EtcdEndpoint {
		return EtcdEndpoint{Node: node, OK: true, MemberID: id, LeaderID: leader, IsLeader: id == leader, RaftTerm: term}
	}
	down := func(node string) EtcdEndpoint { return EtcdEndpoint{Node: node, Err: "connect: refused"} }
	for _, tc := range []struct {
		name        string
		members     []EtcdMember
		eps         []EtcdEndpoint
		wantLeader  string
		wantTerm    uint64
		wantHealthy int
		wantSize    int
		wantQuorum  bool
	}{
		{"all up", members, []EtcdEndpoint{ok("cp1", "a1", "b2", 7), ok("cp2", "b2", "b2", 7), ok("cp3", "c3", "b2", 7)}, "cp2", 7, 3, 3, true},
		{"one down", members, []EtcdEndpoint{ok("cp1", "a1", "c3", 8), down("cp2"), ok("cp3", "c3", "c3", 8)}, "cp3", 8, 2, 3, true},
		{"two down: survivor knows no leader", members, []EtcdEndpoint{ok("cp1", "a1", "", 9), down("cp2"), down("cp3")}, "", 9, 0, 3, false},
		{"lagging member names the old leader at an older term", members, []EtcdEndpoint{ok("cp1", "a1", "a1", 5), ok("cp2", "b2", "c3", 6), ok("cp3", "c3", "c3", 6)}, "cp3", 6, 3, 3, true},
		{"member list unknown: leader from endpoints, size from control planes", nil, []EtcdEndpoint{ok("cp1", "a1", "b2", 4), ok("cp2", "b2", "b2", 4), down("cp3")}, "cp2", 4, 2, 3, true},
		{"alarm makes a member unhealthy", members, []EtcdEndpoint{
			ok("cp1", "a1", "a1", 2),
			func() EtcdEndpoint { e := ok("cp2", "b2", "a1", 2); e.Errors = []string{"NOSPACE"}; return e }(),
			down("cp3"),
		}, "cp1", 2, 1, 3, false},
		{"learner does not count", append(append([]EtcdMember{}, members...), EtcdMember{ID: "d4", Name: "cp4", IsLearner: true}),
			[]EtcdEndpoint{ok("cp1", "a1", "a1", 3), ok("cp2", "b2", "a1", 3), down("cp3")}, "cp1", 3, 2, 3, true},
		{"nothing answered", members, []EtcdEndpoint{down("cp1"), down("cp2"), down("cp3")}, "", 0, 0, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &EtcdReport{Members: tc.members, Endpoints: tc.eps}
			summarizeEtcd(rep, 3)
			if rep.Leader != tc.wantLeader || rep.RaftTerm != tc.wantTerm || rep.Healthy != tc.wantHealthy ||
				rep.Size != tc.wantSize || rep.QuorumSize != tc.wantSize/2+1 || rep.Quorum != tc.wantQuorum {
				t.Fatalf("got leader %q term %d healthy %d size %d quorumSize %d quorum %v; want %q %d %d %d %d %v",
					rep.Leader, rep.RaftTerm, rep.Healthy, rep.Size, rep.QuorumSize, rep.Quorum,
					tc.wantLeader, tc.wantTerm, tc.wantHealthy, tc.wantSize, tc.wantSize/2+1, tc.wantQuorum)
			}
		})
	}
}

func TestEtcdInputErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Etcd(ctx, Target{}); err == nil || !strings.Contains(err.Error(), "Target.Cluster is nil") {
		t.Errorf("no cluster: %v", err)
	}
	c := defaultCluster(t)
	if _, err := Etcd(ctx, Target{Cluster: c}); err == nil || !strings.Contains(err.Error(), "PKIDir is empty") {
		t.Errorf("no PKI dir: %v", err)
	}
	dir := t.TempDir()
	if _, err := Etcd(ctx, Target{Cluster: c, PKIDir: dir}); err == nil || !strings.Contains(err.Error(), "ca.pem") || !strings.Contains(err.Error(), "khw pki") {
		t.Errorf("missing ca.pem: %v", err)
	}
}

func TestKubeNodeFrom(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cond := func(typ corev1.NodeConditionType, st corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: st, Reason: reason, Message: msg}
	}
	healthy := []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", ""),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", ""),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", ""),
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
	}
	for _, tc := range []struct {
		name    string
		conds   []corev1.NodeCondition
		cordon  bool
		summary string
		msg     string
	}{
		{"ready", healthy, false, "Ready", ""},
		{"cordoned", healthy, true, "Ready,SchedulingDisabled", ""},
		{"not ready", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady", "container runtime network not ready: cni plugin not initialized")},
			false, "NotReady (KubeletNotReady)", "container runtime network not ready: cni plugin not initialized"},
		{"unknown + disk pressure", []corev1.NodeCondition{
			cond(corev1.NodeDiskPressure, corev1.ConditionTrue, "KubeletHasDiskPressure", ""),
			cond(corev1.NodeNetworkUnavailable, corev1.ConditionTrue, "NoRouteCreated", ""),
			cond(corev1.NodeReady, corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status.")},
			false, "Unknown (NodeStatusUnknown),DiskPressure,NetworkUnavailable", "Kubelet stopped posting node status."},
		{"never posted", nil, false, "NoReadyCondition", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "w1", CreationTimestamp: metav1.NewTime(created)},
				Spec:       corev1.NodeSpec{PodCIDR: "10.200.0.0/24", Unschedulable: tc.cordon},
				Status:     corev1.NodeStatus{Conditions: tc.conds, NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.34.1"}},
			}
			got := KubeNodeFrom(n)
			if got.Summary() != tc.summary || got.Message != tc.msg {
				t.Errorf("Summary() = %q, Message %q; want %q, %q", got.Summary(), got.Message, tc.summary, tc.msg)
			}
			if got.Name != "w1" || got.PodCIDR != "10.200.0.0/24" || got.KubeletVersion != "v1.34.1" || !got.Created.Equal(created) || got.Unschedulable != tc.cordon {
				t.Errorf("fields: %+v", got)
			}
		})
	}
}
