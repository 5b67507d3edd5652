package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestSmokeFlags(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, errOut, code := run(t, base, "init", "--name", "lab", "--provider", "nspawn"); code != 0 {
		t.Fatal(errOut)
	}
	for _, args := range [][]string{{"smoke", "-o", "yaml"}, {"smoke", "--wait", "0s"}, {"smoke", "extra"}} {
		if _, errOut, code := run(t, base, args...); code != exitUsage {
			t.Errorf("%v: exit %d (%s), want %d", args, code, errOut, exitUsage)
		}
	}
	// No PKI yet: the command names what is missing instead of trying.
	_, errOut, code := run(t, base, "smoke")
	if code != exitFailed || !strings.Contains(errOut, "admin.kubeconfig") {
		t.Errorf("smoke before khw kubeconfig: exit %d, %s", code, errOut)
	}
}
