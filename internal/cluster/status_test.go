package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/kubeconfig"
	"github.com/khw-dev/khw/internal/pki"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm"
)

// fakeProvider reports fixed node states and records every dial; each dial
// is refused, as on a network where nothing listens.
type fakeProvider struct {
	c         *config.Cluster
	states    map[string]vm.State
	statusErr error

	mu     sync.Mutex
	dialed []string
}

func (p *fakeProvider) Name() string                             { return "fake" }
func (p *fakeProvider) Create(context.Context) error             { return vm.ErrNotSupported }
func (p *fakeProvider) Start(context.Context, string) error      { return vm.ErrNotSupported }
func (p *fakeProvider) Stop(context.Context, string, bool) error { return vm.ErrNotSupported }
func (p *fakeProvider) Addresses() map[string]netip.Addr         { return nil }
func (p *fakeProvider) Snapshot(context.Context, string) error   { return vm.ErrNotSupported }
func (p *fakeProvider) Revert(context.Context, string) error     { return vm.ErrNotSupported }
func (p *fakeProvider) DeleteSnapshot(context.Context, string) error {
	return vm.ErrNotSupported
}
func (p *fakeProvider) Destroy(context.Context) error { return vm.ErrNotSupported }

func (p *fakeProvider) Status(context.Context) ([]vm.NodeStatus, error) {
	if p.statusErr != nil {
		return nil, p.statusErr
	}
	var out []vm.NodeStatus
	for i, n := range p.c.Nodes {
		st := p.states[n.Name]
		if st == "" {
			st = vm.StateAbsent
		}
		pid := 0
		if st == vm.StateRunning {
			pid = 1000 + i
		}
		out = append(out, vm.NodeStatus{Name: n.Name, State: st, IP: n.Addr(), PID: pid})
	}
	return out, nil
}

func (p *fakeProvider) Dialer() remote.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		p.mu.Lock()
		p.dialed = append(p.dialed, addr)
		p.mu.Unlock()
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
}

// withPKI returns the default cluster and a state directory holding its
// real PKI and kubeconfigs.
func withPKI(t *testing.T) (*config.Cluster, state.Dir) {
	t.Helper()
	c := config.Default("st", config.ArchAMD64, config.ProviderNspawn)
	d := state.New(t.TempDir(), c.Name)
	if _, err := pki.Reconcile(c, d.PKIDir(), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kubeconfig.Reconcile(c, d.PKIDir(), d.KubeconfigDir()); err != nil {
		t.Fatal(err)
	}
	return c, d
}

func noPool(t *testing.T) func() (*remote.Pool, func(), error) {
	return func() (*remote.Pool, func(), error) {
		t.Error("SSH pool opened although no node runs")
		return nil, nil, errors.New("unexpected")
	}
}

func TestCollectStatusNotUp(t *testing.T) {
	c, d := withPKI(t)
	p := &fakeProvider{c: c, states: map[string]vm.State{"cp1": vm.StateStopped}}
	start := time.Now()
	rep, read := CollectStatus(context.Background(), c, p, noPool(t), health.Target{Cluster: c, PKIDir: d.PKIDir()}, filepath.Join(d.KubeconfigDir(), kubeconfig.AdminFile))
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %v with no node running", took)
	}
	if !read || rep.Errors["cluster"] != NotUp || len(rep.Errors) != 1 || len(rep.Nodes) != 7 || rep.Etcd != nil || rep.APIServers != nil || rep.Leases != nil || rep.Units != nil {
		t.Fatalf("read %v report %+v", read, rep)
	}
	if len(p.dialed) != 0 {
		t.Errorf("dialed %v with no node running", p.dialed)
	}
	if rep.Nodes[1] != (NodeRow{Name: "cp1", Role: config.RoleControlPlane, State: "stopped", IP: "192.168.122.11"}) {
		t.Errorf("cp1 row %+v", rep.Nodes[1])
	}
}

// TestCollectStatusDialsOnlyRunningNodes: stopped nodes are refused without
// touching the network, running ones are dialed through the provider; every
// section reports its failure and the report still counts as read (the nodes
// were listed).
func TestCollectStatusDialsOnlyRunningNodes(t *testing.T) {
	c, d := withPKI(t)
	p := &fakeProvider{c: c, states: map[string]vm.State{"lb": vm.StateRunning, "cp1": vm.StateRunning, "cp2": vm.StateStopped}}
	pools := 0
	openPool := func() (*remote.Pool, func(), error) {
		pools++
		return nil, nil, errors.New("no SSH key (test)")
	}
	rep, read := CollectStatus(context.Background(), c, p, openPool, health.Target{Cluster: c, PKIDir: d.PKIDir()}, filepath.Join(d.KubeconfigDir(), kubeconfig.AdminFile))
	if !read || pools != 1 {
		t.Fatalf("read %v, pool opened %d times", read, pools)
	}
	for _, a := range p.dialed {
		if strings.HasPrefix(a, "192.168.122.12:") || strings.HasPrefix(a, "192.168.122.13:") || strings.HasPrefix(a, "cp") || strings.HasPrefix(a, "lb") {
			t.Errorf("dialed %s: a stopped/absent node, or a name instead of an IP", a)
		}
	}
	dialed := strings.Join(p.dialed, " ")
	for _, want := range []string{"192.168.122.11:2379", "192.168.122.11:6443", "192.168.122.10:6443"} {
		if !strings.Contains(dialed, want) {
			t.Errorf("dialed %v, want %s among them", p.dialed, want)
		}
	}
	if rep.Etcd == nil || len(rep.Etcd.Endpoints) != 3 || rep.Etcd.Quorum {
		t.Fatalf("etcd %+v", rep.Etcd)
	}
	if e := rep.Etcd.Endpoints; !strings.Contains(e[0].Err, "connection refused") || !strings.Contains(e[1].Err, "cp2 is stopped") || !strings.Contains(e[2].Err, "cp3 is absent") {
		t.Errorf("etcd endpoints %+v", e)
	}
	if len(rep.APIServers) != 4 || !strings.Contains(rep.APIServers[1].Err, "cp2 is stopped") || !strings.Contains(rep.APIServers[3].Err, "connection refused") {
		t.Errorf("apiservers %+v", rep.APIServers)
	}
	for _, s := range []string{"units", "etcd", "apiservers", "leases"} {
		if rep.Errors[s] == "" {
			t.Errorf("no %s error: %v", s, rep.Errors)
		}
	}
	if !strings.Contains(rep.Errors["units"], "no SSH key (test)") || !strings.Contains(rep.Errors["leases"], "https://lb:6443") {
		t.Errorf("errors %v", rep.Errors)
	}

	// JSON: one object with every section.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"nodes", "units", "etcd", "apiservers", "leases", "errors"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
}

func TestCollectStatusNothingRead(t *testing.T) {
	c, d := withPKI(t)
	p := &fakeProvider{c: c, statusErr: errors.New("pid files unreadable (test)")}
	rep, read := CollectStatus(context.Background(), c, p, func() (*remote.Pool, func(), error) {
		return nil, nil, errors.New("no SSH (test)")
	}, health.Target{Cluster: c, PKIDir: d.PKIDir()}, filepath.Join(d.KubeconfigDir(), kubeconfig.AdminFile))
	if read {
		t.Fatalf("read with nothing answering: %+v", rep)
	}
	if rep.Errors["nodes"] != "pid files unreadable (test)" || rep.Errors["apiservers"] != "no apiserver answered" || rep.Nodes != nil {
		t.Errorf("report %+v", rep)
	}
	// Not knowing which nodes run, it asks them all.
	if !strings.Contains(strings.Join(p.dialed, " "), "192.168.122.13:2379") {
		t.Errorf("dialed %v", p.dialed)
	}
	if msg := JoinErrors(rep.Errors); !strings.HasPrefix(msg, "nodes: pid files unreadable (test); units: open SSH: no SSH (test); etcd: ") {
		t.Errorf("JoinErrors: %s", msg)
	}
}
