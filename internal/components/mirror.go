package components

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/khw-dev/khw/internal/fsutil"
)

// Permissions inside an exported mirror: it holds only public release files
// and is meant to be served to other machines, so it is world-readable.
const (
	mirrorDirMode  fs.FileMode = 0o755
	mirrorFileMode fs.FileMode = 0o644
)

// ExportReport lists what Export did, as paths relative to the mirror root,
// and the mirror's pin.
type ExportReport struct {
	Written   []string
	Unchanged []string
	// Dropped are the entries of the manifest already in the mirror that
	// were left out of the new one (checkMirrorEntry), as "<path>: <why>";
	// their files, if any, stay but are no longer pinned.
	Dropped []string
	// Digest is "sha256:<hex>" of the khw-mirror.json written: what a user of
	// the mirror pins (--mirror-digest).
	Digest string
}

// Export writes fetched artifacts (the result of a successful Fetch) into
// dir with the mirror layout, so that `--mirror dir` (or `khw mirror serve
// dir`) serves them to another machine:
//
//   - a download https://HOST/PATH goes to dir/HOST/PATH; its checksum file
//     to dir/<checksum URL's HOST/PATH> in the published format: "hex" files
//     hold the digest, "sha256sum" files get the line "<hex>  <file name>",
//     merged with the lines an earlier export wrote (e.g. etcd's SHA256SUMS
//     for both arches);
//   - a download fetched from its catalog fallback (Fetched.Fallback) goes
//     to the fallback URL's path, with the fallback's checksum file;
//   - an image goes to dir/ImageMirrorPath(ref, arch) with a ".sha256" file
//     (hex) next to it;
//   - dir/khw-mirror.json lists every artifact; ExportKeeping merges the
//     entries of an earlier one that this export does not replace, when
//     that manifest is the one the caller pins, and that still hold
//     (checkMirrorEntry: a clean relative path where its URL maps, a
//     64-hex SHA-256, a size above 0, the file there with that digest and
//     size); the others are left out and listed in ExportReport.Dropped.
//
// Files already present with the right content are left alone. Files are
// written to a temporary name and renamed, so a reader never sees half a
// file. Errors: an entry with Err set, or a file-system error naming the path.
//
// ctx cancels the export between files and during a copy (Ctrl-C on a slow
// USB stick stops at once): the file being copied is not left behind, files
// already exported stay, and ctx's error is returned.
func Export(ctx context.Context, fetched []Fetched, dir string) (ExportReport, error) {
	return ExportKeeping(ctx, fetched, dir, "")
}

// ExportKeeping is Export that carries over the entries of the manifest
// already in dir (those it does not replace and that pass checkMirrorEntry)
// only when that manifest's digest is keepPin ("sha256:<hex>", as an
// earlier export printed it): the person exporting vouches for what is
// there. Otherwise, and with keepPin "", none is carried over and each is
// listed in ExportReport.Dropped: a file someone put into dir beforehand,
// with a manifest entry of its own, would else be pinned by the new
// manifest. Error: keepPin is given and is not a digest.
func ExportKeeping(ctx context.Context, fetched []Fetched, dir, keepPin string) (ExportReport, error) {
	var rep ExportReport
	abs, err := filepath.Abs(dir)
	if err != nil {
		return rep, err
	}
	if err := os.MkdirAll(abs, mirrorDirMode); err != nil {
		return rep, fmt.Errorf("mirror %s: %w", abs, err)
	}
	man, err := readMirrorManifest(abs)
	if err != nil {
		return rep, err
	}
	entries := map[string]MirrorEntry{}
	note := func(rel string, written bool) {
		if written {
			rep.Written = append(rep.Written, rel)
		} else {
			rep.Unchanged = append(rep.Unchanged, rel)
		}
	}
	for _, f := range fetched {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("export to %s stopped: %w", abs, err)
		}
		r := f.Resolved
		if f.Err != nil {
			return rep, fmt.Errorf("export %s: it was not fetched: %w", r.Artifact.Name, f.Err)
		}
		switch {
		case f.Fallback && r.Fallback != nil:
			r = *r.Fallback // the mirror holds what was fetched, where it came from
		case f.Archive && r.Archive != nil:
			r = *r.Archive
		}
		rel, err := r.mirrorPath()
		if err != nil {
			return rep, err
		}
		dst := filepath.Join(abs, filepath.FromSlash(rel))
		w, err := copyIfDifferent(ctx, f.Path, dst, f.SHA256, f.Size)
		if err != nil {
			return rep, err
		}
		note(rel, w)
		// The checksum file that lets a Fetcher verify the copy.
		switch {
		case r.URL == "" || f.Resolved.Artifact.Format == FormatImage:
			w, err := writeSmall(dst+".sha256", []byte(f.SHA256+"\n"))
			if err != nil {
				return rep, err
			}
			note(rel+".sha256", w)
		case f.SignedChecksum != "" && r.SignatureURL != "":
			// The list and its signature as published: merged lines
			// would no longer verify.
			ws, err := exportSigned(abs, r, f)
			if err != nil {
				return rep, err
			}
			for rel, w := range ws {
				note(rel, w)
			}
		case r.ChecksumURL != "":
			srel, err := mirrorRel(r.ChecksumURL)
			if err != nil {
				return rep, err
			}
			sdst := filepath.Join(abs, filepath.FromSlash(srel))
			var data []byte
			if r.ChecksumFormat == ChecksumSHA256Sum {
				data, err = MergeSHA256Sum(sdst, r.FileName, f.SHA256, false)
			} else {
				var s string
				s, err = FormatChecksum(r.ChecksumFormat, f.SHA256, r.FileName)
				data = []byte(s)
			}
			if err != nil {
				return rep, fmt.Errorf("export %s: checksum file %s: %w", r.Artifact.Name, sdst, err)
			}
			w, err := writeSmall(sdst, data)
			if err != nil {
				return rep, err
			}
			note(srel, w)
		}
		version := r.Version
		if f.Fallback && f.Resolved.Fallback != nil {
			// The fallback moves with each release: not the pinned version.
			version = "current"
		}
		entries[rel] = MirrorEntry{Path: rel, Name: r.Artifact.Name, Version: version, Arch: r.Arch, URL: r.URL, Image: r.Image,
			SHA256: f.SHA256, Size: f.Size, ImageDigest: f.ImageDigest, ImageID: f.ImageID}
	}
	list := make([]MirrorEntry, 0, len(entries)+len(man.Artifacts))
	for _, e := range entries {
		list = append(list, e)
	}
	vouched, why, err := manifestVouched(abs, keepPin)
	if err != nil {
		return rep, err
	}
	kept, dropped, err := keptMirrorEntries(ctx, abs, man.Artifacts, entries, vouched, why)
	if err != nil {
		return rep, err
	}
	rep.Dropped = dropped
	w, digest, err := WriteMirrorManifest(abs, append(list, kept...))
	if err != nil {
		return rep, err
	}
	note(MirrorManifestFile, w)
	rep.Digest = digest
	return rep, nil
}

// isImage reports whether r is a container image rather than a download.
func (r Resolved) isImage() bool {
	return r.Artifact.Format == FormatImage || (r.URL == "" && r.Image != "")
}

// MirrorPath is where a mirror holds r, relative to its root: HOST/PATH
// for a download, ImageMirrorPath for an image.
func (r Resolved) MirrorPath() (string, error) { return r.mirrorPath() }

func (r Resolved) mirrorPath() (string, error) {
	if r.isImage() {
		return ImageMirrorPath(r.Image, r.Arch)
	}
	return mirrorRel(r.URL)
}

// mirrorRel is the slash path of an official URL inside a mirror: HOST/PATH.
func mirrorRel(official string) (string, error) {
	loc, _, err := MirrorLocation("/", official)
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(filepath.ToSlash(loc), "/"), nil
}

// MergeSHA256Sum returns the sha256sum-format file at p (missing: empty)
// with the line for name set to sum, written "<sum>  <name>" or, with
// binary, "<sum> *<name>" (sha256sum's binary mode, as Ubuntu's SHA256SUMS);
// the lines of other files are kept as they were, sorted by name.
func MergeSHA256Sum(p, name, sum string, binary bool) ([]byte, error) {
	lines := map[string]string{}
	old, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(old))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		lines[strings.TrimPrefix(f[1], "*")] = sc.Text()
	}
	sep := "  "
	if binary {
		sep = " *"
	}
	lines[name] = sum + sep + name
	names := make([]string, 0, len(lines))
	for n := range lines {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	for _, n := range names {
		b.WriteString(lines[n] + "\n")
	}
	return b.Bytes(), nil
}

// writeSmall writes data to p (world-readable) unless p already holds it.
func writeSmall(p string, data []byte) (bool, error) {
	if err := os.MkdirAll(filepath.Dir(p), mirrorDirMode); err != nil {
		return false, fmt.Errorf("mirror: %w", err)
	}
	return fsutil.WriteIfChanged(p, data, mirrorFileMode)
}

// copyIfDifferent copies src to dst unless dst already has size and sum. The
// copy streams (artifacts are up to a few hundred MiB) to a temporary file in
// dst's directory, fsyncs it and renames it, like fsutil.WriteFileAtomic.
func copyIfDifferent(ctx context.Context, src, dst, sum string, size int64) (bool, error) {
	if st, err := os.Stat(dst); err == nil && st.Size() == size {
		if got, _, err := hashFile(dst); err == nil && got == sum {
			return false, nil
		}
	}
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, mirrorDirMode); err != nil {
		return false, fmt.Errorf("mirror: %w", err)
	}
	in, err := os.Open(src)
	if err != nil {
		return false, err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return false, fmt.Errorf("mirror: write %s: %w", dst, err)
	}
	fail := func(err error) (bool, error) {
		tmp.Close()
		os.Remove(tmp.Name())
		return false, fmt.Errorf("mirror: write %s: %w", dst, err)
	}
	if _, err := io.Copy(tmp, ctxReader{ctx, in}); err != nil {
		return fail(err)
	}
	if err := tmp.Chmod(mirrorFileMode); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		os.Remove(tmp.Name())
		return false, fmt.Errorf("mirror: write %s: %w", dst, err)
	}
	syncDir(dir)
	return true, nil
}

// mirrorHosts are the top-level directories a mirror of the catalog has:
// the hosts of every URL and the registries of every image.
func mirrorHosts() []string {
	set := map[string]bool{}
	if cat, err := Load(); err == nil {
		for _, c := range cat.Components {
			for _, a := range c.Artifacts {
				urls := []string{a.URL, a.Checksum.URL}
				if a.Archive != nil {
					urls = append(urls, a.Archive.URL)
				}
				for _, s := range urls {
					if u, err := url.Parse(s); err == nil && u.Host != "" {
						set[u.Host] = true
					}
				}
				if i := strings.IndexByte(a.Image, '/'); i > 0 {
					set[a.Image[:i]] = true
				}
			}
		}
	}
	for _, h := range debArchiveHosts() {
		set[h] = true
	}
	var out []string
	for h := range set {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}
