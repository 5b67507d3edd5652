package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A state that smuggles an O into the subject is refused by every command
// that reads cluster.yaml: khw pki issues nothing with it, and khw pki
// renew --dry-run prints no `openssl req -subj` from it (which once read
// '/ST=Oregon+O=system:masters/…/O=system:nodes/CN=system:node:w1': w1's
// kubelet as cluster-admin).
func TestPKIRenewRefusesSubjectInjection(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, e, code := run(t, base, "init", "--provider", "nspawn"); code != 0 {
		t.Fatalf("init: exit %d %s", code, e)
	}
	p := filepath.Join(base, "khw", "cluster.yaml")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(data), "state: Oregon", `state: "Oregon+O=system:masters"`, 1)
	if bad == string(data) {
		t.Fatal("cluster.yaml has no state: Oregon line")
	}
	if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"pki"}, {"pki", "renew", "w1", "--dry-run"}} {
		out, e, code := run(t, base, args...)
		if code != exitInvalid || !strings.Contains(e, "pki.subject.state") || !strings.Contains(e, "fix:") || strings.Contains(out, "-subj") {
			t.Errorf("khw %s: exit %d (want %d), stderr %q should name pki.subject.state and the fix; stdout:\n%s", strings.Join(args, " "), code, exitInvalid, e, out)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "khw", "pki", "w1.pem")); err == nil {
		t.Error("khw pki issued w1.pem from the refused cluster.yaml")
	}
}
