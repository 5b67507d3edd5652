package health

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/khw-dev/khw/internal/kube"
)

// Readyz is the answer of one apiserver's GET /readyz?verbose.
type Readyz struct {
	// Target is the control-plane node name (cp1 …) for a direct request,
	// or the load balancer's node name (lb) for the request through it.
	Target string `json:"target"`
	// URL is the base URL asked (https://cp1:6443, https://lb:6443).
	URL string `json:"url"`
	// OK is true for HTTP 200: every readiness check passed.
	OK bool `json:"ok"`
	// HTTPStatus is the response's status code, 0 when there was none.
	HTTPStatus int `json:"httpStatus,omitempty"`
	// Failed lists the failing checks, e.g. "etcd failed: etcd client
	// connection not yet established": the verbose body says only "reason
	// withheld" (the endpoint is public), so each failing check's own
	// endpoint, /readyz/<check>, is asked for its reason (readyzReasons);
	// a check whose reason cannot be read keeps "reason withheld".
	Failed []string `json:"failed,omitempty"`
	// Err is why the request failed (connect, TLS, timeout) or, for a
	// non-200 answer without failed checks, the status and body.
	Err string `json:"error,omitempty"`
	// Latency is the time of the request, connection and TLS handshake
	// included (JSON: nanoseconds).
	Latency time.Duration `json:"latencyNs"`
}

// APIServers GETs /readyz?verbose from every control plane directly
// (https://<cp name>:<port>, the name resolved by Target.Dialer and verified
// by TLS) and through the load balancer (https://<lb name>:<port>), all in
// parallel, each bounded by HTTPTimeout (longer on slow nodes, Target.Slowdown). It authenticates with the user of
// kubeconfigPath (<state>/kubeconfigs/admin.kubeconfig), whose server URL is
// replaced per target.
//
// The result has one entry per control plane in cluster.yaml order, then
// the load balancer (when the cluster has one). Failures are in the entries
// (Err, Failed), never dropped. /readyz is the apiserver's readiness
// endpoint: it fails while the apiserver cannot reach etcd or is still
// starting (https://kubernetes.io/docs/reference/using-api/health-checks/).
func APIServers(ctx context.Context, t Target, kubeconfigPath string) []Readyz {
	type target struct{ name, url string }
	var targets []target
	if t.Cluster != nil {
		for _, n := range t.Cluster.ControlPlanes() {
			targets = append(targets, target{n.Name, t.apiServerURL(n.Name)})
		}
		if lb, ok := t.Cluster.LB(); ok {
			targets = append(targets, target{lb.Name, t.apiServerURL(lb.Name)})
		}
	}
	out := make([]Readyz, len(targets))
	base, err := t.restConfig(kubeconfigPath)
	for i, tg := range targets {
		out[i] = Readyz{Target: tg.name, URL: tg.url}
		if err != nil {
			out[i].Err = errText(err)
		}
	}
	if err != nil {
		return out
	}
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			readyz(ctx, base, &out[i])
		}()
	}
	wg.Wait()
	return out
}

// restConfig loads kubeconfigPath and routes it through t.Dialer, without
// proxies (the cluster is reachable only directly), with HTTPTimeout (longer on slow nodes, Target.Slowdown).
func (t Target) restConfig(kubeconfigPath string) (*rest.Config, error) {
	if err := t.requireCluster(); err != nil {
		return nil, err
	}
	cfg, err := kube.RESTConfig(kubeconfigPath, "")
	if err != nil {
		return nil, fmt.Errorf("%w (fix: run `khw kubeconfig`)", err)
	}
	cfg.Dial = t.Dialer()
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	cfg.Timeout = t.httpTimeout()
	cfg.QPS, cfg.Burst = -1, 0 // a handful of requests: no client-side rate limit
	return cfg, nil
}

// forServer copies cfg for base URL server, verifying the certificate
// against server's host name.
func forServer(cfg *rest.Config, server string) (*rest.Config, error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, fmt.Errorf("server URL %q: %w", server, err)
	}
	c := rest.CopyConfig(cfg)
	c.Host = server
	c.ServerName = u.Hostname()
	return c, nil
}

func readyz(ctx context.Context, base *rest.Config, r *Readyz) {
	cfg, err := forServer(base, r.URL)
	if err != nil {
		r.Err = errText(err)
		return
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		r.Err = errText(err)
		return
	}
	defer hc.CloseIdleConnections()
	timeout := base.Timeout // restConfig's, scaled for slow nodes
	if timeout <= 0 {
		timeout = HTTPTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(r.URL, "/")+"/readyz?verbose", nil)
	if err != nil {
		r.Err = errText(err)
		return
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		r.Latency = time.Since(start)
		// The row already names the URL: keep the cause only.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		r.Err = errText(err)
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	r.Latency = time.Since(start)
	r.HTTPStatus = resp.StatusCode
	r.OK = resp.StatusCode == http.StatusOK
	if err != nil {
		r.OK = false
		r.Err = "read body: " + errText(err)
		return
	}
	r.Failed = readyzReasons(ctx, hc, r.URL, FailedChecks(body))
	if !r.OK && len(r.Failed) == 0 {
		r.Err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, shorten(strings.Join(strings.Fields(string(body)), " "), 200))
	}
}

// withheld ends a failing check's line in a verbose /readyz body: the
// apiserver logs the reason but does not print it there
// (k8s.io/apiserver/pkg/server/healthz, handleRootHealth).
const withheld = " failed: reason withheld"

// readyzReasons asks each failing check's own endpoint, GET
// /readyz/<check>, which answers "internal server error: <reason>"
// (healthz.go, adaptCheckToHandler), and puts the reason in place of
// "reason withheld". Lines that do not parse, and checks whose endpoint
// does not answer with a reason, are kept as they are.
func readyzReasons(ctx context.Context, hc *http.Client, base string, failed []string) []string {
	out := slices.Clone(failed)
	for i, f := range failed {
		name, ok := strings.CutSuffix(f, withheld)
		if !ok || name == "" {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/readyz/"+name, nil)
		if err != nil {
			continue
		}
		resp, err := hc.Do(req)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		reason, ok := strings.CutPrefix(strings.TrimSpace(string(body)), "internal server error: ")
		if resp.StatusCode == http.StatusInternalServerError && ok && reason != "" {
			out[i] = name + " failed: " + shorten(strings.Join(strings.Fields(reason), " "), 300)
		}
	}
	return out
}

// FailedChecks returns the failing checks of a verbose /readyz or /livez
// body: each line "[-]<check> failed: <reason>" becomes "<check> failed:
// <reason>". Passing lines ("[+]ping ok") and the summary line are skipped.
// The format is written by k8s.io/apiserver/pkg/server/healthz (healthz.go,
// handleRootHealth).
func FailedChecks(body []byte) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "[-]"); ok {
			out = append(out, rest)
		}
	}
	return out
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// LeaseNames are the leader-election Leases Leases reads, all in
// kube-system: one per component started with --leader-elect=true.
var LeaseNames = []string{"kube-controller-manager", "kube-scheduler"}

// Lease is the state of one leader-election Lease
// (coordination.k8s.io/v1, namespace kube-system).
type Lease struct {
	// Name is the Lease (and component) name.
	Name string `json:"name"`
	// Found is false when the Lease does not exist: the component has never
	// won an election (not started, or cannot reach the apiserver).
	Found bool `json:"found"`
	// Holder is spec.holderIdentity as written by client-go's leader
	// election: "<hostname>_<uuid>" (a new uuid each time the process
	// starts). HolderNode is the hostname part, mapped to the node name of
	// cluster.yaml when it is one (cp2.kubernetes.local → cp2).
	Holder     string `json:"holder"`
	HolderNode string `json:"holderNode"`
	// RenewTime is spec.renewTime: the leader renews it every retry period
	// (2 s by default) while it leads.
	RenewTime time.Time `json:"renewTime"`
	// Transitions is spec.leaseTransitions: how many times the Lease
	// changed hands.
	Transitions int32 `json:"transitions"`
	// DurationSeconds is spec.leaseDurationSeconds (15 by default): how
	// long the others wait after the last renewal before taking over.
	DurationSeconds int32 `json:"durationSeconds"`
	// Fresh is RenewTime + DurationSeconds > now, now being the answering
	// apiserver's clock (its HTTP Date header; the jumpbox's clock when the
	// answer has none): the holder is still leading. A stale Lease means
	// the leader is gone and no other instance has taken over yet. The
	// leader writes RenewTime with its node's clock, which can drift from
	// the jumpbox's (an emulated VM's by minutes), not from its own
	// apiserver's; client-go's leader election likewise never compares a
	// renewTime with another machine's clock (leaderelection.go keeps an
	// observedTime of its own).
	Fresh bool `json:"fresh"`
}

// Leases reads the Leases named in LeaseNames from kube-system through the
// load balancer (https://<lb name>:<port>; the kubeconfig's own server when
// the cluster has no load balancer), authenticating as kubeconfigPath's user.
// Both are read in parallel, each bounded by HTTPTimeout (longer on slow nodes, Target.Slowdown), and returned in
// LeaseNames order. A Lease that does not exist is returned with Found false.
// err is non-nil when the kubeconfig cannot be loaded or a GET failed for
// another reason than NotFound; the Leases that could be read are still
// returned.
//
// Leader election with Leases: k8s.io/client-go/tools/leaderelection
// (resourcelock/leaselock.go) and
// https://kubernetes.io/docs/concepts/architecture/leases/.
func Leases(ctx context.Context, t Target, kubeconfigPath string) ([]Lease, error) {
	server := ""
	if lb, ok := t.Cluster.LB(); ok {
		server = t.apiServerURL(lb.Name)
	}
	return LeasesFrom(ctx, t, kubeconfigPath, server)
}

// LeasesFrom is Leases asking the apiserver at server (e.g.
// "https://cp1:6443", before the load balancer exists); "" means the
// kubeconfig's own server.
func LeasesFrom(ctx context.Context, t Target, kubeconfigPath, server string) ([]Lease, error) {
	cfg, err := t.restConfig(kubeconfigPath)
	if err != nil {
		return nil, err
	}
	if server != "" {
		if cfg, err = forServer(cfg, server); err != nil {
			return nil, err
		}
	}
	clock := &serverClock{dates: map[string]time.Time{}}
	cfg.Wrap(clock.wrap)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	leases := make([]*Lease, len(LeaseNames))
	errs := make([]error, len(LeaseNames))
	var wg sync.WaitGroup
	for i, name := range LeaseNames {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gctx, cancel := context.WithTimeout(ctx, t.httpTimeout())
			defer cancel()
			l, err := cs.CoordinationV1().Leases(metav1.NamespaceSystem).Get(gctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				leases[i] = &Lease{Name: name}
			case err != nil:
				var ue *url.Error
				if errors.As(err, &ue) {
					err = ue.Err
				}
				errs[i] = fmt.Errorf("get Lease kube-system/%s via %s: %w", name, cfg.Host, err)
			default:
				lease := t.leaseFrom(l, clock.now(name))
				leases[i] = &lease
			}
		}()
	}
	wg.Wait()
	var out []Lease
	for _, l := range leases {
		if l != nil {
			out = append(out, *l)
		}
	}
	return out, errors.Join(errs...)
}

// serverClock keeps the Date header of each response by request path: the
// answering server's clock at that moment (1 s resolution).
type serverClock struct {
	mu    sync.Mutex
	dates map[string]time.Time
}

func (s *serverClock) wrap(rt http.RoundTripper) http.RoundTripper {
	return clockTransport{s: s, rt: rt}
}

// clockTransport records the Date of each response in s. It names the
// transport it wraps (WrappedRoundTripper), so that client-go can cancel
// a request that timed out through it instead of logging "unable to
// cancel request" for every one.
type clockTransport struct {
	s  *serverClock
	rt http.RoundTripper
}

func (c clockTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if err == nil {
		if d, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
			c.s.mu.Lock()
			c.s.dates[r.URL.Path] = d
			c.s.mu.Unlock()
		}
	}
	return resp, err
}

// WrappedRoundTripper is the wrapped transport (k8s.io/apimachinery's
// net.RoundTripperWrapper).
func (c clockTransport) WrappedRoundTripper() http.RoundTripper { return c.rt }

// now is the server's time of the answer for the Lease name (kube-system),
// or the jumpbox's clock when the answer carried no Date.
func (s *serverClock) now(name string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.dates["/apis/coordination.k8s.io/v1/namespaces/"+metav1.NamespaceSystem+"/leases/"+name]; ok {
		return d
	}
	return time.Now()
}

// leaseFrom summarizes l as seen at now.
func (t Target) leaseFrom(l *coordinationv1.Lease, now time.Time) Lease {
	out := Lease{Name: l.Name, Found: true}
	if h := l.Spec.HolderIdentity; h != nil {
		out.Holder = *h
		out.HolderNode = t.nodeName(HolderHost(*h))
	}
	if l.Spec.RenewTime != nil {
		out.RenewTime = l.Spec.RenewTime.Time
	}
	if l.Spec.LeaseTransitions != nil {
		out.Transitions = *l.Spec.LeaseTransitions
	}
	if l.Spec.LeaseDurationSeconds != nil {
		out.DurationSeconds = *l.Spec.LeaseDurationSeconds
	}
	out.Fresh = out.Holder != "" && !out.RenewTime.IsZero() && out.DurationSeconds > 0 &&
		out.RenewTime.Add(time.Duration(out.DurationSeconds)*time.Second).After(now)
	return out
}

// HolderHost returns the hostname part of a leader-election holder
// identity: kube-controller-manager and kube-scheduler use
// "<hostname>_<uuid>" (cmd/kube-controller-manager/app/controllermanager.go:
// id + "_" + uuid). An identity without "_" is returned whole.
func HolderHost(holder string) string {
	if i := strings.LastIndexByte(holder, '_'); i > 0 {
		return holder[:i]
	}
	return holder
}

// ReadyzOf is one request of APIServers: GET /readyz?verbose from node
// name's apiserver port (a control plane directly, or the load balancer) on
// a new connection, as the user of kubeconfigPath.
func ReadyzOf(ctx context.Context, t Target, kubeconfigPath, name string) Readyz {
	r := Readyz{Target: name, URL: t.apiServerURL(name)}
	base, err := t.restConfig(kubeconfigPath)
	if err != nil {
		r.Err = errText(err)
		return r
	}
	readyz(ctx, base, &r)
	return r
}

// Problem is why r is not ready, in one line: the failed checks, or the
// error.
func (r Readyz) Problem() string {
	if len(r.Failed) > 0 {
		return strings.Join(r.Failed, "; ")
	}
	if r.Err != "" {
		return r.Err
	}
	if !r.OK {
		return fmt.Sprintf("HTTP %d", r.HTTPStatus)
	}
	return ""
}
