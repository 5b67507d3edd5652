package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/remote"
)

// Probe schedule. Every signal is sent on its own ticker, so a slow answer
// (an apiserver waiting 7 s on an etcd without quorum) does not lower the
// sampling rate: up to maxInFlight probes of one signal run at once, and a
// tick that finds them all busy is counted as skipped rather than queued.
//
// These are the values for nspawn and KVM nodes. On emulated nodes (TCG
// VMs, Prober.Emulated) the prober samples less often and waits longer
// (Prober.Every and the methods below): a TCG control plane answers
// /readyz in ~0.2 s when idle, but two requests per signal per second, each
// on a new TLS connection, keep its emulated CPUs busy until every answer
// is late and the drill measures its own load instead of the cluster.
const (
	// Interval is the period of every probe: at least two samples per
	// second of each signal.
	Interval = 500 * time.Millisecond
	// APITimeout bounds one API request through the load balancer: long
	// enough to see etcd's own "request timed out" (which comes after about
	// 5–7 s) instead of our client's deadline.
	APITimeout = 15 * time.Second
	// APISlow: an API request that succeeds but takes longer than this
	// counts as failed ("unavailable"): an apiserver waiting for an etcd
	// without quorum holds requests and answers them only after the heal.
	APISlow = 5 * time.Second
	// WorkloadTimeout bounds one HTTP request to the web pod, and one to
	// HAProxy's stats page.
	WorkloadTimeout = 2 * time.Second
)

// Workload names: the drill's namespace, the DaemonSet and Service of its web
// pods, and the ConfigMap the API write probe patches.
const (
	Namespace   = "khw-drill"
	WebName     = "web"
	ProbeCMName = "probe"
	WebPort     = 8080
	// HAProxyBackend is the backend of haproxy.cfg that holds the apiservers.
	HAProxyBackend = "kube-apiservers"
)

// Prober samples the signals of a cluster from the jumpbox.
type Prober struct {
	// Cluster is cluster.yaml.
	Cluster *config.Cluster
	// Target reaches the nodes (Target.Dial set to the provider's Dialer) and
	// holds the PKI directory for the admin client certificate.
	Target health.Target
	// AdminKubeconfig is <state>/kubeconfigs/admin.kubeconfig (for the Lease
	// and /readyz probes of package health).
	AdminKubeconfig string
	// LBDial opens a TCP connection from the load balancer node to an
	// address on it (remote.Client.DialContext of the lb's SSH client); nil
	// skips the HAProxy signal.
	LBDial remote.DialFunc
	// NodePort is the web Service's node port; 0 skips the workload signal.
	NodePort int
	// Workers are the workers whose web pod the workload signal asks.
	Workers []config.Node
	// ReadOnly skips the api-write signal: for an operation that must not
	// write to the cluster while it runs (an etcd restore would drop the
	// probe's ConfigMap, or its namespace, with everything else written
	// after the snapshot).
	ReadOnly bool

	client *http.Client
	seq    int64
	mu     sync.Mutex

	// flights: launch time of each probe whose sample has not been
	// observed yet (Done), by number.
	flightMu sync.Mutex
	flights  map[uint64]time.Time
	lastID   uint64
}

// launch records a probe that starts now and returns its number.
func (p *Prober) launch() uint64 {
	p.flightMu.Lock()
	defer p.flightMu.Unlock()
	if p.flights == nil {
		p.flights = map[uint64]time.Time{}
	}
	p.lastID++
	p.flights[p.lastID] = time.Now()
	return p.lastID
}

// Done says that the probe which made s is over: its sample was observed
// (or dropped). Run's consumer calls it after it has taken s into account.
func (p *Prober) Done(s Sample) {
	p.flightMu.Lock()
	defer p.flightMu.Unlock()
	delete(p.flights, s.flight)
}

// InFlightSince returns when the oldest probe still in flight (launched,
// its sample not yet Done) started, and false when none is. No sample
// observed later can be older than that (a sample's At is taken after its
// launch), so events before it can be printed in their final order.
func (p *Prober) InFlightSince() (time.Time, bool) {
	p.flightMu.Lock()
	defer p.flightMu.Unlock()
	var oldest time.Time
	for _, t := range p.flights {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	return oldest, !oldest.IsZero()
}

// Init builds the HTTP client: admin certificate, cluster CA, and a new TCP
// connection per request (keep-alives off), so every API sample goes through
// HAProxy's choice of backend like a new kubectl would. Errors come from
// loading the PKI files.
func (p *Prober) Init() error {
	tlsCfg, err := p.Target.ClientTLS()
	if err != nil {
		return err
	}
	p.client = &http.Client{Transport: &http.Transport{
		DialContext:       p.Target.Dialer(),
		TLSClientConfig:   tlsCfg,
		DisableKeepAlives: true,
		ForceAttemptHTTP2: false,
	}}
	return nil
}

type schedule struct {
	sig      Signal
	every    time.Duration
	inFlight int
	probe    func(ctx context.Context) Sample
}

// Emulated reports whether the prober samples emulated nodes: a
// Target.Slowdown above 3, the factor of KVM VMs (their CPUs run at native
// speed; their factor is for boots and service starts), so TCG VMs. Those
// get the slower pace of the methods below; nspawn and KVM nodes the
// constants above.
func (p *Prober) Emulated() bool { return p.Target.Slowdown > 3 }

// pace returns d on native nodes and d×k on emulated ones.
func (p *Prober) pace(d time.Duration, k int) time.Duration {
	if p.Emulated() {
		return d * time.Duration(k)
	}
	return d
}

// Every is the period of every probe: Interval, 4× (2 s) on emulated nodes.
func (p *Prober) Every() time.Duration { return p.pace(Interval, 4) }

// apiTimeout and apiSlow are APITimeout and APISlow, 2× on emulated nodes;
// stepTimeout bounds one workload or HAProxy stats request (2 s, 4 s on
// emulated nodes).
func (p *Prober) apiTimeout() time.Duration  { return p.pace(APITimeout, 2) }
func (p *Prober) apiSlow() time.Duration     { return p.pace(APISlow, 2) }
func (p *Prober) stepTimeout() time.Duration { return p.pace(WorkloadTimeout, 2) }

func (p *Prober) schedules() []schedule {
	every := p.Every()
	s := []schedule{
		{SigAPIRead, every, 40, p.apiRead},
		{SigEtcd, every, 3, p.etcd},
		{SigAPIServers, every, 3, p.apiServers},
		{SigLeases, every, 3, p.leases},
		{SigNodes, every, 3, p.nodes},
	}
	if !p.ReadOnly {
		s = slices.Insert(s, 1, schedule{SigAPIWrite, every, 40, p.apiWrite})
	}
	if p.LBDial != nil {
		s = append(s, schedule{SigHAProxy, every, 3, p.haproxy})
	}
	if p.NodePort > 0 && len(p.Workers) > 0 {
		s = append(s, schedule{SigWorkload, every, 4, p.workload})
	}
	return s
}

// Run samples every signal until ctx ends and sends each Sample to out as
// it completes (so samples of one signal may arrive slightly out of At
// order). It returns when ctx is done and every probe in flight has
// returned; it never closes out.
func (p *Prober) Run(ctx context.Context, out chan<- Sample) {
	var wg sync.WaitGroup
	for _, sc := range p.schedules() {
		wg.Add(1)
		go func(sc schedule) {
			defer wg.Done()
			sem := make(chan struct{}, sc.inFlight)
			var inner sync.WaitGroup
			t := time.NewTicker(sc.every)
			defer t.Stop()
			for {
				select {
				case sem <- struct{}{}:
					inner.Add(1)
					go func() {
						defer inner.Done()
						defer func() { <-sem }()
						id := p.launch()
						s := sc.probe(ctx)
						s.Signal, s.flight = sc.sig, id
						if ctx.Err() != nil && !s.OK {
							p.Done(s)
							return // cut short by the end of the drill, not by the cluster
						}
						select {
						case out <- s:
						case <-ctx.Done():
							p.Done(s)
						}
					}()
				default:
				}
				select {
				case <-ctx.Done():
					inner.Wait()
					return
				case <-t.C:
				}
			}
		}(sc)
	}
	wg.Wait()
}

func (p *Prober) lbURL(path string) string {
	port := p.Cluster.Kubernetes.APIServerPort
	if port == 0 {
		port = health.DefaultAPIServerPort
	}
	lb := "lb"
	if n, ok := p.Cluster.LB(); ok {
		lb = n.Name
	}
	return "https://" + net.JoinHostPort(lb, strconv.Itoa(port)) + path
}

// do sends one request through the load balancer and returns the sample.
func (p *Prober) do(ctx context.Context, method, path, contentType string, body []byte) (Sample, []byte) {
	s := Sample{At: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, p.apiTimeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.lbURL(path), bytes.NewReader(body))
	if err != nil {
		s.Err = err.Error()
		return s, nil
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := p.client.Do(req)
	s.Latency = time.Since(s.At)
	if err != nil {
		s.Err = oneLine(err.Error())
		return s, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	s.Latency = time.Since(s.At)
	if resp.StatusCode/100 != 2 {
		s.Err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, statusMessage(data))
		return s, nil
	}
	if slow := p.apiSlow(); s.Latency > slow {
		s.Err = fmt.Sprintf("answered only after %s (slower than %s counts as unavailable)", fmtDur(s.Latency), slow)
		return s, data
	}
	s.OK = true
	return s, data
}

// statusMessage is the message of a Kubernetes Status body
// ({"kind":"Status","message":"etcdserver: request timed out"}), else the
// start of the body.
func statusMessage(body []byte) string {
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return oneLine(st.Message)
	}
	return oneLine(shorten(string(body), 200))
}

func (p *Prober) apiRead(ctx context.Context) Sample {
	s, _ := p.do(ctx, http.MethodGet, "/api/v1/namespaces/kube-system", "", nil)
	return s
}

func (p *Prober) apiWrite(ctx context.Context) Sample {
	p.mu.Lock()
	p.seq++
	n := p.seq
	p.mu.Unlock()
	body := fmt.Sprintf(`{"data":{"seq":"%d","at":"%s"}}`, n, time.Now().UTC().Format(time.RFC3339Nano))
	s, _ := p.do(ctx, http.MethodPatch, "/api/v1/namespaces/"+Namespace+"/configmaps/"+ProbeCMName, "application/merge-patch+json", []byte(body))
	return s
}

func (p *Prober) etcd(ctx context.Context) Sample {
	s := Sample{At: time.Now()}
	rep, err := health.Etcd(ctx, p.Target)
	s.Latency = time.Since(s.At)
	if rep != nil {
		s.Etcd = &EtcdState{Leader: rep.Leader, Term: rep.RaftTerm, Healthy: rep.Healthy, Quorum: rep.Quorum}
		s.Parts = map[string]string{}
		for _, e := range rep.Endpoints {
			s.Parts[e.Node] = e.Err
		}
	}
	switch {
	case err != nil:
		s.Err = oneLine(err.Error())
	case rep.Leader == "" || !rep.Quorum:
		s.Err = fmt.Sprintf("no leader: %d of %d members healthy, quorum needs %d", rep.Healthy, rep.Size, rep.QuorumSize)
	case rep.Healthy < rep.Size:
		s.Err = fmt.Sprintf("%d of %d members healthy (quorum kept, leader %s)", rep.Healthy, rep.Size, rep.Leader)
	default:
		s.OK = true
	}
	return s
}

func (p *Prober) apiServers(ctx context.Context) Sample {
	s := Sample{At: time.Now(), Parts: map[string]string{}}
	all := health.APIServers(ctx, p.Target, p.AdminKubeconfig)
	s.Latency = time.Since(s.At)
	var bad []string
	for _, r := range all {
		if lb, ok := p.Cluster.LB(); ok && r.Target == lb.Name {
			continue // the load balancer is the api-read signal's job
		}
		why := ""
		if !r.OK {
			why = r.Err
			if why == "" {
				why = strings.Join(r.Failed, ",")
			}
			if why == "" {
				why = fmt.Sprintf("HTTP %d", r.HTTPStatus)
			}
			bad = append(bad, r.Target+": "+oneLine(why))
		}
		s.Parts[r.Target] = oneLine(why)
	}
	if len(bad) == 0 {
		s.OK = true
	} else {
		s.Err = strings.Join(bad, "; ")
	}
	return s
}

func (p *Prober) leases(ctx context.Context) Sample {
	s := Sample{At: time.Now()}
	ls, err := health.Leases(ctx, p.Target, p.AdminKubeconfig)
	s.Latency = time.Since(s.At)
	if err != nil {
		s.Err = oneLine(err.Error())
		return s
	}
	s.Leases = map[string]LeaseState{}
	var stale []string
	for _, l := range ls {
		s.Leases[l.Name] = LeaseState{Holder: l.HolderNode, Transitions: l.Transitions, Fresh: l.Fresh}
		if !l.Found || !l.Fresh {
			stale = append(stale, l.Name)
		}
	}
	if len(stale) == 0 {
		s.OK = true
	} else {
		s.Err = "not renewed within the lease duration: " + strings.Join(stale, ", ")
	}
	return s
}

func (p *Prober) nodes(ctx context.Context) Sample {
	s, data := p.do(ctx, http.MethodGet, "/api/v1/nodes", "", nil)
	if !s.OK {
		return s
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Status struct {
				Conditions []struct {
					Type   string `json:"type"`
					Status string `json:"status"`
				} `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		s.OK, s.Err = false, "decode the node list: "+err.Error()
		return s
	}
	s.Parts = map[string]string{}
	var notReady []string
	for _, n := range list.Items {
		st := "Unknown"
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" {
				switch c.Status {
				case "True":
					st = "Ready"
				case "False":
					st = "NotReady"
				}
			}
		}
		s.Parts[n.Metadata.Name] = st
		if st != "Ready" {
			notReady = append(notReady, n.Metadata.Name+" "+st)
		}
	}
	if len(notReady) > 0 {
		sort.Strings(notReady)
		s.OK, s.Err = false, strings.Join(notReady, ", ")
	}
	return s
}

func (p *Prober) haproxy(ctx context.Context) Sample {
	s := Sample{At: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, p.stepTimeout())
	defer cancel()
	servers, err := health.ReadHAProxyStats(ctx, p.LBDial)
	s.Latency = time.Since(s.At)
	if err == nil {
		s.Parts, err = backendStatus(servers, HAProxyBackend)
	}
	if err != nil {
		s.Err = oneLine(err.Error())
		return s
	}
	var down []string
	for name, st := range s.Parts {
		if st != "UP" {
			down = append(down, name+" "+st)
		}
	}
	sort.Strings(down)
	if len(down) == 0 {
		s.OK = true
	} else {
		s.Err = strings.Join(down, ", ")
	}
	return s
}

// backendStatus is server name → status ("UP", "DOWN", "UP 1/2", "MAINT",
// "no check") of the active servers of backend; backup servers (khw's
// unchecked last-resort entries) are left out. Errors: no server of that
// backend.
func backendStatus(servers []health.HAProxyServer, backend string) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range servers {
		if s.Backend == backend && !s.Backup {
			out[s.Name] = s.Status
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("HAProxy stats list no server in backend %q", backend)
	}
	return out, nil
}

func (p *Prober) workload(ctx context.Context) Sample {
	s := Sample{At: time.Now(), Parts: map[string]string{}}
	type res struct {
		node, err string
	}
	ch := make(chan res, len(p.Workers))
	for _, w := range p.Workers {
		go func(w config.Node) {
			ch <- res{w.Name, p.web(ctx, w)}
		}(w)
	}
	var bad []string
	for range p.Workers {
		r := <-ch
		s.Parts[r.node] = r.err
		if r.err != "" {
			bad = append(bad, r.node+": "+r.err)
		}
	}
	s.Latency = time.Since(s.At)
	sort.Strings(bad)
	if len(bad) == 0 {
		s.OK = true
	} else {
		s.Err = strings.Join(bad, "; ")
	}
	return s
}

// web asks worker w's node port for /hostname; "" when a pod answered.
func (p *Prober) web(ctx context.Context, w config.Node) string {
	ctx, cancel := context.WithTimeout(ctx, p.stepTimeout())
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DialContext: p.Target.Dialer(), DisableKeepAlives: true}}
	url := "http://" + net.JoinHostPort(w.Addr().String(), strconv.Itoa(p.NodePort)) + "/hostname"
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := client.Do(req)
	if err != nil {
		return oneLine(err.Error())
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || len(bytes.TrimSpace(body)) == 0 {
		return fmt.Sprintf("HTTP %d %q", resp.StatusCode, shorten(string(body), 60))
	}
	return ""
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
