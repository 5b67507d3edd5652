package components

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/khw-dev/khw/internal/fsutil"
)

// The trust model (docs/catalog.md "Trust model"):
//
//   - Without a mirror, a download is accepted only if its SHA-256 equals the
//     digest pinned in the catalog or the one in the official checksum file,
//     fetched over HTTPS from the project's own release location.
//   - With a mirror, nothing the mirror says is believed until its manifest
//     (khw-mirror.json) has the SHA-256 the user pinned (--mirror-digest,
//     $KHW_MIRROR_DIGEST); then each file must have the digest and size the
//     manifest lists. The mirror's own checksum files are not used.
//   - The cache keeps a blob only under a digest that one of those sources
//     (or a registry's content addressing) named, records which, and refuses
//     to work in a directory that another user could write to.

// EnvMirrorDigest pins the mirror's manifest (see Fetcher.MirrorDigest).
const EnvMirrorDigest = "KHW_MIRROR_DIGEST"

// DefaultMirrorDigest returns $KHW_MIRROR_DIGEST ("" when unset).
func DefaultMirrorDigest() string { return os.Getenv(EnvMirrorDigest) }

// Trust values of IndexEntry.Trust: the source that named a cached blob's
// digest. An entry without one of these (written by an older khw, or by
// hand) is never used; the artifact is fetched and verified again.
const (
	TrustOfficial = "official checksum file" // the project's checksum file over HTTPS
	TrustCatalog  = "catalog pin"            // checksum.sha256 in catalog.yaml
	TrustMirror   = "pinned mirror manifest" // khw-mirror.json with the pinned digest
	TrustRegistry = "registry manifest"      // a registry's content addressing
)

func trustedEntry(e IndexEntry) bool {
	switch e.Trust {
	case TrustOfficial, TrustCatalog, TrustMirror, TrustRegistry:
		return true
	}
	return false
}

// maxManifestSize bounds khw-mirror.json (a full two-arch mirror's is ~10 KiB).
const maxManifestSize = 16 << 20

// ParseMirrorDigest checks a mirror pin, "sha256:" and 64 hex digits (the
// form `khw mirror export` prints), and returns the lower-case hex. Errors
// name the flag and show the expected form.
func ParseMirrorDigest(s string) (string, error) {
	t := strings.TrimSpace(s)
	if len(t) >= 7 && strings.EqualFold(t[:7], "sha256:") {
		h, err := normalizeHex(strings.TrimSpace(t[7:]))
		if err != nil {
			return "", fmt.Errorf("--mirror-digest / %s: %v; want sha256:<64 hex digits>, as `khw mirror export` prints it", EnvMirrorDigest, err)
		}
		return h, nil
	}
	if _, err := normalizeHex(t); err == nil {
		return "", fmt.Errorf("--mirror-digest / %s %q: add the prefix: sha256:%s", EnvMirrorDigest, shorten(s), t)
	}
	return "", fmt.Errorf("--mirror-digest / %s %q: want sha256:<64 hex digits>, as `khw mirror export` prints it", EnvMirrorDigest, shorten(s))
}

func shorten(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// ManifestDigest returns the pin of the mirror in dir: "sha256:<hex>" of
// dir/khw-mirror.json as it is on disk (`sha256sum khw-mirror.json` gives the
// same hex).
func ManifestDigest(dir string) (string, error) {
	sum, _, err := hashFile(filepath.Join(dir, MirrorManifestFile))
	if err != nil {
		return "", fmt.Errorf("mirror manifest: %w", err)
	}
	return "sha256:" + sum, nil
}

// pinnedManifest is a mirror's khw-mirror.json whose digest matched the pin.
type pinnedManifest struct {
	pin     string                 // hex
	loc     string                 // where it was read
	entries map[string]MirrorEntry // by CacheKey: official URL, or "image <ref> linux/<arch>"
}

func (m *pinnedManifest) verifiedBy() string {
	return fmt.Sprintf("mirror manifest %s (sha256:%s, pinned)", m.loc, m.pin)
}

// lookup returns the manifest's entry for r, or an error that says the mirror
// does not hold it.
func (m *pinnedManifest) lookup(r Resolved) (MirrorEntry, error) {
	e, ok := m.entries[CacheKey(r)]
	if !ok {
		what := r.URL
		if what == "" {
			what = r.Image + " for linux/" + r.Arch
		}
		return MirrorEntry{}, permanentError{fmt.Errorf("the pinned mirror manifest %s does not list %s (fix: export the mirror again with this artifact, e.g. `khw mirror export DIR --arch %s`, and pin the new digest it prints)", m.loc, what, r.Arch)}
	}
	return e, nil
}

// loadPinnedManifest reads khw-mirror.json from the mirror, checks its
// SHA-256 against pin (hex) and indexes its entries. Errors: missing or
// oversized manifest, a digest other than the pin (the mirror changed, or
// the pin is for another mirror), a manifest that does not parse.
func (f *Fetcher) loadPinnedManifest(ctx context.Context, run *fetchRun, pin string) (*pinnedManifest, error) {
	loc, isFile := f.mirrorFile(MirrorManifestFile)
	data, err := f.getBounded(ctx, run, loc, isFile, maxManifestSize, "mirror manifest")
	if err != nil {
		if unreachable(err) {
			return nil, fmt.Errorf("mirror %s: %w (fix: nothing answers there: check the address and port, and that `khw mirror serve` runs on that machine)", f.Mirror, err)
		}
		return nil, fmt.Errorf("mirror %s: %w (fix: the mirror must be made by `khw mirror export` or hack/build-mirror.sh, which write %s)", f.Mirror, err, MirrorManifestFile)
	}
	h := sha256.Sum256(data)
	if got := hex.EncodeToString(h[:]); got != pin {
		return nil, fmt.Errorf("mirror %s: its manifest %s has sha256:%s, but the pin (--mirror-digest / %s) is sha256:%s: "+
			"nothing was fetched from it (fix: if the mirror was exported again, get the new digest from whoever made it; otherwise this is not the mirror you pinned)",
			f.Mirror, loc, got, EnvMirrorDigest, pin)
	}
	var man MirrorManifest
	if err := json.Unmarshal(data, &man); err != nil || man.Format != mirrorFormat {
		return nil, fmt.Errorf("mirror manifest %s: not a %s file", loc, mirrorFormat)
	}
	m := &pinnedManifest{pin: pin, loc: loc, entries: map[string]MirrorEntry{}}
	for _, e := range man.Artifacts {
		if _, err := normalizeHex(e.SHA256); err != nil || e.Size < 0 {
			return nil, fmt.Errorf("mirror manifest %s: entry %s: bad sha256 or size", loc, e.Path)
		}
		switch {
		case e.URL != "":
			m.entries[e.URL] = e
		case e.Image != "":
			m.entries["image "+e.Image+" linux/"+e.Arch] = e
		}
	}
	return m, nil
}

// PinnedDigest is what a pinned mirror manifest says of one artifact.
type PinnedDigest struct {
	// SHA256 is the lower-case hex digest the manifest lists: the one Fetch
	// requires of the file it takes from the mirror ("" when Err is set).
	SHA256 string
	// Err says why there is none: the manifest does not list the artifact,
	// or lists another digest than the catalog pins.
	Err error
}

// PinnedDigests reads f.Mirror's manifest, checks it against the pin
// (f.MirrorDigest) as Fetch does, and returns for each of rs, in order,
// the digest it lists; from says where that comes from (the manifest's
// location, without any credentials, and the pin). It downloads nothing
// else: it is how khw tells a learner which digest to check a file they
// download by hand against, in place of the checksum files the mirror
// serves. Errors: no mirror set, the mirror unpinned or its manifest not
// matching the pin, unreadable or not a mirror manifest.
func (f *Fetcher) PinnedDigests(ctx context.Context, rs []Resolved) (sums []PinnedDigest, from string, err error) {
	if f.Mirror == "" {
		return nil, "", fmt.Errorf("no mirror is set (%s): there is no mirror manifest to read", EnvMirror)
	}
	ff := f
	if isURLMirror(f.Mirror) {
		if ff, err = f.withMirrorCredentials(); err != nil {
			return nil, "", err
		}
	}
	if strings.TrimSpace(ff.MirrorDigest) == "" {
		return nil, "", NewMirrorPinError(f.Mirror)
	}
	pin, err := ParseMirrorDigest(ff.MirrorDigest)
	if err != nil {
		return nil, "", err
	}
	man, err := ff.loadPinnedManifest(ctx, &fetchRun{client: ff.client()}, pin)
	if err != nil {
		return nil, "", err
	}
	sums = make([]PinnedDigest, len(rs))
	for i, r := range rs {
		e, err := man.lookup(r)
		switch {
		case err != nil:
			sums[i].Err = err
		case r.SHA256 != "" && !strings.EqualFold(r.SHA256, e.SHA256):
			sums[i].Err = fmt.Errorf("the mirror manifest %s lists %s with sha256 %s, but the catalog pins %s: the mirror holds another file (fix: export the mirror again from a verified source)", man.loc, r.URL, e.SHA256, r.SHA256)
		default:
			sums[i].SHA256 = strings.ToLower(e.SHA256)
		}
	}
	return sums, man.verifiedBy(), nil
}

// RedactMirror is mirror as it may be shown: an http(s) URL with its
// password replaced by "xxxxx" (url.URL.Redacted); anything else as it is.
func RedactMirror(mirror string) string {
	u, err := url.Parse(mirror)
	if err != nil || (u.User == nil && u.RawQuery == "") {
		return mirror
	}
	// A user name alone can be the secret (a token as the user), and so
	// can a query: both are shown as xxxxx.
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword("xxxxx", "xxxxx")
		} else {
			u.User = url.User("xxxxx")
		}
	}
	if u.RawQuery != "" {
		u.RawQuery = "xxxxx"
	}
	return u.String()
}

// MirrorHasCredentials reports whether mirror is a URL with user
// information (https://user:password@host/): such a mirror is never
// written into a command or a file khw shows.
func MirrorHasCredentials(mirror string) bool {
	u, err := url.Parse(mirror)
	return err == nil && u.User != nil
}

// NewMirrorPinError is the refusal of a mirror without a pin: it says why
// and how to get and give the pin.
func NewMirrorPinError(mirror string) error {
	shown := RedactMirror(mirror)
	how := "run `sha256sum " + filepath.Join(mirrorDir(mirror), MirrorManifestFile) + "` where the mirror was made"
	if isURLMirror(mirror) {
		how = "ask whoever serves it: `khw mirror export` and `khw mirror serve` print it"
	}
	return fmt.Errorf("mirror %s is not pinned: khw trusts a mirror only through the SHA-256 of its manifest %s, which you pin "+
		"(fix: add --mirror-digest sha256:<hex> or set %s; to get the digest, %s)", shown, MirrorManifestFile, EnvMirrorDigest, how)
}

// checkPrivate refuses a cache directory that another user could change
// (fsutil.CheckPrivateDir) and returns its resolved path: what the cache
// holds is installed as root on every node and run on the jumpbox.
func checkPrivate(p string) (string, error) {
	return fsutil.CheckPrivateDir(p, "artifact cache", "what it holds is installed as root on every node", "--cache-dir / "+EnvCacheDir)
}

// checkPrivateFile refuses a cache file (the index, a blob) that is a
// symlink, not owned by the effective uid, or writable by group or others.
func checkPrivateFile(p string) error {
	err := fsutil.CheckPrivateFile(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("artifact cache: %w", err)
	}
	return err
}

// EnvFetcher is a Fetcher configured from the environment: the mirror in
// $KHW_MIRROR with its pin in $KHW_MIRROR_DIGEST, the cache in
// $KHW_CACHE_DIR (or the XDG default).
func EnvFetcher() Fetcher {
	return Fetcher{Mirror: DefaultMirror(), MirrorDigest: DefaultMirrorDigest(), CacheDir: DefaultCacheDir()}
}
