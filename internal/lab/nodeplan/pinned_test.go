package nodeplan

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/khw-dev/khw/internal/components"
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

// TestDownloadCommandsWithoutAReadableManifest: with a mirror whose
// manifest cannot be read, each download's check is a command that fails
// and says why; the manifest is asked for once in the run, not once per
// step that prints commands.
func TestDownloadCommandsWithoutAReadableManifest(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/"+components.MirrorManifestFile {
			w.Write([]byte("a file")) // the downloads work
			return
		}
		asked.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c := config.Default("t", config.ArchAMD64, config.ProviderNspawn)
	m := &Machines{}
	m.Art.Fetcher = &components.Fetcher{Mirror: srv.URL, MirrorDigest: "sha256:" + strings.Repeat("a", 64), CacheDir: t.TempDir(), Retries: -1}
	for _, names := range [][]string{{"kubectl"}, {"etcd", "runc"}} {
		sh, err := m.DownloadCommands(context.Background(), c, names...)
		if err != nil {
			t.Fatal(err)
		}
		out, err := runShell(t, sh)
		if err == nil || !strings.Contains(out, "no SHA-256 khw trusts to check it against") || !strings.Contains(out, "503") {
			t.Errorf("%v: the commands went on without a digest (%v):\n%s\ncommands:\n%s", names, err, out, sh)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the mirror was asked %d times for its manifest in one run, want once", n)
	}
}
