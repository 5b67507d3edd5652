package components

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// NodeDebsReport is what ExportNodeDebs wrote.
type NodeDebsReport struct {
	// Debs are the packages put into the mirror (the closure).
	Debs []DebPackage
	// Written and Unchanged are mirror-relative paths.
	Written, Unchanged []string
	// Dropped are the entries of dir/khw-mirror.json left out of the new
	// one because they did not hold (checkMirrorEntry), as "<path>: <why>".
	Dropped []string
	// Digest is the new pin of the mirror.
	Digest string
}

// ExportNodeDebs writes into the mirror dir, in archive a's official
// layout, what khw installs offline on nodes of an image with the package
// manifest imageManifest (InstalledFromManifest): the closure of NodeDebs
// and extra for arch minus the image's packages, with each suite's InRelease
// (as published), Release (its verified text) and Packages index, and merges
// them into dir/khw-mirror.json (its entries that no longer hold are left
// out and listed in Dropped). It downloads from the official archive:
// each InRelease must carry a signature by one of a.Keys found in keyring
// (VerifyInRelease), the Packages index must match the Release file, each
// .deb its Packages entry. f must have no mirror (a mirror's archive copy is
// used directly by the nodes' installs). Errors name the file and the check
// that failed; nothing is written before every file verified.
func (f *Fetcher) ExportNodeDebs(ctx context.Context, dir string, a DebArchive, arch string, imageManifest, keyring []byte, extra []string) (NodeDebsReport, error) {
	var rep NodeDebsReport
	if f.Mirror != "" {
		return rep, fmt.Errorf("node packages are exported from the official archive %s, not from a mirror (fix: run without --mirror on a machine with internet)", a.URL)
	}
	run := &fetchRun{client: f.client(), sums: map[string]*sumCall{}, prog: newProgress(nil, 0)}
	type file struct {
		url  string
		name string
		ver  string
		data []byte
	}
	var files []file
	var pkgs []DebPackage
	for i, suite := range a.Suites {
		inURL := a.DistURL(suite, "InRelease")
		in, err := f.getBounded(ctx, run, inURL, false, maxReleaseSize, "InRelease file")
		if err != nil {
			var pe permanentError
			if i > 0 && errors.As(err, &pe) {
				continue // a suite the archive does not (yet) have
			}
			return rep, err
		}
		relData, err := VerifyInRelease(in, keyring, a.Keys)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", inURL, err)
		}
		rel, err := ParseRelease(relData)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", inURL, err)
		}
		if rel.Suite != suite && rel.Codename != suite {
			return rep, fmt.Errorf("%s names suite %q (codename %q), not %s", inURL, rel.Suite, rel.Codename, suite)
		}
		files = append(files, file{url: inURL, data: in}, file{url: a.ReleaseURL(suite), name: "Release", ver: suite, data: relData})
		for _, comp := range a.Components {
			base := IndexPath(comp, arch)
			ext := ".xz"
			rf, ok := rel.Files[base+ext]
			if !ok {
				ext = ".gz"
				if rf, ok = rel.Files[base+ext]; !ok {
					return rep, fmt.Errorf("%s lists no %s.xz or .gz", inURL, base)
				}
			}
			u := a.DistURL(suite, base+ext)
			data, err := f.getBounded(ctx, run, u, false, rf.Size, "package index")
			if err != nil {
				return rep, err
			}
			if got := sha256Hex(data); got != rf.SHA256 {
				return rep, &DigestMismatchError{URL: u, Source: u, Expected: rf.SHA256, Actual: got, ExpectedFrom: inURL + " (signed)"}
			}
			raw, err := decodeIndex(a, rel, suite, base, ext, data)
			if err != nil {
				return rep, err
			}
			ps, err := ParsePackages(strings.NewReader(string(raw)))
			if err != nil {
				return rep, fmt.Errorf("%s: %w", u, err)
			}
			pkgs = append(pkgs, ps...)
			files = append(files, file{url: u, name: "Packages", ver: suite, data: data})
		}
	}
	ix := NewDebIndex(a, arch, pkgs)
	installed, err := InstalledFromManifest(imageManifest, ix)
	if err != nil {
		return rep, err
	}
	closure, err := ix.Closure(append(append([]string(nil), NodeDebs...), extra...), installed)
	if err != nil {
		return rep, err
	}
	for _, p := range closure {
		u, err := a.PoolURL(p.Filename)
		if err != nil {
			return rep, err
		}
		data, err := f.getBounded(ctx, run, u, false, p.Size, "package")
		if err != nil {
			return rep, err
		}
		if got := sha256Hex(data); got != p.SHA256 || int64(len(data)) != p.Size {
			return rep, &DigestMismatchError{URL: u, Source: u, Expected: p.SHA256, Actual: got, ExpectedFrom: "the signed archive's Packages index"}
		}
		files = append(files, file{url: u, name: p.Name, ver: p.Version, data: data})
	}
	var entries []MirrorEntry
	for _, fl := range files {
		rel, err := mirrorRel(fl.url)
		if err != nil {
			return rep, err
		}
		w, err := writeSmall(filepath.Join(dir, filepath.FromSlash(rel)), fl.data)
		if err != nil {
			return rep, err
		}
		if w {
			rep.Written = append(rep.Written, rel)
		} else {
			rep.Unchanged = append(rep.Unchanged, rel)
		}
		if fl.name != "" {
			entries = append(entries, MirrorEntry{Path: rel, Name: fl.name, Version: fl.ver, Arch: arch, URL: fl.url, SHA256: sha256Hex(fl.data), Size: int64(len(fl.data))})
		}
	}
	if rep.Digest, rep.Dropped, err = mergeMirrorManifest(ctx, dir, entries, true); err != nil {
		return rep, err
	}
	rep.Debs = closure
	return rep, nil
}
