package nodeplan

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/components/mirrortest"
	"github.com/khw-dev/khw/internal/config"
)

// TestImageCommands: with a directory mirror, the jumpbox part of the
// shown image commands copies each tarball from the mirror's layout and
// checks it with sha256sum -c against the digest the pinned manifest
// lists (run here with bash); after a tarball and the .sha256 beside it
// are swapped for a consistent pair, the commands printed before and after
// stop. Without a mirror the node pulls each image itself.
func TestImageCommands(t *testing.T) {
	c := config.Default("t", config.ArchARM64, config.ProviderNspawn)
	w1, _ := c.Node("w1")
	refs, err := imageRefs(c)
	if err != nil {
		t.Fatal(err)
	}
	mir := mirrortest.New(t, c, workerImages...)
	mir.Use(t)
	dl := t.TempDir()
	w := &NodeWant{Node: w1, Downloads: dl}
	jump := func() (string, string) {
		var script, shown string
		for _, cmd := range (&artifacts{}).imageCommands(context.Background(), c, w) {
			shown += cmd.String() + "\n"
			if cmd.Node == "" && !strings.HasPrefix(cmd.Shell, "scp ") {
				script += cmd.Shell + "\n"
			}
		}
		return "set -euo pipefail\n" + script, shown
	}
	script, shown := jump()
	if out, err := exec.Command("bash", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("the commands failed: %v\n%s\n%s", err, out, shown)
	}
	for _, want := range []string{"w1$ sudo ctr -n k8s.io images import pause_", `scp -F "$KHW_SSH_CONFIG" ` + dl + "/pause_"} {
		if !strings.Contains(shown, want) {
			t.Errorf("commands lack %q:\n%s", want, shown)
		}
	}
	if strings.Contains(script, ".sha256") {
		t.Errorf("the commands read a checksum file of the mirror:\n%s", script)
	}
	if _, err := os.Stat(filepath.Join(dl, strings.ReplaceAll(filepath.Base(refs[0]), ":", "_")+".tar")); err != nil {
		t.Errorf("no tarball in the downloads directory: %v", err)
	}
	// A tarball that is not what the pinned manifest lists is refused,
	// though the .sha256 beside it agrees with it.
	mir.Tamper(t, "pause-image")
	after, _ := jump()
	for when, sh := range map[string]string{"before": script, "after": after} {
		if out, err := exec.Command("bash", "-c", sh).CombinedOutput(); err == nil || !strings.Contains(string(out), "FAILED") {
			t.Errorf("the commands printed %s the mirror changed accept a tampered tarball: %v\n%s", when, err, out)
		}
	}

	t.Setenv(components.EnvMirror, "")
	_, shown = jump()
	if !strings.Contains(shown, "w1$ sudo ctr -n k8s.io images pull --platform linux/arm64 "+refs[0]) || strings.Contains(shown, "scp ") {
		t.Errorf("without a mirror, the node should pull each image:\n%s", shown)
	}
}
