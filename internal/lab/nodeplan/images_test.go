package nodeplan

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
)

// TestImageCommands: with a directory mirror, the jumpbox part of the
// shown image commands copies each tarball from the mirror's layout and
// checks it with sha256sum -c against the digest beside it (run here with
// bash: a tarball that does not match stops them); without a mirror the
// node pulls each image itself.
func TestImageCommands(t *testing.T) {
	c := config.Default("t", config.ArchARM64, config.ProviderNspawn)
	w1, _ := c.Node("w1")
	refs, err := imageRefs(c)
	if err != nil {
		t.Fatal(err)
	}
	mirror, dl := t.TempDir(), t.TempDir()
	for _, ref := range refs {
		p, err := components.ImageMirrorPath(ref, config.ArchARM64)
		if err != nil {
			t.Fatal(err)
		}
		data := []byte("tarball of " + ref)
		sum := sha256.Sum256(data)
		dst := filepath.Join(mirror, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+".sha256", []byte(hex.EncodeToString(sum[:])+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(components.EnvMirror, mirror)
	w := &NodeWant{Node: w1, Downloads: dl}
	jump := func() (string, string) {
		var script, shown string
		for _, cmd := range imageCommands(c, w) {
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
	if _, err := os.Stat(filepath.Join(dl, strings.ReplaceAll(filepath.Base(refs[0]), ":", "_")+".tar")); err != nil {
		t.Errorf("no tarball in the downloads directory: %v", err)
	}
	// A tarball that is not what the mirror lists is refused.
	p, _ := components.ImageMirrorPath(refs[0], config.ArchARM64)
	if err := os.WriteFile(filepath.Join(mirror, filepath.FromSlash(p)), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-c", script).CombinedOutput(); err == nil || !strings.Contains(string(out), "FAILED") {
		t.Errorf("a tampered tarball passed the commands' check: %v\n%s", err, out)
	}

	t.Setenv(components.EnvMirror, "")
	_, shown = jump()
	if !strings.Contains(shown, "w1$ sudo ctr -n k8s.io images pull --platform linux/arm64 "+refs[0]) || strings.Contains(shown, "scp ") {
		t.Errorf("without a mirror, the node should pull each image:\n%s", shown)
	}
}
