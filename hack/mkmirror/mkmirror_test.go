package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

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
