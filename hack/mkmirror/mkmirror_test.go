package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
)

func resolveDefault(t *testing.T, arch string) []components.Resolved {
	t.Helper()
	cat, err := components.Load()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := cat.Resolve(config.Default("khw", arch, config.ProviderNspawn), arch)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestMirrorRelPath(t *testing.T) {
	for _, tc := range []struct {
		url, want, err string
	}{
		{"https://dl.k8s.io/release/v1.37.2/bin/linux/amd64/kubectl", "dl.k8s.io/release/v1.37.2/bin/linux/amd64/kubectl", ""},
		{"https://github.com/etcd-io/etcd/releases/download/v3.7.3/SHA256SUMS", "github.com/etcd-io/etcd/releases/download/v3.7.3/SHA256SUMS", ""},
		{"http://127.0.0.1:8080/a//b/./c", "127.0.0.1:8080/a/b/c", ""},
		{"https://example.com/a/../../etc/passwd", "", `".." segment`},
		{"ftp://example.com/x", "", "not http(s)"},
		{"https:///x", "", "no usable host"},
		{"https://example.com/", "", "no file path"},
	} {
		got, err := mirrorRelPath(tc.url)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("mirrorRelPath(%q) error = %v, want %q", tc.url, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("mirrorRelPath(%q) = %q, %v; want %q", tc.url, got, err, tc.want)
		}
	}
}

func TestImageRelPath(t *testing.T) {
	for _, tc := range []struct {
		ref, arch, want, err string
	}{
		{"registry.k8s.io/pause:3.10.2", "amd64", "registry.k8s.io/pause/3.10.2/image-linux-amd64.tar", ""},
		{"registry.k8s.io/coredns/coredns:v1.14.6", "arm64", "registry.k8s.io/coredns/coredns/v1.14.6/image-linux-arm64.tar", ""},
		{"registry.k8s.io/e2e-test-images/agnhost:2.66.1", "amd64", "registry.k8s.io/e2e-test-images/agnhost/2.66.1/image-linux-amd64.tar", ""},
		{"localhost:5000/x:1", "amd64", "localhost:5000/x/1/image-linux-amd64.tar", ""},
		{"pause:3.10.2", "amd64", "", "registry"},
		{"registry.k8s.io/pause", "amd64", "", "REGISTRY/REPO:TAG"},
		{"registry.k8s.io/pause:3.10.2", "s390x", "", "use amd64 or arm64"},
	} {
		got, err := imageRelPath(tc.ref, tc.arch)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("imageRelPath(%q, %s) error = %v, want %q", tc.ref, tc.arch, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("imageRelPath(%q, %s) = %q, %v; want %q", tc.ref, tc.arch, got, err, tc.want)
		}
	}
}

// The mirror layout of the real catalog: every download keeps its official
// host and path, and shared checksum files sit next to what they list.
func TestCatalogLayout(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		rs := resolveDefault(t, arch)
		got := map[string]string{} // artifact -> mirror path
		sums := map[string]string{}
		for _, a := range rs {
			switch {
			case a.Image != "":
				p, err := imageRelPath(a.Image, arch)
				if err != nil {
					t.Fatalf("%s: %v", a.Artifact.Name, err)
				}
				got[a.Artifact.Name] = p
			case a.URL != "":
				p, err := mirrorRelPath(a.URL)
				if err != nil {
					t.Fatalf("%s: %v", a.Artifact.Name, err)
				}
				s, err := mirrorRelPath(a.ChecksumURL)
				if err != nil {
					t.Fatalf("%s checksum: %v", a.Artifact.Name, err)
				}
				if path.Base(p) != a.FileName {
					t.Errorf("%s: mirror file %s is not named %s", a.Artifact.Name, p, a.FileName)
				}
				if path.Dir(s) != path.Dir(p) {
					t.Errorf("%s: checksum %s is not next to %s", a.Artifact.Name, s, p)
				}
				got[a.Artifact.Name], sums[a.Artifact.Name] = p, s
			}
		}
		want := map[string]string{
			"kubectl":       "dl.k8s.io/release/v1.37.2/bin/linux/" + arch + "/kubectl",
			"etcd":          "github.com/etcd-io/etcd/releases/download/v3.7.4/etcd-v3.7.4-linux-" + arch + ".tar.gz",
			"containerd":    "github.com/containerd/containerd/releases/download/v2.3.7/containerd-2.3.7-linux-" + arch + ".tar.gz",
			"runc":          "github.com/opencontainers/runc/releases/download/v1.5.3/runc." + arch,
			"cni-plugins":   "github.com/containernetworking/plugins/releases/download/v1.9.1/cni-plugins-linux-" + arch + "-v1.9.1.tgz",
			"crictl":        "github.com/kubernetes-sigs/cri-tools/releases/download/v1.37.0/crictl-v1.37.0-linux-" + arch + ".tar.gz",
			"pause-image":   "registry.k8s.io/pause/3.10.2/image-linux-" + arch + ".tar",
			"coredns-image": "registry.k8s.io/coredns/coredns/v1.14.7/image-linux-" + arch + ".tar",
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s %s: mirror path %q, want %q", arch, k, got[k], v)
			}
		}
		wantSums := map[string]string{
			"kubectl": "dl.k8s.io/release/v1.37.2/bin/linux/" + arch + "/kubectl.sha256",
			"etcd":    "github.com/etcd-io/etcd/releases/download/v3.7.4/SHA256SUMS",
			"runc":    "github.com/opencontainers/runc/releases/download/v1.5.3/runc.sha256sum",
		}
		for k, v := range wantSums {
			if sums[k] != v {
				t.Errorf("%s %s: checksum path %q, want %q", arch, k, sums[k], v)
			}
		}
	}
}

func TestRenderChecksumFileParsesBack(t *testing.T) {
	a := strings.Repeat("a", 64)
	b := strings.Repeat("b", 64)
	data, err := renderChecksumFile(components.ChecksumSHA256Sum, []sumEntry{{"runc.arm64", b}, {"runc.amd64", a}})
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != a+"  runc.amd64\n"+b+"  runc.arm64\n" {
		t.Errorf("sha256sum file:\n%s", data)
	}
	for name, want := range map[string]string{"runc.amd64": a, "runc.arm64": b} {
		got, err := components.ParseChecksum(data, components.ChecksumSHA256Sum, name)
		if err != nil || got != want {
			t.Errorf("ParseChecksum(%s) = %s, %v; want %s", name, got, err, want)
		}
	}
	if got := sha256sumNames(append(data, []byte("garbage line\n# comment\n")...)); strings.Join(got, ",") != "runc.amd64,runc.arm64" {
		t.Errorf("sha256sumNames = %v", got)
	}
	hexData, err := renderChecksumFile(components.ChecksumHex, []sumEntry{{"kubectl", a}})
	if err != nil || string(hexData) != a+"\n" {
		t.Fatalf("hex file %q, %v", hexData, err)
	}
	if got, err := components.ParseChecksum(hexData, components.ChecksumHex, "kubectl"); err != nil || got != a {
		t.Errorf("ParseChecksum(hex) = %s, %v", got, err)
	}
	if _, err := renderChecksumFile(components.ChecksumHex, []sumEntry{{"x", a}, {"y", b}}); err == nil {
		t.Error("hex format with two files: no error")
	}
	if _, err := renderChecksumFile(components.ChecksumSHA256Sum, []sumEntry{{"x", a}, {"x", b}}); err == nil {
		t.Error("two digests for one name: no error")
	}
}

// fakeBin writes a small executable stand-in for a built binary.
func fakeBin(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho "+name+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func tarMembers(t *testing.T, p string) []*tar.Header {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var hs []*tar.Header
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hs
		}
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
}

// archiveFor lays out the archive of a catalog tar.gz artifact the way the
// builders do, from fake binaries.
func archiveFor(t *testing.T, dir string, a components.Resolved) []entry {
	t.Helper()
	bins := func(names ...string) []namedFile {
		var nf []namedFile
		for _, n := range names {
			nf = append(nf, namedFile{n, fakeBin(t, dir, n)})
		}
		return nf
	}
	doc := entry{Name: "README.md", Mode: 0o644, Data: []byte("readme\n")}
	switch a.Component {
	case "etcd":
		return etcdEntries(a.Version, a.Arch, bins("etcd", "etcdctl", "etcdutl"), []entry{doc, {Name: "Documentation/", Mode: 0o755}})
	case "containerd":
		return containerdEntries(bins("containerd", "containerd-shim-runc-v2", "containerd-stress", "ctr"))
	case "cni-plugins":
		var names []string
		for _, f := range a.Files {
			names = append(names, path.Base(f.Path))
		}
		return cniEntries(bins(names...), []entry{doc})
	case "crictl":
		return crictlEntries(fakeBin(t, dir, "crictl"))
	}
	t.Fatalf("no archive layout for %s", a.Component)
	return nil
}

func TestArchiveLayouts(t *testing.T) {
	rs := resolveDefault(t, "arm64")
	wantFirst := map[string][]string{
		"etcd":        {"etcd-v3.7.4-linux-arm64/", "etcd-v3.7.4-linux-arm64/etcd", "etcd-v3.7.4-linux-arm64/etcdctl", "etcd-v3.7.4-linux-arm64/etcdutl", "etcd-v3.7.4-linux-arm64/README.md"},
		"containerd":  {"bin/", "bin/containerd", "bin/containerd-shim-runc-v2", "bin/containerd-stress", "bin/ctr"},
		"cni-plugins": {"./", "./bridge", "./host-local", "./loopback", "./portmap", "./README.md"},
		"crictl":      {"crictl"},
	}
	n := 0
	for _, a := range rs {
		if a.Artifact.Format != components.FormatTarGz {
			continue
		}
		n++
		dir := t.TempDir()
		entries := archiveFor(t, filepath.Join(dir, "bin"), a)
		if err := checkArchiveCoversCatalog(a, entries); err != nil {
			t.Errorf("%s: %v", a.Component, err)
		}
		p := filepath.Join(dir, a.FileName)
		if err := writeTarGzFile(p, entries); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, h := range tarMembers(t, p) {
			names = append(names, h.Name)
			if h.Typeflag == tar.TypeReg && strings.Contains(h.Name, "README") == (h.Mode&0o111 != 0) {
				t.Errorf("%s: member %s has mode %o", a.Component, h.Name, h.Mode)
			}
			if !h.ModTime.Equal(epoch) {
				t.Errorf("%s: member %s mtime %v", a.Component, h.Name, h.ModTime)
			}
		}
		want := wantFirst[a.Component]
		if len(names) < len(want) || strings.Join(names[:len(want)], ",") != strings.Join(want, ",") {
			t.Errorf("%s members %v, want to start with %v", a.Component, names, want)
		}
		if err := verifyArchiveMembers(p, a.Files); err != nil {
			t.Errorf("%s: %v", a.Component, err)
		}
		// Same inputs, same bytes (cache keys and checksums stay stable).
		p2 := p + ".again"
		if err := writeTarGzFile(p2, entries); err != nil {
			t.Fatal(err)
		}
		h1, _ := fileSHA256(p)
		h2, _ := fileSHA256(p2)
		if h1 != h2 {
			t.Errorf("%s: archive not reproducible", a.Component)
		}
	}
	if n != 4 {
		t.Errorf("catalog has %d tar.gz artifacts, test expects etcd, containerd, cni-plugins, crictl", n)
	}
}

func TestVerifyArchiveMembersRejects(t *testing.T) {
	dir := t.TempDir()
	files := []components.File{{Path: "bin/ctr"}}
	for _, tc := range []struct {
		name    string
		entries []entry
		want    string
	}{
		{"missing", []entry{{Name: "bin/", Mode: 0o755}, {Name: "bin/containerd", Mode: 0o755, Data: []byte("x")}}, "no member"},
		{"not executable", []entry{{Name: "bin/ctr", Mode: 0o644, Data: []byte("x")}}, "not executable"},
		{"symlink", []entry{{Name: "bin/ctr", Mode: 0o777, Link: "containerd"}}, "not a regular file"},
	} {
		p := filepath.Join(dir, tc.name+".tar.gz")
		if err := writeTarGzFile(p, tc.entries); err != nil {
			t.Fatal(err)
		}
		if err := verifyArchiveMembers(p, files); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

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

// End to end without compilers: fake builds for every catalog artifact of
// both arches, assembled into a mirror, verified; then tampering is caught.
func TestAssembleAndVerify(t *testing.T) {
	cache := t.TempDir()
	root := filepath.Join(t.TempDir(), "mirror")
	resolved := map[string][]components.Resolved{}
	var products []product
	for _, arch := range []string{"amd64", "arm64"} {
		rs := resolveDefault(t, arch)
		resolved[arch] = rs
		for _, a := range rs {
			dir := filepath.Join(cache, a.Component, arch)
			var p product
			var err error
			switch {
			case a.Artifact.Format == components.FormatDisk:
				continue
			case a.Image != "":
				spec := pauseImage(a.Image, arch, fakeBin(t, dir, "bin"))
				img, berr := buildImage(spec)
				if berr != nil {
					t.Fatal(berr)
				}
				dst := filepath.Join(dir, "image.tar")
				if err := writeImageTarball(dst, a.Image, img); err != nil {
					t.Fatal(err)
				}
				p, err = imageProduct(a, dst)
			case a.Artifact.Format == components.FormatTarGz:
				dst := filepath.Join(dir, a.FileName)
				if err := writeTarGzFile(dst, archiveFor(t, filepath.Join(dir, "bin"), a)); err != nil {
					t.Fatal(err)
				}
				p, err = urlProduct(a, dst)
			default:
				p, err = urlProduct(a, fakeBin(t, dir, a.Artifact.Name+"-"+arch))
			}
			if err != nil {
				t.Fatal(err)
			}
			products = append(products, p)
		}
	}
	if err := assemble(root, products); err != nil {
		t.Fatal(err)
	}
	problems, notes, checked := verifyMirror(root, resolved, nil)
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	if checked != len(products) || len(notes) != 2 {
		t.Errorf("checked %d of %d products; notes %v", checked, len(products), notes)
	}
	// Mirror files are hard links into the cache.
	si, _ := os.Stat(products[0].Src)
	di, _ := os.Stat(abs(root, products[0].Rel))
	if !os.SameFile(si, di) {
		t.Errorf("%s is not a hard link to %s", products[0].Rel, products[0].Src)
	}
	// The shared etcd SHA256SUMS lists both arches.
	sums, err := os.ReadFile(abs(root, "github.com/etcd-io/etcd/releases/download/v3.7.4/SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256sumNames(sums); strings.Join(got, ",") != "etcd-v3.7.4-linux-amd64.tar.gz,etcd-v3.7.4-linux-arm64.tar.gz" {
		t.Errorf("SHA256SUMS names %v", got)
	}

	// A later amd64-only run with a rebuilt runc keeps the arm64 line.
	var runcAMD product
	for _, p := range products {
		if strings.HasSuffix(p.Rel, "/runc.amd64") {
			runcAMD = p
		}
	}
	newSrc := filepath.Join(cache, "runc-rebuilt")
	os.WriteFile(newSrc, []byte("rebuilt"), 0o755)
	runcAMD.Src = newSrc
	if err := assemble(root, []product{runcAMD}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(abs(root, runcAMD.SumRel))
	want := sha256.Sum256([]byte("rebuilt"))
	if got, err := components.ParseChecksum(data, components.ChecksumSHA256Sum, "runc.amd64"); err != nil || got != hex.EncodeToString(want[:]) {
		t.Errorf("runc.amd64 after rebuild: %s, %v", got, err)
	}
	if _, err := components.ParseChecksum(data, components.ChecksumSHA256Sum, "runc.arm64"); err != nil {
		t.Errorf("runc.arm64 line lost: %v", err)
	}
	if problems, _, _ := verifyMirror(root, resolved, nil); len(problems) > 0 {
		t.Fatalf("after rebuild: %v", problems)
	}

	// Tampering: a changed file, a missing checksum file, a wrong-arch image.
	kubectl := abs(root, "dl.k8s.io/release/v1.37.2/bin/linux/amd64/kubectl")
	os.Remove(kubectl)
	os.WriteFile(kubectl, []byte("tampered"), 0o755)
	os.Remove(abs(root, "github.com/kubernetes-sigs/cri-tools/releases/download/v1.37.0/crictl-v1.37.0-linux-arm64.tar.gz.sha256"))
	pauseArm := abs(root, "registry.k8s.io/pause/3.10.2/image-linux-arm64.tar")
	os.Remove(pauseArm)
	if err := linkOrCopy(abs(root, "registry.k8s.io/pause/3.10.2/image-linux-amd64.tar"), pauseArm); err != nil {
		t.Fatal(err)
	}
	h, _ := fileSHA256(pauseArm)
	os.Remove(pauseArm + ".sha256")
	os.WriteFile(pauseArm+".sha256", []byte(h+"\n"), 0o644)
	problems, _, _ = verifyMirror(root, resolved, nil)
	joined := strings.Join(problems, "\n")
	for _, want := range []string{"kubectl (linux/amd64)", "crictl crictl (linux/arm64): checksum file", "is linux/amd64, want linux/arm64"} {
		if !strings.Contains(joined, want) {
			t.Errorf("verification missed %q; problems:\n%s", want, joined)
		}
	}
	if len(problems) != 3 {
		t.Errorf("%d problems, want 3:\n%s", len(problems), joined)
	}
	// --only narrows verification.
	if problems, _, checked := verifyMirror(root, resolved, map[string]bool{"etcd": true}); len(problems) != 0 || checked != 2 {
		t.Errorf("--only etcd: %d checked, problems %v", checked, problems)
	}
}

func TestStagingModules(t *testing.T) {
	gomod := []byte(`module k8s.io/kubernetes

go 1.26.0

require (
	github.com/x/y v1.2.3
	k8s.io/api v0.0.0
	k8s.io/client-go v0.0.0
	k8s.io/klog/v2 v2.130.1
)

require k8s.io/cri-client v0.0.0 // indirect

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/sample-controller v0.0.0 => ./staging/src/k8s.io/sample-controller
)
replace k8s.io/sample-cli-plugin v0.0.0 => ./staging/src/k8s.io/sample-cli-plugin
`)
	if got := strings.Join(stagingModules(gomod), ","); got != "k8s.io/api,k8s.io/client-go,k8s.io/cri-client" {
		t.Errorf("stagingModules = %s", got)
	}
	for in, want := range map[string]string{"v1.37.2": "v0.37.2", "v1.38.0-beta.0": "v0.38.0-beta.0"} {
		if got, err := stagingVersion(in); err != nil || got != want {
			t.Errorf("stagingVersion(%s) = %s, %v", in, got, err)
		}
	}
	if _, err := stagingVersion("1.37.2"); err == nil {
		t.Error("stagingVersion without v: no error")
	}
}

func TestKubeLDFlags(t *testing.T) {
	f, err := kubeLDFlags("v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(f, " ")
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, kv := range []string{"gitVersion=v1.37.2", "gitMajor=1", "gitMinor=37", "gitTreeState=clean"} {
			if !strings.Contains(s, "-X "+pkg+"."+kv) {
				t.Errorf("ldflags lack -X %s.%s: %s", pkg, kv, s)
			}
		}
	}
	if f, _ := kubeLDFlags("v1.38.0-beta.0"); !strings.Contains(strings.Join(f, " "), "gitMinor=38+") {
		t.Errorf("pre-release minor: %v", f)
	}
	if _, err := kubeLDFlags("v1.37"); err == nil {
		t.Error("v1.37: no error")
	}
}

func TestSmallHelpers(t *testing.T) {
	for pkg, want := range map[string]string{
		"go.etcd.io/etcd/server/v3":                 "server",
		"go.etcd.io/etcd/etcdctl/v3":                "etcdctl",
		"github.com/opencontainers/runc":            "runc",
		"k8s.io/kubernetes/cmd/kube-apiserver":      "kube-apiserver",
		"github.com/containerd/containerd/v2/cmd/x": "x",
	} {
		if got := defaultExeName(pkg); got != want {
			t.Errorf("defaultExeName(%s) = %s, want %s", pkg, got, want)
		}
	}
	for in, want := range map[string]string{"go1.26.8": "1.26.0", "go1.27rc1": "1.27.0", "go1.26": "1.26.0"} {
		if got := goDirective(in); got != want {
			t.Errorf("goDirective(%s) = %s, want %s", in, got, want)
		}
	}
	m := goModule{Key: "etcd-v3.7.3", Requires: []string{"go.etcd.io/etcd/server/v3 v3.7.3"}, Replaces: []string{"a => a v1"},
		Mains: []string{"z/main", "a/main"}}
	gomod, tools := m.files("1.26.0")
	for _, want := range []string{"module khw.local/mkmirror/etcd-v3.7.3\n", "go 1.26.0\n", "\tgo.etcd.io/etcd/server/v3 v3.7.3\n", "replace (\n\ta => a v1\n)"} {
		if !strings.Contains(gomod, want) {
			t.Errorf("go.mod lacks %q:\n%s", want, gomod)
		}
	}
	if !strings.HasPrefix(tools, "//go:build tools\n") || strings.Index(tools, `"a/main"`) > strings.Index(tools, `"z/main"`) {
		t.Errorf("tools.go:\n%s", tools)
	}
}

// goBuild against a throw-away module with no dependencies (offline): the
// binary is built with the ldflags, reused while its recipe holds, rebuilt
// when an ldflag changes; runCheck sees the version it prints.
func TestGoBuildRecipeCache(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go tool")
	}
	gv, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Skipf("no go tool: %v", err)
	}
	r := &run{cache: t.TempDir(), goVersion: strings.TrimSpace(string(gv))}
	r.goLine = goDirective(r.goVersion)
	m := goModule{Key: "hello-v1", Mains: []string{"khw.local/mkmirror/hello-v1/hello"}}
	src := filepath.Join(m.dir(r.cache), "hello")
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nvar version = \"unset\"\n\nfunc main() { println(\"hello\", version) }\n"), 0o644)
	lg, err := newJobLog(r.cache, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer lg.close()
	ctx := context.Background()
	digest, err := r.ensureModule(ctx, m, lg)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(r.cache, "out")
	bins := []goBinary{{"hi", "khw.local/mkmirror/hello-v1/hello"}}
	build := func(ver string) (string, time.Time) {
		g := goRecipe{LDFlags: []string{"-X", "main.version=" + ver}}
		if err := r.goBuild(ctx, m, digest, runtime.GOARCH, g, bins, out, lg); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(filepath.Join(out, "hi"))
		if err != nil {
			t.Fatal(err)
		}
		line, ran, err := runCheck(ctx, binCheck{Name: "hi", Path: filepath.Join(out, "hi"), Arch: runtime.GOARCH, Want: "hello " + ver})
		if err != nil || !ran {
			t.Fatalf("runCheck: %q ran=%v %v", line, ran, err)
		}
		return line, st.ModTime()
	}
	_, t1 := build("v1")
	time.Sleep(10 * time.Millisecond)
	if _, t2 := build("v1"); !t2.Equal(t1) {
		t.Error("same recipe: binary was rebuilt")
	}
	if d2, err := r.ensureModule(ctx, m, lg); err != nil || d2 != digest {
		t.Errorf("ensureModule again: digest %s vs %s, %v", d2, digest, err)
	}
	build("v2")
	if _, _, err := runCheck(ctx, binCheck{Name: "hi", Path: filepath.Join(out, "hi"), Arch: runtime.GOARCH, Want: "hello v1"}); err == nil {
		t.Error("runCheck accepted output without the wanted version")
	}
}

func TestDerive(t *testing.T) {
	dir := t.TempDir()
	lg, err := newJobLog(dir, "derive")
	if err != nil {
		t.Fatal(err)
	}
	defer lg.close()
	out := filepath.Join(dir, "x.tar.gz")
	calls := 0
	mk := func() error { calls++; return os.WriteFile(out, []byte("x"), 0o644) }
	for i, recipe := range []string{"a", "a", "b", "b"} {
		if err := derive(out, recipe, lg, mk); err != nil {
			t.Fatal(err)
		}
		if want := []int{1, 1, 2, 2}[i]; calls != want {
			t.Errorf("step %d (recipe %s): %d builds, want %d", i, recipe, calls, want)
		}
	}
	os.Remove(out)
	if derive(out, "b", lg, mk); calls != 3 {
		t.Errorf("missing output with a matching recipe: not rebuilt")
	}
	if err := derive(out, "c", lg, func() error { return errors.New("boom") }); err == nil {
		t.Error("failed make: no error")
	}
	if _, err := os.Stat(out + ".recipe"); err == nil {
		t.Error("failed make left a recipe behind")
	}
}

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
