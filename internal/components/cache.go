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
	"sync"
	"syscall"
	"time"

	"github.com/khw-dev/khw/internal/fsutil"
)

// Environment variables read by DefaultCacheDir and DefaultMirror.
const (
	// EnvCacheDir overrides the artifact cache directory.
	EnvCacheDir = "KHW_CACHE_DIR"
	// EnvMirror sets the default mirror (a directory or an http(s) base URL).
	EnvMirror = "KHW_MIRROR"
)

// Cache layout under the cache directory (docs/catalog.md "Artifact cache"):
//
//	sha256/<hex>        verified blobs, named by the SHA-256 of their content
//	index.json          key (official URL, or "image <ref> linux/<arch>") -> digest
//	index.lock          flock(2) lock serialising index updates between processes
//	partial/<k>.part    unfinished downloads kept for resuming (never trusted)
//	locks/<k>.lock      flock(2) lock held while one process fetches key k
//	verified/<hex>      the stat of sha256/<hex> when it last hashed correctly
const (
	cacheLocksDir   = "locks"
	cacheIndexFile  = "index.json"
	cacheLockFile   = "index.lock"
	cacheBlobDir    = "sha256"
	cachePartialDir = "partial"
	cacheStampDir   = "verified"
	cacheIndexVer   = 1
)

// DefaultCacheDir returns the artifact cache directory: $KHW_CACHE_DIR, else
// $XDG_CACHE_HOME/khw/artifacts, else ~/.cache/khw/artifacts (XDG Base
// Directory spec), else <tmp>/khw-artifacts when there is no home directory.
func DefaultCacheDir() string {
	if d := os.Getenv(EnvCacheDir); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "khw", "artifacts")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".cache", "khw", "artifacts")
	}
	return filepath.Join(os.TempDir(), "khw-artifacts")
}

// DefaultMirror returns $KHW_MIRROR ("" means: use the official URLs).
func DefaultMirror() string { return os.Getenv(EnvMirror) }

// CacheKey is the key under which the cache index records an artifact: the
// official URL for a download, "image <reference> linux/<arch>" for an image.
// The key never contains the mirror, so a blob fetched through one mirror is
// found again when fetching from another or from the official site.
func CacheKey(r Resolved) string {
	if r.isImage() {
		return "image " + r.Image + " linux/" + r.Arch
	}
	return r.URL
}

// IndexEntry is one record of the cache index (index.json).
type IndexEntry struct {
	// SHA256 is the lower-case hex digest of the blob sha256/<SHA256>.
	SHA256 string `json:"sha256"`
	// Size of the blob in bytes.
	Size int64 `json:"size"`
	// Source is the URL or file the blob was first fetched from.
	Source string `json:"source"`
	// VerifiedBy says how the digest was established: "checksum file <url>",
	// "pinned in catalog", "mirror manifest <loc> (sha256:<pin>, pinned)" or
	// "registry manifest <digest>".
	VerifiedBy string `json:"verifiedBy"`
	// Trust is the kind of source that named the digest (TrustOfficial,
	// TrustCatalog, TrustMirror, TrustRegistry); an entry without one is
	// never used.
	Trust string `json:"trust,omitempty"`
	// ImageDigest is an image's manifest digest ("sha256:<hex>"), images only.
	ImageDigest string `json:"imageDigest,omitempty"`
	// ImageID is an image's config digest ("sha256:<hex>"), images only.
	ImageID string `json:"imageID,omitempty"`
	// SignedChecksum and ChecksumSignature are the digests (hex) of the
	// blobs holding the checksum file and the detached signature that
	// verified SHA256, as published; set only for a signed checksum file.
	SignedChecksum    string `json:"signedChecksum,omitempty"`
	ChecksumSignature string `json:"checksumSignature,omitempty"`
	// Fetched is when the blob was stored (UTC).
	Fetched time.Time `json:"fetched"`
}

type cacheIndex struct {
	Version int                   `json:"version"`
	Entries map[string]IndexEntry `json:"entries"`
}

// cache is the on-disk content-addressed store. All methods are safe for
// concurrent use; index updates are also serialised between processes.
type cache struct {
	dir string
	mu  sync.Mutex
}

func openCache(dir string) (*cache, error) {
	if dir == "" {
		return nil, errors.New("artifact cache: no directory (fix: set Fetcher.CacheDir, --cache-dir or " + EnvCacheDir + ")")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("artifact cache %s: %w", dir, err)
	}
	for i, d := range []string{abs, filepath.Join(abs, cacheBlobDir), filepath.Join(abs, cachePartialDir), filepath.Join(abs, cacheLocksDir), filepath.Join(abs, cacheStampDir)} {
		if err := os.MkdirAll(d, fsutil.DirMode); err != nil {
			return nil, fmt.Errorf("artifact cache: create %s: %w (fix: choose a writable --cache-dir)", d, err)
		}
		real, err := checkPrivate(d)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			abs = real // from here on the checked path, not a link someone could swap
		}
	}
	if err := checkPrivateFile(filepath.Join(abs, cacheIndexFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return &cache{dir: abs}, nil
}

func (c *cache) blobPath(sum string) string { return filepath.Join(c.dir, cacheBlobDir, sum) }

// partialPath is where the download for key is kept until it is verified.
func (c *cache) partialPath(key string) string {
	h := sha256.Sum256([]byte(key))
	return filepath.Join(c.dir, cachePartialDir, hex.EncodeToString(h[:12])+".part")
}

// lockKey takes the per-key fetch lock, so that two khw processes (or two
// Fetch calls) never write the same partial file at once; the second waits
// (polling every 100 ms, until ctx ends) and then usually finds the blob
// cached. waiting is called once if the lock is busy.
func (c *cache) lockKey(ctx context.Context, key string, waiting func()) (unlock func(), err error) {
	h := sha256.Sum256([]byte(key))
	p := filepath.Join(c.dir, cacheLocksDir, hex.EncodeToString(h[:12])+".lock")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, fsutil.SecretMode)
	if err != nil {
		return nil, fmt.Errorf("artifact cache lock: %w", err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("artifact cache lock %s: %w", p, err)
		}
		if !told && waiting != nil {
			waiting()
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctxErr(ctx)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *cache) readIndex() (cacheIndex, error) {
	idx := cacheIndex{Version: cacheIndexVer, Entries: map[string]IndexEntry{}}
	data, err := os.ReadFile(filepath.Join(c.dir, cacheIndexFile))
	if errors.Is(err, fs.ErrNotExist) {
		return idx, nil
	}
	if err != nil {
		return idx, fmt.Errorf("artifact cache index: %w", err)
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		// A broken index only costs re-downloads: the blobs are still verified.
		return cacheIndex{Version: cacheIndexVer, Entries: map[string]IndexEntry{}}, nil
	}
	if idx.Entries == nil {
		idx.Entries = map[string]IndexEntry{}
	}
	return idx, nil
}

// lookup returns the index entry for key.
func (c *cache) lookup(key string) (IndexEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	idx, err := c.readIndex()
	if err != nil {
		return IndexEntry{}, false
	}
	e, ok := idx.Entries[key]
	return e, ok
}

// update changes the index under the in-process mutex and an flock on
// index.lock, re-reading the file first so concurrent khw processes do not
// lose each other's entries. e == nil deletes key.
func (c *cache) update(key string, e *IndexEntry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	lf, err := os.OpenFile(filepath.Join(c.dir, cacheLockFile), os.O_CREATE|os.O_RDWR, fsutil.SecretMode)
	if err != nil {
		return fmt.Errorf("artifact cache lock: %w", err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("artifact cache lock: %w", err)
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
	idx, err := c.readIndex()
	if err != nil {
		return err
	}
	if e == nil {
		if _, ok := idx.Entries[key]; !ok {
			return nil
		}
		delete(idx.Entries, key)
	} else {
		idx.Entries[key] = *e
	}
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(c.dir, cacheIndexFile), append(data, '\n'), fsutil.PublicMode)
}

// verifyBlob checks that sha256/<sum> has size bytes (any size when size is
// negative) and hashes to sum. A cached blob is trusted only after this
// check (docs/catalog.md "Artifact cache"). The hash is skipped when the
// file is the very one that last hashed correctly: same device, inode, size,
// mtime and ctime (blobStamp). Any write to the file sets its ctime to the
// current time, which no program can set back, so a stamp that still
// matches means the bytes are those that were hashed.
func (c *cache) verifyBlob(sum string, size int64) error {
	p := c.blobPath(sum)
	if err := checkPrivateFile(p); err != nil {
		return err
	}
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if size >= 0 && st.Size() != size {
		return fmt.Errorf("cached blob %s has %d bytes, the index says %d", p, st.Size(), size)
	}
	stamp, stampPath := blobStamp(st), filepath.Join(c.dir, cacheStampDir, sum)
	if stamp != "" {
		if b, err := os.ReadFile(stampPath); err == nil && string(b) == stamp {
			return nil
		}
	}
	got, _, err := hashFile(p)
	if err != nil {
		return err
	}
	if got != sum {
		os.Remove(stampPath)
		return fmt.Errorf("cached blob %s has SHA-256 %s", p, got)
	}
	if stamp != "" {
		// Best effort: without a stamp the next use hashes again.
		_ = fsutil.WriteFileAtomic(stampPath, []byte(stamp), fsutil.PublicMode)
	}
	return nil
}

// blobStamp returns "dev ino size mtime ctime" of a file (times in
// nanoseconds), or "" where the platform does not report them.
func blobStamp(st os.FileInfo) string {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d %d %d %d %d", uint64(sys.Dev), sys.Ino, st.Size(),
		time.Unix(sys.Mtim.Unix()).UnixNano(), time.Unix(sys.Ctim.Unix()).UnixNano())
}

// store moves the verified file tmp to sha256/<sum>. tmp must be in the cache
// directory's file system (it is: partial/ lives next to sha256/).
func (c *cache) store(tmp, sum string) (string, error) {
	dst := c.blobPath(sum)
	if err := os.Chmod(tmp, fsutil.PublicMode); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("artifact cache: store %s: %w", dst, err)
	}
	syncDir(filepath.Dir(dst))
	return dst, nil
}

// HashFile returns the hex SHA-256 and the size of the file at p, read
// as a stream.
func HashFile(p string) (string, int64, error) { return hashFile(p) }

// hashFile returns the hex SHA-256 and the size of the file at p.
func hashFile(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
