package podnet

import (
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labcheck/labchecktest"
)

// TestDetectorsPodNetwork breaks one thing at a time in a good cluster and
// expects lab 08-pod-network's detectors to name it.
func TestDetectorsPodNetwork(t *testing.T) {
	cases := []struct {
		name   string
		lab    string
		break_ func(t *testing.T, f *labchecktest.Fixture)
		want   []labchecktest.Want
	}{
		{"route missing", "08-pod-network", func(t *testing.T, f *labchecktest.Fixture) {
			k := labchecktest.Key("w2", labcheck.RouteShell)
			f.Src.Runs[k] = strings.Replace(f.Src.Runs[k], "10.200.2.0/24 via 192.168.122.23 dev enp1s0\n", "", 1)
		}, []labchecktest.Want{{"08-pod-network", "w2", "no route to w3's pods (10.200.2.0/24)"}}},
		{"route via the wrong worker", "08-pod-network", func(t *testing.T, f *labchecktest.Fixture) {
			k := labchecktest.Key("w3", labcheck.RouteShell)
			f.Src.Runs[k] = strings.Replace(f.Src.Runs[k], "10.200.0.0/24 via 192.168.122.21", "10.200.0.0/24 via 192.168.122.22", 1)
		}, []labchecktest.Want{{"08-pod-network", "w3", "via 192.168.122.22, but w1 is at 192.168.122.21"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { labchecktest.RunCase(t, Detectors, tc.break_, tc.want) })
	}
}
