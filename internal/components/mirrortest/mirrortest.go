// Package mirrortest makes directory mirrors for tests of the commands
// khw prints: catalog artifacts with made-up content at their mirror
// paths, each checksum file as `khw mirror export` writes it beside them,
// and a khw-mirror.json whose SHA-256 is the mirror's pin. Tamper then
// plays whoever controls the mirror: it swaps a file and its checksum file
// consistently, leaving the pinned manifest as it was.
package mirrortest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
)

// Mirror is a directory mirror made by New.
type Mirror struct {
	// Dir is the mirror's root.
	Dir string
	// Pin is "sha256:<hex>" of Dir/khw-mirror.json.
	Pin string
	// Artifacts are the catalog entries it holds, by artifact name.
	Artifacts map[string]components.Resolved
}

// New makes, in a new temporary directory, a mirror of the catalog
// artifacts names of cluster c (for c.Arch, amd64 when unset): a binary
// holds "genuine <name> <version>", an archive (tar.gz) one member per
// catalog file with "genuine <member path>", an image a stand-in tarball
// (not importable: enough for commands that copy and check it). It fails
// the test for a name the catalog does not have.
func New(t testing.TB, c *config.Cluster, names ...string) *Mirror {
	t.Helper()
	arch := c.Arch
	if arch == "" {
		arch = config.ArchAMD64
	}
	cat, err := components.Load()
	if err != nil {
		t.Fatal(err)
	}
	all, err := cat.Resolve(c, arch)
	if err != nil {
		t.Fatal(err)
	}
	m := &Mirror{Dir: t.TempDir(), Artifacts: map[string]components.Resolved{}}
	var entries []components.MirrorEntry
	for _, n := range names {
		var r *components.Resolved
		for i := range all {
			if all[i].Artifact.Name == n {
				r = &all[i]
			}
		}
		if r == nil {
			t.Fatalf("mirrortest: artifact %q is not in the catalog", n)
		}
		m.Artifacts[n] = *r
		data := genuine(t, *r)
		rel := m.write(t, *r, data)
		entries = append(entries, components.MirrorEntry{Path: rel, Name: n, Version: r.Version, Arch: r.Arch, URL: r.URL, Image: r.Image,
			SHA256: sum(data), Size: int64(len(data))})
	}
	if _, m.Pin, err = components.WriteMirrorManifest(m.Dir, entries); err != nil {
		t.Fatal(err)
	}
	return m
}

// Use makes the mirror the test's $KHW_MIRROR with its pin in
// $KHW_MIRROR_DIGEST, and a new empty $KHW_CACHE_DIR, so that nothing
// fetched before counts.
func (m *Mirror) Use(t *testing.T) {
	t.Setenv(components.EnvMirror, m.Dir)
	t.Setenv(components.EnvMirrorDigest, m.Pin)
	t.Setenv(components.EnvCacheDir, t.TempDir())
}

// Tamper replaces the file of artifact name with other content of the same
// kind and rewrites its checksum file to match it; khw-mirror.json (and so
// the pin) stays as it was. It returns the new content.
func (m *Mirror) Tamper(t testing.TB, name string) []byte {
	t.Helper()
	r, ok := m.Artifacts[name]
	if !ok {
		t.Fatalf("mirrortest: the mirror does not hold %q", name)
	}
	data := content(t, r, "altered") // as long as "genuine": only the digest tells them apart
	m.write(t, r, data)
	return data
}

// Path is where the mirror holds artifact name's file.
func (m *Mirror) Path(t testing.TB, name string) string {
	t.Helper()
	rel, err := m.Artifacts[name].MirrorPath()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(m.Dir, filepath.FromSlash(rel))
}

// write puts data at r's mirror path and the checksum file that names its
// digest where `khw mirror export` puts it, and returns the mirror path.
func (m *Mirror) write(t testing.TB, r components.Resolved, data []byte) string {
	t.Helper()
	rel, err := r.MirrorPath()
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(m.Dir, filepath.FromSlash(rel))
	put(t, dst, data)
	switch {
	case r.URL == "":
		put(t, dst+".sha256", []byte(sum(data)+"\n"))
	case r.ChecksumURL != "":
		loc, _, err := components.MirrorLocation(m.Dir, r.ChecksumURL)
		if err != nil {
			t.Fatal(err)
		}
		var text []byte
		if r.ChecksumFormat == components.ChecksumSHA256Sum {
			text, err = components.MergeSHA256Sum(loc, r.FileName, sum(data), false)
		} else {
			var s string
			s, err = components.FormatChecksum(r.ChecksumFormat, sum(data), r.FileName)
			text = []byte(s)
		}
		if err != nil {
			t.Fatal(err)
		}
		put(t, loc, text)
	}
	return rel
}

func genuine(t testing.TB, r components.Resolved) []byte { return content(t, r, "genuine") }

// content is what the mirror holds for r, each file's text starting with
// word.
func content(t testing.TB, r components.Resolved, word string) []byte {
	t.Helper()
	if r.Artifact.Format != components.FormatTarGz {
		return []byte(word + " " + r.Artifact.Name + " " + r.Version + " " + r.Image + "\n")
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range r.Files {
		body := []byte(word + " " + f.Path + "\n")
		if err := tw.WriteHeader(&tar.Header{Name: f.Path, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func put(t testing.TB, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
