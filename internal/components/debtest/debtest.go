// Package debtest builds small distribution archives for tests: real .deb
// files (dpkg-deb --build), their Packages index (plain and .xz) and a
// Release file, laid out as the official archive is, inside a khw mirror
// with its khw-mirror.json.
package debtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/khw-dev/khw/internal/components"
	"github.com/ulikunitz/xz"
)

// Pkg is one package to build.
type Pkg struct {
	Name, Version                 string
	Depends, PreDepends, Provides string
	// Files are installed by the package: absolute path -> content (mode
	// 0755 under a bin/ directory, else 0644).
	Files map[string]string
}

// BuildDeb builds p for arch into dir with dpkg-deb and returns the path.
func BuildDeb(dir, arch string, p Pkg) (string, error) {
	root, err := os.MkdirTemp("", "debtest-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(root)
	if err := os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755); err != nil {
		return "", err
	}
	var c strings.Builder
	fmt.Fprintf(&c, "Package: %s\nVersion: %s\nArchitecture: %s\nMaintainer: khw tests <tests@example.invalid>\nDescription: test package %s\n", p.Name, p.Version, arch, p.Name)
	for k, v := range map[string]string{"Depends": p.Depends, "Pre-Depends": p.PreDepends, "Provides": p.Provides} {
		if v != "" {
			fmt.Fprintf(&c, "%s: %s\n", k, v)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "DEBIAN", "control"), []byte(c.String()), 0o644); err != nil {
		return "", err
	}
	for fp, content := range p.Files {
		dst := filepath.Join(root, filepath.FromSlash(fp))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		mode := os.FileMode(0o644)
		if strings.Contains(fp, "bin/") {
			mode = 0o755
		}
		if err := os.WriteFile(dst, []byte(content), mode); err != nil {
			return "", err
		}
	}
	out := filepath.Join(dir, fmt.Sprintf("%s_%s_%s.deb", p.Name, p.Version, arch))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb --build %s: %v: %s", p.Name, err, b)
	}
	return out, nil
}

// Archive is a built archive inside a mirror.
type Archive struct {
	Mirror string // the mirror directory
	// Entries are the manifest entries written (Release, Packages.xz, debs).
	Entries []components.MirrorEntry
	// Debs maps a package name to its .deb in the mirror.
	Debs map[string]string
	// Release and Packages are the files' paths in the mirror.
	Release, Packages, PackagesXZ string
}

func sum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// Write builds pkgs into mirror for the first suite of a and arch: the
// .debs at the archive's pool paths, dists/SUITE/main/binary-ARCH/Packages
// and Packages.xz, dists/SUITE/Release listing both, and returns the
// manifest entries for the Release, the Packages.xz and every .deb (not yet
// written to khw-mirror.json: see Pin).
func Write(mirror string, a components.DebArchive, arch string, pkgs []Pkg) (*Archive, error) {
	host, root, _ := strings.Cut(strings.SplitN(a.URL, "://", 2)[1], "/")
	base := filepath.Join(mirror, host, filepath.FromSlash(root))
	suite := a.Suites[0]
	out := &Archive{Mirror: mirror, Debs: map[string]string{}}
	var idx bytes.Buffer
	for _, p := range pkgs {
		rel := path.Join("pool", a.Components[0], p.Name[:1], p.Name)
		f, err := BuildDeb(filepath.Join(base, filepath.FromSlash(rel)), arch, p)
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		fn := rel + "/" + filepath.Base(f)
		fmt.Fprintf(&idx, "Package: %s\nVersion: %s\nArchitecture: %s\n", p.Name, p.Version, arch)
		for k, v := range map[string]string{"Depends": p.Depends, "Pre-Depends": p.PreDepends, "Provides": p.Provides} {
			if v != "" {
				fmt.Fprintf(&idx, "%s: %s\n", k, v)
			}
		}
		fmt.Fprintf(&idx, "Filename: %s\nSize: %d\nSHA256: %s\nDescription: test package %s\n\n", fn, len(data), sum(data), p.Name)
		out.Debs[p.Name] = f
		out.Entries = append(out.Entries, components.MirrorEntry{Path: host + "/" + path.Join(root, fn), Name: p.Name, Version: p.Version, Arch: arch,
			URL: a.URL + "/" + fn, SHA256: sum(data), Size: int64(len(data))})
	}
	dist := filepath.Join(base, "dists", suite)
	ip := components.IndexPath(a.Components[0], arch)
	var xzb bytes.Buffer
	w, err := xz.NewWriter(&xzb)
	if err != nil {
		return nil, err
	}
	w.Write(idx.Bytes())
	if err := w.Close(); err != nil {
		return nil, err
	}
	out.Packages = filepath.Join(dist, filepath.FromSlash(ip))
	out.PackagesXZ = out.Packages + ".xz"
	if err := os.MkdirAll(filepath.Dir(out.Packages), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(out.Packages, idx.Bytes(), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(out.PackagesXZ, xzb.Bytes(), 0o644); err != nil {
		return nil, err
	}
	release := fmt.Sprintf("Origin: khw tests\nSuite: %s\nCodename: %s\nArchitectures: %s\nComponents: %s\nSHA256:\n %s %d %s\n %s %d %s\n",
		suite, suite, arch, a.Components[0], sum(idx.Bytes()), idx.Len(), ip, sum(xzb.Bytes()), xzb.Len(), ip+".xz")
	out.Release = filepath.Join(dist, "Release")
	if err := os.WriteFile(out.Release, []byte(release), 0o644); err != nil {
		return nil, err
	}
	distRel := host + "/" + path.Join(root, "dists", suite)
	out.Entries = append(out.Entries,
		components.MirrorEntry{Path: distRel + "/Release", Name: "Release", Version: suite, Arch: arch, URL: a.ReleaseURL(suite), SHA256: sum([]byte(release)), Size: int64(len(release))},
		components.MirrorEntry{Path: distRel + "/" + ip + ".xz", Name: "Packages", Version: suite, Arch: arch, URL: a.DistURL(suite, ip+".xz"), SHA256: sum(xzb.Bytes()), Size: int64(xzb.Len())})
	return out, nil
}

// Pin writes khw-mirror.json with entries (each re-hashed from the file at
// its Path, so a test that altered a file after Write still gets a manifest
// that lists what it wrote: pass rehash false to keep Write's digests) and
// returns the pin.
func Pin(mirror string, entries []components.MirrorEntry, rehash bool) (string, error) {
	es := append([]components.MirrorEntry(nil), entries...)
	if rehash {
		for i := range es {
			data, err := os.ReadFile(filepath.Join(mirror, filepath.FromSlash(es[i].Path)))
			if err != nil {
				return "", err
			}
			es[i].SHA256, es[i].Size = sum(data), int64(len(data))
		}
	}
	_, pin, err := components.WriteMirrorManifest(mirror, es)
	return pin, err
}
