package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/upgrade"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm/nspawn"
)

// TestStatusNotUpNspawn runs the real command on a fresh nspawn cluster
// (nothing created): exit 0, the nodes absent, the health sections skipped.
func TestStatusNotUpNspawn(t *testing.T) {
	if err := nspawn.CheckHost(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	base := t.TempDir()
	if _, errOut, code := run(t, base, "init", "--name", "su", "--arch", runtime.GOARCH, "--provider", "nspawn"); code != 0 {
		t.Fatalf("init: %s", errOut)
	}
	start := time.Now()
	out, errOut, code := run(t, base, "status", "-o", "json")
	if code != 0 || time.Since(start) > 3*time.Second {
		t.Fatalf("status -o json: exit %d after %v: %s", code, time.Since(start), errOut)
	}
	var rep map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var nodes []cluster.NodeRow
	var errs map[string]string
	json.Unmarshal(rep["nodes"], &nodes)
	json.Unmarshal(rep["errors"], &errs)
	if len(nodes) != 7 || nodes[0].State != "absent" || nodes[0].Role != config.RoleLoadBalancer || errs["cluster"] != cluster.NotUp || string(rep["etcd"]) != "null" {
		t.Errorf("json: %s", out)
	}
	out, _, code = run(t, base, "status")
	if code != 0 || !strings.Contains(out, cluster.NotUp) || len(nodesSection(out)) != 8 || strings.Contains(out, "UPGRADE") {
		t.Errorf("text: exit %d\n%s", code, out)
	}
	// An upgrade under way is shown, with how to go on or back.
	d, err := state.Resolve(base, "su")
	if err != nil {
		t.Fatal(err)
	}
	if err := upgrade.SaveRecord(d, upgrade.Record{From: "v1.36.3", To: "v1.37.2", StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	out, _, _ = run(t, base, "status")
	if !strings.Contains(out, "UPGRADE  from v1.36.3 to v1.37.2, under way since") || !strings.Contains(out, "khw upgrade --to v1.37.2 goes on") {
		t.Errorf("status during an upgrade:\n%s", out)
	}
}
