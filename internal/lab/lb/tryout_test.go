package lb

import (
	"errors"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// TestHAProxyViewNamesWhyAServerIsOut: from HAProxy's view of its servers,
// a ready control plane without a server at its address, or whose server
// is down, is out of rotation with the cause; one that is coming back up
// is not (yet).
func TestHAProxyViewNamesWhyAServerIsOut(t *testing.T) {
	c := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	lb, _ := c.LB()
	h := &haView{e: &labcheck.Env{Cluster: c}, lb: lb, port: "6443", servers: []health.HAProxyServer{
		{Backend: "kube-apiservers", Name: "cp1", Addr: "192.168.122.11:6443", Status: "UP", Check: "L7OK 200"},
		{Backend: "kube-apiservers", Name: "cp2", Addr: "192.168.122.12:6443", Status: "DOWN", Check: "L7STS 403", LastCheck: "HTTP status check returned code <3C>403<3E>"},
		{Backend: "kube-apiservers", Name: "cp3", Addr: "192.168.122.13:6444", Status: "DOWN", Check: "L4CON", LastCheck: "Connection refused"},
		{Backend: "kube-apiservers", Name: "cp3-last-resort", Addr: "192.168.122.13:6443", Status: "no check", Backup: true},
	}}
	cps := c.ControlPlanes()
	out := h.outOfRotation(cps)
	if names(out) != "cp2, cp3" {
		t.Fatalf("out of rotation: %s, want cp2, cp3", names(out))
	}
	m2, m3 := h.mistake(out[0]), h.mistake(out[1])
	for _, want := range []string{"HAProxy keeps cp2 out of rotation (DOWN) although its apiserver answers ready", "401/403", "last check L7STS 403"} {
		if !strings.Contains(m2.What, want) {
			t.Errorf("cp2: %q lacks %q", m2.What, want)
		}
	}
	if !strings.Contains(m3.What, "its server cp3 points at 192.168.122.13:6444, not at 192.168.122.13:6443") || !strings.Contains(m3.Fix, "change server cp3's address to 192.168.122.13:6443") {
		t.Errorf("cp3: %+v", m3)
	}
	h.servers[2].Name = "apiserver-3" // not named after cp3: no server of cp3 at all
	if m := h.mistake(out[1]); !strings.Contains(m.What, "no active server is at 192.168.122.13:6443") || !strings.Contains(m.Fix, "add `server cp3 192.168.122.13:6443 check`") {
		t.Errorf("cp3 without a server: %+v", m)
	}
	h.servers[2].Name = "cp3"
	if want := "cp3 192.168.122.13:6444 DOWN (L4CON)"; !strings.Contains(m3.Evidence, want) || strings.Contains(m3.Evidence, "last-resort") {
		t.Errorf("evidence %q: want %q and no backup server", m3.Evidence, want)
	}
	h.servers[1].Check = "L7STS 401" // the admin is answered, the anonymous check is not
	if m := h.mistake(out[0]); m.Node != "cp2" || m.Lab != labid.ControlPlane || !strings.Contains(m.What, "AlwaysAllow alone, which turns it off") {
		t.Errorf("401 is blamed on the apiserver's anonymous authentication: %+v", m)
	}
	if h.checkRunning(cps) {
		t.Error("checkRunning with no check under way")
	}
	h.servers[1].CheckRunning = true // its last result is shown without a code: read again
	if !h.checkRunning(cps) {
		t.Error("checkRunning false while cp2's check runs")
	}
	h.servers[0].CheckRunning, h.servers[1].CheckRunning = true, false // cp1 is in rotation: nothing to wait for
	if h.checkRunning(cps) {
		t.Error("checkRunning waits for a server in rotation")
	}
	h.servers[1].Status = "DOWN 1/2" // passed one check of rise 2: coming back
	if out := h.outOfRotation(cps); names(out) != "cp3" {
		t.Errorf("with cp2 coming back: %s, want cp3", names(out))
	}
	h.err = errors.New("connection refused")
	if ev := h.summary(); !strings.Contains(ev, "stats page on lb (http://127.0.0.1:8404/stats;csv) could not be read: connection refused") {
		t.Errorf("summary without stats: %q", ev)
	}
}
