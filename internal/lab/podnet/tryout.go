package podnet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/smoketest"
)

// podTraffic tries what lab 08 exists to make work: a pod reaches a pod on
// another worker at its pod IP, without NAT
// (https://kubernetes.io/docs/concepts/services-networking/#the-kubernetes-network-model).
// It starts a web pod on every Ready worker and has each pod fetch
// /hostname from every other one (agnhost netexec's /dial, asked from the
// pod's own node). A path that fails is named with the likely cause read
// from both nodes: the route to the other worker's podCIDR, IP forwarding,
// and the iptables FORWARD chain (a DROP policy drops forwarded pod
// traffic; Docker sets one when it starts,
// https://docs.docker.com/engine/network/packet-filtering-firewalls/#docker-on-a-router).
func podTraffic(e *labcheck.Env) ([]labcheck.Mistake, error) {
	if e.Live == nil || e.API == nil {
		return nil, nil
	}
	workers, err := e.ReadyWorkers()
	if err != nil || len(workers) < 2 {
		return nil, err
	}
	// The CNI bridge plugin turns IP forwarding on when it gives a pod its
	// gateway (containernetworking/plugins, bridge: isGateway), so a pod of
	// this check would quietly undo a worker's net.ipv4.ip_forward=0: name
	// it, and try no traffic.
	var noForward []labcheck.Mistake
	for _, w := range workers {
		fwd, err := e.Run(w.Name, forwardingShell)
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(fwd) == "0" {
			noForward = append(noForward, labcheck.Mistake{Node: w.Name, Lab: labid.Workers, Kind: grade.Breaks, Subject: "net.ipv4.ip_forward",
				What:     w.Name + " does not forward IP packets: its pods cannot reach pods on other workers, nor they its pods (pod traffic was not tried: a new pod would turn forwarding on and hide the mistake)",
				Evidence: "/proc/sys/net/ipv4/ip_forward = 0 on " + w.Name,
				Fix:      "sudo sysctl -w net.ipv4.ip_forward=1 on " + w.Name + ", and keep it in /etc/sysctl.d/ (lab 07)"})
		}
	}
	if len(noForward) > 0 {
		return noForward, nil
	}
	t := e.Live.Target
	pods, err := e.StartWebPods(workers, t.Scaled(90*time.Second, 5*time.Minute))
	defer pods.Delete()
	if err != nil {
		return nil, err
	}
	const lab = labid.PodNetwork
	var out []labcheck.Mistake
	for _, w := range workers {
		if why, ok := pods.NotStarted[w.Name]; ok {
			out = append(out, labcheck.Mistake{Node: w.Name, Lab: lab, Kind: grade.Breaks, Subject: "pod on " + w.Name,
				What:     "a pod on " + w.Name + " does not get Ready, so no traffic to it can be tried: " + why,
				Evidence: why, Fix: "read the pod's events (kubectl describe pod) and the kubelet's log on " + w.Name + " (journalctl -u kubelet): a CNI config that does not load, or a plugin missing from /opt/cni/bin, stops every pod"})
		}
	}
	// Every path at once (a failing one waits for netexec's 5 s dial
	// timeout), then the causes, which read the nodes one by one.
	type path struct {
		from, to config.Node
		why      string
	}
	var paths []*path
	var wg sync.WaitGroup
	for _, from := range workers {
		for _, to := range workers {
			if from.Name == to.Name || pods.Pods[from.Name] == nil || pods.Pods[to.Name] == nil {
				continue
			}
			p := &path{from: from, to: to}
			paths = append(paths, p)
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.why = dial(e, pods, p.from, p.to)
			}()
		}
	}
	wg.Wait()
	// One finding per cause, listing every path it breaks: a FORWARD
	// policy on one worker breaks every path through it.
	type cause struct{ node, ev, fix string }
	var causes []cause
	broken := map[cause][]*path{}
	for _, p := range paths {
		if p.why == "" {
			continue
		}
		var c cause
		c.node, c.ev, c.fix = pathCause(e, p.from, p.to)
		if broken[c] == nil {
			causes = append(causes, c)
		}
		broken[c] = append(broken[c], p)
	}
	for _, c := range causes {
		ps := broken[c]
		first := ps[0]
		what := fmt.Sprintf("a pod on %s cannot reach a pod on %s at its pod IP %s: %s", first.from.Name, first.to.Name, pods.Pods[first.to.Name].Status.PodIP, first.why)
		if len(ps) > 1 {
			var list []string
			for _, p := range ps {
				list = append(list, p.from.Name+" → "+p.to.Name)
			}
			what = fmt.Sprintf("pod traffic fails on %d paths between workers (%s); the first: %s", len(ps), strings.Join(list, ", "), what)
		}
		out = append(out, labcheck.Mistake{Node: c.node, Lab: lab, Kind: grade.Breaks, Subject: "pod traffic", What: what, Evidence: c.ev, Fix: c.fix})
	}
	return out, nil
}

// dial has from's pod GET /hostname of to's pod; "" when the answer is
// to's pod name, else what happened.
func dial(e *labcheck.Env, pods *labcheck.WebPods, from, to config.Node) string {
	ctx, cancel := context.WithTimeout(e.Ctx, e.Live.Target.Scaled(15*time.Second, time.Minute))
	defer cancel()
	q := url.Values{"request": {"hostname"}, "protocol": {"http"}, "host": {pods.Pods[to.Name].Status.PodIP},
		"port": {strconv.Itoa(smoketest.HTTPPort)}, "tries": {"1"}}
	code, body, err := pods.Get(ctx, from, "/dial?"+q.Encode())
	if err != nil {
		return "the pod on " + from.Name + " could not be asked from " + from.Name + " itself: " + labcheck.OneLine(err)
	}
	var res struct{ Responses, Errors []string }
	if jerr := json.Unmarshal([]byte(body), &res); jerr != nil {
		return fmt.Sprintf("HTTP %d %q from the pod on %s", code, body, from.Name)
	}
	for _, r := range res.Responses {
		if r == pods.Pods[to.Name].Name {
			return ""
		}
	}
	if len(res.Errors) > 0 {
		return res.Errors[len(res.Errors)-1]
	}
	return fmt.Sprintf("it answered %v, not its name %s", res.Responses, pods.Pods[to.Name].Name)
}

// The commands pathCause runs on a worker.
const (
	forwardingShell   = "cat /proc/sys/net/ipv4/ip_forward 2>/dev/null || true"
	forwardChainShell = "iptables -S FORWARD 2>/dev/null || true"
)

// pathCause reads, on both workers, what a packet between their pods
// needs, and returns the worker, the evidence and the fix of the first
// thing that is missing (a route on either side, forwarding, the FORWARD
// chain), or to and what was read when everything looks in place.
func pathCause(e *labcheck.Env, from, to config.Node) (node, evidence, fix string) {
	var seen []string
	for _, hop := range [][2]config.Node{{from, to}, {to, from}} {
		n, peer := hop[0], hop[1]
		want, err := netip.ParsePrefix(peer.PodCIDR)
		if err != nil {
			continue
		}
		text, err := e.Run(n.Name, labcheck.RouteShell)
		if err != nil {
			return n.Name, "could not read the routes of " + n.Name + ": " + labcheck.OneLine(err), "read `ip -4 route` on both workers"
		}
		r, ok := parseRoutes(text)[want.Masked()]
		if !ok || r.via != peer.IP {
			got := "no route"
			if ok {
				got = "route " + r.line
			}
			return n.Name, fmt.Sprintf("%s has %s for %s's podCIDR %s (the %s)", n.Name, got, peer.Name, want.Masked(), map[bool]string{true: "request's way", false: "answer's way back"}[n.Name == from.Name]),
				fmt.Sprintf("sudo systemctl restart khw-pod-routes on %[3]s if lab 08 installed it; else sudo ip route replace %[1]s via %[2]s on %[3]s (lab 08), and make it permanent", want.Masked(), peer.IP, n.Name)
		}
		seen = append(seen, n.Name+": "+r.line)
	}
	for _, n := range []config.Node{to, from} {
		fwd, err := e.Run(n.Name, forwardingShell)
		if err == nil && strings.TrimSpace(fwd) == "0" {
			return n.Name, n.Name + ": /proc/sys/net/ipv4/ip_forward = 0: the kernel does not forward between its NIC and the pods' bridge",
				"sudo sysctl -w net.ipv4.ip_forward=1 on " + n.Name + ", and keep it in /etc/sysctl.d/ (lab 07)"
		}
		chain, err := e.Run(n.Name, forwardChainShell)
		if err == nil && forwardDrops(chain) {
			return n.Name, n.Name + ": iptables -S FORWARD: " + strings.Join(strings.Fields(firstLine(chain)), " ") + " and no rule that accepts the pod network: forwarded pod packets are dropped (Docker sets this policy when it starts)",
				fmt.Sprintf("sudo iptables -A FORWARD -s %s -j ACCEPT && sudo iptables -A FORWARD -d %s -j ACCEPT on %s (or -P FORWARD ACCEPT), and find what set the policy", e.Cluster.Kubernetes.ClusterCIDR, e.Cluster.Kubernetes.ClusterCIDR, n.Name)
		}
		seen = append(seen, n.Name+": ip_forward "+strings.TrimSpace(fwd))
	}
	return to.Name, "the routes and forwarding look right (" + strings.Join(seen, "; ") + ")",
		"look at " + to.Name + "'s pod bridge (ip addr show; the CNI config in /etc/cni/net.d) and its firewall (iptables -S; nft list ruleset)"
}

// forwardDrops reports whether `iptables -S FORWARD` output drops
// forwarded packets: policy DROP and no ACCEPT rule without conditions or
// for a source or destination network. kube-proxy's KUBE-FORWARD chain
// accepts only connections already established (and marked Service
// traffic), so a new connection between pods still meets the policy.
func forwardDrops(chain string) bool {
	if !strings.Contains(chain, "-P FORWARD DROP") {
		return false
	}
	for _, l := range strings.Split(chain, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "-A" && strings.HasSuffix(l, "-j ACCEPT") && (len(f) == 4 || strings.Contains(l, " -s ") || strings.Contains(l, " -d ")) {
			return false
		}
	}
	return true
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
