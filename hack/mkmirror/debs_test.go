package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/components/debtest"
)

// gpgKey makes a throw-away signing key in a temporary GNUPGHOME and
// returns the home and an exported keyring file for gpgv.
func gpgKey(t *testing.T, name string) (home, keyring string) {
	t.Helper()
	for _, tool := range []string{"gpg", "gpgv", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIP: no %s", tool)
		}
	}
	home = t.TempDir()
	gpg := func(args ...string) []byte {
		t.Helper()
		out, err := exec.Command("gpg", append([]string{"--homedir", home, "--batch", "--quiet"}, args...)...).Output()
		if err != nil {
			t.Fatalf("gpg %v: %v", args, err)
		}
		return out
	}
	gpg("--passphrase", "", "--quick-gen-key", name+" <archive@example.invalid>", "ed25519", "sign", "never")
	keyring = filepath.Join(t.TempDir(), "keyring.gpg")
	if err := os.WriteFile(keyring, gpg("--export"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("gpgconf", "--homedir", home, "--kill", "all").Run() })
	return home, keyring
}

var debsArchive = components.DebArchive{OS: "debian", Codename: "bookworm", Arches: []string{"amd64"},
	URL: "https://deb.debian.org/debian", Suites: []string{"bookworm", "bookworm-updates"}, Components: []string{"main"}}

// TestNodeDebs builds node packages from a fake signed archive served over
// HTTP and checks that khw then reads them through the pinned mirror; an
// InRelease signed by a key outside the keyring is refused.
func TestNodeDebs(t *testing.T) {
	home, keyring := gpgKey(t, "khw test archive")
	src := t.TempDir()
	a, err := debtest.Write(src, debsArchive, "amd64", []debtest.Pkg{
		{Name: "haproxy", Version: "2.6.12-1", Depends: "libc6 (>= 2.34), liblua5.3-0", Files: map[string]string{"/usr/sbin/haproxy": "x"}},
		{Name: "liblua5.3-0", Version: "5.3.6-2", Depends: "libc6"},
		{Name: "iptables", Version: "1.8.9-2", Depends: "libc6"},
		{Name: "jq", Version: "1.6-2.1", Depends: "libjq1 (= 1.6-2.1)"},
		{Name: "libjq1", Version: "1.6-2.1", Depends: "libonig5"},
		{Name: "libonig5", Version: "6.9.8-1"},
		{Name: "socat", Version: "1.7.4.4-2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(home string) {
		t.Helper()
		in := filepath.Join(filepath.Dir(a.Release), "InRelease")
		os.Remove(in)
		if out, err := exec.Command("gpg", "--homedir", home, "--batch", "--quiet", "--clearsign", "-o", in, a.Release).CombinedOutput(); err != nil {
			t.Fatalf("gpg --clearsign: %v: %s", err, out)
		}
	}
	sign(home)
	srv := httptest.NewServer(http.FileServer(http.Dir(filepath.Join(src, "deb.debian.org"))))
	defer srv.Close()
	manifest := filepath.Join(t.TempDir(), "manifest")
	// The image: libc6, iproute2, iptables, and jq's library (whose own
	// dependency libonig5 it lacks, as a hand-trimmed image may).
	if err := os.WriteFile(manifest, []byte("libc6\t2.36-9\niproute2\t6.1.0-3\niptables:amd64\t1.8.9-2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, pin, err := components.WriteMirrorManifest(out, nil); err != nil || pin == "" {
		t.Fatal(err)
	}
	o := debsOpts{manifest: manifest, distro: "debian/bookworm", from: srv.URL + "/debian", keyring: keyring, arches: []string{"amd64"}}
	entries, summary, err := buildNodeDebs(context.Background(), out, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(summary) != 1 || !strings.Contains(summary[0], "haproxy liblua5.3-0 jq libjq1 libonig5") {
		t.Errorf("summary %q: want the closure haproxy liblua5.3-0 jq libjq1 libonig5 (not iptables, iproute2, socat)", summary)
	}
	pin, err := components.MergeMirrorManifest(out, entries)
	if err != nil {
		t.Fatal(err)
	}
	f := components.Fetcher{Mirror: out, MirrorDigest: pin}
	ix, err := f.DebIndex(context.Background(), debsArchive, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := ix.Closure([]string{"haproxy", "jq"}, map[string]bool{"libc6": true})
	if err != nil {
		t.Fatal(err)
	}
	files, err := ix.FetchDebs(context.Background(), cl)
	if err != nil || len(files) != 5 {
		t.Fatalf("khw reads %d .deb(s) from the built mirror, %v; want 5", len(files), err)
	}
	if _, err := os.Stat(filepath.Join(out, "deb.debian.org/debian/pool/main/s/socat")); err == nil {
		t.Error("socat (not needed) was put into the mirror")
	}

	// Signed by another key: nothing is written.
	other, _ := gpgKey(t, "someone else")
	sign(other)
	out2 := t.TempDir()
	if _, _, err := buildNodeDebs(context.Background(), out2, o); err == nil || !strings.Contains(err.Error(), "InRelease signature does not verify") {
		t.Errorf("foreign signature: err = %v", err)
	}
	if ents, _ := os.ReadDir(out2); len(ents) != 0 {
		t.Errorf("foreign signature: the mirror got %d entries", len(ents))
	}

	// A package nobody has: the error names it.
	o.extra = []string{"nosuch"}
	sign(home)
	if _, _, err := buildNodeDebs(context.Background(), t.TempDir(), o); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("missing package: err = %v", err)
	}
}

// A rebuild of the catalog manifest keeps node packages and other
// versions' artifacts whose files are intact, and drops the altered ones
// and those it lists afresh.
func TestKeptEntries(t *testing.T) {
	dir := t.TempDir()
	put := func(rel, content string) components.MirrorEntry {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return components.MirrorEntry{Path: rel, URL: "https://" + rel, SHA256: hexSum([]byte(content)), Size: int64(len(content))}
	}
	ok := put("deb.debian.org/debian/pool/main/j/jq/jq_1_amd64.deb", "jq")
	bad := put("deb.debian.org/debian/pool/main/h/haproxy/haproxy_1_amd64.deb", "haproxy")
	other := put("dl.k8s.io/release/v1/bin/linux/amd64/kubectl", "kubectl")
	current := put("dl.k8s.io/release/v2/bin/linux/amd64/kubectl", "kubectl 2")
	gone := put("dl.k8s.io/release/v1/bin/linux/amd64/kubelet", "kubelet")
	if _, _, err := components.WriteMirrorManifest(dir, []components.MirrorEntry{ok, bad, other, current, gone}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, filepath.FromSlash(bad.Path)), []byte("changed"), 0o644)
	os.Remove(filepath.Join(dir, filepath.FromSlash(gone.Path)))
	got := keptEntries(dir, map[string]bool{current.Path: true})
	var paths []string
	for _, e := range got {
		paths = append(paths, e.Path)
	}
	if strings.Join(paths, " ") != ok.Path+" "+other.Path {
		t.Errorf("kept %v, want %s and %s", paths, ok.Path, other.Path)
	}
}
