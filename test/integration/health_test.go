package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/kubeconfig"
)

// tcpProxy stands in for HAProxy in `mode tcp`: it listens on listen and
// passes every connection through to backend unchanged, so TLS runs end to
// end between the client and the apiserver.
func tcpProxy(t *testing.T, listen, backend string) {
	t.Helper()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("load balancer stand-in on %s: %v", listen, err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", backend)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
}

// stopProc kills p's process group at once (a crashed member) and waits.
func stopProc(t *testing.T, p *proc) {
	t.Helper()
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit after SIGKILL", p.name)
	}
}

// TestHealth reads the real control plane with internal/health: the etcd
// members and their raft state (before and after a member dies), /readyz of
// each apiserver directly and through a TCP load balancer, and the
// leader-election Leases.
func TestHealth(t *testing.T) {
	cp := startControlPlane(t)
	ctx := context.Background()
	lb, ok := cp.c.LB()
	if !ok {
		t.Fatal("loopback cluster has no lb")
	}
	cp1 := cp.cps[0]
	tcpProxy(t, lb.IP+":6443", cp1.IP+":6443")

	var d net.Dialer
	target := health.Target{Cluster: cp.c, PKIDir: cp.d.PKIDir(), Dial: d.DialContext}
	admin := filepath.Join(cp.d.KubeconfigDir(), kubeconfig.AdminFile)

	var before *health.EtcdReport
	t.Run("etcd: 3 members, one leader, quorum", func(t *testing.T) {
		waitFor(t, "etcd report with a leader and 3 healthy members", 30*time.Second, func() error {
			rep, err := health.Etcd(ctx, target)
			if err != nil {
				return err
			}
			if rep.Leader == "" || rep.Healthy != 3 || !rep.Quorum {
				return fmt.Errorf("leader %q healthy %d quorum %v: %+v", rep.Leader, rep.Healthy, rep.Quorum, rep.Endpoints)
			}
			before = rep
			return nil
		})
		rep := before
		if len(rep.Members) != 3 || rep.Size != 3 || rep.QuorumSize != 2 || rep.MembersErr != "" {
			t.Fatalf("members %+v size %d quorumSize %d err %q", rep.Members, rep.Size, rep.QuorumSize, rep.MembersErr)
		}
		ids := map[string]string{} // member ID -> name
		for i, m := range rep.Members {
			want := fmt.Sprintf("cp%d", i+1)
			if m.Name != want || m.ID == "" || len(m.PeerURLs) != 1 || m.PeerURLs[0] != "https://"+cp.cps[i].IP+":2380" {
				t.Errorf("member %d: %+v, want %s with peer URL on %s:2380", i, m, want, cp.cps[i].IP)
			}
			ids[m.ID] = m.Name
		}
		if rep.RaftTerm == 0 {
			t.Error("raft term 0 with an elected leader")
		}
		leaders := 0
		for i, e := range rep.Endpoints {
			if !e.OK || e.Err != "" || e.Node != cp.cps[i].Name || e.Endpoint != "https://"+cp.cps[i].IP+":2379" {
				t.Errorf("endpoint %d: %+v", i, e)
			}
			if ids[e.MemberID] != e.Node {
				t.Errorf("%s answered as member %s (%s)", e.Node, e.MemberID, ids[e.MemberID])
			}
			if ids[e.LeaderID] != rep.Leader {
				t.Errorf("%s follows %s, report says leader %s", e.Node, ids[e.LeaderID], rep.Leader)
			}
			if e.IsLeader {
				leaders++
				if e.Node != rep.Leader {
					t.Errorf("%s says it leads, report says %s", e.Node, rep.Leader)
				}
			}
			if e.RaftTerm == 0 || e.RaftIndex == 0 || e.DBSizeBytes <= 0 || !strings.HasPrefix(e.Version, "3.") || e.Latency <= 0 || e.Latency > health.EtcdEndpointTimeout {
				t.Errorf("%s: term %d index %d db %d version %q latency %v", e.Node, e.RaftTerm, e.RaftIndex, e.DBSizeBytes, e.Version, e.Latency)
			}
		}
		if leaders != 1 {
			t.Errorf("%d members say they lead, want 1", leaders)
		}
	})

	t.Run("apiservers: cp1 ready directly and through the lb, cp2/cp3 down", func(t *testing.T) {
		got := health.APIServers(ctx, target, admin)
		if len(got) != 4 {
			t.Fatalf("%d results: %+v", len(got), got)
		}
		for _, r := range got {
			switch r.Target {
			case "cp1", lb.Name:
				if !r.OK || r.HTTPStatus != 200 || len(r.Failed) != 0 || r.Err != "" || r.Latency <= 0 {
					t.Errorf("%s: %+v, want ready", r.Target, r)
				}
			default:
				// No apiserver runs on cp2/cp3 in this harness.
				if r.OK || !strings.Contains(r.Err, "connection refused") {
					t.Errorf("%s: %+v, want connection refused", r.Target, r)
				}
			}
		}
		if got[3].URL != "https://lb:6443" || got[0].URL != "https://cp1:6443" {
			t.Errorf("URLs: %s, %s", got[0].URL, got[3].URL)
		}
	})

	t.Run("leases: controller-manager and scheduler hold theirs", func(t *testing.T) {
		host, err := os.Hostname()
		if err != nil {
			t.Fatal(err)
		}
		var leases []health.Lease
		waitFor(t, "both Leases held and fresh", 90*time.Second, func() error {
			leases, err = health.Leases(ctx, target, admin)
			if err != nil {
				return err
			}
			for _, l := range leases {
				if !l.Found || l.Holder == "" || !l.Fresh {
					return fmt.Errorf("%+v", l)
				}
			}
			return nil
		})
		if len(leases) != 2 || leases[0].Name != "kube-controller-manager" || leases[1].Name != "kube-scheduler" {
			t.Fatalf("leases %+v", leases)
		}
		for _, l := range leases {
			// Both run on this host here, so the holder is its hostname.
			if l.HolderNode != host || !strings.HasPrefix(l.Holder, host+"_") || l.DurationSeconds != 15 || time.Since(l.RenewTime) > 15*time.Second {
				t.Errorf("%s: %+v, want holder %s_<uuid>, 15 s lease renewed recently", l.Name, l, host)
			}
		}
	})

	t.Run("etcd: the leader dies, quorum stays with a new leader; a second dies, quorum is lost", func(t *testing.T) {
		if before == nil {
			t.Skip("no healthy etcd report before")
		}
		old := before.Leader
		stopProc(t, cp.etcdProcs[old])
		var rep *health.EtcdReport
		waitFor(t, "a new etcd leader", 30*time.Second, func() error {
			t0 := time.Now()
			r, err := health.Etcd(ctx, target)
			if took := time.Since(t0); took > 2*health.EtcdEndpointTimeout+time.Second {
				t.Errorf("Etcd took %v with a member down", took)
			}
			if err != nil {
				return err
			}
			if r.Leader == "" || r.Leader == old {
				return fmt.Errorf("leader %q (old %s)", r.Leader, old)
			}
			rep = r
			return nil
		})
		if !rep.Quorum || rep.Healthy != 2 || rep.Size != 3 || len(rep.Members) != 3 {
			t.Errorf("quorum %v healthy %d size %d members %d, want quorum with 2 of 3", rep.Quorum, rep.Healthy, rep.Size, len(rep.Members))
		}
		t.Logf("etcd leader %s (term %d) killed; now leader %s, term %d, healthy %d/%d", old, before.RaftTerm, rep.Leader, rep.RaftTerm, rep.Healthy, rep.Size)
		for _, e := range rep.Endpoints {
			t.Logf("  %s ok=%v leader=%v term=%d index=%d latency=%v err=%q", e.Node, e.OK, e.IsLeader, e.RaftTerm, e.RaftIndex, e.Latency, e.Err)
		}
		if rep.RaftTerm <= before.RaftTerm {
			t.Errorf("raft term %d after an election, was %d", rep.RaftTerm, before.RaftTerm)
		}
		for _, e := range rep.Endpoints {
			if e.Node == old {
				if e.OK || !strings.Contains(e.Err, "connection refused") {
					t.Errorf("stopped member %s: %+v", old, e)
				}
			} else if !e.OK || e.LeaderID == "" {
				t.Errorf("surviving member %s: %+v", e.Node, e)
			}
		}

		// A second member dies: the survivor answers Status but knows no
		// leader any more, and the member list (serializable) still works.
		stopProc(t, cp.etcdProcs[rep.Leader])
		waitFor(t, "the last member to lose its leader", 30*time.Second, func() error {
			r, err := health.Etcd(ctx, target)
			if err != nil {
				return err
			}
			if r.Leader != "" || r.Quorum {
				return fmt.Errorf("leader %q quorum %v", r.Leader, r.Quorum)
			}
			rep = r
			return nil
		})
		if rep.Healthy != 0 || len(rep.Members) != 3 || rep.QuorumSize != 2 {
			t.Errorf("without quorum: healthy %d members %d quorumSize %d", rep.Healthy, len(rep.Members), rep.QuorumSize)
		}
		answered := 0
		for _, e := range rep.Endpoints {
			if e.OK {
				answered++
				if e.LeaderID != "" || e.IsLeader {
					t.Errorf("survivor %s still names a leader: %+v", e.Node, e)
				}
			}
		}
		if answered != 1 {
			t.Errorf("%d members answered, want the 1 survivor: %+v", answered, rep.Endpoints)
		}
	})
}
