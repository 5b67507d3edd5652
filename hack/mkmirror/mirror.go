package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/fsutil"
)

// assemble puts every product into the mirror (a hard link to the cache
// file, or a copy across file systems) and writes the checksum files. A
// sha256sum-format file shared by several downloads (etcd SHA256SUMS,
// runc.sha256sum) lists every file of this run plus the files it already
// listed that are still present next to it (e.g. the other arch from an
// earlier run); every digest is computed from the file in the mirror.
func assemble(root string, products []product) error {
	type sumFile struct {
		format  string
		entries []sumEntry
	}
	sums := map[string]*sumFile{}
	for _, p := range products {
		dst := abs(root, p.Rel)
		if err := linkOrCopy(p.Src, dst); err != nil {
			return fmt.Errorf("mirror %s: %w", p.Rel, err)
		}
		h, err := fileSHA256(dst)
		if err != nil {
			return err
		}
		s := sums[p.SumRel]
		if s == nil {
			s = &sumFile{format: p.SumFormat}
			sums[p.SumRel] = s
		}
		if s.format != p.SumFormat {
			return fmt.Errorf("checksum file %s is %q for one download and %q for another", p.SumRel, s.format, p.SumFormat)
		}
		if path.Dir(p.SumRel) != path.Dir(p.Rel) && p.SumFormat == components.ChecksumSHA256Sum {
			return fmt.Errorf("checksum file %s lists %s, which is in another directory (%s)", p.SumRel, p.SumName, p.Rel)
		}
		s.entries = append(s.entries, sumEntry{Name: p.SumName, Hex: h})
	}
	rels := make([]string, 0, len(sums))
	for rel := range sums {
		rels = append(rels, rel)
	}
	sort.Strings(rels)
	for _, rel := range rels {
		s := sums[rel]
		dst := abs(root, rel)
		if s.format == components.ChecksumSHA256Sum {
			have := map[string]bool{}
			for _, e := range s.entries {
				have[e.Name] = true
			}
			if old, err := os.ReadFile(dst); err == nil {
				for _, n := range sha256sumNames(old) {
					other := filepath.Join(filepath.Dir(dst), n)
					if have[n] || !exists(other) {
						continue
					}
					h, err := fileSHA256(other)
					if err != nil {
						return err
					}
					s.entries = append(s.entries, sumEntry{Name: n, Hex: h})
					have[n] = true
				}
			}
		}
		data, err := renderChecksumFile(s.format, s.entries)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if _, err := fsutil.WriteIfChanged(dst, data, fsutil.PublicMode); err != nil {
			return err
		}
	}
	return nil
}

// linkOrCopy makes dst the same file as src: a hard link (instant, no extra
// space), or a copy when the mirror is on another file system.
func linkOrCopy(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	si, err := os.Stat(src)
	if err != nil {
		return err
	}
	if di, err := os.Stat(dst); err == nil && os.SameFile(si, di) {
		return nil
	}
	os.Remove(dst)
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	return copyFile(src, dst, si.Mode().Perm())
}

// verifyMirror checks, for every catalog artifact of the given arches (and
// components, if only is set), that the mirror has the file at the official
// path, that the published checksum file at the official checksum path
// parses with internal/components.ParseChecksum and matches the file, that
// every archive member the catalog installs is there and executable, and
// that an image tarball loads with go-containerregistry with the right
// os/arch and its entrypoint in the layer. It returns one line per problem
// and notes for skipped artifacts.
func verifyMirror(root string, resolved map[string][]components.Resolved, only map[string]bool) (problems, notes []string, checked int) {
	arches := make([]string, 0, len(resolved))
	for a := range resolved {
		arches = append(arches, a)
	}
	sort.Strings(arches)
	for _, arch := range arches {
		for _, a := range resolved[arch] {
			if len(only) > 0 && !only[a.Component] {
				continue
			}
			if a.Artifact.Format == components.FormatDisk {
				notes = append(notes, fmt.Sprintf("%s (%s): not in the mirror (disk images are not built by mkmirror)", a.Artifact.Name, arch))
				continue
			}
			checked++
			var err error
			if a.Image != "" {
				err = verifyImage(root, a)
			} else {
				err = verifyDownload(root, a)
			}
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s %s (linux/%s): %v", a.Component, a.Artifact.Name, arch, err))
			}
		}
	}
	return problems, notes, checked
}

func verifyDownload(root string, a components.Resolved) error {
	rel, err := mirrorRelPath(a.URL)
	if err != nil {
		return err
	}
	sumRel, err := mirrorRelPath(a.ChecksumURL)
	if err != nil {
		return err
	}
	got, err := fileSHA256(abs(root, rel))
	if err != nil {
		return fmt.Errorf("mirror file: %w", err)
	}
	data, err := os.ReadFile(abs(root, sumRel))
	if err != nil {
		return fmt.Errorf("checksum file: %w", err)
	}
	want, err := components.ParseChecksum(data, a.ChecksumFormat, a.FileName)
	if err != nil {
		return fmt.Errorf("checksum file %s: %w", sumRel, err)
	}
	if want != got {
		return fmt.Errorf("%s has sha256 %s, its checksum file %s says %s", rel, got, sumRel, want)
	}
	if a.SHA256 != "" && !strings.EqualFold(a.SHA256, got) {
		return fmt.Errorf("%s has sha256 %s but the catalog pins %s (an upstream digest a local build cannot reproduce)", rel, got, a.SHA256)
	}
	if a.Artifact.Format == components.FormatTarGz {
		return verifyArchiveMembers(abs(root, rel), a.Files)
	}
	return nil
}

// verifyArchiveMembers checks that each file the catalog installs is a
// regular, executable member of the tar.gz at p.
func verifyArchiveMembers(p string, files []components.File) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	tr := tar.NewReader(zr)
	members := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		members[h.Name] = h
	}
	for _, fl := range files {
		h := members[fl.Path]
		switch {
		case h == nil:
			return fmt.Errorf("%s has no member %q", filepath.Base(p), fl.Path)
		case h.Typeflag != tar.TypeReg:
			return fmt.Errorf("%s member %q is not a regular file", filepath.Base(p), fl.Path)
		case h.Mode&0o111 == 0:
			return fmt.Errorf("%s member %q is not executable (mode %o)", filepath.Base(p), fl.Path, h.Mode)
		}
	}
	return nil
}

func verifyImage(root string, a components.Resolved) error {
	rel, err := imageRelPath(a.Image, a.Arch)
	if err != nil {
		return err
	}
	p := abs(root, rel)
	got, err := fileSHA256(p)
	if err != nil {
		return fmt.Errorf("image tarball: %w", err)
	}
	data, err := os.ReadFile(p + ".sha256")
	if err != nil {
		return fmt.Errorf("image checksum: %w", err)
	}
	want, err := components.ParseChecksum(data, components.ChecksumHex, filepath.Base(p))
	if err != nil {
		return fmt.Errorf("%s.sha256: %w", rel, err)
	}
	if want != got {
		return fmt.Errorf("%s has sha256 %s, %s.sha256 says %s", rel, got, rel, want)
	}
	return checkImageTarball(p, a.Image, a.Arch)
}

// checkImageTarball loads the image tarball at p by its tag and checks
// os/arch, a single layer and that the entrypoint is a file in that layer.
func checkImageTarball(p, ref, arch string) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return err
	}
	img, err := tarball.ImageFromPath(p, &tag)
	if err != nil {
		return fmt.Errorf("%s does not load as image %s: %w", p, ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	if cf.OS != "linux" || cf.Architecture != arch {
		return fmt.Errorf("image %s is %s/%s, want linux/%s", ref, cf.OS, cf.Architecture, arch)
	}
	if len(cf.Config.Entrypoint) == 0 {
		return fmt.Errorf("image %s has no entrypoint", ref)
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	if len(layers) != 1 {
		return fmt.Errorf("image %s has %d layers, want 1", ref, len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	want := strings.TrimPrefix(cf.Config.Entrypoint[0], "/")
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("image %s: entrypoint %s is not in its layer", ref, cf.Config.Entrypoint[0])
		}
		if err != nil {
			return err
		}
		if strings.TrimPrefix(h.Name, "./") == want {
			if h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 {
				return fmt.Errorf("image %s: entrypoint %s is not an executable file", ref, want)
			}
			return nil
		}
	}
}

// qemuUser names the qemu user-mode emulator for a foreign arch (Debian
// package qemu-user or qemu-user-static).
var qemuUser = map[string][]string{"arm64": {"qemu-aarch64-static", "qemu-aarch64"}, "amd64": {"qemu-x86_64-static", "qemu-x86_64"}}

// runCheck runs a version command on a built binary and returns its output
// on one line (prefixed "(qemu) " when a cross-built binary ran under qemu
// user-mode emulation), or an error when the output lacks Want. A foreign
// binary without qemu installed is reported as not run (ran=false).
func runCheck(ctx context.Context, c binCheck) (line string, ran bool, err error) {
	argv := append([]string{c.Path}, c.Args...)
	prefix := ""
	if c.Arch != runtime.GOARCH {
		emu := ""
		for _, q := range qemuUser[c.Arch] {
			if p, err := exec.LookPath(q); err == nil {
				emu = p
				break
			}
		}
		if emu == "" {
			return "not run (cross-built for " + c.Arch + "; apt-get install qemu-user to run it)", false, nil
		}
		argv = append([]string{emu}, argv...)
		prefix = "(qemu) "
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + os.TempDir()}
	out, _ := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	line = strings.ReplaceAll(text, "\n", " | ")
	if len(line) > 160 {
		line = line[:160] + "…"
	}
	line = prefix + line
	if !strings.Contains(text, c.Want) {
		return line, true, fmt.Errorf("%s %s: output lacks %q: %s", c.Name, strings.Join(c.Args, " "), c.Want, line)
	}
	return line, true, nil
}
