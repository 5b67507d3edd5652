package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
)

// --vm-image: the image lands at the catalog's fallback path with Ubuntu's
// SHA256SUMS line and its .manifest, the written manifest lists it, and
// khw's fetcher, finding no pinned dated release in the mirror, takes it
// from there verified by the pin.
func TestPlaceVMImage(t *testing.T) {
	src := filepath.Join(t.TempDir(), "cloud-amd64-0123abcd")
	disk := []byte("QFI\xfb fake cloud image")
	manifest := []byte("cloud-init\t22.4.2-1+deb12u4\nsystemd-resolved\t252.39-1~deb12u2\n")
	for name, data := range map[string][]byte{"disk.qcow2": disk, "manifest": manifest} {
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if arch, err := vmImageArch(src, []string{"amd64", "arm64"}); err != nil || arch != "amd64" {
		t.Fatalf("vmImageArch = %q, %v", arch, err)
	}
	if _, err := vmImageArch(t.TempDir(), []string{"amd64", "arm64"}); err == nil || !strings.Contains(err.Error(), "--arch") {
		t.Errorf("an unnamed directory with two arches: %v", err)
	}
	out := t.TempDir()
	sumsDir := filepath.Join(out, "cloud-images.ubuntu.com/releases/noble/release")
	if err := os.MkdirAll(sumsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("1", 64) + " *ubuntu-24.04-server-cloudimg-arm64.img\n"
	if err := os.WriteFile(filepath.Join(sumsDir, "SHA256SUMS"), []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := config.Default("khw", "amd64", config.ProviderLibvirt)
	p, err := placeVMImage(out, src, "amd64", cl)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(sumsDir, "ubuntu-24.04-server-cloudimg-amd64.img"); p != want {
		t.Errorf("image at %s, want %s", p, want)
	}
	h := sha256.Sum256(disk)
	sum := hex.EncodeToString(h[:])
	if got, _ := os.ReadFile(filepath.Join(sumsDir, "SHA256SUMS")); string(got) != sum+" *ubuntu-24.04-server-cloudimg-amd64.img\n"+other {
		t.Errorf("SHA256SUMS:\n%s", got)
	}
	if got, _ := os.ReadFile(filepath.Join(sumsDir, "ubuntu-24.04-server-cloudimg-amd64.manifest")); !bytes.Equal(got, manifest) {
		t.Errorf("manifest: %q", got)
	}
	if _, err := placeVMImage(out, t.TempDir(), "amd64", cl); err == nil || !strings.Contains(err.Error(), "disk.qcow2") {
		t.Errorf("a directory without the image: %v", err)
	}

	cat, err := components.Load()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := cat.Resolve(cl, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	pin, err := components.ManifestFromDir(out, rs)
	if err != nil {
		t.Fatal(err)
	}
	f := components.Fetcher{Mirror: out, MirrorDigest: pin, CacheDir: filepath.Join(t.TempDir(), "cache")}
	got, err := f.Fetch(context.Background(), components.ForRole(rs, components.RoleVMImage))
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].Fallback || got[0].SHA256 != sum || got[0].Trust != components.TrustMirror {
		t.Errorf("fetched %+v; want the placed image through the fallback, verified by the manifest", got[0])
	}
}
