package health

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/kubeconfig"
	"github.com/khw-dev/khw/internal/pki"
	"github.com/khw-dev/khw/internal/state"
	"k8s.io/apiserver/pkg/server/healthz"
)

// fakeCluster is the default cluster with khw's real PKI and kubeconfigs in
// a temporary state directory, plus HTTPS servers standing in for the
// apiservers, serving the `kubernetes` certificate and requiring a client
// certificate signed by the cluster CA. Dial routes "<node IP>:6443" to the
// server registered for that IP (connection refused for the others).
type fakeCluster struct {
	c       *config.Cluster
	d       state.Dir
	servers map[string]*httptest.Server // by node IP

	mu   sync.Mutex
	seen []string // "<SNI> <client CN> <path>" per request
}

func newFakeCluster(t *testing.T) *fakeCluster {
	t.Helper()
	c := defaultCluster(t)
	d := state.New(t.TempDir(), c.Name)
	if _, err := pki.Reconcile(c, d.PKIDir(), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kubeconfig.Reconcile(c, d.PKIDir(), d.KubeconfigDir()); err != nil {
		t.Fatal(err)
	}
	return &fakeCluster{c: c, d: d, servers: map[string]*httptest.Server{}}
}

func (f *fakeCluster) target() Target {
	return Target{Cluster: f.c, PKIDir: f.d.PKIDir(), Dial: f.dial}
}

func (f *fakeCluster) kubeconfig() string {
	return filepath.Join(f.d.KubeconfigDir(), kubeconfig.AdminFile)
}

func (f *fakeCluster) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if net.ParseIP(host) == nil {
		return nil, fmt.Errorf("fake dial: %q is not an IP (the Dialer must resolve node names)", addr)
	}
	s := f.servers[host]
	if s == nil || port != "6443" {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, s.Listener.Addr().String())
}

// serve registers an apiserver at node's IP answering with h.
func (f *fakeCluster) serve(t *testing.T, node string, h http.HandlerFunc) {
	t.Helper()
	n, ok := f.c.Node(node)
	if !ok {
		t.Fatalf("no node %s", node)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(f.d.PKIDir(), "kubernetes.pem"), filepath.Join(f.d.PKIDir(), "kubernetes-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(f.d.PKIDir(), "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.seen = append(f.seen, r.TLS.ServerName+" "+r.TLS.PeerCertificates[0].Subject.CommonName+" "+r.URL.RequestURI())
		f.mu.Unlock()
		h(w, r)
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	s.StartTLS()
	t.Cleanup(s.Close)
	f.servers[n.IP] = s
}

func ready(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/readyz" {
		http.NotFound(w, r)
		return
	}
	fmt.Fprint(w, "[+]ping ok\n[+]etcd ok\nreadyz check passed\n")
}

func TestAPIServersThroughTLS(t *testing.T) {
	f := newFakeCluster(t)
	f.serve(t, "cp1", ready)
	f.serve(t, "cp2", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, "[+]ping ok\n[-]etcd failed: reason withheld\n[+]log ok\nreadyz check failed\n")
	})
	// cp3: nothing listens. lb: passes through to a ready apiserver.
	f.serve(t, "lb", ready)

	got := APIServers(context.Background(), f.target(), f.kubeconfig())
	if len(got) != 4 {
		t.Fatalf("%d results, want cp1-3 and lb: %+v", len(got), got)
	}
	want := []struct {
		target, url string
		ok          bool
		status      int
		failed      string
		err         string
	}{
		{"cp1", "https://cp1:6443", true, 200, "", ""},
		{"cp2", "https://cp2:6443", false, 500, "etcd failed: reason withheld", ""},
		{"cp3", "https://cp3:6443", false, 0, "", "connection refused"},
		{"lb", "https://lb:6443", true, 200, "", ""},
	}
	for i, w := range want {
		r := got[i]
		if r.Target != w.target || r.URL != w.url || r.OK != w.ok || r.HTTPStatus != w.status ||
			strings.Join(r.Failed, ";") != w.failed || (w.err == "") != (r.Err == "") || !strings.Contains(r.Err, w.err) {
			t.Errorf("%s: got %+v, want %+v", w.target, r, w)
		}
		if r.OK && (r.Latency <= 0 || r.Latency > HTTPTimeout) {
			t.Errorf("%s: latency %v", w.target, r.Latency)
		}
	}
	// TLS was verified against each node's name (SNI), the client was the
	// admin cert, and the verbose readiness endpoint was asked.
	seen := strings.Join(f.seen, "\n")
	for _, s := range []string{"cp1 admin /readyz?verbose", "cp2 admin /readyz?verbose", "lb admin /readyz?verbose"} {
		if !strings.Contains(seen, s) {
			t.Errorf("server saw:\n%s\nwant a line %q", seen, s)
		}
	}
}

func TestAPIServersForbiddenAndBadKubeconfig(t *testing.T) {
	f := newFakeCluster(t)
	f.serve(t, "cp1", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"kind":"Status","message":"forbidden: User \"x\" cannot get path \"/readyz\""}`)
	})
	got := APIServers(context.Background(), f.target(), f.kubeconfig())
	if got[0].OK || got[0].HTTPStatus != 403 || !strings.Contains(got[0].Err, "HTTP 403") || !strings.Contains(got[0].Err, "cannot get path") {
		t.Errorf("403: %+v", got[0])
	}
	missing := filepath.Join(t.TempDir(), "nope.kubeconfig")
	got = APIServers(context.Background(), f.target(), missing)
	if len(got) != 4 {
		t.Fatalf("bad kubeconfig: %d results", len(got))
	}
	for _, r := range got {
		if r.OK || !strings.Contains(r.Err, "nope.kubeconfig") || !strings.Contains(r.Err, "khw kubeconfig") {
			t.Errorf("bad kubeconfig: %+v", r)
		}
	}
}

func TestAPIServersUntrustedServer(t *testing.T) {
	// A server whose certificate is not from the cluster CA is rejected.
	f := newFakeCluster(t)
	s := httptest.NewTLSServer(http.HandlerFunc(ready))
	defer s.Close()
	n, _ := f.c.Node("cp1")
	f.servers[n.IP] = s
	got := APIServers(context.Background(), f.target(), f.kubeconfig())
	if got[0].OK || !strings.Contains(got[0].Err, "certificate") {
		t.Fatalf("untrusted server: %+v", got[0])
	}
}

func TestLeasesThroughLB(t *testing.T) {
	f := newFakeCluster(t)
	renew := time.Now().Add(-3 * time.Second).UTC().Format("2006-01-02T15:04:05.000000Z07:00")
	f.serve(t, "lb", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager":
			json.NewEncoder(w).Encode(map[string]any{
				"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
				"metadata": map[string]any{"name": "kube-controller-manager", "namespace": "kube-system"},
				"spec": map[string]any{"holderIdentity": "cp2_1d4c2b1e-8a6f-4d55-9a65-0c7d3c1e2f00", "leaseDurationSeconds": 15,
					"renewTime": renew, "leaseTransitions": 4},
			})
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"leases.coordination.k8s.io \"kube-scheduler\" not found"}`)
		}
	})
	got, err := Leases(context.Background(), f.target(), f.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %+v", got)
	}
	kcm, sched := got[0], got[1]
	if kcm.Name != "kube-controller-manager" || !kcm.Found || kcm.HolderNode != "cp2" || kcm.Holder != "cp2_1d4c2b1e-8a6f-4d55-9a65-0c7d3c1e2f00" ||
		kcm.Transitions != 4 || kcm.DurationSeconds != 15 || !kcm.Fresh || time.Since(kcm.RenewTime) < 3*time.Second || time.Since(kcm.RenewTime) > time.Minute {
		t.Errorf("kcm: %+v", kcm)
	}
	if sched.Name != "kube-scheduler" || sched.Found || sched.Holder != "" || sched.Fresh {
		t.Errorf("scheduler (no Lease): %+v", sched)
	}
	if seen := strings.Join(f.seen, "\n"); !strings.Contains(seen, "lb admin /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager") {
		t.Errorf("requests:\n%s", seen)
	}

	// The LB down: an error naming the Lease and the URL.
	f.servers = map[string]*httptest.Server{}
	_, err = Leases(context.Background(), f.target(), f.kubeconfig())
	if err == nil || !strings.Contains(err.Error(), "Lease kube-system/kube-controller-manager via https://lb:6443") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("lb down: %v", err)
	}
}

// TestEtcdNoMemberAnswers: with the real PKI and every member refusing, Etcd
// returns quickly with one failed row per control plane and an error.
func TestEtcdNoMemberAnswers(t *testing.T) {
	f := newFakeCluster(t)
	start := time.Now()
	rep, err := Etcd(context.Background(), f.target())
	if time.Since(start) > 3*time.Second {
		t.Errorf("took %v with every member refusing", time.Since(start))
	}
	if err == nil || !strings.Contains(err.Error(), "no member answered") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err %v", err)
	}
	if rep == nil || len(rep.Endpoints) != 3 || rep.Quorum || rep.Healthy != 0 || rep.Leader != "" || rep.Size != 3 {
		t.Fatalf("report %+v", rep)
	}
	for i, e := range rep.Endpoints {
		want := fmt.Sprintf("https://192.168.122.1%d:2379", i+1)
		if e.OK || e.Endpoint != want || e.Node != fmt.Sprintf("cp%d", i+1) || !strings.Contains(e.Err, "connect") {
			t.Errorf("endpoint %d: %+v", i, e)
		}
	}
}

func TestKubeNodesThroughLB(t *testing.T) {
	f := newFakeCluster(t)
	f.serve(t, "lb", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/nodes" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		node := func(name, ready string) map[string]any {
			return map[string]any{
				"metadata": map[string]any{"name": name, "creationTimestamp": "2026-01-02T03:04:05Z"},
				"spec":     map[string]any{"podCIDR": "10.200.1.0/24"},
				"status": map[string]any{
					"conditions": []map[string]any{{"type": "Ready", "status": ready, "reason": "KubeletReady"}},
					"nodeInfo":   map[string]any{"kubeletVersion": "v1.34.1"},
				},
			}
		}
		json.NewEncoder(w).Encode(map[string]any{
			"apiVersion": "v1", "kind": "NodeList", "metadata": map[string]any{},
			"items": []any{node("w2", "False"), node("w1", "True")},
		})
	})
	got, err := KubeNodes(context.Background(), f.target(), f.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "w1" || got[0].Summary() != "Ready" || got[1].Name != "w2" || got[1].Summary() != "NotReady (KubeletReady)" || got[0].PodCIDR != "10.200.1.0/24" {
		t.Fatalf("got %+v", got)
	}
	if seen := strings.Join(f.seen, "\n"); !strings.Contains(seen, "lb admin /api/v1/nodes") {
		t.Errorf("requests:\n%s", seen)
	}
	f.servers = map[string]*httptest.Server{}
	if _, err := KubeNodes(context.Background(), f.target(), f.kubeconfig()); err == nil || !strings.Contains(err.Error(), "list Nodes via https://lb:6443") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("lb down: %v", err)
	}
}

// A ready apiserver that answers a little later than HTTPTimeout is down
// for a Target of nspawn speed and up for one of slow nodes (Slowdown 15:
// TCG VMs), whose timeout grows to 4×.
func TestAPIServersSlowNodes(t *testing.T) {
	f := newFakeCluster(t)
	f.serve(t, "cp1", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(HTTPTimeout + 500*time.Millisecond):
		case <-r.Context().Done():
			return
		}
		ready(w, r)
	})
	for _, tc := range []struct {
		slowdown int
		ok       bool
	}{{0, false}, {15, true}} {
		t.Run(fmt.Sprintf("slowdown-%d", tc.slowdown), func(t *testing.T) {
			t.Parallel()
			tg := f.target()
			tg.Slowdown = tc.slowdown
			got := APIServers(context.Background(), tg, f.kubeconfig())
			if r := got[0]; r.Target != "cp1" || r.OK != tc.ok {
				t.Errorf("slowdown %d: cp1 %+v, want OK=%v", tc.slowdown, r, tc.ok)
			}
		})
	}
	if got, want := (Target{Slowdown: 15}).Scaled(HTTPTimeout, 4*HTTPTimeout), 4*HTTPTimeout; got != want {
		t.Errorf("Scaled: %v, want the limit %v", got, want)
	}
	if got := (Target{Slowdown: 2}).Scaled(HTTPTimeout, 4*HTTPTimeout); got != 2*HTTPTimeout {
		t.Errorf("Scaled with slowdown 2: %v, want %v", got, 2*HTTPTimeout)
	}
}

// A Lease is judged by the answering apiserver's clock (its Date header):
// a leader renewing every 2 s on a node whose clock runs 10 minutes behind
// the jumpbox's is fresh, and a Lease that clock says expired is not.
func TestLeasesJudgedByTheServersClock(t *testing.T) {
	for _, tc := range []struct {
		name     string
		renewAgo time.Duration // on the server's clock
		want     bool
	}{
		{"renewed 2s ago by a node 10 min behind", 2 * time.Second, true},
		{"renewed 30s ago by a node 10 min behind", 30 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCluster(t)
			serverNow := time.Now().Add(-10 * time.Minute)
			renew := serverNow.Add(-tc.renewAgo).UTC().Format("2006-01-02T15:04:05.000000Z07:00")
			f.serve(t, "lb", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", serverNow.UTC().Format(http.TimeFormat))
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(map[string]any{
					"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
					"metadata": map[string]any{"name": path.Base(r.URL.Path), "namespace": "kube-system"},
					"spec":     map[string]any{"holderIdentity": "cp1_0b5e", "leaseDurationSeconds": 15, "renewTime": renew},
				})
			})
			got, err := Leases(context.Background(), f.target(), f.kubeconfig())
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range got {
				if l.Fresh != tc.want {
					t.Errorf("%s: fresh %v, want %v", l.Name, l.Fresh, tc.want)
				}
			}
		})
	}
}

// TestReadyzReasons: an apiserver's verbose /readyz withholds why a check
// fails; the check's own endpoint tells. cp1 runs upstream's readyz
// handler (k8s.io/apiserver/pkg/server/healthz) with a failing etcd check:
// its reason replaces "reason withheld". cp2 has no per-check endpoint:
// its line stays as the body gave it.
func TestReadyzReasons(t *testing.T) {
	f := newFakeCluster(t)
	mux := http.NewServeMux()
	healthz.InstallReadyzHandler(mux, healthz.PingHealthz,
		healthz.NamedCheck("etcd", func(*http.Request) error { return errors.New("etcd client connection not yet established") }),
		healthz.NamedCheck("poststarthook/rbac/bootstrap-roles", func(*http.Request) error { return errors.New("not finished") }))
	f.serve(t, "cp1", mux.ServeHTTP)
	f.serve(t, "cp2", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, "[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed\n")
	})
	got := APIServers(context.Background(), f.target(), f.kubeconfig())
	if want := "etcd failed: etcd client connection not yet established;poststarthook/rbac/bootstrap-roles failed: not finished"; strings.Join(got[0].Failed, ";") != want || got[0].OK {
		t.Errorf("cp1: failed %q, want %q", got[0].Failed, want)
	}
	if want := "etcd failed: reason withheld"; strings.Join(got[1].Failed, ";") != want {
		t.Errorf("cp2: failed %q, want %q", got[1].Failed, want)
	}
	if seen := strings.Join(f.seen, "\n"); !strings.Contains(seen, "cp1 admin /readyz/etcd") || !strings.Contains(seen, "cp1 admin /readyz/poststarthook/rbac/bootstrap-roles") {
		t.Errorf("server saw:\n%s\nwant the per-check endpoints asked", seen)
	}
}
