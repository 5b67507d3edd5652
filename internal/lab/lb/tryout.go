package lb

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// apiThroughLB tries what lab 06 exists to make work: one address for the
// API (https://lb:6443) that reaches the apiservers, and HAProxy sending
// new connections to every apiserver that is ready, so that losing one
// control plane is invisible to clients. It asks each apiserver's /readyz
// directly, sends two requests per control plane through the load
// balancer (each on a new connection: HAProxy balances connections, not
// requests), and reads HAProxy's own view of its servers from its stats
// page (https://docs.haproxy.org/2.8/management.html#9.1). A failure is
// named with the cause read there: the server's state and its last health
// check. Nothing is reported when no apiserver is ready (lab 05's check
// says why).
func apiThroughLB(e *labcheck.Env) ([]labcheck.Mistake, error) {
	lb, ok := e.Cluster.LB()
	if e.Live == nil || e.Live.Admin == nil || !ok {
		return nil, nil
	}
	t := e.Live.Target
	ctx, cancel := context.WithTimeout(e.Ctx, t.Scaled(30*time.Second, 2*time.Minute))
	defer cancel()
	cps := e.Cluster.ControlPlanes()
	var ready []config.Node
	var notReady []string
	for _, n := range cps {
		if r := health.ReadyzOf(ctx, t, e.Live.AdminKubeconfig, n.Name); r.OK {
			ready = append(ready, n)
		} else {
			notReady = append(notReady, n.Name+": "+r.Problem())
		}
	}
	if len(ready) == 0 {
		return nil, nil
	}
	h := haView{e: e, lb: lb, port: strconv.Itoa(e.Cluster.Kubernetes.APIServerPort)}
	h.read(ctx)
	tries, failed, last := 2*len(cps), 0, ""
	for range tries {
		if r := health.ReadyzOf(ctx, t, e.Live.AdminKubeconfig, lb.Name); !r.OK {
			failed++
			last = r.Problem()
		}
	}
	var out []labcheck.Mistake
	if failed > 0 {
		// A certificate that does not name the load balancer fails only
		// the connections HAProxy sends to that apiserver: name it.
		var unnamed []labcheck.Mistake
		if strings.Contains(last, "x509") {
			unnamed = certsWithoutName(ctx, e, cps, lb.Name, h.port)
		}
		if len(unnamed) > 0 {
			out = append(out, unnamed...)
		} else {
			ev := h.summary()
			if len(notReady) > 0 {
				ev += "; not ready when asked directly: " + strings.Join(notReady, "; ")
			}
			out = append(out, labcheck.Mistake{Node: lb.Name, Lab: labid.LB, Kind: grade.Breaks, Subject: "API through " + lb.Name,
				What: fmt.Sprintf("%d of %d API requests through https://%s:%s failed (last: %s) although the apiservers of %s answer ready directly",
					failed, tries, lb.Name, h.port, last, names(ready)),
				Evidence: ev,
				Fix:      "make HAProxy on " + lb.Name + " pass the apiserver port through (mode tcp) to a server line per control plane with a check that passes (khw lab 06's haproxy.cfg), then systemctl reload haproxy"})
		}
	}
	if h.err != nil {
		return out, nil
	}
	// A server that has just come back is DOWN until rise checks passed:
	// look again after that long before calling it a mistake.
	if len(h.outOfRotation(ready)) > 0 {
		select {
		case <-time.After(t.Scaled(5*time.Second, 20*time.Second)):
		case <-ctx.Done():
			return out, nil
		}
		h.read(ctx)
		if h.err != nil {
			return out, nil
		}
	}
	// While a check runs, HAProxy shows the last result without its HTTP
	// code or text: read again until the servers named are at rest.
	for try := 0; try < 5 && h.checkRunning(ready); try++ {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return out, nil
		}
		h.read(ctx)
		if h.err != nil {
			return out, nil
		}
	}
	for _, n := range h.outOfRotation(ready) {
		out = append(out, h.mistake(n))
	}
	return out, nil
}

// haView is HAProxy's view of its servers, read from its stats page on lb.
type haView struct {
	e       *labcheck.Env
	lb      config.Node
	port    string
	servers []health.HAProxyServer
	err     error
}

func (h *haView) read(ctx context.Context) {
	if h.e.Live.DialFrom == nil {
		h.servers, h.err = nil, fmt.Errorf("no connection to %s", h.lb.Name)
		return
	}
	h.servers, h.err = health.ReadHAProxyStats(ctx, h.e.Live.DialFrom(h.lb))
}

// checkRunning reports whether a health check was under way at any
// server that keeps one of the ready control planes out of rotation.
func (h *haView) checkRunning(ready []config.Node) bool {
	for _, n := range h.outOfRotation(ready) {
		if s, ok := h.serverOf(n); ok && s.CheckRunning {
			return true
		}
	}
	return false
}

// serverOf is the active server at control plane n's apiserver address
// (by the addr column, else by name when HAProxy does not list addresses).
func (h *haView) serverOf(n config.Node) (health.HAProxyServer, bool) {
	addr := net.JoinHostPort(n.IP, h.port)
	for _, s := range h.servers {
		if !s.Backup && (s.Addr == addr || (s.Addr == "" && s.Name == n.Name)) {
			return s, true
		}
	}
	return health.HAProxyServer{}, false
}

// outOfRotation is the ready control planes to which HAProxy sends no new
// connection: no server at their address, or one that is down (not one
// that is coming up, "DOWN 1/2").
func (h *haView) outOfRotation(ready []config.Node) []config.Node {
	var out []config.Node
	for _, n := range ready {
		if s, ok := h.serverOf(n); !ok || (!s.Up() && !strings.HasPrefix(s.Status, "DOWN ")) {
			out = append(out, n)
		}
	}
	return out
}

// mistake says that HAProxy keeps ready control plane n out of rotation,
// and why, from its server's state and last check.
func (h *haView) mistake(n config.Node) labcheck.Mistake {
	m := labcheck.Mistake{Node: h.lb.Name, Lab: labid.LB, Kind: grade.Breaks, Subject: "HAProxy server " + n.Name, Evidence: h.summary()}
	addr := net.JoinHostPort(n.IP, h.port)
	s, ok := h.serverOf(n)
	if !ok {
		for _, other := range h.servers {
			if !other.Backup && other.Name == n.Name && other.Addr != "" {
				m.What = fmt.Sprintf("HAProxy sends no API request to %s, whose apiserver is ready: its server %s points at %s, not at %s, so losing another control plane takes more of the API away than it should", n.Name, other.Name, other.Addr, addr)
				m.Fix = fmt.Sprintf("change server %s's address to %s in /etc/haproxy/haproxy.cfg, then systemctl reload haproxy", other.Name, addr)
				return m
			}
		}
		m.What = fmt.Sprintf("HAProxy sends no API request to %s, whose apiserver is ready: no active server is at %s (a backup server takes traffic only when every active one is down), so losing another control plane takes more of the API away than it should", n.Name, addr)
		m.Fix = fmt.Sprintf("add `server %s %s check` to the apiservers' backend in /etc/haproxy/haproxy.cfg, then systemctl reload haproxy", n.Name, addr)
		return m
	}
	m.What = fmt.Sprintf("HAProxy keeps %s out of rotation (%s) although its apiserver answers ready: %s", n.Name, s.Status, checkMeaning(s))
	m.Fix = "make the health check of server " + s.Name + " pass (khw lab check 06 reads its settings; khw lab 06's haproxy.cfg has one that does), then systemctl reload haproxy"
	if strings.HasPrefix(s.Check, "L7STS 401") {
		// The check is anonymous; the apiserver answered the admin but
		// not it. With --authorization-mode=AlwaysAllow alone the
		// apiserver turns anonymous authentication off
		// (pkg/kubeapiserver/options/authentication.go, ApplyAuthorization).
		m.Node, m.Lab = n.Name, labid.ControlPlane
		m.What = fmt.Sprintf("HAProxy keeps %s out of rotation (%s): the apiserver on %s refuses HAProxy's anonymous health check with 401 Unauthorized while it answers the admin, so it runs without anonymous authentication (--anonymous-auth=false, or --authorization-mode=AlwaysAllow alone, which turns it off)", n.Name, s.Status, n.Name)
		m.Fix = "run the apiserver on " + n.Name + " with --authorization-mode=Node,RBAC and anonymous authentication on (anonymous may read only /healthz, /livez, /readyz and /version, through the ClusterRole system:public-info-viewer), then systemctl restart kube-apiserver"
	}
	return m
}

// checkMeaning explains a server's last health check (check_status codes:
// https://docs.haproxy.org/2.8/management.html#9.1, column 36).
func checkMeaning(s health.HAProxyServer) string {
	code, _, _ := strings.Cut(s.Check, " ")
	why := map[string]string{
		"L4CON":  "its check cannot connect (nothing listens at the server's address and port)",
		"L4TOUT": "its check's connection times out (a wrong address, or a firewall)",
		"L6RSP":  "its check's TLS handshake fails (check-ssl against something that is not TLS?)",
		"L6TOUT": "its check's TLS handshake times out",
		"L7RSP":  "its check got no valid HTTP answer (an HTTP check without check-ssl reaches the apiserver's TLS port)",
		"L7STS":  "its HTTP check is answered with a status other than the expected one (401/403: a path or user the apiserver refuses; 400: HTTP spoken to the TLS port)",
		"L7TOUT": "its HTTP check gets no answer in time",
		"":       "it is not checked at all",
	}[code]
	if why == "" {
		why = "its last check failed"
	}
	if s.Check != "" {
		why += "; last check " + s.Check
		if s.LastCheck != "" {
			why += " (" + s.LastCheck + ")"
		}
	}
	return why
}

// summary lists HAProxy's servers as evidence: "cp1 192.168.122.11:6443
// UP, cp2 … DOWN (L4CON)", or why they could not be read.
func (h *haView) summary() string {
	if h.err != nil {
		return fmt.Sprintf("HAProxy's stats page on %s (http://%s/stats;csv) could not be read: %s", h.lb.Name, health.HAProxyStatsAddr, labcheck.OneLine(h.err))
	}
	var parts []string
	for _, s := range h.servers {
		if s.Backup {
			continue
		}
		p := s.Name + " " + s.Status
		if s.Addr != "" {
			p = s.Name + " " + s.Addr + " " + s.Status
		}
		if s.Check != "" && !s.Up() {
			p += " (" + s.Check + ")"
		}
		parts = append(parts, p)
	}
	return "HAProxy on " + h.lb.Name + " (stats page): " + strings.Join(parts, ", ")
}

func names(ns []config.Node) string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return strings.Join(out, ", ")
}

// certsWithoutName connects to each control plane's apiserver port as a
// client of https://<lb>:<port> does (TLS to that name, trusting only the
// cluster CA) and returns a mistake for each whose certificate fails to
// verify: HAProxy passes TLS through, so that apiserver's certificate must
// name the load balancer too.
func certsWithoutName(ctx context.Context, e *labcheck.Env, cps []config.Node, name, port string) []labcheck.Mistake {
	t := e.Live.Target
	base, err := t.ClientTLS()
	if err != nil {
		return nil
	}
	var out []labcheck.Mistake
	for _, n := range cps {
		cctx, cancel := context.WithTimeout(ctx, t.Scaled(5*time.Second, 20*time.Second))
		conn, err := t.Dialer()(cctx, "tcp", net.JoinHostPort(n.IP, port))
		if err != nil {
			cancel()
			continue
		}
		cfg := base.Clone()
		cfg.ServerName = name
		tc := tls.Client(conn, cfg)
		herr := tc.HandshakeContext(cctx)
		tc.Close()
		cancel()
		if herr == nil || !strings.Contains(herr.Error(), "x509") {
			continue
		}
		out = append(out, labcheck.Mistake{Node: n.Name, Lab: labid.PKI, Kind: grade.Breaks, Subject: "apiserver certificate",
			What:     fmt.Sprintf("the apiserver on %s serves a certificate that does not name %s: HAProxy passes TLS through, so every client of https://%s:%s that HAProxy sends to %s fails to verify it", n.Name, name, name, port, n.Name),
			Evidence: fmt.Sprintf("TLS to %s with server name %s: %s", net.JoinHostPort(n.IP, port), name, labcheck.OneLine(herr)),
			Fix:      fmt.Sprintf("issue the kubernetes certificate with %s among its SANs (khw lab check 02 lists what it lacks), install it on %s and restart kube-apiserver", name, n.Name)})
	}
	return out
}
