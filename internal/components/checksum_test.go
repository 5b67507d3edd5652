package components

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
)

func TestParseChecksum(t *testing.T) {
	a := strings.Repeat("a", 64)
	b := strings.Repeat("b", 64)
	cases := []struct {
		name, data, format, file, want, err string
	}{
		{"hex only (dl.k8s.io)", a, ChecksumHex, "kubectl", a, ""},
		{"hex with newline, upper case", strings.ToUpper(a) + "\n", ChecksumHex, "kubectl", a, ""},
		{"hex file with its own name", a + "  kubectl\n", ChecksumHex, "kubectl", a, ""},
		{"hex file naming another file", a + "  kubelet\n", ChecksumHex, "kubectl", "", `names "kubelet", not "kubectl"`},
		{"hex empty", "\n", ChecksumHex, "kubectl", "", "empty"},
		{"hex short", "abc", ChecksumHex, "kubectl", "", "not a SHA-256 digest"},
		{"hex not hex", strings.Repeat("z", 64), ChecksumHex, "kubectl", "", "not hex"},
		{"hex given a SHA256SUMS", a + "  x\n" + b + "  y\n", ChecksumHex, "x", "", "4 fields"},
		{"sha256sum text mode", a + "  etcd-v3.7.3-linux-amd64.tar.gz\n" + b + "  etcd-v3.7.3-linux-arm64.tar.gz\n", ChecksumSHA256Sum, "etcd-v3.7.3-linux-arm64.tar.gz", b, ""},
		{"sha256sum binary mode (Ubuntu)", a + " *ubuntu-24.04-server-cloudimg-amd64.img\n" + b + " *ubuntu-24.04-server-cloudimg-arm64.img\n", ChecksumSHA256Sum, "ubuntu-24.04-server-cloudimg-amd64.img", a, ""},
		{"sha256sum comments and blank lines", "# release\n\n" + a + "  runc.amd64\n", ChecksumSHA256Sum, "runc.amd64", a, ""},
		{"sha256sum ./ prefix", a + "  ./cni.tgz\n", ChecksumSHA256Sum, "cni.tgz", a, ""},
		{"sha256sum exact name beats base name", a + "  dist/x\n" + b + "  x\n", ChecksumSHA256Sum, "x", b, ""},
		{"sha256sum ambiguous base names", a + "  d1/x\n" + b + "  d2/x\n", ChecksumSHA256Sum, "x", "", "2 different digests"},
		{"BSD format", "SHA256 (runc.arm64) = " + b + "\n", ChecksumSHA256Sum, "runc.arm64", b, ""},
		{"sha256sum missing file", a + "  runc.amd64\n" + b + "  runc.arm64\n", ChecksumSHA256Sum, "runc.riscv64", "", `no line for "runc.riscv64" (it lists: runc.amd64, runc.arm64)`},
		{"sha256sum hex-only content", a + "\n", ChecksumSHA256Sum, "x", "", "has no file name"},
		{"sha256sum bad digest", "xyz  runc.amd64\n", ChecksumSHA256Sum, "runc.amd64", "", "line 1"},
		{"unknown format", a, "md5", "x", "", `unknown checksum format "md5"`},
	}
	for _, c := range cases {
		got, err := ParseChecksum([]byte(c.data), c.format, c.file)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %q %v, want %q", c.name, got, err, c.want)
		}
	}
	// What Export writes, ParseChecksum reads back.
	for _, format := range []string{ChecksumHex, ChecksumSHA256Sum} {
		s, err := FormatChecksum(format, a, "crictl-v1.37.0-linux-amd64.tar.gz")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ParseChecksum([]byte(s), format, "crictl-v1.37.0-linux-amd64.tar.gz"); err != nil || got != a {
			t.Errorf("%s round trip: %q %v", format, got, err)
		}
	}
}

func TestExtractFile(t *testing.T) {
	dir := t.TempDir()
	arch := filepath.Join(dir, "cni.tgz")
	writeFile(t, arch, tarGz(t, map[string][]byte{
		"./bridge":             []byte("bridge-binary"),
		"./loopback":           []byte("loopback-binary"),
		"etcd-v3.7.3-x/etcd":   []byte("etcd-binary"),
		"etcd-v3.7.3-x/README": []byte("readme"),
	}))
	cases := []struct{ member, want, err string }{
		{"./bridge", "bridge-binary", ""},
		{"bridge", "bridge-binary", ""},
		{"etcd-v3.7.3-x/etcd", "etcd-binary", ""},
		{"./etcd-v3.7.3-x/etcd", "etcd-binary", ""},
		{"portmap", "", `has no file "portmap" (it has: bridge, etcd-v3.7.3-x/README, etcd-v3.7.3-x/etcd, loopback)`},
		{"etcd-v3.7.3-x", "", "not a regular file"},
		{"", "", "empty member"},
	}
	for _, c := range cases {
		var buf bytes.Buffer
		n, err := ExtractFile(arch, c.member, &buf)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.member, err, c.err)
			}
			continue
		}
		if err != nil || buf.String() != c.want || n != int64(len(c.want)) {
			t.Errorf("%q: %q (%d) %v", c.member, buf.String(), n, err)
		}
	}
	if _, err := ExtractFile(filepath.Join(dir, "nope.tgz"), "x", &bytes.Buffer{}); err == nil {
		t.Error("missing archive")
	}
	writeFile(t, filepath.Join(dir, "plain"), []byte("not gzip"))
	if _, err := ExtractFile(filepath.Join(dir, "plain"), "x", &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "plain") {
		t.Errorf("not a tar.gz: %v", err)
	}
}

// Fetched.WriteFile gives every catalog file of a fetched artifact: the
// bring-up installs from it.
func TestFetchedWriteFileCoversCatalogFiles(t *testing.T) {
	w := newWorld(t, config.ArchARM64)
	f := testFetcher(t, w.root)
	rs := w.rs[config.ArchARM64]
	res, err := f.Fetch(t.Context(), rs)
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, r := range res {
		for _, file := range r.Resolved.Files {
			var buf bytes.Buffer
			if _, err := r.WriteFile(file, &buf); err != nil {
				t.Errorf("%s %s: %v", r.Resolved.Artifact.Name, file.Path, err)
				continue
			}
			files++
			switch r.Resolved.Artifact.Format {
			case FormatBinary:
				if !bytes.Equal(buf.Bytes(), w.content[r.Resolved.URL]) {
					t.Errorf("%s: binary content differs", r.Resolved.Artifact.Name)
				}
			case FormatTarGz:
				if !strings.Contains(buf.String(), "echo "+file.Path+" "+r.Resolved.Version+" arm64") {
					t.Errorf("%s %s: %q", r.Resolved.Artifact.Name, file.Path, buf.String())
				}
			}
		}
		if r.Resolved.Artifact.Format == FormatImage {
			if _, err := r.WriteFile(File{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "ctr") {
				t.Errorf("image WriteFile: %v", err)
			}
		}
	}
	if files < 15 {
		t.Errorf("only %d catalog files written", files)
	}
	failed := Fetched{Resolved: rs[0], Err: os.ErrNotExist}
	if _, err := failed.WriteFile(File{}, &bytes.Buffer{}); err == nil {
		t.Error("WriteFile of a failed fetch")
	}
}
