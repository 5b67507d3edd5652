package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// entry is one member of a tar archive or image layer.
type entry struct {
	// Name inside the archive, slash-separated, exactly as upstream writes
	// it ("etcd-v3.7.3-linux-amd64/etcd", "bin/ctr", "./bridge", "crictl").
	// Directories end in "/".
	Name string
	// Mode holds the permission bits (and sticky bit for /tmp).
	Mode fs.FileMode
	// Exactly one of Src (a file on disk), Data (inline) or Link (symlink
	// target) for a regular file or link; none for a directory.
	Src  string
	Data []byte
	Link string
	// UID and GID of the member (0 unless set).
	UID, GID int
	// Xattrs become PAX "SCHILY.xattr.<key>" records, e.g. the file
	// capability "security.capability".
	Xattrs map[string]string
}

func (e entry) isDir() bool { return strings.HasSuffix(e.Name, "/") }

// epoch is the modification time of every member: archives and images built
// from the same inputs are byte-identical.
var epoch = time.Unix(0, 0).UTC()

// writeTar writes entries in the given order as a tar stream (PAX format when
// an entry has xattrs, otherwise whatever archive/tar picks). Errors name the
// entry.
func writeTar(w io.Writer, entries []entry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.Name, Mode: int64(e.Mode.Perm()), Uid: e.UID, Gid: e.GID, ModTime: epoch}
		if e.Mode&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		if len(e.Xattrs) > 0 {
			hdr.Format = tar.FormatPAX
			hdr.PAXRecords = map[string]string{}
			keys := make([]string, 0, len(e.Xattrs))
			for k := range e.Xattrs {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				hdr.PAXRecords["SCHILY.xattr."+k] = e.Xattrs[k]
			}
		}
		var src *os.File
		switch {
		case e.isDir():
			hdr.Typeflag = tar.TypeDir
		case e.Link != "":
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = e.Link
		case e.Src != "":
			f, err := os.Open(e.Src)
			if err != nil {
				return fmt.Errorf("archive member %s: %w", e.Name, err)
			}
			st, err := f.Stat()
			if err != nil {
				f.Close()
				return fmt.Errorf("archive member %s: %w", e.Name, err)
			}
			if !st.Mode().IsRegular() {
				f.Close()
				return fmt.Errorf("archive member %s: source %s is not a regular file", e.Name, e.Src)
			}
			hdr.Typeflag = tar.TypeReg
			hdr.Size = st.Size()
			src = f
		default:
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.Data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			if src != nil {
				src.Close()
			}
			return fmt.Errorf("archive member %s: %w", e.Name, err)
		}
		if src != nil {
			_, err := io.Copy(tw, src)
			src.Close()
			if err != nil {
				return fmt.Errorf("archive member %s: %w", e.Name, err)
			}
		} else if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.Data); err != nil {
				return fmt.Errorf("archive member %s: %w", e.Name, err)
			}
		}
	}
	return tw.Close()
}

// writeTarGzFile writes entries as a gzip-compressed tar to path (through a
// temporary file and rename, so a crash never leaves half an archive).
func writeTarGzFile(path string, entries []entry) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err := writeTar(zw, entries); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// entriesRecipe is a stable description of entries (names, modes, owners,
// xattrs and the SHA-256 of each content) used as a cache key: a derived file
// is rebuilt exactly when one of its inputs changed.
func entriesRecipe(entries []entry) (string, error) {
	var b strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&b, "%s mode=%o uid=%d gid=%d", e.Name, uint32(e.Mode), e.UID, e.GID)
		switch {
		case e.Link != "":
			fmt.Fprintf(&b, " link=%s", e.Link)
		case e.Src != "":
			h, err := fileSHA256(e.Src)
			if err != nil {
				return "", fmt.Errorf("archive member %s: %w", e.Name, err)
			}
			fmt.Fprintf(&b, " sha256=%s", h)
		case !e.isDir():
			s := sha256.Sum256(e.Data)
			fmt.Fprintf(&b, " sha256=%s", hex.EncodeToString(s[:]))
		}
		keys := make([]string, 0, len(e.Xattrs))
		for k := range e.Xattrs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, " xattr.%s=%x", k, e.Xattrs[k])
		}
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// Official inner layouts (sources in catalog-research §2 and catalog.yaml):

// etcdEntries: one top directory etcd-VERSION-linux-ARCH/ holding the
// binaries and docs (etcd scripts/build-binary.sh package()).
func etcdEntries(version, arch string, bins []namedFile, docs []entry) []entry {
	top := "etcd-" + version + "-linux-" + arch + "/"
	out := []entry{{Name: top, Mode: 0o755}}
	for _, b := range bins {
		out = append(out, entry{Name: top + b.Name, Mode: 0o755, Src: b.Path})
	}
	for _, d := range docs {
		d.Name = top + d.Name
		out = append(out, d)
	}
	return out
}

// containerdEntries: bin/<binary> (containerd Makefile pack_release:
// tar -czf … -C releases/… bin).
func containerdEntries(bins []namedFile) []entry {
	out := []entry{{Name: "bin/", Mode: 0o755}}
	for _, b := range bins {
		out = append(out, entry{Name: "bin/" + b.Name, Mode: 0o755, Src: b.Path})
	}
	return out
}

// cniEntries: flat "./<plugin>" members plus ./README.md and ./LICENSE
// (plugins release workflow: `tar cfzpv … .` inside bin/).
func cniEntries(bins []namedFile, docs []entry) []entry {
	out := []entry{{Name: "./", Mode: 0o755}}
	for _, b := range bins {
		out = append(out, entry{Name: "./" + b.Name, Mode: 0o755, Src: b.Path})
	}
	for _, d := range docs {
		d.Name = "./" + d.Name
		out = append(out, d)
	}
	return out
}

// crictlEntries: the single member "crictl" at the root (cri-tools
// hack/release.sh: tar zcf … -C … crictl).
func crictlEntries(bin string) []entry {
	return []entry{{Name: "crictl", Mode: 0o755, Src: bin}}
}

// namedFile is a built binary: its name in the archive and its cache path.
type namedFile struct {
	Name string
	Path string
}
