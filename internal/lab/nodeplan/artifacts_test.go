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
// labs show them, against a directory mirror: sha256sum -c passes for the
// digest khw trusts and stops the commands for a download that does not
// match it, whatever the checksum file beside it in the mirror says; with
// a mirror and no digest the check fails and says why; without a mirror
// the digest comes from the project's own checksum file over HTTPS.
func TestBinaryFetchVerifies(t *testing.T) {
	mirror := t.TempDir()
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
	listR := components.Resolved{URL: "https://github.com/opencontainers/runc/releases/download/v1.5.2/runc.amd64", FileName: "runc.amd64",
		ChecksumURL: "https://github.com/opencontainers/runc/releases/download/v1.5.2/runc.sha256sum", ChecksumFormat: components.ChecksumSHA256Sum}
	file := components.File{Target: "/usr/local/bin/x", Mode: 0o755}
	run := func(f *wantFile) (string, error) {
		cmd := exec.Command("bash", "-c", "set -euo pipefail\n"+f.Fetch)
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, r := range []components.Resolved{hexR, listR} {
		put(r.URL, bin)
		f := newBinaryFile(mirror, r, file, expected{sum: digest(bin)})
		if f.Src != r.FileName {
			t.Errorf("%s: the copy to the node names %q, want the download %q", r.FileName, f.Src, r.FileName)
		}
		if out, err := run(f); err != nil || !strings.Contains(out, r.FileName+": OK") {
			t.Errorf("%s: %v\n%s\ncommands:\n%s", r.FileName, err, out, f.Fetch)
		}
		// The mirror's checksum file agrees with the swapped file: it
		// does not count.
		forged := []byte("tampered")
		put(r.URL, forged)
		put(r.ChecksumURL, []byte(digest(forged)+"  "+r.FileName+"\n"))
		if out, err := run(f); err == nil {
			t.Errorf("%s: a tampered download passed the commands' check:\n%s", r.FileName, out)
		}
		missing := newBinaryFile(mirror, r, file, expected{missing: "the pinned mirror manifest does not list it"})
		if out, err := run(missing); err == nil || !strings.Contains(out, r.FileName+": no SHA-256 khw trusts to check it against: the pinned mirror manifest does not list it") {
			t.Errorf("%s: with a mirror and no digest the commands went on (%v):\n%s", r.FileName, err, out)
		}
		official := newBinaryFile("", r, file, expected{})
		if want := "curl -fLO " + r.ChecksumURL; !strings.Contains(official.Fetch, want) || strings.Contains(official.Fetch, mirror) {
			t.Errorf("%s: without a mirror the commands should check against %s:\n%s", r.FileName, r.ChecksumURL, official.Fetch)
		}
	}
}
