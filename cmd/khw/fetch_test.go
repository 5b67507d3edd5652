package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
)

func hexSum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func put(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeMirror writes every catalog artifact of the default versions for arch
// into dir under its official path, with made-up content and checksum files
// in the published formats, and its manifest, whose pin it puts into
// $KHW_MIRROR_DIGEST. It returns the artifact names and their digests.
func fakeMirror(t *testing.T, dir, arch string) map[string]string {
	t.Helper()
	cat, err := components.Load()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := cat.Resolve(config.Default("khw", arch, config.ProviderLibvirt), arch)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	lines := map[string]string{}
	at := func(u string) string {
		p, _, err := components.MirrorLocation(dir, u)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, r := range rs {
		if r.SHA256 != "" && r.Fallback != nil {
			// Made-up bytes cannot have the pinned digest: stand in for
			// the fallback, as the mirror builder's --vm-image does.
			r = *r.Fallback
		}
		var data []byte
		switch r.Artifact.Format {
		case components.FormatImage:
			img, err := random.Image(256, 1)
			if err != nil {
				t.Fatal(err)
			}
			cf, _ := img.ConfigFile()
			cf = cf.DeepCopy()
			cf.OS, cf.Architecture = "linux", arch
			img, _ = mutate.ConfigFile(img, cf)
			tag, err := name.NewTag(r.Image)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := tarball.Write(tag, img, &buf); err != nil {
				t.Fatal(err)
			}
			data = buf.Bytes()
			rel, _ := components.ImageMirrorPath(r.Image, arch)
			put(t, filepath.Join(dir, rel), data)
			put(t, filepath.Join(dir, rel+".sha256"), []byte(hexSum(data)+"\n"))
			sums[r.Artifact.Name] = hexSum(data)
			continue
		case components.FormatTarGz:
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			tw := tar.NewWriter(zw)
			for _, f := range r.Files {
				body := []byte("fake " + f.Path)
				tw.WriteHeader(&tar.Header{Name: f.Path, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg})
				tw.Write(body)
			}
			tw.Close()
			zw.Close()
			data = buf.Bytes()
		default:
			data = make([]byte, 2048)
			rand.Read(data)
		}
		sums[r.Artifact.Name] = hexSum(data)
		put(t, at(r.URL), data)
		if r.ChecksumFormat == components.ChecksumHex {
			put(t, at(r.ChecksumURL), []byte(hexSum(data)))
		} else {
			lines[r.ChecksumURL] += hexSum(data) + "  " + r.FileName + "\n"
		}
	}
	for u, l := range lines {
		put(t, at(u), []byte(l))
	}
	pin, err := components.ManifestFromDir(dir, rs)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(components.EnvMirrorDigest, pin)
	return sums
}

func TestFetchCommandFromDirectoryMirror(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	mirror := t.TempDir()
	cache := filepath.Join(t.TempDir(), "cache")
	sums := fakeMirror(t, mirror, config.ArchAMD64)
	if _, e, code := run(t, base, "init", "--arch", "amd64", "--provider", "nspawn"); code != 0 {
		t.Fatal(e)
	}
	out, errOut, code := run(t, base, "fetch", "--mirror", mirror, "--cache-dir", cache)
	if code != 0 {
		t.Fatalf("fetch: exit %d\n%s\n%s", code, out, errOut)
	}
	for n, sum := range sums {
		row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(n) + `\s+\S+\s+amd64\s+.*` + sum[:12] + `\s+fetched\s+` + regexp.QuoteMeta(mirror))
		if n == "ubuntu-24.04" {
			if strings.Contains(out, n) {
				t.Errorf("nspawn cluster fetched the VM image:\n%s", out)
			}
			continue
		}
		if !row.MatchString(out) {
			t.Errorf("no table row for %s:\n%s", n, out)
		}
		if !strings.Contains(errOut, "fetched "+n+" ") {
			t.Errorf("no progress line for %s:\n%s", n, errOut)
		}
	}
	want := len(sums) - 1
	if !strings.Contains(out, "fetched, 0 cached") || !strings.Contains(out, strconv.Itoa(want)+" artifacts") {
		t.Errorf("summary:\n%s", out)
	}
	// Second run: everything from the cache (the mirror may even be gone).
	os.RemoveAll(mirror)
	os.MkdirAll(mirror, 0o755)
	out, errOut, code = run(t, base, "fetch", "--mirror", mirror, "--cache-dir", cache)
	if code != 0 || !strings.Contains(out, "0 fetched, "+strconv.Itoa(want)+" cached") {
		t.Fatalf("second fetch: exit %d\n%s\n%s", code, out, errOut)
	}
	// --only picks the VM image even on nspawn.
	fakeMirror(t, mirror, config.ArchAMD64)
	out, _, code = run(t, base, "fetch", "--mirror", mirror, "--cache-dir", cache, "--only", "ubuntu-24.04,kubectl")
	if code != 0 || !strings.Contains(out, "ubuntu-24.04") || !strings.Contains(out, "2 artifacts") {
		t.Errorf("--only: exit %d\n%s", code, out)
	}
	// KHW_MIRROR and KHW_CACHE_DIR stand in for the flags.
	t.Setenv(components.EnvMirror, mirror)
	t.Setenv(components.EnvCacheDir, cache)
	out, errOut, code = run(t, base, "fetch", "--only", "etcd")
	if code != 0 || !regexp.MustCompile(`etcd\s+v3.7.4\s+amd64.*cached`).MatchString(out) {
		t.Errorf("env: exit %d\n%s%s", code, out, errOut)
	}
}

func TestFetchCommandErrors(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	mirror := t.TempDir()
	fakeMirror(t, mirror, config.ArchARM64)
	run(t, base, "init", "--arch", "arm64", "--provider", "libvirt")
	cache := filepath.Join(t.TempDir(), "cache")
	cases := []struct {
		args  []string
		code  int
		words []string
	}{
		{[]string{"fetch", "--mirror", mirror, "--cache-dir", cache, "--only", "kubectl,nosuch"}, exitUsage, []string{"unknown artifact nosuch", "known:", "kube-apiserver"}},
		{[]string{"fetch", "--mirror", mirror, "--cache-dir", cache, "--arch", "x86"}, exitUsage, []string{`--arch "x86"`}},
		{[]string{"fetch", "--mirror", filepath.Join(mirror, "missing"), "--cache-dir", cache}, exitUsage, []string{"neither a directory nor an http(s) URL"}},
		{[]string{"fetch", "--mirror", mirror, "--cache-dir", cache, "--parallel", "0"}, exitUsage, []string{"--parallel 0"}},
		{[]string{"fetch", "extra"}, exitUsage, []string{"accepts 0 arg"}},
	}
	for _, c := range cases {
		_, e, code := run(t, base, c.args...)
		for _, w := range c.words {
			if code != c.code || !strings.Contains(e, w) {
				t.Errorf("%v: exit %d (want %d), stderr %q lacks %q", c.args, code, c.code, e, w)
			}
		}
	}
	// A tampered file: exit 1, the error names the URL and both digests,
	// the table marks it FAILED, and the rest is still fetched.
	cat, _ := components.Load()
	rs, _ := cat.Resolve(config.Default("khw", "arm64", config.ProviderLibvirt), "arm64")
	var kubelet components.Resolved
	for _, r := range rs {
		if r.Artifact.Name == "kubelet" {
			kubelet = r
		}
	}
	p, _, _ := components.MirrorLocation(mirror, kubelet.URL)
	fake := make([]byte, 2048) // the size the manifest lists
	copy(fake, "not the real kubelet")
	put(t, p, fake)
	out, e, code := run(t, base, "fetch", "--mirror", mirror, "--cache-dir", cache)
	if code != exitFailed || !strings.Contains(e, "sha256 mismatch for "+kubelet.URL) || !strings.Contains(e, "actual "+hexSum(fake)) {
		t.Errorf("tampered kubelet: exit %d\n%s", code, e)
	}
	if !regexp.MustCompile(`(?m)^kubelet\s+v1.37.2\s+arm64\s+-\s+-\s+FAILED`).MatchString(out) || !regexp.MustCompile(`(?m)^ubuntu-24.04\s.*fetched`).MatchString(out) {
		t.Errorf("table after a failure (libvirt includes the VM image):\n%s", out)
	}
}

// syncBuf is a bytes.Buffer for a command running in another goroutine.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestMirrorExportServeFetch(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	src := t.TempDir()
	sums := fakeMirror(t, src, config.ArchARM64)
	run(t, base, "init", "--arch", "arm64", "--provider", "nspawn")
	exported := filepath.Join(t.TempDir(), "export")
	out, e, code := run(t, base, "mirror", "export", exported, "--mirror", src, "--cache-dir", filepath.Join(t.TempDir(), "c1"))
	if code != 0 || !strings.Contains(out, "Exported "+strconv.Itoa(len(sums)-1)+" artifacts") {
		t.Fatalf("export: exit %d\n%s\n%s", code, out, e)
	}
	for _, rel := range []string{"khw-mirror.json", "dl.k8s.io/release/v1.37.2/bin/linux/arm64/kubelet.sha256",
		"github.com/opencontainers/runc/releases/download/v1.5.3/runc.sha256sum", "registry.k8s.io/coredns/coredns/v1.14.7/image-linux-arm64.tar"} {
		if _, err := os.Stat(filepath.Join(exported, rel)); err != nil {
			t.Errorf("export lacks %s: %v", rel, err)
		}
	}
	// The pin it prints is the manifest's sha256, and the command to use it.
	m := regexp.MustCompile(`--mirror-digest (sha256:[0-9a-f]{64})`).FindStringSubmatch(out)
	man, _ := os.ReadFile(filepath.Join(exported, "khw-mirror.json"))
	if m == nil || m[1] != "sha256:"+hexSum(man) {
		t.Fatalf("export did not print the manifest's digest sha256:%s:\n%s", hexSum(man), out)
	}
	pin := m[1]
	if b, _ := os.ReadFile(filepath.Join(exported, "github.com/opencontainers/runc/releases/download/v1.5.3/runc.sha256sum")); string(b) != sums["runc"]+"  runc.arm64\n" {
		t.Errorf("runc.sha256sum = %q", b)
	}
	if _, e, code := run(t, base, "mirror", "export", src, "--mirror", src); code != exitUsage || !strings.Contains(e, "both") {
		t.Errorf("export onto its own source: %d %s", code, e)
	}
	// Not into, and not serving, a system directory (an export into /etc
	// made it look like a mirror, and serve, as root, would publish it).
	for _, args := range [][]string{{"mirror", "export", "/etc", "--mirror", src, "--only", "kubectl"}, {"mirror", "serve", "/etc"}, {"mirror", "serve", "/"}} {
		if _, e, code := run(t, base, args...); code != exitUsage || !strings.Contains(e, "is a system directory") {
			t.Errorf("%v: exit %d %s", args, code, e)
		}
	}
	if _, err := os.Stat("/etc/" + components.MirrorManifestFile); err == nil {
		t.Fatal("an export wrote into /etc")
	}

	// Serve it on a free port; fetch through it into an empty cache.
	var sout, serr syncBuf
	cmd := newRootCmd(&sout, &serr)
	cmd.SetArgs([]string{"--state-dir", base, "mirror", "serve", exported, "--listen", "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	re := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+)/`)
	var url string
	for deadline := time.Now().Add(10 * time.Second); url == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(sout.String()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		cancel()
		t.Fatalf("serve did not start: %s %s", sout.String(), serr.String())
	}
	if !strings.Contains(sout.String(), "Mirror pin: "+pin) {
		t.Errorf("serve does not print the pin %s:\n%s", pin, sout.String())
	}
	// Without the pin the mirror is refused, saying how to pin it.
	t.Setenv(components.EnvMirrorDigest, "")
	if _, e, code := run(t, base, "fetch", "--mirror", url, "--cache-dir", filepath.Join(t.TempDir(), "c3")); code != exitUsage || !strings.Contains(e, "is not pinned") || !strings.Contains(e, "--mirror-digest") {
		t.Errorf("unpinned: exit %d %s", code, e)
	}
	out, e, code = run(t, base, "fetch", "--mirror", url, "--mirror-digest", pin, "--cache-dir", filepath.Join(t.TempDir(), "c2"))
	if code != 0 || !strings.Contains(out, "fetched, 0 cached") {
		t.Errorf("fetch through serve: exit %d\n%s\n%s", code, out, e)
	}
	for n, sum := range sums {
		if n != "ubuntu-24.04" && !strings.Contains(out, sum[:12]) {
			t.Errorf("%s: digest %s missing from the table", n, sum[:12])
		}
	}
	if !strings.Contains(serr.String(), `GET "/dl.k8s.io/release/v1.37.2/bin/linux/arm64/kube-proxy" 200`) {
		t.Errorf("serve did not log the requests:\n%s", serr.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(sout.String(), "Stopped.") {
			t.Errorf("serve after cancel: %v\n%s", err, sout.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
	// A directory that is not a mirror is refused.
	if _, e, code := run(t, base, "mirror", "serve", t.TempDir(), "--listen", "127.0.0.1:0"); code != exitInvalid || !strings.Contains(e, "does not look like a khw mirror") {
		t.Errorf("serve of a non-mirror: %d %s", code, e)
	}
}

// A bad --node-debs, --distro or --debs-keyring is refused before anything
// is fetched or written.
func TestMirrorExportNodeDebsFlagsCheckedFirst(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	run(t, base, "init", "--arch", "amd64", "--provider", "libvirt")
	manifest := filepath.Join(t.TempDir(), "img.manifest")
	if err := os.WriteFile(manifest, []byte("bash\t5.2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-debs", filepath.Join(t.TempDir(), "none")}, "--node-debs: open"},
		{[]string{"--distro", "nosuch"}, "give --node-debs MANIFEST too"},
		{[]string{"--node-debs", manifest, "--distro", "noble"}, "want ID/VERSION_CODENAME"},
		{[]string{"--node-debs", manifest, "--distro", "ubuntu/jammy"}, "khw knows no package archive for ubuntu jammy amd64"},
		{[]string{"--node-debs", manifest, "--debs-keyring", filepath.Join(t.TempDir(), "none.gpg")}, "--debs-keyring: open"},
	} {
		// The mirror is unreachable: a fetch would fail with another error.
		dir := filepath.Join(t.TempDir(), "export")
		args := append([]string{"mirror", "export", dir, "--mirror", "http://127.0.0.1:1", "--mirror-digest", "sha256:" + strings.Repeat("0", 64)}, tc.args...)
		_, e, code := run(t, base, args...)
		if code != exitUsage || !strings.Contains(e, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want usage error %q", tc.args, code, e, tc.want)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%v: the export directory was made", tc.args)
		}
	}
}
