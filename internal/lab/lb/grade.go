package lb

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// haLine is one configuration line of haproxy.cfg: its words, and the line
// as written (for evidence).
type haLine struct {
	words []string
	text  string
}

// haSection is global, defaults, frontend, backend or listen.
type haSection struct {
	kind, name string
	lines      []haLine
}

// parseHAProxy splits haproxy.cfg into sections. Comments (# to the end of
// the line) and blank lines are dropped; quoting is not interpreted beyond
// what the apiserver checks need.
func parseHAProxy(text string) []haSection {
	var out []haSection
	for _, raw := range strings.Split(text, "\n") {
		l := raw
		if i := strings.Index(l, "#"); i >= 0 {
			l = l[:i]
		}
		w := strings.Fields(l)
		if len(w) == 0 {
			continue
		}
		switch w[0] {
		case "global", "defaults", "frontend", "backend", "listen":
			s := haSection{kind: w[0]}
			if len(w) > 1 {
				s.name = w[1]
			}
			out = append(out, s)
			continue
		}
		if len(out) == 0 {
			continue
		}
		out[len(out)-1].lines = append(out[len(out)-1].lines, haLine{words: w, text: strings.TrimSpace(raw)})
	}
	return out
}

// last returns the last line of the sections starting with the keywords.
func last(secs []*haSection, kw ...string) (haLine, bool) {
	var found haLine
	ok := false
	for _, s := range secs {
		for _, l := range s.lines {
			if len(l.words) >= len(kw) && slices.Equal(l.words[:len(kw)], kw) {
				found, ok = l, true
			}
		}
	}
	return found, ok
}

// Paths the apiserver serves to anonymous clients, through the built-in
// ClusterRole system:public-info-viewer
// (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go); any other
// path answers 401/403 to a health check.
var publicPaths = []string{"/healthz", "/livez", "/readyz", "/version", "/version/"}

// lbHealthCheck parses /etc/haproxy/haproxy.cfg on the load balancer and
// finds a health check of the apiservers that can never pass, or none at
// all: the frontend on the apiserver port must pass TCP through (mode tcp:
// clients speak TLS to the apiservers, whose SANs hold the LB's name), each
// control plane must be a server at its IP and the apiserver port, and an
// HTTP check must speak TLS (check-ssl), either verify against the cluster
// CA or say verify none (HAProxy refuses a verifying check without
// ca-file), GET or HEAD a path anonymous clients may read (/readyz,
// /livez, /healthz) on the apiserver port, and expect 200, while no
// apiserver runs with --anonymous-auth=false (which turns that into 401).
// Upstream: https://docs.haproxy.org/2.8/configuration.html (option
// httpchk, http-check, check-ssl, verify) and
// https://kubernetes.io/docs/reference/using-api/health-checks/.
func lbHealthCheck(e *labcheck.Env) ([]labcheck.Mistake, error) {
	lb, ok := e.Cluster.LB()
	if !ok {
		return nil, nil
	}
	data, found, err := e.Read(lb.Name, haproxyCfg)
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(e.Cluster.Kubernetes.APIServerPort)
	if !found {
		return []labcheck.Mistake{labcheck.Missing(labid.LB, lb.Name, haproxyCfg, "HAProxy's configuration", "apt-get install haproxy, then write the frontend and backend for :"+port)}, nil
	}
	h := &haCheck{e: e, lb: lb, port: port, secs: parseHAProxy(string(data))}
	if m, ok := h.route(); !ok {
		return []labcheck.Mistake{m}, nil
	}
	h.modes()
	h.request()
	if err := h.servers(); err != nil {
		return nil, err
	}
	return h.out, nil
}

// haproxyCfg is HAProxy's configuration on the load balancer.
const haproxyCfg = "/etc/haproxy/haproxy.cfg"

// haCheck is one reading of haproxy.cfg by lbHealthCheck.
type haCheck struct {
	e    *labcheck.Env
	lb   config.Node
	port string
	secs []haSection
	out  []labcheck.Mistake

	front, back         *haSection
	frontDefs, backDefs []*haSection // the defaults in force for each
	backChain           []*haSection // backDefs, then back

	// The health check request: option httpchk and http-check send.
	httpchk, send   haLine
	isHTTP, hasSend bool
	method, uri     string
}

func (h *haCheck) mk(what, ev, fix string) labcheck.Mistake {
	return labcheck.Mistake{Lab: labid.LB, Node: h.lb.Name, What: what, Evidence: haproxyCfg + ": " + ev, Fix: fix}
}

// onServer is mk for a mistake in the backend's server line name: its
// Subject is that setting's as grade reads haproxy.cfg ("<path> backend
// <name>: server <name>"), so the line is not also listed as a variant.
func (h *haCheck) onServer(name, what, ev, fix string) labcheck.Mistake {
	m := h.mk(what, ev, fix)
	m.Subject = haproxyCfg + " " + h.back.kind + " " + h.back.name + ": server " + name
	return m
}

// route finds the frontend (or listen) bound to the apiserver port and the
// backend it sends to; ok false with the mistake when there is none.
func (h *haCheck) route() (labcheck.Mistake, bool) {
	var defs []*haSection
	for i := range h.secs {
		s := &h.secs[i]
		if s.kind == "defaults" {
			defs = append(defs, s)
			continue
		}
		if h.front != nil || (s.kind != "frontend" && s.kind != "listen") {
			continue
		}
		for _, l := range s.lines {
			if l.words[0] == "bind" && len(l.words) > 1 && strings.HasSuffix(l.words[1], ":"+h.port) {
				h.front = s
				h.frontDefs = slices.Clone(defs)
			}
		}
	}
	if h.front != nil {
		h.bindAddress()
	}
	if h.front == nil {
		return h.mk("no frontend binds port "+h.port+": clients of https://"+h.lb.Name+":"+h.port+" get connection refused", "no `bind *:"+h.port+"` in a frontend or listen section", "frontend kube-apiserver / bind *:"+h.port+" / default_backend kube-apiservers"), false
	}
	h.back = h.front
	if h.front.kind == "frontend" {
		l, ok := last([]*haSection{h.front}, "default_backend")
		if !ok {
			l, ok = last([]*haSection{h.front}, "use_backend")
		}
		if !ok || len(l.words) < 2 {
			return h.mk("frontend "+h.front.name+" has no default_backend: HAProxy has nowhere to send the connections", "frontend "+h.front.name+" without default_backend", "default_backend kube-apiservers"), false
		}
		h.back = nil
		for i := range h.secs {
			if h.secs[i].kind == "backend" && h.secs[i].name == l.words[1] {
				h.back = &h.secs[i]
			}
		}
		if h.back == nil {
			return h.mk("frontend "+h.front.name+" sends to backend "+l.words[1]+", which is not defined", l.text, "define backend "+l.words[1]+" with a server line per control plane"), false
		}
	}
	for i := range h.secs {
		if &h.secs[i] == h.back {
			break
		}
		if h.secs[i].kind == "defaults" {
			h.backDefs = append(h.backDefs, &h.secs[i])
		}
	}
	h.backChain = append(slices.Clone(h.backDefs), h.back)
	return labcheck.Mistake{}, true
}

// bindAddress: the frontend's bind lines for the apiserver port must listen
// where the clients connect: on every address ("*", "0.0.0.0", "::" or
// none: HAProxy's bind keyword, https://docs.haproxy.org/2.8/configuration.html#4.2-bind)
// or on the load balancer's own IP, which every kubeconfig names through
// lb. Any other address (127.0.0.1, another host's) leaves the clients on
// the other machines with connection refused.
func (h *haCheck) bindAddress() {
	var seen []string
	for _, l := range h.front.lines {
		if l.words[0] != "bind" || len(l.words) < 2 || !strings.HasSuffix(l.words[1], ":"+h.port) {
			continue
		}
		addr := strings.Trim(strings.TrimSuffix(l.words[1], ":"+h.port), "[]")
		switch addr {
		case "", "*", "0.0.0.0", "::", "::ffff:0.0.0.0", h.lb.IP:
			return
		}
		seen = append(seen, l.words[1])
	}
	if len(seen) == 0 {
		return
	}
	m := h.mk(fmt.Sprintf("%s %s listens on %s only: clients of https://%s:%s (every kubeconfig, the kubelets, kube-proxy) connect to %s:%s and get connection refused",
		h.front.kind, h.front.name, strings.Join(seen, ", "), h.lb.Name, h.port, h.lb.IP, h.port),
		"bind "+strings.Join(seen, ", "), fmt.Sprintf("bind *:%s (or %s:%s) in %s %s, then systemctl reload haproxy", h.port, h.lb.IP, h.port, h.front.kind, h.front.name))
	m.Subject = haproxyCfg + " " + h.front.kind + " " + h.front.name + ": bind"
	h.out = append(h.out, m)
}

// modes: the frontend and the backend must pass TLS through (mode tcp).
func (h *haCheck) modes() {
	for _, chain := range [][]*haSection{append(h.frontDefs, h.front), h.backChain} {
		if l, ok := last(chain, "mode"); ok && len(l.words) > 1 && l.words[1] != "tcp" {
			h.out = append(h.out, h.mk(fmt.Sprintf("%s %s runs in mode %s: HAProxy reads the clients' TLS as HTTP; the apiservers need TLS passed through", chain[len(chain)-1].kind, chain[len(chain)-1].name, l.words[1]), l.text, "mode tcp"))
		}
	}
}

// request reads the health check's request: method and URI from option
// httpchk, overridden by http-check send (HAProxy's defaults OPTIONS /).
func (h *haCheck) request() {
	h.httpchk, h.isHTTP = last(h.backChain, "option", "httpchk")
	h.send, h.hasSend = last(h.backChain, "http-check", "send")
	h.method, h.uri = "OPTIONS", "/"
	if h.isHTTP {
		switch a := h.httpchk.words[2:]; len(a) {
		case 0:
		case 1:
			h.uri = a[0]
		default:
			h.method, h.uri = a[0], a[1]
		}
	}
	if h.hasSend {
		for i := 2; i+1 < len(h.send.words); i++ {
			switch h.send.words[i] {
			case "meth":
				h.method = h.send.words[i+1]
			case "uri":
				h.uri = h.send.words[i+1]
			}
		}
	}
}

// servers checks the backend's server lines (each control plane a server,
// at the apiserver port, with a check that can pass), then the check's
// request against what the apiservers allow anonymous clients.
func (h *haCheck) servers() error {
	var defaultServer []string
	for _, s := range h.backChain {
		for _, l := range s.lines {
			if l.words[0] == "default-server" {
				defaultServer = append(defaultServer, l.words[1:]...)
			}
		}
	}
	globalNoVerify := false
	for _, s := range h.secs {
		if s.kind == "global" {
			if l, ok := last([]*haSection{&s}, "ssl-server-verify"); ok && len(l.words) > 1 && l.words[1] == "none" {
				globalNoVerify = true
			}
		}
	}
	seenCP := map[string]bool{}
	anyCheck := false
	var noSSL, noCA []haLine
	for _, l := range h.back.lines {
		if l.words[0] != "server" || len(l.words) < 3 {
			continue
		}
		params := append(slices.Clone(defaultServer), l.words[3:]...)
		host, sport, err := net.SplitHostPort(l.words[2])
		if err != nil {
			host, sport = l.words[2], ""
		}
		cp := ""
		for _, n := range h.e.Cluster.ControlPlanes() {
			if host == n.IP || host == n.Name || host == h.e.Cluster.FQDN(n) {
				cp = n.Name
			}
		}
		switch {
		case cp == "":
			fix := "server <cp> <cp IP>:" + h.port + " check"
			if n, ok := h.e.Cluster.Node(l.words[1]); ok && n.Role == config.RoleControlPlane {
				fix = "server " + n.Name + " " + n.IP + ":" + h.port + " check"
			}
			what := fmt.Sprintf("server %s points at %s, which is not a control plane of cluster.yaml: its check never passes and clients sent there fail", l.words[1], host)
			for _, n := range h.e.Cluster.Nodes {
				if host == n.IP {
					what = fmt.Sprintf("server %s points at %s, which is %s (%s), not a control plane: its check never passes and clients sent there fail", l.words[1], host, n.Name, n.Role)
				}
			}
			h.out = append(h.out, h.onServer(l.words[1], what, l.text, fix))
		case !slices.Contains(params, "backup"):
			// A backup server takes traffic only when every other one is
			// down: it does not put its cp into the rotation.
			seenCP[cp] = true
		}
		if sport != "" && sport != h.port {
			h.out = append(h.out, h.onServer(l.words[1], fmt.Sprintf("server %s uses port %s; the apiserver listens on %s", l.words[1], sport, h.port), l.text, "server "+l.words[1]+" "+host+":"+h.port+" check"))
		}
		if !slices.Contains(params, "check") {
			continue
		}
		anyCheck = true
		if i := slices.Index(params, "port"); i >= 0 && i+1 < len(params) && params[i+1] != h.port {
			h.out = append(h.out, h.mk(fmt.Sprintf("server %s checks port %s, where no apiserver listens: the check never passes", l.words[1], params[i+1]), l.text, "drop `port "+params[i+1]+"` (the check then uses the server's port "+h.port+")"))
		}
		if !h.isHTTP {
			continue
		}
		ssl := slices.Contains(params, "check-ssl") || slices.Contains(params, "ssl")
		if !ssl {
			noSSL = append(noSSL, l)
		} else if !globalNoVerify && !hasParam(params, "verify", "none") && !slices.Contains(params, "ca-file") {
			noCA = append(noCA, l)
		}
	}
	// One mistake per problem, naming every server it hits.
	serverNames := func(ls []haLine) (string, string) {
		var ns, ts []string
		for _, l := range ls {
			ns, ts = append(ns, l.words[1]), append(ts, l.text)
		}
		return strings.Join(ns, ", "), strings.Join(ts, "; ")
	}
	if len(noSSL) > 0 {
		ns, ts := serverNames(noSSL)
		h.out = append(h.out, h.mk(fmt.Sprintf("the HTTP health check of %s has no check-ssl: the apiserver speaks only TLS on %s and answers 400, so the check never passes", ns, h.port),
			ts+" (with "+h.httpchk.text+")", "add check-ssl verify none to the server lines (or to default-server)"))
	}
	if len(noCA) > 0 {
		ns, ts := serverNames(noCA)
		h.out = append(h.out, h.mk(fmt.Sprintf("the health check of %s verifies TLS but has no ca-file: HAProxy refuses the configuration (\"verify is enabled by default but no CA file specified\")", ns),
			ts, "add verify none (clients verify the apiserver themselves), or ca-file /etc/haproxy/ca.pem with the cluster CA"))
	}
	for _, n := range h.e.Cluster.ControlPlanes() {
		if !seenCP[n.Name] {
			h.out = append(h.out, h.onServer(n.Name, "control plane "+n.Name+" is not a server of backend "+h.back.name+": the load balancer never sends clients to it", "no server line for "+n.IP, "server "+n.Name+" "+n.IP+":"+h.port+" check"))
		}
	}
	if !anyCheck && len(h.back.lines) > 0 {
		h.out = append(h.out, h.mk("no server of backend "+h.back.name+" has `check`: HAProxy keeps sending clients to an apiserver that is down",
			"backend "+h.back.name+" server lines have no check", "add check to every server line, and option httpchk GET /readyz with check-ssl verify none"))
	}
	if h.isHTTP && anyCheck {
		return h.anonymousRequest()
	}
	return nil
}

// anonymousRequest checks that the HTTP health check asks what an
// anonymous client may read (GET or HEAD of a health path), expects 200,
// and that no apiserver turns anonymous requests off.
func (h *haCheck) anonymousRequest() error {
	ev := h.httpchk.text
	if h.hasSend {
		ev += "; " + h.send.text
	}
	m := strings.ToUpper(h.method)
	p := h.uri
	if u, err := url.Parse(h.uri); err == nil {
		p = u.Path
	}
	switch {
	case m != "GET" && m != "HEAD":
		h.out = append(h.out, h.mk(fmt.Sprintf("the health check sends %s %s: anonymous clients may only GET (or HEAD) the health paths, so the apiserver answers 403 and the check never passes", m, h.uri),
			ev, "option httpchk GET /readyz"))
	case !slices.Contains(publicPaths, p):
		h.out = append(h.out, h.mk(fmt.Sprintf("the health check asks for %s, which anonymous clients may not read (only %s): the apiserver answers 401/403 and the check never passes", h.uri, strings.Join(publicPaths[:3], ", ")),
			ev, "option httpchk GET /readyz"))
	}
	if l, ok := last(h.backChain, "http-check", "expect", "status"); ok && len(l.words) > 3 && l.words[3] != "200" {
		h.out = append(h.out, h.mk("the health check expects status "+l.words[3]+"; a ready apiserver answers 200", l.text, "http-check expect status 200"))
	}
	for _, n := range h.e.Cluster.ControlPlanes() {
		u, ok, err := h.e.ReadUnit(n.Name, "kube-apiserver.service")
		if err != nil {
			return err
		}
		if v, set := u.Flag("anonymous-auth"); ok && set && v == "false" {
			h.out = append(h.out, labcheck.Mistake{Lab: labid.LB, Node: n.Name, What: "kube-apiserver on " + n.Name + " runs with --anonymous-auth=false: HAProxy's unauthenticated health check gets 401 and never passes",
				Evidence: "kube-apiserver.service has --anonymous-auth=false; " + haproxyCfg + " on " + h.lb.Name + ": " + h.httpchk.text,
				Fix:      "drop --anonymous-auth=false (anonymous clients may only read the health and version paths), or use a TCP check"})
		}
	}
	return nil
}

func hasParam(params []string, k, v string) bool {
	for i := 0; i+1 < len(params); i++ {
		if params[i] == k && params[i+1] == v {
			return true
		}
	}
	return false
}

// lbDetectors are the detectors of lab LB, in the order they run.
var Detectors = []labcheck.Detector{
	{Name: "lb-health-check", Lab: labid.LB, Doc: "haproxy.cfg: mode tcp on the apiserver port, every cp a server, an HTTP check that can pass (check-ssl, verify, path, port)", Run: lbHealthCheck},
	{Name: "lb-api-traffic", Lab: labid.LB, Doc: "tries it live: API requests through the LB succeed and HAProxy sends to every ready apiserver; a failure named with HAProxy's view of its servers", Run: apiThroughLB},
}
