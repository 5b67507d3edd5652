package jumpbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm"
)

// EnvLabObserve is set (to 1) by khw lab for the observe commands it runs
// through khw shell: before lab 03 there is no kubeconfig, as expected,
// and Enter does not warn about it.
const EnvLabObserve = "KHW_LAB_OBSERVE"

// WithSelf is path with the directory of the running khw in front, so
// that khw shell can run khw itself (a lab's by-hand commands use khw
// etcd restore --dry-run); path unchanged when it is empty (Prepare then
// uses the login PATH) or the executable cannot be found.
func WithSelf(path string) string {
	self, err := os.Executable()
	if err != nil || path == "" {
		return path
	}
	return filepath.Dir(self) + string(os.PathListSeparator) + path
}

// InstallKubectl is EnsureKubectl for the host's architecture from the
// artifact cache, $KHW_MIRROR or the official URL (components.EnvFetcher).
// progress gets the fetch's progress lines (nil: none); retries is
// Fetcher.Retries (0: the default, -1: none).
func InstallKubectl(ctx context.Context, c *config.Cluster, d state.Dir, progress io.Writer, retries int) (Kubectl, error) {
	f := components.EnvFetcher()
	f.Progress, f.Retries = progress, retries
	// runtime.GOARCH as it is, not mapped to a node architecture as khw
	// init's default is: kubectl must run here, and an architecture
	// without a kubectl build is an error, not arm64.
	return EnsureKubectl(ctx, c, d, runtime.GOARCH, &f)
}

// Enter is what khw shell and khw kubectl do before they run a program:
// the Session (Prepare, with path), kubectl installed in BinDir
// (InstallKubectl), and on notes a line when kubectl was (re)written and a
// warning when there is no admin kubeconfig yet (unless EnvLabObserve is
// set). With kubectlOptional (khw shell) kubectl is a convenience: one that
// cannot be installed is a warning on notes, fetched without retries so
// that the shell starts without waiting; else (khw kubectl) its fetch
// reports progress on notes, retries, and its failure is the error.
// Errors: Prepare's, and kubectl's unless optional.
func Enter(ctx context.Context, c *config.Cluster, d state.Dir, path string, notes io.Writer, kubectlOptional bool) (*Session, Kubectl, error) {
	s, err := Prepare(c, d, path)
	if err != nil {
		return nil, Kubectl{}, err
	}
	var k Kubectl
	if kubectlOptional {
		if k, err = InstallKubectl(ctx, c, d, nil, -1); err != nil {
			fmt.Fprintf(notes, "khw: warning: no kubectl in %s: %v\n", BinDir(d), err)
		}
	} else if k, err = InstallKubectl(ctx, c, d, notes, 0); err != nil {
		return nil, k, err
	}
	if err == nil && k.Written {
		fmt.Fprintf(notes, "khw: installed kubectl %s (%s) at %s\n", k.Version, k.Arch, k.Path)
	}
	if !fsutil.Exists(s.Kubeconfig) && os.Getenv(EnvLabObserve) == "" {
		fmt.Fprintf(notes, "khw: warning: no admin kubeconfig at %s yet (fix: khw pki && khw kubeconfig); kubectl will not reach the cluster\n", s.Kubeconfig)
	}
	return s, k, nil
}

// Banner is the one line khw shell prints before the interactive shell
// of cluster c.
func (s *Session) Banner(c *config.Cluster) string {
	where := "network namespace " + vm.NetnsName(c.Name)
	if s.Netns == "" {
		where = "the host's network (provider " + c.Provider + ")"
	}
	return fmt.Sprintf("khw shell: cluster %s, in %s; kubectl is admin, ssh -F \"$%s\" cp1 reaches a node; exit or Ctrl-D leaves",
		c.Name, where, EnvSSHConfig)
}

// ObserveInShell runs one observe block of a lab (shell text) with sh -c
// inside khw shell of cluster (state d) — this same program, with
// EnvLabObserve set — so that it sees what the student's shell sees; its
// output and errors go to w.
func ObserveInShell(ctx context.Context, d state.Dir, cluster, shell string, w io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, self, "--state-dir", filepath.Dir(d.Root), "--cluster", cluster, "shell", "--", "sh", "-c", shell)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Env = append(os.Environ(), EnvLabObserve+"=1")
	return cmd.Run()
}
