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
)

// TestBinaryFetchVerifies runs the download commands of a binary, as the
// labs show them, against a directory mirror: sha256sum -c passes for
// the published digest in either format (a file with only the digest, a
// sha256sum list naming other files too) and stops the commands for a
// download that does not match.
func TestBinaryFetchVerifies(t *testing.T) {
	mirror := t.TempDir()
	t.Setenv(components.EnvMirror, mirror)
	put := func(url string, data []byte) {
		t.Helper()
		loc, _, err := components.MirrorLocation(mirror, url)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(loc), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(loc, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	digest := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	bin := []byte("kubelet binary")
	hexR := components.Resolved{URL: "https://dl.k8s.io/release/v1.37.2/bin/linux/amd64/kubelet", FileName: "kubelet",
		ChecksumURL: "https://dl.k8s.io/release/v1.37.2/bin/linux/amd64/kubelet.sha256", ChecksumFormat: components.ChecksumHex}
	put(hexR.URL, bin)
	put(hexR.ChecksumURL, []byte(digest(bin)+"\n"))
	listR := components.Resolved{URL: "https://github.com/opencontainers/runc/releases/download/v1.5.2/runc.amd64", FileName: "runc.amd64",
		ChecksumURL: "https://github.com/opencontainers/runc/releases/download/v1.5.2/runc.sha256sum", ChecksumFormat: components.ChecksumSHA256Sum}
	put(listR.URL, bin)
	put(listR.ChecksumURL, []byte(digest([]byte("other"))+"  runc.arm64\n"+digest(bin)+"  runc.amd64\n"))
	for _, r := range []components.Resolved{hexR, listR} {
		f := newBinaryFile(r, components.File{Target: "/usr/local/bin/x", Mode: 0o755})
		if f.Src != r.FileName {
			t.Errorf("%s: the copy to the node names %q, want the download %q", r.FileName, f.Src, r.FileName)
		}
		run := func() (string, error) {
			cmd := exec.Command("bash", "-c", "set -euo pipefail\n"+f.Fetch)
			cmd.Dir = t.TempDir()
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		if out, err := run(); err != nil || !strings.Contains(out, r.FileName+": OK") {
			t.Errorf("%s: %v\n%s\ncommands:\n%s", r.FileName, err, out, f.Fetch)
		}
		put(r.URL, []byte("tampered"))
		if out, err := run(); err == nil {
			t.Errorf("%s: a tampered download passed the commands' check:\n%s", r.FileName, out)
		}
		put(r.URL, bin)
	}
}
