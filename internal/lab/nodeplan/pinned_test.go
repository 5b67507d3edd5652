package nodeplan

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/components/mirrortest"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// runShell runs script with bash (set -euo pipefail, as the by-hand
// scripts do) in a new directory and returns its output.
func runShell(t *testing.T, script string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", "-c", "set -euo pipefail\n"+script)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestDownloadCommandsCheckThePinnedDigest: the download commands a
// learner types check each file against the digest khw trusts (the
// pinned mirror manifest), not against the checksum file the mirror
// serves beside it. Against the genuine mirror they pass; after whoever
// controls the mirror swaps kubectl and kubectl.sha256 for a consistent
// pair, khw's own fetch refuses kubectl, and so do the commands printed
// before the swap and those printed after it.
func TestDownloadCommandsCheckThePinnedDigest(t *testing.T) {
	c := config.Default("t", config.ArchAMD64, config.ProviderNspawn)
	names := []string{"kubectl", "runc", "etcd"}
	mir := mirrortest.New(t, c, names...)
	mir.Use(t)
	printed := func() string {
		t.Helper()
		sh, err := (&Machines{}).DownloadCommands(context.Background(), c, names...)
		if err != nil {
			t.Fatal(err)
		}
		return sh
	}
	before := printed()
	out, err := runShell(t, before)
	if err != nil {
		t.Fatalf("against the genuine mirror the commands failed: %v\n%s\ncommands:\n%s", err, out, before)
	}
	for _, n := range []string{"kubectl", "runc.amd64", "etcd-"} {
		if !strings.Contains(out, n) || !strings.Contains(out, ": OK") {
			t.Errorf("sha256sum did not say OK for %s:\n%s", n, out)
		}
	}

	mir.Tamper(t, "kubectl")
	env := steps.NewEnv(c, state.Dir{Root: t.TempDir()})
	defer env.Close()
	if err := (&Machines{}).FetchBinaries(context.Background(), env, "kubectl"); err == nil || !strings.Contains(err.Error(), "sha256 mismatch") {
		t.Fatalf("khw's fetch of the tampered kubectl: %v, want a sha256 mismatch", err)
	}
	if out, err := runShell(t, before); err == nil {
		t.Errorf("the commands printed before the mirror changed accept the tampered kubectl:\n%s\ncommands:\n%s", out, before)
	}
	after := printed()
	if out, err := runShell(t, after); err == nil {
		t.Errorf("the commands printed after the mirror changed accept the tampered kubectl:\n%s\ncommands:\n%s", out, after)
	}
	for _, sh := range []string{before, after} {
		if strings.Contains(sh, ".sha256") || strings.Contains(sh, "SHA256SUMS") || strings.Contains(sh, "sha256sum -c --ignore-missing") {
			t.Errorf("the commands read a checksum file of the mirror:\n%s", sh)
		}
	}
}
