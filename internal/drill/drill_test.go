package drill

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
)

func testCluster(t *testing.T) *config.Cluster {
	t.Helper()
	c := config.Default("drill", config.ArchAMD64, config.ProviderNspawn)
	if _, err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPlan(t *testing.T) {
	c := testCluster(t)
	live := Live{EtcdLeader: "cp2", LeaseHolders: []string{"cp3", "cp1"}}
	tests := []struct {
		name    string
		spec    Spec
		want    string // actions joined by "; "
		wantErr string
	}{
		{"etcd 1 stops the leader", Spec{Kind: KindEtcd, Count: 1}, "systemctl stop etcd.service on cp2", ""},
		{"etcd 2: leader then file order", Spec{Kind: KindEtcd, Count: 2}, "systemctl stop etcd.service on cp2; systemctl stop etcd.service on cp1", ""},
		{"etcd count defaults to 1", Spec{Kind: KindEtcd}, "systemctl stop etcd.service on cp2", ""},
		{"etcd explicit nodes", Spec{Kind: KindEtcd, Count: 2, Nodes: []string{"cp1", "cp3"}}, "systemctl stop etcd.service on cp1; systemctl stop etcd.service on cp3", ""},
		{"etcd unknown leader falls back to file order", Spec{Kind: KindEtcd, Count: 1}, "", ""},
		{"etcd all needs force", Spec{Kind: KindEtcd, Count: 3}, "", "add --force"},
		{"etcd all with force", Spec{Kind: KindEtcd, Count: 3, Force: true}, "systemctl stop etcd.service on cp2; systemctl stop etcd.service on cp1; systemctl stop etcd.service on cp3", ""},
		{"etcd too many", Spec{Kind: KindEtcd, Count: 4, Force: true}, "", "give 1..3"},
		{"etcd on a worker", Spec{Kind: KindEtcd, Count: 1, Nodes: []string{"w1"}}, "", "w1 is a worker"},
		{"etcd nodes vs count", Spec{Kind: KindEtcd, Count: 2, Nodes: []string{"cp1"}}, "", "names 1 nodes but --count is 2"},
		{"apiserver starts with the kcm lease holder", Spec{Kind: KindAPIServer, Count: 1}, "systemctl stop kube-apiserver.service on cp3", ""},
		{"node", Spec{Kind: KindNode, Nodes: []string{"cp2"}}, "power off cp2", ""},
		{"node needs a name", Spec{Kind: KindNode}, "", "exactly one node"},
		{"node unknown", Spec{Kind: KindNode, Nodes: []string{"jumpbox"}}, "", `"jumpbox" is not a node`},
		{"lb", Spec{Kind: KindLB}, "systemctl stop haproxy.service on lb", ""},
		{"lb other node", Spec{Kind: KindLB, Nodes: []string{"cp1"}}, "", "stops HAProxy on lb"},
		{"kubelet", Spec{Kind: KindKubelet, Nodes: []string{"w2"}}, "systemctl stop kubelet.service on w2", ""},
		{"kubelet on a cp", Spec{Kind: KindKubelet, Nodes: []string{"cp1"}}, "", "takes a worker"},
		{"bad kind", Spec{Kind: "disk"}, "", "unknown drill"},
		{"negative for", Spec{Kind: KindLB, For: -time.Second}, "", "positive duration"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := live
			if strings.Contains(tc.name, "unknown leader") {
				l = Live{}
				tc.want = "systemctl stop etcd.service on cp1"
			}
			acts, err := Plan(c, tc.spec, l)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range acts {
				got = append(got, a.String())
			}
			if strings.Join(got, "; ") != tc.want {
				t.Errorf("actions = %q, want %q", strings.Join(got, "; "), tc.want)
			}
		})
	}
}

func TestHAProxyBackendStatus(t *testing.T) {
	csv := "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck\n" +
		"kube-apiserver,FRONTEND,,,0,3,,3,0,0,0,0,0,,,,,OPEN,,,\n" +
		"kube-apiservers,cp1,0,0,0,1,,1,0,0,,0,,0,0,0,0,UP,1,1,0\n" +
		"kube-apiservers,cp2,0,0,0,1,,1,0,0,,0,,0,0,0,0,DOWN,1,1,0\n" +
		"kube-apiservers,cp3,0,0,0,1,,1,0,0,,0,,0,0,0,0,UP 1/2,1,1,0\n" +
		"kube-apiservers,cp1-last-resort,0,0,0,1,,1,0,0,,0,,0,0,0,0,no check,1,0,1\n" +
		"kube-apiservers,BACKEND,0,0,0,1,,1,0,0,0,0,,0,0,0,0,UP,2,3,0\n" +
		"stats,FRONTEND,,,1,1,,1,0,0,0,0,0,,,,,OPEN,,,\n"
	servers, err := health.ParseHAProxyStats([]byte(csv))
	if err != nil {
		t.Fatal(err)
	}
	got, err := backendStatus(servers, "kube-apiservers")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cp1": "UP", "cp2": "DOWN", "cp3": "UP 1/2"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, err := backendStatus(servers, "nosuch"); err == nil || !strings.Contains(err.Error(), "no server in backend") {
		t.Errorf("unknown backend: err = %v", err)
	}
	if _, err := health.ParseHAProxyStats([]byte("# a,b\n1,2\n")); err == nil || !strings.Contains(err.Error(), "lacks") {
		t.Errorf("bad header: err = %v", err)
	}
}

// scenario builds samples: every signal every 500 ms from -3 s to end,
// with health decided by fn(signal, offset).
type scenario struct {
	t0  time.Time
	out []Sample
}

func (s *scenario) run(from, to time.Duration, sig Signal, fn func(at time.Duration, x *Sample)) {
	for at := from; at <= to; at += 500 * time.Millisecond {
		x := Sample{Signal: sig, At: s.t0.Add(at), OK: true}
		fn(at, &x)
		s.out = append(s.out, x)
	}
}

func etcdQuorumLoss(t *testing.T) (Record, []Sample) {
	t.Helper()
	t0 := time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)
	heal := t0.Add(20 * time.Second)
	end := t0.Add(40 * time.Second)
	s := &scenario{t0: t0}
	broken := func(at time.Duration) bool { return at >= time.Second && at < 29*time.Second }
	for _, sig := range []Signal{SigAPIRead, SigAPIWrite} {
		s.run(-3*time.Second, 40*time.Second, sig, func(at time.Duration, x *Sample) {
			if broken(at) {
				x.OK, x.Err = false, "HTTP 500: etcdserver: request timed out"
			}
		})
	}
	s.run(-3*time.Second, 40*time.Second, SigEtcd, func(at time.Duration, x *Sample) {
		x.Etcd = &EtcdState{Leader: "cp1", Term: 4, Healthy: 3, Quorum: true}
		switch {
		case at >= 500*time.Millisecond && at < 28*time.Second:
			x.OK, x.Err = false, "no leader"
			x.Etcd = &EtcdState{Term: 5, Healthy: 0}
		case at >= 28*time.Second:
			x.Etcd = &EtcdState{Leader: "cp3", Term: 6, Healthy: 3, Quorum: true}
		}
	})
	s.run(-3*time.Second, 40*time.Second, SigWorkload, func(at time.Duration, x *Sample) {
		x.Parts = map[string]string{"w1": "", "w2": "", "w3": ""}
	})
	rec := Record{ID: "x", Cluster: "drill", Spec: Spec{Kind: KindEtcd, Count: 2, For: 20 * time.Second},
		Actions:       []Action{{Node: "cp1", Unit: "etcd.service"}, {Node: "cp2", Unit: "etcd.service"}},
		ControlPlanes: []string{"cp1", "cp2", "cp3"}, LB: "lb", BrokeAt: t0, HealedAt: &heal, EndedAt: &end}
	return rec, s.out
}

func facts() Facts {
	return Facts{ControlPlanes: 3, LBInter: time.Second, LBFall: 2, LeaseDuration: 15 * time.Second, NodeMonitorGracePeriod: 50 * time.Second}
}

func TestAnalyzeEtcdQuorumLoss(t *testing.T) {
	rec, samples := etcdQuorumLoss(t)
	r := Analyze(rec, samples, facts())
	rd, _ := r.signal(SigAPIRead)
	if rd.DetectedAfter == nil || *rd.DetectedAfter != 1 {
		t.Errorf("api-read detected after %v, want 1.0", rd.DetectedAfter)
	}
	if len(rd.Windows) != 1 || rd.Longest != 28 {
		t.Errorf("api-read windows %+v longest %v, want one of 28 s", rd.Windows, rd.Longest)
	}
	if rd.RecoveredAfterHeal == nil || *rd.RecoveredAfterHeal != 9 {
		t.Errorf("api-read recovered %v after heal, want 9.0", rd.RecoveredAfterHeal)
	}
	if r.Etcd.TermBefore != 4 || r.Etcd.TermAfter != 6 || r.Etcd.Elections != 2 {
		t.Errorf("etcd terms %+v", r.Etcd)
	}
	if got := leaderSeq(r.Etcd); got != "cp1 → (none) → cp3" {
		t.Errorf("leaders %q", got)
	}
	if r.Etcd.QuorumBackAfterHeal == nil || *r.Etcd.QuorumBackAfterHeal != 8 {
		t.Errorf("quorum back %v, want 8", r.Etcd.QuorumBackAfterHeal)
	}
	if r.Recovery == nil || *r.Recovery != 9 {
		t.Errorf("recovery %v, want 9", r.Recovery)
	}
	if !r.Passed {
		t.Errorf("verdict failed: %+v", r.Expectations)
	}
	var texts []string
	for _, e := range r.Expectations {
		texts = append(texts, e.Result+" "+e.Text)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"pass API reads and writes fail while quorum is lost", "pass quorum returns after the heal", "pass running pods keep serving", "pass everything is healthy again"} {
		if !strings.Contains(all, want) {
			t.Errorf("expectations lack %q:\n%s", want, all)
		}
	}
	md := r.Markdown()
	for _, want := range []string{"— PASSED", "etcdserver: request timed out", "Raft term 4 → 6", "leader cp1 → (none)"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
}

func TestAnalyzeFailsWhenPodsStopServing(t *testing.T) {
	rec, samples := etcdQuorumLoss(t)
	for i := range samples {
		x := &samples[i]
		if x.Signal == SigWorkload && x.At.Sub(rec.BrokeAt) == 5*time.Second {
			x.OK, x.Err, x.Parts["w2"] = false, "w2: connection refused", "connection refused"
		}
	}
	r := Analyze(rec, samples, facts())
	if r.Passed {
		t.Fatal("verdict passed although a pod stopped serving")
	}
	found := false
	for _, e := range r.Expectations {
		if strings.HasPrefix(e.Text, "running pods keep serving") {
			found = e.Result == Fail && strings.Contains(e.Evidence, "w2 failed at +5.0")
		}
	}
	if !found {
		t.Errorf("expectations: %+v", r.Expectations)
	}
}

func TestAnalyzeControlPlanePowerOff(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)
	heal := t0.Add(30 * time.Second)
	end := t0.Add(45 * time.Second)
	s := &scenario{t0: t0}
	for _, sig := range []Signal{SigAPIRead, SigAPIWrite} {
		s.run(-3*time.Second, 45*time.Second, sig, func(at time.Duration, x *Sample) {
			if at == time.Second { // one request caught the dead backend
				x.OK, x.Err = false, "EOF"
			}
		})
	}
	s.run(-3*time.Second, 45*time.Second, SigHAProxy, func(at time.Duration, x *Sample) {
		x.Parts = map[string]string{"cp1": "UP", "cp2": "UP", "cp3": "UP"}
		switch {
		case at >= 1500*time.Millisecond && at < 2500*time.Millisecond:
			x.Parts["cp2"] = "UP 1/2"
		case at >= 2500*time.Millisecond && at < 36*time.Second:
			x.Parts["cp2"] = "DOWN"
		}
		if x.Parts["cp2"] != "UP" {
			x.OK, x.Err = false, "cp2 "+x.Parts["cp2"]
		}
	})
	s.run(-3*time.Second, 45*time.Second, SigLeases, func(at time.Duration, x *Sample) {
		x.Leases = map[string]LeaseState{"kube-controller-manager": {Holder: "cp2", Transitions: 1, Fresh: true}, "kube-scheduler": {Holder: "cp1", Transitions: 0, Fresh: true}}
		if at >= 17*time.Second {
			x.Leases["kube-controller-manager"] = LeaseState{Holder: "cp3", Transitions: 2, Fresh: true}
		}
	})
	s.run(-3*time.Second, 45*time.Second, SigEtcd, func(at time.Duration, x *Sample) {
		x.Etcd = &EtcdState{Leader: "cp1", Term: 3, Healthy: 3, Quorum: true}
		if at >= 0 && at < 33*time.Second {
			x.Etcd.Healthy = 2
		}
	})
	rec := Record{ID: "y", Spec: Spec{Kind: KindNode, Nodes: []string{"cp2"}, For: 30 * time.Second},
		Actions: []Action{{Node: "cp2", PowerOff: true}}, ControlPlanes: []string{"cp1", "cp2", "cp3"}, LB: "lb",
		BrokeAt: t0, HealedAt: &heal, EndedAt: &end}
	r := Analyze(rec, s.out, facts())
	results := map[string]string{}
	for _, e := range r.Expectations {
		results[strings.SplitN(e.Text, " (", 2)[0]] = e.Result + ": " + e.Evidence
	}
	check := func(prefix, want string) {
		t.Helper()
		for k, v := range results {
			if strings.HasPrefix(k, prefix) {
				if !strings.HasPrefix(v, want) {
					t.Errorf("%s: %s, want %s", k, v, want)
				}
				return
			}
		}
		t.Errorf("no expectation %q in %v", prefix, results)
	}
	check("the API stays available", "pass")
	check("HAProxy takes cp2 out of rotation", "pass: DOWN at +2.5 s")
	check("the kube-controller-manager Lease moves off cp2", "pass: cp2 → cp3 at +17.0 s, leaseTransitions 1 → 2")
	check("the etcd leader stays", "pass")
	if p, ok := r.part(SigHAProxy, "cp2"); !ok || p.DownAfter == nil || *p.DownAfter != 2.5 || p.UpAfterHeal == nil || *p.UpAfterHeal != 6 {
		t.Errorf("haproxy cp2 part = %+v", p)
	}
	// The bound is fall×inter + inter + 1 s: DOWN at 2.5 s passes with
	// 1×1s (3 s) and fails with 1×100ms (1.2 s). "UP 1/2" is still in
	// rotation and does not count as down.
	for _, tc := range []struct {
		inter time.Duration
		want  string
	}{{time.Second, Pass}, {100 * time.Millisecond, Fail}} {
		f := facts()
		f.LBInter, f.LBFall = tc.inter, 1
		r = Analyze(rec, s.out, f)
		for _, e := range r.Expectations {
			if strings.HasPrefix(e.Text, "HAProxy takes cp2 out of rotation") && e.Result != tc.want {
				t.Errorf("inter %s: %+v, want %s", tc.inter, e, tc.want)
			}
		}
	}
}

func TestTrackerEvents(t *testing.T) {
	tr := NewTracker()
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var got []string
	feed := func(x Sample) {
		for _, e := range tr.Add(x) {
			got = append(got, string(e.Signal)+" "+e.Text)
		}
	}
	feed(Sample{Signal: SigEtcd, At: at(0), OK: true, Etcd: &EtcdState{Leader: "cp1", Term: 3}})
	feed(Sample{Signal: SigEtcd, At: at(1), OK: false, Err: "no leader", Etcd: &EtcdState{Term: 4}})
	feed(Sample{Signal: SigEtcd, At: at(0.5), OK: true, Etcd: &EtcdState{Leader: "cp1", Term: 3}}) // late: ignored
	feed(Sample{Signal: SigEtcd, At: at(3), OK: true, Etcd: &EtcdState{Leader: "cp2", Term: 4}})
	feed(Sample{Signal: SigHAProxy, At: at(0), OK: true, Parts: map[string]string{"cp1": "UP"}})
	feed(Sample{Signal: SigHAProxy, At: at(1), OK: false, Err: "cp1 DOWN", Parts: map[string]string{"cp1": "DOWN"}})
	want := []string{
		"etcd failing: no leader",
		"etcd leader cp1 → (none) (raft term 4)",
		"etcd ok again (failed for 2.0s)",
		"etcd leader (none) → cp2 (raft term 4)",
		"haproxy failing: cp1 DOWN",
		"haproxy cp1: UP → DOWN",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSamplesFileAndStore(t *testing.T) {
	dir := t.TempDir()
	st := Store{Dir: filepath.Join(dir, "drills")}
	rec := &Record{ID: "20261129-230000-etcd-2", Spec: Spec{Kind: KindEtcd, Count: 2}}
	if _, err := st.Active(); err != ErrNoActive {
		t.Fatalf("Active on empty store: %v", err)
	}
	if err := st.Save(rec); err != nil {
		t.Fatal(err)
	}
	if err := st.SetActive(rec.ID); err != nil {
		t.Fatal(err)
	}
	got, err := st.Active()
	if err != nil || got.ID != rec.ID || got.Spec.Count != 2 {
		t.Fatalf("Active = %+v, %v", got, err)
	}
	fi, err := os.Stat(st.Dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("drills dir mode %v, %v", fi.Mode().Perm(), err)
	}
	t0 := time.Now()
	path := st.SamplesPath(rec.ID)
	if err := AppendSamples(path, []Sample{{Signal: SigAPIRead, At: t0.Add(time.Second), OK: true}, {Signal: SigEtcd, At: t0}}); err != nil {
		t.Fatal(err)
	}
	// A writer killed mid-line leaves a torn last line: skipped.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"signal":"api-wr`)
	f.Close()
	ss, err := ReadSamples(path)
	if err != nil || len(ss) != 2 || ss[0].Signal != SigEtcd {
		t.Fatalf("ReadSamples = %+v, %v", ss, err)
	}
	// A bad line in the middle is an error naming the line.
	os.WriteFile(path, []byte("{bad\n{\"signal\":\"etcd\"}\n"), 0o600)
	if _, err := ReadSamples(path); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad middle line: %v", err)
	}
	if err := st.ClearActive(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Active(); err != ErrNoActive {
		t.Errorf("after ClearActive: %v", err)
	}
}

// On emulated nodes (TCG VMs: Slowdown 15) the prober samples every 2 s
// instead of twice a second, waits twice as long for an API answer, and the
// runner waits twice as long for the recovery; on nspawn nodes and KVM VMs
// (Slowdown 3) nothing changes.
func TestPaceFollowsSlowdown(t *testing.T) {
	for _, tc := range []struct {
		slowdown                  int
		every, timeout, slow, rec time.Duration
	}{
		{0, Interval, APITimeout, APISlow, DefaultMaxRecovery},
		{3, Interval, APITimeout, APISlow, DefaultMaxRecovery}, // KVM VMs
		{15, 4 * Interval, 2 * APITimeout, 2 * APISlow, 2 * DefaultMaxRecovery},
	} {
		p := &Prober{Target: health.Target{Slowdown: tc.slowdown}}
		r := &Runner{Prober: p}
		r.defaults()
		if p.Every() != tc.every || p.apiTimeout() != tc.timeout || p.apiSlow() != tc.slow || r.MaxRecovery != tc.rec {
			t.Errorf("slowdown %d: every %v, API timeout %v, slow %v, max recovery %v; want %v, %v, %v, %v",
				tc.slowdown, p.Every(), p.apiTimeout(), p.apiSlow(), r.MaxRecovery, tc.every, tc.timeout, tc.slow, tc.rec)
		}
		for _, sc := range p.schedules() {
			if sc.every != tc.every {
				t.Errorf("slowdown %d: %s sampled every %v, want %v", tc.slowdown, sc.sig, sc.every, tc.every)
			}
		}
	}
}

// TestLiveTimelineInTimeOrder: a slow probe launched first answers last.
// Its event must still be printed before the later events that faster
// probes queued meanwhile, so nothing is printed past a probe in flight.
func TestLiveTimelineInTimeOrder(t *testing.T) {
	var out strings.Builder
	p := &Prober{}
	r := &Runner{Prober: p, Out: &out}
	r.defaults()
	t0 := time.Now().Add(-20 * time.Second)
	r.brokeAt = t0
	// A slow etcd probe sent at +1 s is still in flight.
	p.flights = map[uint64]time.Time{7: t0.Add(time.Second)}
	r.observe(Sample{Signal: SigAPIRead, At: t0.Add(2 * time.Second), Err: "connection refused"})
	r.printEvents(false)
	if out.Len() != 0 {
		t.Fatalf("printed past a probe in flight since +1 s:\n%s", out.String())
	}
	r.observe(Sample{Signal: SigEtcd, At: t0.Add(time.Second), Err: "no leader", flight: 7})
	r.printEvents(false)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "1.0s  etcd") || !strings.Contains(lines[1], "2.0s  api-read") {
		t.Errorf("timeline not in time order:\n%s", out.String())
	}
	if _, ok := p.InFlightSince(); ok {
		t.Errorf("the observed probe is still in flight: %v", p.flights)
	}
}

// TestActiveRefusesIDsOutsideTheStore: an active file holding a path
// ("../..", "a/b") or anything NewID cannot make is an error naming the
// file and the fix, and no drill.json outside the store is read; a
// drill.json naming another drill, or with more actions applied than it
// has (heal takes Actions[:Applied]), is refused too.
func TestActiveRefusesIDsOutsideTheStore(t *testing.T) {
	root := t.TempDir()
	st := Store{Dir: filepath.Join(root, "state", "drills")}
	// A Record two levels up, where "../.." leads.
	outside := &Record{ID: "..", Cluster: "outside"}
	data, _ := json.Marshal(outside)
	if err := os.WriteFile(filepath.Join(root, "drill.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "state", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	data, _ = json.Marshal(&Record{ID: "../x", Cluster: "outside"})
	if err := os.WriteFile(filepath.Join(root, "state", "x", "drill.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	active := filepath.Join(st.Dir, "active")
	for _, id := range []string{"../..", "../x", "/etc", "20261129-230000-etcd-2/../..", "20261129-230000-Etcd", "20261129-230000-etcd-", "", strings.Repeat("1", 200)} {
		if err := os.MkdirAll(st.Dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(active, []byte(id+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		rec, err := st.Active()
		if err == nil || !strings.Contains(err.Error(), active+" holds ") || !strings.Contains(err.Error(), "write the ID of the broken drill there") {
			t.Errorf("active %q: %+v, %v; want an error naming %s and the fix", id, rec, err, active)
		}
	}

	// drill.json must name its own drill and apply at most its actions.
	id := "20261129-230000-node-w1"
	for _, tc := range []struct {
		rec  Record
		want string
	}{
		{Record{ID: "20261129-230000-node-w2"}, `holds drill "20261129-230000-node-w2", not ` + id},
		{Record{ID: id, Actions: []Action{{Node: "w1"}}, Applied: 2}, "applied is 2, not 0 to its 1 actions"},
		{Record{ID: id, Applied: -1}, "applied is -1, not 0 to its 0 actions"},
	} {
		if err := os.MkdirAll(filepath.Join(st.Dir, id), 0o700); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(tc.rec)
		if err := os.WriteFile(filepath.Join(st.Dir, id, "drill.json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := st.SetActive(id); err != nil {
			t.Fatal(err)
		}
		if rec, err := st.Active(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("drill.json %+v: %+v, %v; want %q", tc.rec, rec, err, tc.want)
		}
	}

	// The IDs khw makes pass.
	t0 := time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)
	for _, made := range []string{
		NewID(t0, Spec{Kind: KindEtcd}, []Action{{}, {}}),
		NewID(t0, Spec{Kind: KindLB}, nil),
		NewID(t0, Spec{Kind: KindNode}, []Action{{Node: "worker--1"}}),
		NewID(t0, Spec{Kind: KindKubelet}, []Action{{Node: strings.Repeat("w", 63)}}),
		"20261129-230000-pki-renew",
	} {
		if err := CheckID(made); err != nil {
			t.Errorf("CheckID(%q): %v", made, err)
		}
	}
}
