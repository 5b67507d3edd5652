package components

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ulikunitz/xz"
)

// Bounds on what an archive's index may bring (Debian's bookworm main
// amd64 Release is ~150 KiB, its Packages ~45 MiB uncompressed).
const (
	maxReleaseSize  = 32 << 20
	maxPackagesSize = 512 << 20
)

// debSource reads a distribution archive through a pinned mirror: every
// file must be listed in the mirror's manifest and have the digest and
// size listed there, besides the digest the archive's own index gives it.
type debSource struct {
	f   *Fetcher
	run *fetchRun
	man *pinnedManifest
}

// openDebSource checks f's mirror and its pin and reads the pinned manifest.
func (f *Fetcher) openDebSource(ctx context.Context) (*debSource, error) {
	if f.Mirror == "" {
		return nil, fmt.Errorf("no mirror is set: khw reads node packages offline only from a mirror (%s and %s)", EnvMirror, EnvMirrorDigest)
	}
	if isURLMirror(f.Mirror) {
		ff, err := f.withMirrorCredentials()
		if err != nil {
			return nil, err
		}
		f = ff
	} else if st, err := os.Stat(mirrorDir(f.Mirror)); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("mirror %s: not a directory or an http(s) URL (fix: point --mirror / %s at a directory made by `khw mirror export`, or at the URL `khw mirror serve` prints)", f.Mirror, EnvMirror)
	}
	if strings.TrimSpace(f.MirrorDigest) == "" {
		return nil, NewMirrorPinError(f.Mirror)
	}
	pin, err := ParseMirrorDigest(f.MirrorDigest)
	if err != nil {
		return nil, err
	}
	run := &fetchRun{client: f.client(), sums: map[string]*sumCall{}, prog: newProgress(nil, 0), pin: pin}
	man, err := f.loadPinnedManifest(ctx, run, pin)
	if err != nil {
		return nil, err
	}
	return &debSource{f: f, run: run, man: man}, nil
}

// get reads the file of official URL u from the mirror: the manifest must
// list it with at most limit bytes, and the content must have the manifest's
// SHA-256. ok is false (and err nil) when the manifest does not list u.
func (s *debSource) get(ctx context.Context, u string, limit int64, what string) (data []byte, ok bool, err error) {
	e, listed := s.man.entries[u]
	if !listed {
		return nil, false, nil
	}
	if e.Size > limit {
		return nil, true, fmt.Errorf("the mirror manifest lists %s with %d bytes, more than the %d a %s may have (fix: check the mirror)", u, e.Size, limit, what)
	}
	loc, isFile, err := MirrorLocation(s.f.Mirror, u)
	if err != nil {
		return nil, true, err
	}
	data, err = s.f.getBounded(ctx, s.run, loc, isFile, max(e.Size, 1), what)
	if err != nil {
		return nil, true, err
	}
	if got := sha256Hex(data); got != e.SHA256 {
		return nil, true, &DigestMismatchError{URL: u, Source: loc, Expected: e.SHA256, Actual: got, ExpectedFrom: s.man.verifiedBy()}
	}
	return data, true, nil
}

func sha256Hex(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// DebIndex reads the package index of archive a for arch through the
// pinned mirror: for each suite whose Release file the manifest lists (at
// least the first), the Release file (checked against the manifest), then
// per component the Packages.xz, .gz or plain Packages that both the
// Release file and the manifest list, checked against both (and, once
// decompressed, against the Release file's digest of the plain Packages
// when it lists one). Errors: no mirror or pin, a digest mismatch (a
// *DigestMismatchError naming the file), a suite or component the mirror
// does not hold (the fix: rebuild the mirror).
func (f *Fetcher) DebIndex(ctx context.Context, a DebArchive, arch string) (*DebIndex, error) {
	src, err := f.openDebSource(ctx)
	if err != nil {
		return nil, err
	}
	var all []DebPackage
	for i, suite := range a.Suites {
		relURL := a.ReleaseURL(suite)
		data, ok, err := src.get(ctx, relURL, maxReleaseSize, "Release file")
		if err != nil {
			return nil, err
		}
		if !ok {
			if i == 0 {
				return nil, fmt.Errorf("the pinned mirror manifest %s does not list %s: the mirror has no %s packages "+
					"(fix: rebuild the mirror with the node packages: `khw mirror export DIR --arch %s --node-debs <the image's .manifest>` on a machine with internet, or hack/build-mirror.sh --node-debs <image manifest> for the stand-in image; then pin the new digest)",
					src.man.loc, relURL, a, arch)
			}
			continue
		}
		rel, err := ParseRelease(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", relURL, err)
		}
		if rel.Suite != suite && rel.Codename != suite {
			return nil, fmt.Errorf("%s names suite %q (codename %q), not %s: the mirror is mixed up (fix: rebuild it)", relURL, rel.Suite, rel.Codename, suite)
		}
		for _, comp := range a.Components {
			pkgs, err := src.packages(ctx, a, rel, suite, comp, arch)
			if err != nil {
				return nil, err
			}
			all = append(all, pkgs...)
		}
	}
	ix := NewDebIndex(a, arch, all)
	ix.src = src
	return ix, nil
}

// packages reads and verifies one component's Packages file.
func (s *debSource) packages(ctx context.Context, a DebArchive, rel *Release, suite, comp, arch string) ([]DebPackage, error) {
	base := IndexPath(comp, arch)
	for _, ext := range []string{".xz", ".gz", ""} {
		rf, inRelease := rel.Files[base+ext]
		u := a.DistURL(suite, base+ext)
		if _, listed := s.man.entries[u]; !inRelease || !listed {
			continue
		}
		data, _, err := s.get(ctx, u, rf.Size, "package index")
		if err != nil {
			return nil, err
		}
		if got := sha256Hex(data); got != rf.SHA256 || int64(len(data)) != rf.Size {
			return nil, &DigestMismatchError{URL: u, Source: u, Expected: rf.SHA256, Actual: got, ExpectedFrom: a.ReleaseURL(suite) + " (its SHA256 field)"}
		}
		raw, err := decodeIndex(a, rel, suite, base, ext, data)
		if err != nil {
			return nil, err
		}
		pkgs, err := ParsePackages(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", u, err)
		}
		return pkgs, nil
	}
	return nil, fmt.Errorf("the mirror holds no package index %s of %s %s that its Release file lists (fix: rebuild the mirror with the node packages and pin the new digest)", base, a, suite)
}

// decodeIndex decompresses the Packages index data (base+ext, already
// checked against rel) and checks the result against rel's digest of the
// plain file when rel lists one.
func decodeIndex(a DebArchive, rel *Release, suite, base, ext string, data []byte) ([]byte, error) {
	u := a.DistURL(suite, base+ext)
	var r io.Reader = bytes.NewReader(data)
	var err error
	switch ext {
	case ".xz":
		if r, err = xz.NewReader(r); err != nil {
			return nil, fmt.Errorf("%s: %w", u, err)
		}
	case ".gz":
		if r, err = gzip.NewReader(r); err != nil {
			return nil, fmt.Errorf("%s: %w", u, err)
		}
	}
	limit := int64(maxPackagesSize)
	plain, hasPlain := rel.Files[base]
	if hasPlain && ext != "" {
		limit = plain.Size
	}
	raw, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%s: decompresses to more than %d bytes", u, limit)
	}
	if hasPlain && ext != "" {
		if got := sha256Hex(raw); got != plain.SHA256 {
			return nil, &DigestMismatchError{URL: a.DistURL(suite, base), Source: u, Expected: plain.SHA256, Actual: got, ExpectedFrom: a.ReleaseURL(suite) + " (its SHA256 field)"}
		}
	}
	return raw, nil
}

// DebFile is a fetched and verified .deb.
type DebFile struct {
	Package DebPackage
	Data    []byte
}

// FetchDebs reads the .deb of each package (from ix.Closure) through the
// pinned mirror ix was read from: the manifest must list it with the size
// and SHA-256 the Packages file gives, and the bytes must have them.
// Errors: ix was not read from a mirror, a *DebMissingError for a .deb the
// mirror does not hold, a *DigestMismatchError.
func (ix *DebIndex) FetchDebs(ctx context.Context, pkgs []DebPackage) ([]DebFile, error) {
	if ix.src == nil {
		return nil, fmt.Errorf("the package index of %s was not read from a mirror", ix.Archive)
	}
	out := make([]DebFile, 0, len(pkgs))
	for _, p := range pkgs {
		u, err := ix.Archive.PoolURL(p.Filename)
		if err != nil {
			return nil, err
		}
		e, listed := ix.src.man.entries[u]
		if !listed {
			return nil, &DebMissingError{Package: p.Name + " " + p.Version, Archive: ix.Archive, Arch: ix.Arch, File: u}
		}
		if e.SHA256 != p.SHA256 || e.Size != p.Size {
			return nil, fmt.Errorf("the mirror manifest lists %s with sha256:%s and %d bytes, but the package index says sha256:%s and %d bytes: the mirror is inconsistent (fix: rebuild it and pin the new digest)",
				u, e.SHA256, e.Size, p.SHA256, p.Size)
		}
		data, _, err := ix.src.get(ctx, u, p.Size, "package")
		if err != nil {
			return nil, err
		}
		out = append(out, DebFile{Package: p, Data: data})
	}
	return out, nil
}
