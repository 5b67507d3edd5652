package main

import (
	"archive/tar"
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func layerMembers(t *testing.T, p, ref string) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(p, &tag)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v", len(layers), err)
	}
	if mt, err := layers[0].MediaType(); err != nil || (mt != types.OCILayer && mt != types.DockerLayer) {
		t.Errorf("layer media type %s, %v", mt, err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	hs := map[string]*tar.Header{}
	data := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		hs[h.Name] = h
		b, _ := io.ReadAll(tr)
		data[h.Name] = b
	}
}

func TestImagesReadBack(t *testing.T) {
	dir := t.TempDir()
	bin := fakeBin(t, dir, "payload")
	binData, _ := os.ReadFile(bin)
	ca := filepath.Join(dir, "ca.crt")
	os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644)
	porter := filepath.Join(dir, "porter")
	os.MkdirAll(porter, 0o755)
	os.WriteFile(filepath.Join(porter, "localhost.crt"), []byte("crt"), 0o644)
	os.WriteFile(filepath.Join(porter, "localhost.key"), []byte("key"), 0o644)

	for _, tc := range []struct {
		spec       imageSpec
		entrypoint string
		user       string
		extra      []string // members that must exist
	}{
		{pauseImage("registry.k8s.io/pause:3.10.2", "amd64", bin), "/pause", "65535:65535", nil},
		{pauseImage("registry.k8s.io/pause:3.10.2", "arm64", bin), "/pause", "65535:65535", nil},
		{corednsImage("registry.k8s.io/coredns/coredns:v1.14.6", "amd64", bin, ca), "/coredns", "65532:65532", []string{"etc/passwd", "etc/ssl/certs/ca-certificates.crt", "tmp/"}},
		{agnhostImage("registry.k8s.io/e2e-test-images/agnhost:2.66.1", "amd64", bin, porter, bin), "/agnhost", "", []string{"agnhost-2", "uploads/", "localhost.crt", "bin/busybox", "bin/sh", "bin/nslookup"}},
	} {
		s := tc.spec
		img, err := buildImage(s)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, s.Arch+path.Base(tc.entrypoint)+".tar")
		if err := writeImageTarball(p, s.Ref, img); err != nil {
			t.Fatal(err)
		}
		if err := checkImageTarball(p, s.Ref, s.Arch); err != nil {
			t.Errorf("%s: %v", s.Ref, err)
		}
		tag, _ := name.NewTag(s.Ref, name.StrictValidation)
		back, err := tarball.ImageFromPath(p, &tag)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := back.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != s.Arch {
			t.Errorf("%s: platform %s/%s", s.Ref, cf.OS, cf.Architecture)
		}
		if (s.Arch == "arm64") != (cf.Variant == "v8") {
			t.Errorf("%s %s: variant %q", s.Ref, s.Arch, cf.Variant)
		}
		if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != tc.entrypoint || cf.Config.User != tc.user {
			t.Errorf("%s: entrypoint %v user %q", s.Ref, cf.Config.Entrypoint, cf.Config.User)
		}
		if len(cf.RootFS.DiffIDs) != 1 || len(cf.History) != 1 {
			t.Errorf("%s: %d diff IDs, %d history entries", s.Ref, len(cf.RootFS.DiffIDs), len(cf.History))
		}
		hs, data := layerMembers(t, p, s.Ref)
		main := strings.TrimPrefix(tc.entrypoint, "/")
		if h := hs[main]; h == nil || h.Mode != 0o755 || h.Uid != 0 || !bytes.Equal(data[main], binData) {
			t.Errorf("%s: entrypoint member %+v", s.Ref, h)
		}
		for _, m := range tc.extra {
			if hs[m] == nil {
				t.Errorf("%s: no member %s", s.Ref, m)
			}
		}
		if main == "coredns" {
			capv := hs["coredns"].PAXRecords["SCHILY.xattr.security.capability"]
			// setcap cap_net_bind_service=+ep: revision 2 | effective, permitted bit 10.
			if hex.EncodeToString([]byte(capv)) != "0100000200040000000000000000000000000000" {
				t.Errorf("coredns security.capability = %x", capv)
			}
			if hs["tmp/"].Mode&0o1000 == 0 {
				t.Errorf("coredns /tmp mode %o lacks the sticky bit", hs["tmp/"].Mode)
			}
		}
		if main == "agnhost" && (hs["agnhost-2"].Typeflag != tar.TypeSymlink || hs["agnhost-2"].Linkname != "agnhost") {
			t.Errorf("agnhost-2: %+v", hs["agnhost-2"])
		}
		// Reproducible: the same spec gives the same tarball bytes.
		img2, _ := buildImage(s)
		p2 := p + ".again"
		if err := writeImageTarball(p2, s.Ref, img2); err != nil {
			t.Fatal(err)
		}
		h1, _ := fileSHA256(p)
		h2, _ := fileSHA256(p2)
		if h1 != h2 {
			t.Errorf("%s: image tarball not reproducible", s.Ref)
		}
	}
}
