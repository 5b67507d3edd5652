package lab

import (
	"context"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/components/mirrortest"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// courseArtifacts are the catalog artifacts the labs' commands download.
var courseArtifacts = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl",
	"containerd", "runc", "cni-plugins", "crictl", "kubelet", "kube-proxy", "pause-image", "coredns-image", "agnhost-image"}

// everyByHand returns the commands of every lab of the course as khw lab
// NN --by-hand writes them (every change of a step lab, an Operation's
// commands), by lab ID, for cluster c in state directory d.
func everyByHand(t *testing.T, c *config.Cluster, d state.Dir) map[string][]steps.Command {
	t.Helper()
	env := steps.NewEnv(c, d)
	t.Cleanup(func() { env.Close() })
	s := &cluster.Session{Dir: d, Config: c, Provider: &recProvider{}}
	m := nodeplan.New(s)
	// The packages' installs worked out, as a lab's check does: the .deb
	// lines then name real files.
	m.DebPlans = map[string]*nodeplan.DebPlan{}
	co := &Course{S: s, Env: env, Steps: Steps(m, c)}
	out := map[string][]steps.Command{}
	for _, l := range All() {
		switch {
		case l.HasStep():
			out[l.ID] = co.Commands(l, nil)
		case l.byHand != nil:
			out[l.ID] = l.byHand(context.Background(), c, d)
		}
	}
	return out
}

// TestByHandCommandsQuotePaths: with a state directory and a mirror whose
// paths hold a space and a command substitution, every lab's by-hand
// script parses (bash -n), and run in a sandbox (every program but touch
// replaced by one that does nothing) no substitution of a path runs.
func TestByHandCommandsQuotePaths(t *testing.T) {
	root := t.TempDir()
	c := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	d := state.New(filepath.Join(root, "state dir", "$(touch pwned)"), "lab")
	if err := os.MkdirAll(d.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	mir := mirrortest.New(t, c, courseArtifacts...)
	dir := filepath.Join(root, "mirror dir", "`touch pwned`")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(mir.Dir, dir); err != nil {
		t.Fatal(err)
	}
	t.Setenv(components.EnvMirror, dir)
	t.Setenv(components.EnvMirrorDigest, mir.Pin)
	t.Setenv(components.EnvCacheDir, t.TempDir())
	// Only touch is real, so that a substitution that runs leaves a file,
	// and seq, so that the body of each wait loop runs.
	bin := t.TempDir()
	for _, prog := range []string{"touch", "seq"} {
		p, err := exec.LookPath(prog)
		if err != nil {
			t.Skipf("no %s", prog)
		}
		if err := os.Symlink(p, filepath.Join(bin, prog)); err != nil {
			t.Fatal(err)
		}
	}
	for id, cmds := range everyByHand(t, c, d) {
		p, err := writeByHand(d, id, cmds)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("bash", "-n", p).CombinedOutput(); err != nil {
			t.Errorf("%s: the by-hand script does not parse: %v\n%s", id, err, out)
			continue
		}
		script, _ := os.ReadFile(p)
		sandboxed := filepath.Join(t.TempDir(), "script")
		// Every line runs (no set -e), each program is a no-op.
		if err := os.WriteFile(sandboxed, []byte(strings.Replace(string(script), "set -euo pipefail", "set +e", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, "bash", "-c", `command_not_found_handle() { return 0; }; . "$1"`, "_", sandboxed)
		cmd.Env = []string{"PATH=" + bin, "HOME=" + t.TempDir(), "KHW_SSH_CONFIG=" + filepath.Join(root, "ssh config")}
		cmd.Dir = t.TempDir()
		cmd.Stdin = strings.NewReader("")
		out, _ := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Errorf("%s: the sandboxed script did not end:\n%s", id, out)
		}
		cancel()
	}
	filepath.WalkDir(filepath.Dir(root), func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Name() == "pwned" {
			t.Errorf("a command substitution in a path ran: %s", p)
		}
		return nil
	})
}

// TestByHandCommandsHideMirrorCredentials: a mirror URL with a user and a
// password is in no by-hand command of any lab, printed or written to
// <state>/labs/by-hand-NN.sh: the downloads name "$KHW_MIRROR", from which
// curl takes the credentials, and still fetch and verify each file.
func TestByHandCommandsHideMirrorCredentials(t *testing.T) {
	c := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	mir := mirrortest.New(t, c, courseArtifacts...)
	files := http.FileServer(http.Dir(mir.Dir))
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "teacher" || p != "s3cretpw" {
			http.Error(rw, "auth", http.StatusUnauthorized)
			return
		}
		files.ServeHTTP(rw, r)
	}))
	defer srv.Close()
	withCreds := strings.Replace(srv.URL, "http://", "http://teacher:s3cretpw@", 1)
	t.Setenv(components.EnvMirror, withCreds)
	t.Setenv(components.EnvMirrorDigest, mir.Pin)
	t.Setenv(components.EnvCacheDir, t.TempDir())
	d := state.New(t.TempDir(), "lab")
	if err := os.MkdirAll(d.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	var downloads []string
	for id, cmds := range everyByHand(t, c, d) {
		p, err := writeByHand(d, id, cmds)
		if err != nil {
			t.Fatal(err)
		}
		script, _ := os.ReadFile(p)
		var shown strings.Builder
		for _, cmd := range cmds {
			shown.WriteString(cmd.String() + "\n")
			if cmd.Node == "" && strings.Contains(cmd.Shell, "sha256sum -c") {
				downloads = append(downloads, cmd.Shell)
			}
		}
		for what, text := range map[string]string{"printed": shown.String(), "written to " + p: string(script)} {
			if strings.Contains(text, "s3cretpw") {
				t.Errorf("%s: the mirror's password is in the commands %s:\n%s", id, what, text)
			}
		}
	}
	if len(downloads) == 0 {
		t.Fatal("no lab downloads anything from the mirror")
	}
	// Typed in a shell where $KHW_MIRROR holds the credentials, as khw
	// shell inherits it, the downloads work.
	for _, sh := range downloads {
		cmd := exec.Command("bash", "-c", "set -euo pipefail\n"+sh)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), components.EnvMirror+"="+withCreds, "KHW_STATE_DIR="+filepath.Dir(d.Root), "KHW_CLUSTER=lab")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), ": OK") {
			t.Errorf("the download commands failed with the credentials in $KHW_MIRROR: %v\n%s\ncommands:\n%s", err, out, sh)
		}
	}
}
