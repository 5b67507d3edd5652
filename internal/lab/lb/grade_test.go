package lb

import (
	"testing"

	"github.com/khw-dev/khw/internal/lab/labcheck/labchecktest"
)

// TestDetectorsLB breaks one thing at a time in a good cluster and
// expects lab 06-lb's detectors to name it.
func TestDetectorsLB(t *testing.T) {
	cases := []struct {
		name   string
		lab    string
		break_ func(t *testing.T, f *labchecktest.Fixture)
		want   []labchecktest.Want
	}{
		{"http check without check-ssl", "06-lb", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "lb", "/etc/haproxy/haproxy.cfg", "default-server check-ssl verify none", "default-server")
		}, []labchecktest.Want{{"06-lb", "lb", "of cp1, cp2, cp3 has no check-ssl"}}},
		{"check-ssl verifying without ca-file", "06-lb", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "lb", "/etc/haproxy/haproxy.cfg", "check-ssl verify none", "check-ssl")
		}, []labchecktest.Want{{"06-lb", "lb", "no ca-file"}}},
		{"check of a path anonymous may not read", "06-lb", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "lb", "/etc/haproxy/haproxy.cfg", "option httpchk GET /readyz", "option httpchk GET /api")
		}, []labchecktest.Want{{"06-lb", "lb", "asks for /api"}}},
		{"httpchk without a URI (OPTIONS /)", "06-lb", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "lb", "/etc/haproxy/haproxy.cfg", "option httpchk GET /readyz", "option httpchk")
		}, []labchecktest.Want{{"06-lb", "lb", "sends OPTIONS /"}}},
		{"backend on the wrong port", "06-lb", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "lb", "/etc/haproxy/haproxy.cfg", "192.168.122.12:6443", "192.168.122.12:6444")
		}, []labchecktest.Want{{"06-lb", "lb", "uses port 6444"}}},
		{"backend at a wrong IP", "06-lb", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "lb", "/etc/haproxy/haproxy.cfg", "192.168.122.13:6443", "192.168.122.31:6443")
		}, []labchecktest.Want{{"06-lb", "lb", "points at 192.168.122.31"}, {"06-lb", "lb", "cp3 is not a server"}}},
		{"frontend bound to loopback only", "06-lb", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "lb", "/etc/haproxy/haproxy.cfg", "bind *:6443", "bind 127.0.0.1:6443")
		}, []labchecktest.Want{{"06-lb", "lb", "listens on 127.0.0.1:6443 only"}}},
		{"mode http", "06-lb", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "lb", "/etc/haproxy/haproxy.cfg", "mode tcp", "mode http")
		}, []labchecktest.Want{{"06-lb", "lb", "runs in mode http"}}},
		{"apiserver without anonymous auth", "06-lb", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp2", "/etc/systemd/system/kube-apiserver.service", "--v=2", "--anonymous-auth=false --v=2")
		}, []labchecktest.Want{{"06-lb", "cp2", "--anonymous-auth=false"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { labchecktest.RunCase(t, Detectors, tc.break_, tc.want) })
	}
}
