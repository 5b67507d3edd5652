package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// escNodeText is text a node controls: ESC [2J clears the terminal, the
// carriage return overwrites the line; escShown is how khw prints it.
const escNodeText, escShown = "x\x1b[2J\ry", `x\x1b[2J\x0dy`

// khw lab hint quotes a finding read on a node: its control characters
// are escaped.
func TestLabHintEscapesNodeText(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, e, code := run(t, base, "init", "--name", "lab", "--provider", "nspawn"); code != 0 {
		t.Fatalf("init: exit %d %s", code, e)
	}
	// What khw lab check --hints saved: one mistake, its first rung given.
	saved, err := json.Marshal(map[string]any{"checked": time.Now().UTC(), "given": []int{1},
		"findings": []grade.Finding{{Lab: labid.ControlPlane, Node: "cp2", What: escNodeText, Evidence: escNodeText, Fix: escNodeText}}})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(base, "lab", "labs", "hints-"+labid.ControlPlane+".json")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	for rung := 2; rung <= 3; rung++ {
		out, e, code := run(t, base, "lab", "hint", "05")
		if code != 0 || strings.ContainsAny(out, "\x1b\r") || !strings.Contains(out, escShown) {
			t.Errorf("hint %d: exit %d %s; want the node's text escaped, no raw control character:\n%q", rung, code, e, out)
		}
	}
}

// The error khw ends with is printed with its control characters escaped
// (it may quote a node: an ssh error, a unit's state).
func TestErrorIsEscaped(t *testing.T) {
	_, e, code := run(t, filepath.Join(t.TempDir(), escNodeText), "status")
	if code == 0 || strings.ContainsAny(e, "\x1b\r") || !strings.Contains(e, escShown) {
		t.Errorf("exit %d; want the error with its control characters escaped:\n%q", code, e)
	}
}
