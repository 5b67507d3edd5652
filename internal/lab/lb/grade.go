package lb

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/labid"
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
	const lab = labid.LB
	lb, ok := e.Cluster.LB()
	if !ok {
		return nil, nil
	}
	const path = "/etc/haproxy/haproxy.cfg"
	data, found, err := e.Read(lb.Name, path)
	if err != nil {
		return nil, err
	}
	if !found {
		return []labcheck.Mistake{labcheck.Missing(lab, lb.Name, path, "HAProxy's configuration", "apt-get install haproxy, then write the frontend and backend for :"+strconv.Itoa(e.Cluster.Kubernetes.APIServerPort))}, nil
	}
	port := strconv.Itoa(e.Cluster.Kubernetes.APIServerPort)
	secs := parseHAProxy(string(data))
	mk := func(what, ev, fix string) labcheck.Mistake {
		return labcheck.Mistake{Lab: lab, Node: lb.Name, What: what, Evidence: path + ": " + ev, Fix: fix}
	}
	// The frontend (or listen) bound to the apiserver port.
	var front *haSection
	var defs []*haSection
	var frontDefs []*haSection
	for i := range secs {
		s := &secs[i]
		if s.kind == "defaults" {
			defs = append(defs, s)
			continue
		}
		if front != nil || (s.kind != "frontend" && s.kind != "listen") {
			continue
		}
		for _, l := range s.lines {
			if l.words[0] == "bind" && len(l.words) > 1 && strings.HasSuffix(l.words[1], ":"+port) {
				front = s
				frontDefs = slices.Clone(defs)
			}
		}
	}
	if front == nil {
		return []labcheck.Mistake{mk("no frontend binds port "+port+": clients of https://"+lb.Name+":"+port+" get connection refused", "no `bind *:"+port+"` in a frontend or listen section", "frontend kube-apiserver / bind *:"+port+" / default_backend kube-apiservers")}, nil
	}
	back := front
	if front.kind == "frontend" {
		l, ok := last([]*haSection{front}, "default_backend")
		if !ok {
			l, ok = last([]*haSection{front}, "use_backend")
		}
		if !ok || len(l.words) < 2 {
			return []labcheck.Mistake{mk("frontend "+front.name+" has no default_backend: HAProxy has nowhere to send the connections", "frontend "+front.name+" without default_backend", "default_backend kube-apiservers")}, nil
		}
		back = nil
		for i := range secs {
			if secs[i].kind == "backend" && secs[i].name == l.words[1] {
				back = &secs[i]
			}
		}
		if back == nil {
			return []labcheck.Mistake{mk("frontend "+front.name+" sends to backend "+l.words[1]+", which is not defined", l.text, "define backend "+l.words[1]+" with a server line per control plane")}, nil
		}
	}
	var out []labcheck.Mistake
	// The defaults in force for the backend: those before it.
	var backDefs []*haSection
	for i := range secs {
		if &secs[i] == back {
			break
		}
		if secs[i].kind == "defaults" {
			backDefs = append(backDefs, &secs[i])
		}
	}
	backChain := append(slices.Clone(backDefs), back)
	for _, chain := range [][]*haSection{append(frontDefs, front), backChain} {
		if l, ok := last(chain, "mode"); ok && len(l.words) > 1 && l.words[1] != "tcp" {
			out = append(out, mk(fmt.Sprintf("%s %s runs in mode %s: HAProxy reads the clients' TLS as HTTP; the apiservers need TLS passed through", chain[len(chain)-1].kind, chain[len(chain)-1].name, l.words[1]), l.text, "mode tcp"))
		}
	}
	var defaultServer []string
	for _, s := range backChain {
		for _, l := range s.lines {
			if l.words[0] == "default-server" {
				defaultServer = append(defaultServer, l.words[1:]...)
			}
		}
	}
	httpchk, isHTTP := last(backChain, "option", "httpchk")
	send, hasSend := last(backChain, "http-check", "send")
	method, uri := "OPTIONS", "/"
	if isHTTP {
		switch a := httpchk.words[2:]; len(a) {
		case 0:
		case 1:
			uri = a[0]
		default:
			method, uri = a[0], a[1]
		}
	}
	if hasSend {
		for i := 2; i+1 < len(send.words); i++ {
			switch send.words[i] {
			case "meth":
				method = send.words[i+1]
			case "uri":
				uri = send.words[i+1]
			}
		}
	}
	globalNoVerify := false
	for _, s := range secs {
		if s.kind == "global" {
			if l, ok := last([]*haSection{&s}, "ssl-server-verify"); ok && len(l.words) > 1 && l.words[1] == "none" {
				globalNoVerify = true
			}
		}
	}
	anonOff := []string{}
	if isHTTP {
		for _, n := range e.Cluster.ControlPlanes() {
			u, ok, err := e.ReadUnit(n.Name, "kube-apiserver.service")
			if err != nil {
				return nil, err
			}
			if v, set := u.Flag("anonymous-auth"); ok && set && v == "false" {
				anonOff = append(anonOff, n.Name)
			}
		}
	}
	seenCP := map[string]bool{}
	anyCheck := false
	var noSSL, noCA []haLine
	for _, l := range back.lines {
		if l.words[0] != "server" || len(l.words) < 3 {
			continue
		}
		params := append(slices.Clone(defaultServer), l.words[3:]...)
		host, sport, err := net.SplitHostPort(l.words[2])
		if err != nil {
			host, sport = l.words[2], ""
		}
		cp := ""
		for _, n := range e.Cluster.ControlPlanes() {
			if host == n.IP || host == n.Name || host == e.Cluster.FQDN(n) {
				cp = n.Name
			}
		}
		switch {
		case cp == "":
			out = append(out, mk(fmt.Sprintf("server %s points at %s, which is not a control plane of cluster.yaml: its check never passes and clients sent there fail", l.words[1], host), l.text, "server <cp> <cp IP>:"+port+" check"))
		case !slices.Contains(params, "backup"):
			// A backup server takes traffic only when every other one is
			// down: it does not put its cp into the rotation.
			seenCP[cp] = true
		}
		if sport != "" && sport != port {
			out = append(out, mk(fmt.Sprintf("server %s uses port %s; the apiserver listens on %s", l.words[1], sport, port), l.text, "server "+l.words[1]+" "+host+":"+port+" check"))
		}
		if !slices.Contains(params, "check") {
			continue
		}
		anyCheck = true
		if i := slices.Index(params, "port"); i >= 0 && i+1 < len(params) && params[i+1] != port {
			out = append(out, mk(fmt.Sprintf("server %s checks port %s, where no apiserver listens: the check never passes", l.words[1], params[i+1]), l.text, "drop `port "+params[i+1]+"` (the check then uses the server's port "+port+")"))
		}
		if !isHTTP {
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
		out = append(out, mk(fmt.Sprintf("the HTTP health check of %s has no check-ssl: the apiserver speaks only TLS on %s and answers 400, so the check never passes", ns, port),
			ts+" (with "+httpchk.text+")", "add check-ssl verify none to the server lines (or to default-server)"))
	}
	if len(noCA) > 0 {
		ns, ts := serverNames(noCA)
		out = append(out, mk(fmt.Sprintf("the health check of %s verifies TLS but has no ca-file: HAProxy refuses the configuration (\"verify is enabled by default but no CA file specified\")", ns),
			ts, "add verify none (clients verify the apiserver themselves), or ca-file /etc/haproxy/ca.pem with the cluster CA"))
	}
	for _, n := range e.Cluster.ControlPlanes() {
		if !seenCP[n.Name] {
			out = append(out, mk("control plane "+n.Name+" is not a server of backend "+back.name+": the load balancer never sends clients to it", "no server line for "+n.IP, "server "+n.Name+" "+n.IP+":"+port+" check"))
		}
	}
	if !anyCheck && len(back.lines) > 0 {
		out = append(out, mk("no server of backend "+back.name+" has `check`: HAProxy keeps sending clients to an apiserver that is down",
			"backend "+back.name+" server lines have no check", "add check to every server line, and option httpchk GET /readyz with check-ssl verify none"))
	}
	if isHTTP && anyCheck {
		ev := httpchk.text
		if hasSend {
			ev += "; " + send.text
		}
		m := strings.ToUpper(method)
		p := uri
		if u, err := url.Parse(uri); err == nil {
			p = u.Path
		}
		switch {
		case m != "GET" && m != "HEAD":
			out = append(out, mk(fmt.Sprintf("the health check sends %s %s: anonymous clients may only GET (or HEAD) the health paths, so the apiserver answers 403 and the check never passes", m, uri),
				ev, "option httpchk GET /readyz"))
		case !slices.Contains(publicPaths, p):
			out = append(out, mk(fmt.Sprintf("the health check asks for %s, which anonymous clients may not read (only %s): the apiserver answers 401/403 and the check never passes", uri, strings.Join(publicPaths[:3], ", ")),
				ev, "option httpchk GET /readyz"))
		}
		if l, ok := last(backChain, "http-check", "expect", "status"); ok && len(l.words) > 3 && l.words[3] != "200" {
			out = append(out, mk("the health check expects status "+l.words[3]+"; a ready apiserver answers 200", l.text, "http-check expect status 200"))
		}
		for _, n := range anonOff {
			out = append(out, labcheck.Mistake{Lab: lab, Node: n, What: "kube-apiserver on " + n + " runs with --anonymous-auth=false: HAProxy's unauthenticated health check gets 401 and never passes",
				Evidence: "kube-apiserver.service has --anonymous-auth=false; " + path + " on " + lb.Name + ": " + httpchk.text,
				Fix:      "drop --anonymous-auth=false (anonymous clients may only read the health and version paths), or use a TCP check"})
		}
	}
	return out, nil
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
}
