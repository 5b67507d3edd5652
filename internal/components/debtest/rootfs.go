package debtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/components"
)

// RootfsArchive lays out, in mirror, Debian's bookworm archive as the node
// image knows it: the Release and main Packages files apt downloaded when
// the image was built (in its /var/lib/apt/lists) and every .deb of its
// /var/cache/apt/archives that the Packages file lists with that digest,
// except those named in leave. It returns the mirror's pin.
func RootfsArchive(t testing.TB, rootfs, mirror, arch string, leave ...string) string {
	t.Helper()
	a, err := components.FindDebArchive("debian", "bookworm", arch)
	if err != nil {
		t.Fatal(err)
	}
	lists := filepath.Join(rootfs, "var/lib/apt/lists")
	release, err := os.ReadFile(filepath.Join(lists, "deb.debian.org_debian_dists_bookworm_Release"))
	if err != nil {
		t.Skipf("SKIP: the node image has no apt lists to build a test archive from: %v", err)
	}
	pkgsData, err := os.ReadFile(filepath.Join(lists, "deb.debian.org_debian_dists_bookworm_main_binary-"+arch+"_Packages"))
	if err != nil {
		t.Skipf("SKIP: the node image has no Packages list: %v", err)
	}
	pkgs, err := components.ParsePackages(bytes.NewReader(pkgsData))
	if err != nil {
		t.Fatal(err)
	}
	bySum := map[string]components.DebPackage{}
	for _, p := range pkgs {
		bySum[p.SHA256] = p
	}
	var es []components.MirrorEntry
	put := func(u string, data []byte, name string) {
		rel := strings.TrimPrefix(u, "https://")
		dst := filepath.Join(mirror, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(data)
		es = append(es, components.MirrorEntry{Path: rel, Name: name, Arch: arch, URL: u, SHA256: hex.EncodeToString(h[:]), Size: int64(len(data))})
	}
	put(a.ReleaseURL("bookworm"), release, "Release")
	put(a.DistURL("bookworm", components.IndexPath("main", arch)), pkgsData, "Packages")
	debs, _ := filepath.Glob(filepath.Join(rootfs, "var/cache/apt/archives/*.deb"))
	n := 0
	for _, f := range debs {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(data)
		p, ok := bySum[hex.EncodeToString(h[:])]
		if !ok || slices.Contains(leave, p.Name) {
			continue
		}
		u, err := a.PoolURL(p.Filename)
		if err != nil {
			t.Fatal(err)
		}
		put(u, data, p.Name)
		n++
	}
	if n == 0 {
		t.Skip("SKIP: no .deb of the node image matches its Packages list")
	}
	_, pin, err := components.WriteMirrorManifest(mirror, es)
	if err != nil {
		t.Fatal(err)
	}
	return pin
}
