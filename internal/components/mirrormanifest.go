package components

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/khw-dev/khw/internal/termtext"
)

// MirrorManifestFile is the file `khw mirror export` writes at the root of a
// mirror, listing what it holds with each file's SHA-256 and size
// (MirrorManifest as JSON). Its own SHA-256 is the mirror's pin: a Fetcher
// trusts the mirror only when the file has the digest the user pinned
// (Fetcher.MirrorDigest). A directory with it is recognised as a mirror by
// CheckMirrorDir.
const MirrorManifestFile = "khw-mirror.json"

// MirrorManifest is the content of khw-mirror.json.
type MirrorManifest struct {
	// Format is "khw-mirror/v1".
	Format string `json:"format"`
	// Artifacts are sorted by Path; one per file in the mirror (checksum files
	// are not listed).
	Artifacts []MirrorEntry `json:"artifacts"`
}

// MirrorEntry is one artifact file of a mirror.
type MirrorEntry struct {
	// Path is relative to the mirror root, slash-separated.
	Path string `json:"path"`
	// Name, Version and Arch are the catalog artifact's.
	Name    string `json:"name"`
	Version string `json:"version"`
	Arch    string `json:"arch"`
	// URL is the official URL (downloads) and Image the reference (images).
	URL   string `json:"url,omitempty"`
	Image string `json:"image,omitempty"`
	// SHA256 (hex) and Size (bytes) of the file.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// ImageDigest and ImageID as in Fetched, images only.
	ImageDigest string `json:"imageDigest,omitempty"`
	ImageID     string `json:"imageID,omitempty"`
}

const mirrorFormat = "khw-mirror/v1"

// ManifestFromDir writes dir/khw-mirror.json for the artifacts of rs that
// dir holds at their mirror paths, or at their fallback's (each file hashed
// now; artifacts not in dir are left out) and returns the pin,
// "sha256:<hex>". It is how a mirror
// laid out by other means than `khw mirror export` (the builder in hack/, a
// copy made by hand) gets its manifest: whoever runs it vouches for the
// files, and the pin it prints is what users of the mirror trust.
func ManifestFromDir(dir string, rs []Resolved) (digest string, err error) {
	var es []MirrorEntry
	seen := map[string]bool{}
	var all []Resolved
	for _, r := range rs {
		all = append(all, r)
		if r.Fallback != nil {
			all = append(all, *r.Fallback)
		}
		if r.Archive != nil {
			all = append(all, *r.Archive)
		}
	}
	for _, r := range all {
		rel, err := r.mirrorPath()
		if err != nil {
			return "", err
		}
		if seen[rel] {
			continue
		}
		seen[rel] = true
		p := filepath.Join(dir, filepath.FromSlash(rel))
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("mirror %s: %w", dir, err)
		}
		if !st.Mode().IsRegular() {
			return "", fmt.Errorf("mirror %s: %s is not a regular file", dir, rel)
		}
		sum, n, err := hashFile(p)
		if err != nil {
			return "", err
		}
		es = append(es, MirrorEntry{Path: rel, Name: r.Artifact.Name, Version: r.Version, Arch: r.Arch, URL: r.URL, Image: r.Image, SHA256: sum, Size: n})
	}
	_, digest, err = WriteMirrorManifest(dir, es)
	return digest, err
}

// WriteMirrorManifest writes dir/khw-mirror.json listing entries (sorted by
// Path; each entry's SHA256 and Size must be the file's) unless it already
// holds exactly that, and returns whether it wrote and the manifest's pin,
// "sha256:<hex>". It is the one writer of the format, used by `khw mirror
// export` and by the mirror builder in hack/.
func WriteMirrorManifest(dir string, entries []MirrorEntry) (written bool, digest string, err error) {
	man := MirrorManifest{Format: mirrorFormat, Artifacts: append([]MirrorEntry(nil), entries...)}
	sort.Slice(man.Artifacts, func(i, j int) bool { return man.Artifacts[i].Path < man.Artifacts[j].Path })
	data, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return false, "", err
	}
	data = append(data, '\n')
	w, err := writeSmall(filepath.Join(dir, MirrorManifestFile), data)
	if err != nil {
		return false, "", err
	}
	sum := sha256.Sum256(data)
	return w, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// MergeMirrorManifest adds entries to dir/khw-mirror.json (an entry with
// the Path of an existing one replaces it; the others are kept) and returns
// the new pin, "sha256:<hex>". It is how the mirror builder adds files that
// are not catalog artifacts (node packages) after ManifestFromDir. Errors:
// an existing entry that is not replaced fails checkMirrorEntry (each is
// named with why; nothing is written), or a file-system error.
func MergeMirrorManifest(dir string, entries []MirrorEntry) (digest string, err error) {
	digest, dropped, err := mergeMirrorManifest(context.Background(), dir, entries, false)
	if err == nil && len(dropped) > 0 {
		err = fmt.Errorf("%s lists entries that do not hold, so it was not changed:\n  - %s\n(fix: export into an empty directory, or remove those entries from it)",
			filepath.Join(dir, MirrorManifestFile), strings.Join(dropped, "\n  - "))
	}
	return digest, err
}

// mergeMirrorManifest is MergeMirrorManifest; with drop, the existing
// entries that fail checkMirrorEntry are left out of the new manifest and
// returned as "<path>: <why>", without drop they are returned and nothing
// is written.
func mergeMirrorManifest(ctx context.Context, dir string, entries []MirrorEntry, drop bool) (digest string, dropped []string, err error) {
	man, err := readMirrorManifest(dir)
	if err != nil {
		return "", nil, err
	}
	byPath := map[string]MirrorEntry{}
	for _, e := range entries {
		byPath[e.Path] = e
	}
	kept, dropped, err := keptMirrorEntries(ctx, dir, man.Artifacts, byPath, true, "")
	if err != nil || (len(dropped) > 0 && !drop) {
		return "", dropped, err
	}
	list := make([]MirrorEntry, 0, len(byPath)+len(kept))
	for _, e := range byPath {
		list = append(list, e)
	}
	_, digest, err = WriteMirrorManifest(dir, append(list, kept...))
	return digest, dropped, err
}

// keptMirrorEntries returns the entries of old (the manifest already in
// the mirror dir) that a new manifest keeps: those not replaced (no entry
// of replacing has their Path) that pass checkMirrorEntry. dropped lists
// the others as "<path>: <why>". Errors: ctx is done (checking hashes each
// file).
func keptMirrorEntries(ctx context.Context, dir string, old []MirrorEntry, replacing map[string]MirrorEntry, vouched bool, notVouched string) (kept []MirrorEntry, dropped []string, err error) {
	seen := map[string]bool{}
	for _, e := range old {
		if _, ok := replacing[e.Path]; ok {
			continue
		}
		if !vouched {
			dropped = append(dropped, fmt.Sprintf("%s: %s", abbrev(e.Path, 200), notVouched))
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("checking the entries of %s stopped: %w", filepath.Join(dir, MirrorManifestFile), err)
		}
		why := checkMirrorEntry(dir, e)
		if why == "" && seen[e.Path] {
			why = "listed twice"
		}
		if why != "" {
			dropped = append(dropped, fmt.Sprintf("%s: %s", abbrev(e.Path, 200), why))
			continue
		}
		seen[e.Path] = true
		kept = append(kept, e)
	}
	return kept, dropped, nil
}

// checkMirrorEntry says why e, an entry of the manifest in the mirror
// dir, cannot be pinned again ("" when it can): its Path must be clean,
// relative and slash-separated (fs.ValidPath, no backslash) and not the
// manifest itself; it must name a URL or an image (what a Fetcher looks
// it up by); its SHA256 must be 64 lower-case hex digits and its Size
// above 0; and the file must be there, a regular file reached without a
// symbolic link (what khw mirror serve serves), with that size and
// digest.
func checkMirrorEntry(dir string, e MirrorEntry) string {
	switch {
	case !fs.ValidPath(e.Path) || e.Path == "." || strings.Contains(e.Path, "\\"):
		return "its path is not a clean relative path inside the mirror"
	case e.Path == MirrorManifestFile:
		return "it lists the manifest itself"
	case e.URL == "" && e.Image == "":
		return "it names neither a URL nor an image, so nothing would look it up"
	case !sha256HexRE.MatchString(e.SHA256):
		return fmt.Sprintf("its sha256 %q is not 64 lower-case hex digits", abbrev(e.SHA256, 80))
	case e.Size <= 0:
		return fmt.Sprintf("its size is %d bytes, not above 0", e.Size)
	}
	if want, err := (Resolved{URL: e.URL, Image: e.Image, Arch: e.Arch}).mirrorPath(); err != nil || want != e.Path {
		return fmt.Sprintf("its path is not where its %s maps in a mirror (%s)", map[bool]string{true: "image", false: "URL"}[e.Image != ""], abbrev(want, 200))
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Sprintf("the mirror cannot be read: %v", err)
	}
	defer root.Close()
	elems := strings.Split(e.Path, "/")
	for i := range elems {
		st, err := root.Lstat(strings.Join(elems[:i+1], "/"))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "its file is not in the mirror"
		case err != nil:
			return fmt.Sprintf("its file cannot be read: %v", err)
		case st.Mode()&fs.ModeSymlink != 0:
			return fmt.Sprintf("%s is a symbolic link, which khw mirror serve does not follow", strings.Join(elems[:i+1], "/"))
		case i == len(elems)-1 && !st.Mode().IsRegular():
			return "its file is not a regular file"
		}
	}
	f, err := root.Open(e.Path)
	if err != nil {
		return fmt.Sprintf("its file cannot be read: %v", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	switch got := hex.EncodeToString(h.Sum(nil)); {
	case err != nil:
		return fmt.Sprintf("its file cannot be read: %v", err)
	case n != e.Size || got != e.SHA256:
		return fmt.Sprintf("its file has %d bytes and sha256 %s, not the %d bytes and %s listed", n, got, e.Size, e.SHA256)
	}
	return ""
}

var sha256HexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// WriteDropped writes to w, one line each, the entries of manifest (a
// khw-mirror.json) that an export left out (ExportReport.Dropped,
// NodeDebsReport.Dropped), with why; nothing when there are none.
func WriteDropped(w io.Writer, manifest string, dropped []string) {
	if len(dropped) == 0 {
		return
	}
	fmt.Fprintf(w, "khw: warning: left out of %s, so no longer pinned (a file of one stays where it is; exporting its artifact again lists it again):\n", manifest)
	for _, d := range dropped {
		fmt.Fprintf(w, "  - %s\n", termtext.Escape(d))
	}
}

func readMirrorManifest(dir string) (MirrorManifest, error) {
	var m MirrorManifest
	data, err := os.ReadFile(filepath.Join(dir, MirrorManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return MirrorManifest{Format: mirrorFormat}, nil
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil || m.Format != mirrorFormat {
		return m, fmt.Errorf("%s: not a %s file (fix: move it away, or export into an empty directory)", filepath.Join(dir, MirrorManifestFile), mirrorFormat)
	}
	return m, nil
}

// manifestVouched reports whether the manifest already in dir may have its
// entries carried over: there is none, or its digest is keepPin. why says,
// when it may not, what to do. Error: keepPin is not a digest.
func manifestVouched(dir, keepPin string) (bool, string, error) {
	data, err := os.ReadFile(filepath.Join(dir, MirrorManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return true, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("mirror %s: %w", dir, err)
	}
	sum := sha256.Sum256(data)
	have := hex.EncodeToString(sum[:])
	if keepPin == "" {
		return false, fmt.Sprintf("not carried over: nothing vouches for the %s that was in the directory (to keep its entries, pass the pin its export printed: --keep sha256:<hex>)", MirrorManifestFile), nil
	}
	want, err := ParseMirrorDigest(keepPin)
	if err != nil {
		return false, "", fmt.Errorf("--keep: %w", err)
	}
	if want != have {
		return false, fmt.Sprintf("not carried over: the %s that was in the directory is not the one --keep pins (its sha256 is %s)", MirrorManifestFile, have), nil
	}
	return true, "", nil
}
