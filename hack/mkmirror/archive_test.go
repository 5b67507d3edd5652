package main

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/components"
)

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
