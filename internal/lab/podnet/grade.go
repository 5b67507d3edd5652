package podnet

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// podRoutes checks the pod network without an overlay: every worker must
// route each other worker's podCIDR via that worker's IP, or pods on
// different nodes cannot reach each other (cluster-facts.md "Workers";
// https://kubernetes.io/docs/concepts/cluster-administration/networking/:
// every pod can reach every other pod without NAT). Read from `ip -4 route`.
func podRoutes(e *labcheck.Env) ([]labcheck.Mistake, error) {
	const lab = labid.PodNetwork
	var out []labcheck.Mistake
	workers := e.Cluster.Workers()
	for _, n := range workers {
		text, err := e.Run(n.Name, labcheck.RouteShell)
		if err != nil {
			return nil, err
		}
		routes := parseRoutes(text)
		for _, w := range workers {
			if w.Name == n.Name || w.PodCIDR == "" {
				continue
			}
			want, err := netip.ParsePrefix(w.PodCIDR)
			if err != nil {
				continue
			}
			want = want.Masked()
			fix := fmt.Sprintf("sudo systemctl restart khw-pod-routes on %[3]s if lab 08 installed it; else sudo ip route replace %[1]s via %[2]s on %[3]s, and make it permanent (a systemd unit or netplan routes)", want, w.IP, n.Name)
			r, ok := routes[want]
			switch {
			case !ok:
				ev := "ip -4 route on " + n.Name + " has no route for " + want.String()
				if len(routes) > 0 {
					ev += " (routes: " + strings.Join(routeList(routes), "; ") + ")"
				}
				out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("%s has no route to %s's pods (%s): packets to them go to the default gateway and are lost", n.Name, w.Name, want),
					Evidence: ev, Fix: fix})
			case r.via != w.IP:
				out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("%s routes %s's pods (%s) via %s, but %s is at %s", n.Name, w.Name, want, labcheck.OrDefault(r.via, "no gateway ("+r.line+")"), w.Name, w.IP),
					Evidence: r.line, Fix: fix})
			}
		}
	}
	return out, nil
}

type route struct{ via, line string }

// parseRoutes reads `ip route` output: destination prefix → gateway.
func parseRoutes(text string) map[netip.Prefix]route {
	out := map[netip.Prefix]route{}
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		p, err := netip.ParsePrefix(f[0])
		if err != nil {
			a, err := netip.ParseAddr(f[0])
			if err != nil {
				continue // default, unreachable …
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		r := route{line: strings.TrimSpace(l)}
		for i := 1; i+1 < len(f); i++ {
			if f[i] == "via" {
				r.via = f[i+1]
			}
		}
		out[p.Masked()] = r
	}
	return out
}

func routeList(m map[netip.Prefix]route) []string {
	var out []string
	for _, r := range m {
		out = append(out, r.line)
	}
	labcheck.SortStrings(out)
	return out
}

// podNetworkDetectors are the detectors of lab PodNetwork, in the order they run.
var Detectors = []labcheck.Detector{
	{Name: "pod-routes", Lab: labid.PodNetwork, Doc: "every worker routes each other worker's podCIDR via that worker's IP", Run: podRoutes},
	{Name: "pod-traffic", Lab: labid.PodNetwork, Doc: "tries it live: a pod on each Ready worker fetches a page from a pod on every other; a failing path named with its cause (route, forwarding, FORWARD chain)", Run: podTraffic},
}
