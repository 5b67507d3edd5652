package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/jumpbox"
	"github.com/khw-dev/khw/internal/state"
)

// TestMain runs the tests without the caller's cluster selection: a shell
// with $KHW_CLUSTER or $KHW_STATE_DIR set (as after `khw shell`) would
// otherwise choose the cluster for commands that name none.
func TestMain(m *testing.M) {
	os.Unsetenv(state.EnvCluster)
	os.Unsetenv(state.EnvStateDir)
	os.Exit(m.Run())
}

// run executes khw with args against a state dir and returns stdout, stderr
// and the exit code main would use.
func run(t *testing.T, stateDir string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCmd(&out, &errOut)
	cmd.SetArgs(append([]string{"--state-dir", stateDir}, args...))
	err := cmd.Execute()
	if err != nil {
		printError(&errOut, err)
	}
	return out.String(), errOut.String(), exitCode(err)
}

func TestInitWritesClusterAndStateDir(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	out, errOut, code := run(t, base, "init", "--name", "lab", "--arch", "amd64", "--provider", "nspawn")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "cluster \"lab\", amd64, provider nspawn") {
		t.Errorf("output: %s", out)
	}
	root := filepath.Join(base, "lab")
	st, err := os.Stat(root)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("state dir: %v %v", st, err)
	}
	fst, err := os.Stat(filepath.Join(root, "cluster.yaml"))
	if err != nil || fst.Mode().Perm() != 0o600 {
		t.Fatalf("cluster.yaml: %v %v", fst, err)
	}
	data, _ := os.ReadFile(filepath.Join(root, "cluster.yaml"))
	for _, want := range []string{"name: lab", "arch: amd64", "provider: nspawn", "tlsBootstrap: true", "192.168.122.23"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("cluster.yaml lacks %q", want)
		}
	}

	// A second init refuses to overwrite and leaves the file untouched.
	os.WriteFile(filepath.Join(root, "cluster.yaml"), append(data, []byte("# edited by hand\n")...), 0o600)
	_, errOut, code = run(t, base, "init", "--name", "lab")
	if code != exitFailed || !strings.Contains(errOut, "--force") {
		t.Fatalf("second init: exit %d, %s", code, errOut)
	}
	now, _ := os.ReadFile(filepath.Join(root, "cluster.yaml"))
	if !strings.Contains(string(now), "# edited by hand") {
		t.Fatal("init overwrote cluster.yaml without --force")
	}
	if _, errOut, code = run(t, base, "init", "--name", "lab", "--force", "--provider", "libvirt"); code != 0 {
		t.Fatalf("init --force: %d %s", code, errOut)
	}
	now, _ = os.ReadFile(filepath.Join(root, "cluster.yaml"))
	if strings.Contains(string(now), "# edited by hand") || !strings.Contains(string(now), "provider: libvirt") {
		t.Fatal("init --force did not rewrite cluster.yaml")
	}
}

func TestInitRejectsBadFlagsAndWritesNothing(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	cases := []struct {
		args  []string
		code  int
		words string
	}{
		{[]string{"init", "--arch", "x86"}, exitUsage, `--arch "x86": use arm64 or amd64`},
		{[]string{"init", "--provider", "vbox"}, exitUsage, `--provider "vbox"`},
		{[]string{"init", "--name", "Bad_Name"}, exitUsage, "--name: \"Bad_Name\" is not a valid cluster name"},
		{[]string{"init", "--name", ""}, exitUsage, "--name: \"\" is not a valid cluster name"},
		{[]string{"--cluster", "../etc", "init"}, exitUsage, "--cluster \"../etc\" is not a valid cluster name"},
		{[]string{"bogus"}, exitUsage, "unknown command"},
		{[]string{"init", "--no-such-flag"}, exitUsage, "unknown flag"},
		{[]string{"init", "extra-arg"}, exitUsage, "accepts 0 arg"},
		{[]string{"--cluster", "a", "init", "--name", "b"}, exitUsage, "disagree"},
	}
	for _, tc := range cases {
		_, errOut, code := run(t, base, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.words) {
			t.Errorf("%v: exit %d (want %d), stderr %q should contain %q", tc.args, code, tc.code, errOut, tc.words)
		}
	}
	if _, err := os.Stat(base); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(base)
		t.Fatalf("rejected init left state behind: %v", entries)
	}
}

func TestConfigValidateExitCodes(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, e, code := run(t, base, "config", "validate"); code != exitFailed || !strings.Contains(e, "khw init") {
		t.Fatalf("validate without cluster: %d %s", code, e)
	}
	run(t, base, "init", "--provider", "nspawn")
	out, e, code := run(t, base, "config", "validate")
	if code != 0 || !strings.Contains(out, "is valid: 7 nodes (3 control planes, 3 workers)") {
		t.Fatalf("validate: %d %s %s", code, out, e)
	}
	p := filepath.Join(base, "khw", "cluster.yaml")
	data, _ := os.ReadFile(p)
	bad := strings.Replace(string(data), "podCIDR: 10.200.1.0/24", "podCIDR: 10.200.0.0/24", 1)
	os.WriteFile(p, []byte(bad), 0o600)
	_, e, code = run(t, base, "config", "validate")
	if code != exitInvalid || !strings.Contains(e, "nodes[5] (w2).podCIDR") {
		t.Fatalf("invalid cluster: exit %d, %s", code, e)
	}
	os.WriteFile(p, []byte(string(data)+"surprise: 1\n"), 0o600)
	_, e, code = run(t, base, "config", "validate")
	if code != exitInvalid || !strings.Contains(e, `unknown field "surprise"`) {
		t.Fatalf("unknown field: exit %d, %s", code, e)
	}
}

func TestClusterSelection(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	run(t, base, "init", "--name", "one", "--provider", "nspawn")
	// One cluster: chosen without --cluster.
	if out, e, code := run(t, base, "config", "validate"); code != 0 || !strings.Contains(out, filepath.Join("one", "cluster.yaml")) {
		t.Fatalf("single cluster not picked: %d %s %s", code, out, e)
	}
	run(t, base, "init", "--name", "two", "--provider", "nspawn")
	if _, e, code := run(t, base, "config", "validate"); code != exitUsage || !strings.Contains(e, "--cluster") {
		t.Fatalf("two clusters must need --cluster: %d %s", code, e)
	}
	if out, _, code := run(t, base, "-c", "two", "config", "validate"); code != 0 || !strings.Contains(out, filepath.Join("two", "cluster.yaml")) {
		t.Fatalf("--cluster two: %d %s", code, out)
	}
}

func TestCompletionAndHelp(t *testing.T) {
	base := t.TempDir()
	out, _, code := run(t, base, "completion", "bash")
	if code != 0 || !strings.Contains(out, "bash completion") {
		t.Fatalf("completion bash: %d", code)
	}
	out, _, code = run(t, base, "--help")
	if code != 0 || !strings.Contains(out, "192.168.122.23") || !strings.Contains(out, "Exit codes") {
		t.Fatalf("help should teach the topology and exit codes: %s", out)
	}
}

// TestMainJobEndToEnd runs the README's main job in-process and checks that a
// second run changes nothing.
func TestMainJobEndToEnd(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	steps := [][]string{{"init", "--provider", "nspawn"}, {"pki"}, {"kubeconfig"}, {"encryption"}, {"render"}}
	for _, s := range steps {
		if out, e, code := run(t, base, s...); code != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", s, code, out, e)
		}
	}
	root := filepath.Join(base, "khw")
	for _, p := range []string{"pki/ca.pem", "pki/ca-key.pem", "pki/admin-csr.json", "pki/ca-config.json", "kubeconfigs/admin.kubeconfig",
		"kubeconfigs/w3-bootstrap.kubeconfig", "encryption-config.yaml", "nodes/cp1/etc/systemd/system/etcd.service",
		"nodes/lb/etc/haproxy/haproxy.cfg", "nodes/w3/var/lib/kubelet/kubelet-config.yaml", "manifests"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("main job did not produce %s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "pki", "w3.pem")); !os.IsNotExist(err) {
		t.Errorf("w3 joins by TLS bootstrap and must get no cert from khw: %v", err)
	}
	// Second run: nothing changes.
	if out, _, code := run(t, base, "pki"); code != 0 || !strings.Contains(out, ": 0 files changed") || strings.Contains(out, "reissued") {
		t.Errorf("second pki run changed something:\n%s", out)
	}
	if out, _, code := run(t, base, "kubeconfig"); code != 0 || strings.Contains(out, "created") || strings.Contains(out, "updated") {
		t.Errorf("second kubeconfig run changed something:\n%s", out)
	}
	if out, _, code := run(t, base, "encryption"); code != 0 || !strings.Contains(out, "kept") {
		t.Errorf("second encryption run:\n%s", out)
	}
	if out, _, code := run(t, base, "render"); code != 0 || !strings.Contains(out, " 0 files written") {
		t.Errorf("second render run:\n%s", out)
	}
	// inspect names the identity.
	out, _, code := run(t, base, "pki", "inspect", "admin")
	if code != 0 || !strings.Contains(out, `user "admin"`) || !strings.Contains(out, "system:masters") || !strings.Contains(out, "cluster-admin") {
		t.Errorf("inspect admin:\n%s", out)
	}
	if _, e, code := run(t, base, "pki", "inspect", "nosuch"); code != exitUsage || !strings.Contains(e, "nosuch") || !strings.Contains(e, "kube-proxy") {
		t.Errorf("inspect of a missing cert should list the certs: %d %s", code, e)
	}
	if _, e, code := run(t, base, "pki", "inspect", "../kubeconfigs/admin"); code != exitUsage {
		t.Errorf("inspect of a path: %d %s", code, e)
	}
	if _, e, code := run(t, base, "pki", "inspect", "w3"); code != exitUsage || !strings.Contains(e, "TLS bootstrap") {
		t.Errorf("inspect w3 should explain TLS bootstrap: %d %s", code, e)
	}
	// A second khw working on the same cluster is refused, not interleaved.
	unlock, err := state.New(base, "khw").Lock()
	if err != nil {
		t.Fatal(err)
	}
	if _, e, code := run(t, base, "pki"); code != exitFailed || !strings.Contains(e, "another khw") {
		t.Errorf("pki while locked: %d %s", code, e)
	}
	unlock()
	// A key printed anywhere would be a leak.
	key, _ := os.ReadFile(filepath.Join(root, "pki", "ca-key.pem"))
	for _, s := range steps[1:] {
		out, e, _ := run(t, base, s...)
		if strings.Contains(out+e, string(key[40:80])) {
			t.Fatalf("%v printed the CA key", s)
		}
	}
}

func TestEncryptionInvalidFileExit3(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	run(t, base, "init", "--provider", "nspawn")
	p := filepath.Join(base, "khw", "encryption-config.yaml")
	os.WriteFile(p, []byte("kind: [unclosed\n"), 0o600)
	_, e, code := run(t, base, "encryption")
	if code != exitInvalid || !strings.Contains(e, "not valid YAML") {
		t.Fatalf("exit %d: %s", code, e)
	}
	if b, _ := os.ReadFile(p); string(b) != "kind: [unclosed\n" {
		t.Fatal("an invalid encryption config was rewritten")
	}
}

func TestLostCAKeyIsRefused(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	run(t, base, "init", "--provider", "nspawn")
	run(t, base, "pki")
	pkiDir := filepath.Join(base, "khw", "pki")
	admin, _ := os.ReadFile(filepath.Join(pkiDir, "admin.pem"))
	os.Remove(filepath.Join(pkiDir, "ca-key.pem"))
	_, e, code := run(t, base, "pki")
	if code != exitInvalid || !strings.Contains(e, "ca-key.pem") || !strings.Contains(e, "--new-ca") {
		t.Fatalf("lost CA key: exit %d, %s", code, e)
	}
	if now, _ := os.ReadFile(filepath.Join(pkiDir, "admin.pem")); string(now) != string(admin) {
		t.Fatal("certs were rewritten although the CA key was refused")
	}
	out, e, code := run(t, base, "pki", "--new-ca")
	if code != 0 || !strings.Contains(out, "admin") {
		t.Fatalf("--new-ca: exit %d %s %s", code, out, e)
	}
	// A key left world-readable is put back to 0600 and said so.
	os.Chmod(filepath.Join(pkiDir, "admin-key.pem"), 0o644)
	out, _, _ = run(t, base, "pki")
	if !strings.Contains(out, "fixed mode") || !strings.Contains(out, "admin-key.pem") {
		t.Fatalf("mode fix not reported:\n%s", out)
	}
}

// TestExitCodesOfWrappedErrors: the exit code follows the cause through
// the wrapping a step or a command adds.
func TestExitCodesOfWrappedErrors(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("step 04-etcd: apply failed: %w", context.Canceled), exitInterrupted},
		{fmt.Errorf("cluster x: %w", &jumpbox.NotFoundError{File: "nosuch", Path: "/bin"}), exitNotFound},
		{usagef("--from: no step %q", "99"), exitUsage},
		{errors.New("plain failure"), exitFailed},
	} {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
