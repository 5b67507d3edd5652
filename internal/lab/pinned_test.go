package lab

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/components/mirrortest"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// byHandStubs stand in for what the by-hand script reaches beyond the
// jumpbox: ssh reads a node's commands and runs none, scp and kubectl do
// nothing. What runs for real is the jumpbox's own work: the downloads
// from the mirror, their checks and extractions.
const byHandStubs = "ssh() { cat >/dev/null; }\nscp() { :; }\nkubectl() { :; }\nexport -f ssh scp kubectl\n"

// TestWorkersByHandRefusesATamperedMirror runs lab 07's by-hand script,
// as khw lab 07 --by-hand writes it, with a directory mirror: against the
// genuine mirror it passes, every download checked; once kubelet and
// kubelet.sha256 in the mirror were swapped for a consistent pair that the
// pinned manifest does not list, it stops at kubelet's check, as khw's own
// fetch would. Both when khw fetched the binaries before printing (as the
// lab's check does) and when it printed them from the manifest alone.
func TestWorkersByHandRefusesATamperedMirror(t *testing.T) {
	c := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	bins := []string{"containerd", "runc", "cni-plugins", "crictl", "kubelet", "kube-proxy"}
	mir := mirrortest.New(t, c, append(bins, "pause-image", "coredns-image", "agnhost-image")...)
	mir.Use(t)
	d := state.New(t.TempDir(), "lab")
	if err := os.MkdirAll(d.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	env := steps.NewEnv(c, d)
	defer env.Close()
	l := mustLab(t, labid.Workers)
	script := func(fetch bool) string {
		t.Helper()
		s := &cluster.Session{Dir: d, Config: c, Provider: &recProvider{}}
		m := nodeplan.New(s)
		// The packages' install worked out (as the lab's check does):
		// nothing to add, so no .deb line without a plan.
		m.DebPlans = map[string]*nodeplan.DebPlan{}
		for _, n := range c.Workers() {
			m.DebPlans[n.Name+" iptables"] = &nodeplan.DebPlan{}
		}
		if fetch {
			if err := m.FetchBinaries(context.Background(), env, bins...); err != nil {
				t.Fatal(err)
			}
		}
		co := &Course{S: s, Env: env, Steps: Steps(m, c)}
		return byHandScript(l.ID, co.Commands(l, nil))
	}
	run := func(sh string) (string, error) {
		cmd := exec.Command("bash", "-c", byHandStubs+"bash -s")
		cmd.Stdin = strings.NewReader(sh)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "KHW_SSH_CONFIG=/nonexistent")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	scripts := map[string]string{"printed after khw's fetch": script(true), "printed from the pinned manifest": script(false)}
	for what, sh := range scripts {
		out, err := run(sh)
		if err != nil || !strings.Contains(out, "kubelet: OK") || !strings.Contains(out, "pause_3.10.2.tar: OK") {
			t.Fatalf("%s: against the genuine mirror: %v\n%s\nscript:\n%s", what, err, out, sh)
		}
		if strings.Contains(sh, ".sha256 .") || strings.Contains(sh, "sha256sum -c --ignore-missing") {
			t.Errorf("%s: the script reads a checksum file of the mirror:\n%s", what, sh)
		}
	}
	mir.Tamper(t, "kubelet")
	for what, sh := range scripts {
		if out, err := run(sh); err == nil || !strings.Contains(out, "kubelet: FAILED") {
			t.Errorf("%s: the script accepts the tampered kubelet (%v):\n%s", what, err, out)
		}
	}
}
