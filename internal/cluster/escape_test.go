package cluster

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
)

// khw status prints what the nodes report (a unit's name and state, a
// certificate's subject, a section's error) with their control characters
// escaped, and lines the columns up with the escaped text.
func TestStatusTextEscapesNodeText(t *testing.T) {
	const nodeText, shown = "x\x1b[2J\ry", `x\x1b[2J\x0dy`
	c := config.Default("st", config.ArchAMD64, config.ProviderNspawn)
	now := time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)
	rep := StatusReport{
		Nodes: []NodeRow{{Name: "cp1", Role: config.RoleControlPlane, State: "running", IP: "192.168.122.11"}},
		Units: map[string][]health.Unit{"cp1": {
			{Name: nodeText + ".service", Load: "loaded", Active: "active", Sub: "running", Enabled: "enabled", Since: "weird"},
			{Name: "etcd.service", Load: "loaded", Active: "active", Sub: nodeText, Enabled: "enabled", Since: "weird"},
		}},
		Certs:  map[string][]health.Cert{"cp1": {{File: "/etc/etcd/kubernetes.pem", Subject: "CN=" + nodeText, NotAfter: now.Add(24 * time.Hour)}}},
		Errors: map[string]string{"etcd": "cp1: " + nodeText},
	}
	var out bytes.Buffer
	if err := WriteStatusTextWith(&out, c, rep, now, StatusOptions{AllCerts: true}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if strings.ContainsAny(text, "\x1b\r") {
		t.Errorf("control characters reach the terminal:\n%q", text)
	}
	if n := strings.Count(text, shown); n != 4 {
		t.Errorf("%d escaped copies of the node's text, want 4:\n%q", n, text)
	}
	// The STATE column starts where its heading does on every UNITS row.
	lines := strings.Split(text, "\n")
	col := -1
	for _, l := range lines {
		if strings.HasPrefix(l, "NODE  UNIT") {
			col = strings.Index(l, "STATE")
		}
		if col > 0 && strings.HasPrefix(l, "cp1 ") && strings.Contains(l, ".service") && !strings.HasPrefix(l[col:], "active/") {
			t.Errorf("the STATE column is not lined up:\n%s", text)
		}
	}
	if col < 0 {
		t.Fatalf("no UNITS heading:\n%s", text)
	}
}
