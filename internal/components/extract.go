package components

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// ExtractFile copies the regular file member of the gzip-compressed tar
// archive at archivePath into w and returns the number of bytes written.
// member is an archive path as the catalog's files[].path gives it; "./x" and
// "x" name the same member. Errors: the archive cannot be read, member is not
// in it (the error lists up to 20 members that are), or member is not a
// regular file (a symlink or hard link is reported with its target, so the
// catalog can name the target instead).
func ExtractFile(archivePath, member string, w io.Writer) (int64, error) {
	f, err := os.Open(archivePath)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return 0, fmt.Errorf("archive %s: %w", archivePath, err)
	}
	defer zr.Close()
	want := cleanMember(member)
	if want == "" {
		return 0, fmt.Errorf("archive %s: empty member name", archivePath)
	}
	tr := tar.NewReader(zr)
	var seen []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("archive %s: %w", archivePath, err)
		}
		name := cleanMember(hdr.Name)
		if name != want {
			if hdr.Typeflag != tar.TypeDir && len(seen) < 1000 {
				seen = append(seen, name)
			}
			continue
		}
		switch hdr.Typeflag {
		case tar.TypeReg:
			n, err := io.Copy(w, tr)
			if err != nil {
				return n, fmt.Errorf("archive %s: extract %s: %w", archivePath, member, err)
			}
			return n, nil
		case tar.TypeSymlink, tar.TypeLink:
			return 0, fmt.Errorf("archive %s: %s is a link to %s, not a file (fix: name the target in the catalog)", archivePath, member, hdr.Linkname)
		default:
			return 0, fmt.Errorf("archive %s: %s is not a regular file (tar type %q)", archivePath, member, hdr.Typeflag)
		}
	}
	sort.Strings(seen)
	if len(seen) > 20 {
		seen = append(seen[:20], "…")
	}
	return 0, fmt.Errorf("archive %s has no file %q (it has: %s)", archivePath, member, strings.Join(seen, ", "))
}

// cleanMember normalises an archive path: no leading "./" or "/", no "..".
func cleanMember(p string) string {
	p = path.Clean("/" + p)
	return strings.TrimPrefix(p, "/")
}

// WriteFile writes the content of one of the artifact's files (an element of
// Resolved.Files) to w and returns the number of bytes written: for a binary
// or disk artifact the whole blob (file.Path must be empty), for a tar.gz
// artifact the archive member file.Path (see ExtractFile). Images are not
// files: they are imported with `ctr -n k8s.io images import <Path>`.
// Errors: the fetch failed (f.Err), the format has no files, a member is
// missing.
func (f Fetched) WriteFile(file File, w io.Writer) (int64, error) {
	if f.Err != nil {
		return 0, f.Err
	}
	if f.Path == "" {
		return 0, fmt.Errorf("%s was not fetched", f.Resolved.Artifact.Name)
	}
	switch f.Resolved.Artifact.Format {
	case FormatBinary, FormatDisk:
		if file.Path != "" {
			return 0, fmt.Errorf("%s is a single %s file; it has no member %q", f.Resolved.Artifact.Name, f.Resolved.Artifact.Format, file.Path)
		}
		in, err := os.Open(f.Path)
		if err != nil {
			return 0, err
		}
		defer in.Close()
		return io.Copy(w, in)
	case FormatTarGz:
		return ExtractFile(f.Path, file.Path, w)
	default:
		return 0, fmt.Errorf("%s has format %s, which has no files to install (images are imported with ctr)", f.Resolved.Artifact.Name, f.Resolved.Artifact.Format)
	}
}
