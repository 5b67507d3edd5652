package podnet

import (
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labcheck/labchecktest"
)

func TestForwardDrops(t *testing.T) {
	for chain, want := range map[string]bool{
		"-P FORWARD ACCEPT\n-A FORWARD -j KUBE-FORWARD\n":                                    false,
		"-P FORWARD DROP\n-A FORWARD -j KUBE-FORWARD\n":                                      true,
		"-P FORWARD DROP\n-A FORWARD -s 10.200.0.0/16 -j ACCEPT\n":                           false,
		"-P FORWARD DROP\n-A FORWARD -j ACCEPT\n":                                            false,
		"-P FORWARD DROP\n-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n": true,
		"": false,
	} {
		if got := forwardDrops(chain); got != want {
			t.Errorf("forwardDrops(%q) = %v, want %v", chain, got, want)
		}
	}
}

// TestPathCauseNamesTheFirstMissingPiece: for traffic from a pod on w1 to
// a pod on w2, the cause is the first thing missing on the way there and
// back: a route on either side, forwarding, the FORWARD chain.
func TestPathCauseNamesTheFirstMissingPiece(t *testing.T) {
	node := func(f *labchecktest.Fixture, name string) config.Node {
		n, _ := f.Cluster.Node(name)
		return n
	}
	cases := []struct {
		name    string
		break_  func(f *labchecktest.Fixture)
		ev, fix string
		node    string
	}{
		{"nothing wrong", func(f *labchecktest.Fixture) {}, "the routes and forwarding look right", "w2's pod bridge", "w2"},
		{"no route there", func(f *labchecktest.Fixture) {
			k := labchecktest.Key("w1", labcheck.RouteShell)
			f.Src.Runs[k] = strings.Replace(f.Src.Runs[k], "10.200.1.0/24 via 192.168.122.22 dev enp1s0\n", "", 1)
		}, "w1 has no route for w2's podCIDR 10.200.1.0/24 (the request's way)", "ip route replace 10.200.1.0/24 via 192.168.122.22 on w1", "w1"},
		{"no route back", func(f *labchecktest.Fixture) {
			k := labchecktest.Key("w2", labcheck.RouteShell)
			f.Src.Runs[k] = strings.Replace(f.Src.Runs[k], "10.200.0.0/24 via 192.168.122.21", "10.200.0.0/24 via 192.168.122.23", 1)
		}, "w2 has route 10.200.0.0/24 via 192.168.122.23 dev enp1s0 for w1's podCIDR 10.200.0.0/24 (the answer's way back)", "ip route replace 10.200.0.0/24 via 192.168.122.21 on w2", "w2"},
		{"w2 does not forward", func(f *labchecktest.Fixture) {
			f.Src.Runs[labchecktest.Key("w2", forwardingShell)] = "0\n"
		}, "w2: /proc/sys/net/ipv4/ip_forward = 0", "sysctl -w net.ipv4.ip_forward=1 on w2", "w2"},
		{"w2 drops forwarded packets", func(f *labchecktest.Fixture) {
			f.Src.Runs[labchecktest.Key("w2", forwardChainShell)] = "-P FORWARD DROP\n-A FORWARD -j KUBE-FORWARD\n"
		}, "w2: iptables -S FORWARD: -P FORWARD DROP and no rule that accepts the pod network", "iptables -A FORWARD -s 10.200.0.0/16 -j ACCEPT", "w2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := labchecktest.NewFixture(t)
			for _, w := range []string{"w1", "w2"} {
				f.Src.Runs[labchecktest.Key(w, forwardingShell)] = "1\n"
				f.Src.Runs[labchecktest.Key(w, forwardChainShell)] = "-P FORWARD ACCEPT\n"
			}
			tc.break_(f)
			at, ev, fix := pathCause(f.Env(), node(f, "w1"), node(f, "w2"))
			if at != tc.node || !strings.Contains(ev, tc.ev) || !strings.Contains(fix, tc.fix) {
				t.Errorf("node %s, evidence %q\nfix %q\nwant %s, %q and %q", at, ev, fix, tc.node, tc.ev, tc.fix)
			}
		})
	}
}
