package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/state"
)

// TestInitKeepsASharedStateDir: khw init --state-dir DIR with a shared
// 1777 DIR leaves DIR's mode alone (it used to chmod it to 0700); what khw
// creates in it is 0700 (directories) and 0600 (cluster.yaml).
func TestInitKeepsASharedStateDir(t *testing.T) {
	base := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(base, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	out, e, code := run(t, base, "init", "--name", "lab", "--provider", "nspawn")
	if code != 0 {
		t.Fatalf("init: exit %d: %s", code, e)
	}
	if _, e, code := run(t, base, "pki"); code != 0 {
		t.Fatalf("pki: exit %d: %s", code, e)
	}
	if st, _ := os.Stat(base); st.Mode()&os.ModePerm != 0o777 || st.Mode()&os.ModeSticky == 0 {
		t.Errorf("the state directory given lost its mode: %v, want drwxrwxrwt", st.Mode())
	}
	root := filepath.Join(base, "lab")
	for p, want := range map[string]os.FileMode{root: 0o700, filepath.Join(root, "pki"): 0o700,
		filepath.Join(root, "cluster.yaml"): 0o600, filepath.Join(root, "pki", "ca-key.pem"): 0o600} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %v", p, st.Mode().Perm(), err, want)
		}
	}
	if !strings.Contains(out, "State directory: "+root+" (mode 0700)") {
		t.Errorf("init output: %s", out)
	}
}

// TestSystemStateDirsAreRefused: / and /tmp (and $HOME, and a link to one)
// are refused as --state-dir and as $KHW_STATE_DIR, with an error naming
// both and the fix, before anything is created.
func TestSystemStateDirsAreRefused(t *testing.T) {
	// A guard first: should the refusal ever be lost, this test must not
	// be the one that runs khw init on / as root.
	for _, p := range []string{"/", "/tmp"} {
		if state.CheckStateDir("x", p) == nil {
			t.Fatalf("%s is accepted as a state directory; not running khw init on it", p)
		}
	}
	tmp := t.TempDir()
	home := filepath.Join(tmp, "home")
	os.Mkdir(home, 0o755)
	t.Setenv("HOME", home)
	link := filepath.Join(tmp, "link-to-home")
	os.Symlink(home, link)
	for _, base := range []string{"/", "/tmp", home, link} {
		for _, args := range [][]string{{"init", "--name", "lab", "--provider", "nspawn"}, {"config", "validate"}, {"status"}} {
			_, e, code := run(t, base, args...)
			if code != exitUsage || !strings.Contains(e, "--state-dir (or $KHW_STATE_DIR)") || !strings.Contains(e, "fix:") {
				t.Errorf("--state-dir %s %s: exit %d: %s", base, args[0], code, e)
			}
		}
	}
	if entries, _ := os.ReadDir(home); len(entries) != 0 {
		t.Errorf("a refused init wrote into $HOME: %v", entries)
	}
	if st, _ := os.Stat(home); st.Mode().Perm() != 0o755 {
		t.Errorf("$HOME changed to %v", st.Mode().Perm())
	}
	// The same through the environment, without the flag.
	t.Setenv(state.EnvStateDir, "/tmp")
	var out, errOut bytes.Buffer
	cmd := newRootCmd(&out, &errOut)
	cmd.SetArgs([]string{"init", "--name", "lab"})
	err := cmd.Execute()
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), `"/tmp" is a system directory`) {
		t.Errorf("$KHW_STATE_DIR=/tmp: %v", err)
	}
}

// TestInitRefusesAForeignClusterDir: a directory that is in the way of the
// cluster directory and is not khw's (no cluster.yaml, no .lock) is not
// written into.
func TestInitRefusesAForeignClusterDir(t *testing.T) {
	base := t.TempDir()
	web := filepath.Join(base, "www")
	os.Mkdir(web, 0o755)
	os.WriteFile(filepath.Join(web, "index.html"), []byte("hi"), 0o644)
	_, e, code := run(t, base, "init", "--name", "www")
	if code != exitFailed || !strings.Contains(e, web+" exists and is not a khw cluster directory") {
		t.Fatalf("exit %d: %s", code, e)
	}
	if entries, _ := os.ReadDir(web); len(entries) != 1 {
		t.Errorf("init wrote into a foreign directory: %v", entries)
	}
	// An empty directory, or one khw locked before, is fine.
	os.Mkdir(filepath.Join(base, "empty"), 0o750)
	if _, e, code := run(t, base, "init", "--name", "empty"); code != 0 {
		t.Errorf("empty directory: %s", e)
	}
	if st, _ := os.Stat(filepath.Join(base, "empty")); st.Mode().Perm() != 0o750 {
		t.Errorf("an existing cluster directory was changed to %v", st.Mode().Perm())
	}
}
