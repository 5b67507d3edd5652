package components

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// Defaults of Fetcher's zero-valued fields.
const (
	DefaultParallel     = 4
	DefaultRetries      = 4
	DefaultRetryWait    = time.Second
	DefaultStallTimeout = time.Minute
	maxRetryWait        = 30 * time.Second
	maxChecksumFileSize = 4 << 20
	userAgent           = "khw (+https://github.com/khw-dev/khw)"
)

// Fetcher downloads, verifies and caches the artifacts of the catalog.
//
// Every artifact ends up as a verified blob in the content-addressed cache
// (CacheDir/sha256/<hex>); an index maps the official URL (or image reference
// and arch) to the digest, so a second Fetch of the same artifacts makes no
// network request at all. A cached blob is re-hashed (and its size checked)
// every time it is used; a damaged one is deleted and fetched again.
//
// Verification of downloads (never skipped; the trust model is in trust.go
// and docs/catalog.md "Trust model"):
//   - with a mirror, its manifest khw-mirror.json must have the SHA-256
//     pinned in MirrorDigest, and each file the digest and size listed there
//     (a catalog pin must agree with it); the mirror's checksum files are not
//     read;
//   - without one, a SHA-256 pinned in the catalog (Resolved.SHA256) wins;
//     otherwise the official checksum file (Resolved.ChecksumURL, https only,
//     format "hex" or "sha256sum", see ParseChecksum) gives the digest for
//     Resolved.FileName;
//   - images pulled from a registry are verified by the registry's content
//     addressing (every layer and the config are checked against the digests
//     in the manifest).
//
// No download may exceed the catalog's bound for its artifact
// (Resolved.MaxSize) nor, from a mirror, the size its manifest lists: the
// transfer is cut off there. A mismatch is a *DigestMismatchError; the bad
// file is deleted and nothing is cached. Cancelling the context stops every transfer; a cancelled download
// stays in CacheDir/partial/ only, to be resumed (with an HTTP Range request)
// by the next Fetch, and is never used without verification.
//
// The zero value works: official URLs, DefaultCacheDir(), DefaultParallel
// transfers, no progress output.
type Fetcher struct {
	// CacheDir is the cache directory ("" = DefaultCacheDir()).
	CacheDir string
	// Mirror is "" (official URLs), a directory, a file:// URL or an http(s)
	// base URL; https://HOST/PATH is read from MIRROR/HOST/PATH (see
	// MirrorLocation), images from MIRROR/ImageMirrorPath(...).
	Mirror string
	// MirrorDigest pins the mirror: "sha256:<hex>" of its khw-mirror.json, as
	// `khw mirror export` prints it. Required when Mirror is set; Fetch
	// refuses an unpinned mirror.
	MirrorDigest string
	// Parallel bounds the number of concurrent transfers (<= 0: DefaultParallel).
	Parallel int
	// Progress receives progress output (nil: none). On a terminal it shows
	// live per-item and total bytes, rate and ETA; otherwise one line per
	// finished item.
	Progress io.Writer
	// HTTPClient does every HTTP request (nil: a client with proxy settings
	// from the environment, redirects followed, 60 s response-header timeout).
	HTTPClient *http.Client
	// Retries is how many times a transient failure (connection error, cut
	// transfer, HTTP 408/429/5xx) is retried, resuming where it stopped:
	// 0 means DefaultRetries, a negative value means none.
	Retries int
	// RetryWait is the wait before the first retry, doubled on each further
	// retry up to 30 s (0: DefaultRetryWait).
	RetryWait time.Duration
	// StallTimeout aborts (and retries) a transfer that received no byte for
	// this long (0: DefaultStallTimeout).
	StallTimeout time.Duration
}

// Fetched is the result of fetching one artifact.
type Fetched struct {
	// Resolved is the catalog entry that was fetched.
	Resolved Resolved
	// Path is the verified blob in the cache (CacheDir/sha256/<SHA256>): the
	// binary, the tar.gz archive, the disk image, or for an image a tarball
	// as written by go-containerregistry's tarball.Write (docker-save layout,
	// importable with `ctr -n k8s.io images import`). Do not modify it.
	Path string
	// SHA256 is the lower-case hex SHA-256 of the file at Path.
	SHA256 string
	// Size of the file at Path in bytes.
	Size int64
	// ImageDigest is the registry's manifest digest of the image for
	// linux/<arch> ("sha256:<hex>"); set for images pulled from a registry,
	// empty for images taken from a mirror tarball (the tarball does not keep
	// the registry's manifest).
	ImageDigest string
	// ImageID is the image's config digest ("sha256:<hex>"), the IMAGE ID
	// that `crictl images` and `ctr images ls` show; images only.
	ImageID string
	// Cached is true when nothing was downloaded.
	Cached bool
	// Source is the URL or file the blob came from (for a cached blob: where
	// it came from when it was first fetched).
	Source string
	// VerifiedBy says how the digest was established, and Trust by which kind
	// of source (see IndexEntry).
	VerifiedBy string
	Trust      string
	// Fallback is true when Path holds Resolved.Fallback (its own URL could
	// not be had); FallbackReason then says why (the error of the first
	// source, or that the fallback was in the cache already).
	Fallback       bool
	FallbackReason string
	// Archive is true when Path holds Resolved.Archive (its own URL could not
	// be had); ArchiveReason then says why.
	Archive       bool
	ArchiveReason string
	// SignedChecksum and ChecksumSignature are the cache's copies of the
	// checksum file and its detached signature that verified the download,
	// as published ("" unless the catalog's checksum is signed).
	SignedChecksum, ChecksumSignature string
	// Err is this artifact's error; the other fields except Resolved are then
	// zero.
	Err error
}

// DigestMismatchError is returned when a download does not have the digest
// its checksum file (or the catalog pin) gives. The download was deleted.
type DigestMismatchError struct {
	// URL is the official URL (or image reference) of the artifact.
	URL string
	// Source is where the bad bytes came from (mirror URL or path).
	Source string
	// Expected and Actual are hex SHA-256 digests.
	Expected, Actual string
	// ExpectedFrom names the checksum file or "pinned in catalog".
	ExpectedFrom string
}

func (e *DigestMismatchError) Error() string {
	from := ""
	if e.Source != e.URL {
		from = " (fetched from " + e.Source + ")"
	}
	return fmt.Sprintf("sha256 mismatch for %s%s: expected %s (%s), actual %s; the download was deleted and nothing was cached "+
		"(fix: if a mirror is in use it is stale or damaged, export it again with `khw mirror export`; otherwise retry, and if it persists the published file changed: check the release)",
		e.URL, from, e.Expected, e.ExpectedFrom, e.Actual)
}

// permanentError marks an error that retrying cannot fix (HTTP 404, a full
// disk, a missing mirror file).
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// fetchRun is the state shared by the transfers of one Fetch call.
type fetchRun struct {
	cache  *cache
	prog   *progress
	client *http.Client
	mu     sync.Mutex
	sums   map[string]*sumCall
	// manifest is the pinned mirror manifest, read on the first cache miss
	// (a run served entirely from the cache needs no mirror).
	manifestOnce sync.Once
	manifest     *pinnedManifest
	manifestErr  error
	pin          string
	// finals maps a requested URL to the URL that answered it after
	// redirects.
	finals map[string]string
}

type sumCall struct {
	done chan struct{}
	data []byte
	err  error
}

// Fetch fetches every artifact of rs (as returned by Catalog.Resolve, any
// mix of downloads and images) into the cache, DefaultParallel (or Parallel)
// at a time. The result has one Fetched per element of rs, in the same order;
// artifacts with the same cache key are fetched once. The error is nil when
// every artifact was fetched and verified, else the errors.Join of each
// failed artifact's error (also in Fetched.Err); the successful ones are
// cached and returned either way. When ctx is cancelled, transfers stop
// and their Err wraps ctx's error.
func (f *Fetcher) Fetch(ctx context.Context, rs []Resolved) ([]Fetched, error) {
	if isURLMirror(f.Mirror) {
		ff, err := f.withMirrorCredentials()
		if err != nil {
			return nil, err
		}
		f = ff
	}
	dir := f.CacheDir
	if dir == "" {
		dir = DefaultCacheDir()
	}
	c, err := openCache(dir)
	if err != nil {
		return nil, err
	}
	if f.Mirror != "" && !isURLMirror(f.Mirror) {
		st, err := os.Stat(mirrorDir(f.Mirror))
		if err != nil || !st.IsDir() {
			return nil, fmt.Errorf("mirror %s: not a directory or an http(s) URL (fix: point --mirror / %s at a directory made by `khw mirror export`, or at the URL `khw mirror serve` prints)", f.Mirror, EnvMirror)
		}
	}
	run := &fetchRun{cache: c, client: withRedirectPolicy(f.client()), sums: map[string]*sumCall{}}
	if f.Mirror != "" {
		if strings.TrimSpace(f.MirrorDigest) == "" {
			return nil, NewMirrorPinError(f.Mirror)
		}
		if run.pin, err = ParseMirrorDigest(f.MirrorDigest); err != nil {
			return nil, err
		}
	}

	// owner[i] is the index whose result i shares (artifacts with the same
	// cache key are fetched once).
	out := make([]Fetched, len(rs))
	owner := make([]int, len(rs))
	first := map[string]int{}
	var jobs []int
	for i, r := range rs {
		owner[i] = i
		if k := CacheKey(r); k != "" {
			if j, ok := first[k]; ok {
				owner[i] = j
				continue
			}
			first[k] = i
		}
		jobs = append(jobs, i)
	}
	run.prog = newProgress(f.Progress, len(jobs))
	defer run.prog.close()
	par := f.Parallel
	if par <= 0 {
		par = DefaultParallel
	}
	queue := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(par, len(jobs)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range queue {
				out[i] = f.fetchOne(ctx, run, rs[i])
			}
		}()
	}
	for _, i := range jobs {
		queue <- i
	}
	close(queue)
	wg.Wait()

	var errs []error
	for i, r := range rs {
		if owner[i] != i {
			out[i] = out[owner[i]]
			out[i].Resolved = r
			continue
		}
		if out[i].Err != nil {
			errs = append(errs, out[i].Err)
		}
	}
	return out, errors.Join(errs...)
}

func (f *Fetcher) fetchOne(ctx context.Context, run *fetchRun, r Resolved) Fetched {
	label := r.Artifact.Name + " " + r.Version
	if err := ctx.Err(); err != nil {
		return Fetched{Resolved: r, Err: fmt.Errorf("%s: %w", label, ctxErr(ctx))}
	}
	it := run.prog.start(label)
	var res Fetched
	var err error
	switch {
	case r.isImage():
		res, err = f.fetchImage(ctx, run, r, it)
	case r.URL != "":
		res, err = f.fetchWithFallback(ctx, run, r, it)
	default:
		err = fmt.Errorf("catalog artifact %s has neither url nor image", r.Artifact.Name)
	}
	res.Resolved = r
	if err != nil {
		res = Fetched{Resolved: r, Err: fmt.Errorf("%s: %w", label, err)}
		run.prog.finish(it, fmt.Sprintf("failed  %s: %v", label, err))
		return res
	}
	verb := "fetched"
	if res.Cached {
		verb = "cached "
	}
	run.prog.finishOK(it, verb, label, res.Size, res.Source)
	return res
}

// pinned returns the mirror's manifest, checked against the pin, reading it
// once per Fetch call.
func (f *Fetcher) pinned(ctx context.Context, run *fetchRun) (*pinnedManifest, error) {
	run.manifestOnce.Do(func() {
		run.manifest, run.manifestErr = f.loadPinnedManifest(ctx, run, run.pin)
		if run.manifestErr != nil {
			run.manifestErr = permanentError{run.manifestErr}
		}
	})
	return run.manifest, run.manifestErr
}

// lock takes the cache's per-key fetch lock, noting when it has to wait.
func (run *fetchRun) lock(ctx context.Context, key string) (func(), error) {
	return run.cache.lockKey(ctx, key, func() {
		run.prog.note("waiting for another khw process that is fetching " + key)
	})
}

// cachedResult turns an index entry into a Fetched.
func (run *fetchRun) cachedResult(r Resolved, e IndexEntry) Fetched {
	res := Fetched{Resolved: r, Path: run.cache.blobPath(e.SHA256), SHA256: e.SHA256, Size: e.Size,
		ImageDigest: e.ImageDigest, ImageID: e.ImageID, Cached: true, Source: e.Source, VerifiedBy: e.VerifiedBy, Trust: e.Trust}
	if e.SignedChecksum != "" {
		if _, _, ok := run.cache.readSigned(e.SignedChecksum, e.ChecksumSignature); ok {
			res.SignedChecksum, res.ChecksumSignature = run.cache.blobPath(e.SignedChecksum), run.cache.blobPath(e.ChecksumSignature)
		}
	}
	return res
}

// fromCache returns the cached blob for key if the index has it, its digest
// equals want (when want is set) and it re-hashes correctly. A damaged blob
// is removed together with its index entry.
func (run *fetchRun) fromCache(r Resolved, key, want string) (Fetched, bool) {
	e, ok := run.cache.lookup(key)
	if !ok || (want != "" && e.SHA256 != want) || !trustedEntry(e) {
		return Fetched{}, false
	}
	if err := run.cache.verifyBlob(e.SHA256, e.Size); err != nil {
		run.prog.note(fmt.Sprintf("cache: %s: %v; fetching it again", key, err))
		if !errors.Is(err, os.ErrNotExist) {
			os.Remove(run.cache.blobPath(e.SHA256))
		}
		run.cache.update(key, nil)
		return Fetched{}, false
	}
	return run.cachedResult(r, e), true
}

func (f *Fetcher) fetchURL(ctx context.Context, run *fetchRun, r Resolved, it *pitem) (Fetched, error) {
	key := CacheKey(r)
	pinned := ""
	if r.SHA256 != "" {
		p, err := normalizeHex(r.SHA256)
		if err != nil {
			return Fetched{}, fmt.Errorf("catalog pins sha256 %w", err)
		}
		pinned = p
	}
	ctx = withRedirects(ctx, r, pinned != "")
	if res, ok := run.fromCache(r, key, pinned); ok {
		return res, nil
	}
	unlock, err := run.lock(ctx, key)
	if err != nil {
		return Fetched{}, err
	}
	defer unlock()
	if res, ok := run.fromCache(r, key, pinned); ok { // fetched meanwhile by another process
		return res, nil
	}
	loc, isFile, err := MirrorLocation(f.Mirror, r.URL)
	if err != nil {
		return Fetched{}, err
	}
	if f.Mirror != "" {
		man, e, limit, err := f.manifestEntry(ctx, run, r)
		if err != nil {
			return Fetched{}, err
		}
		if pinned != "" && e.SHA256 != pinned {
			return Fetched{}, pinConflictError{fmt.Errorf("the mirror manifest %s lists %s with sha256 %s, but the catalog pins %s: the mirror holds another file (fix: export the mirror again from a verified source)", man.loc, r.URL, e.SHA256, pinned)}
		}
		dl := download{want: e.SHA256, verifiedBy: man.verifiedBy(), trust: TrustMirror, limit: limit}
		if r.SignatureURL != "" {
			extra, signed, err := f.mirrorSignature(ctx, run, r, e.SHA256)
			if err != nil {
				return Fetched{}, fmt.Errorf("verify %s: %w", r.URL, err)
			}
			dl.verifiedBy += extra
			dl.signed = signed
		}
		return f.downloadVerified(ctx, run, r, key, r.URL, loc, isFile, dl, nil, it)
	}
	want, verifiedBy, trust := pinned, "pinned in catalog", TrustCatalog
	var signed *signedSums
	if want == "" {
		if r.ChecksumURL == "" {
			return Fetched{}, fmt.Errorf("%s has no checksum URL and no pinned sha256 in the catalog; khw never uses an unverified download (fix: add checksum.url or checksum.sha256 to catalog.yaml)", r.URL)
		}
		if !strings.HasPrefix(r.ChecksumURL, "https://") {
			return Fetched{}, fmt.Errorf("%s: its checksum file %s is not on HTTPS, so it proves nothing; khw never uses such a download (fix: use the https:// URL in catalog.yaml, or pin checksum.sha256)", r.URL, r.ChecksumURL)
		}
		data, err := f.checksumFile(ctx, run, r.ChecksumURL, false)
		if err != nil {
			return Fetched{}, fmt.Errorf("verify %s: %w", r.URL, err)
		}
		verifiedBy, trust = "checksum file "+r.ChecksumURL, TrustOfficial
		if r.SignatureURL != "" {
			if signed, err = f.verifySums(ctx, run, r, data, r.SignatureURL, false); err != nil {
				return Fetched{}, fmt.Errorf("verify %s: %w", r.URL, err)
			}
			verifiedBy = signed.signedBy(r)
		}
		want, err = ParseChecksum(data, r.ChecksumFormat, r.FileName)
		if err != nil {
			return Fetched{}, fmt.Errorf("verify %s: %s: %w", r.URL, r.ChecksumURL, err)
		}
	}
	return f.downloadVerified(ctx, run, r, key, r.URL, loc, isFile, download{want: want, verifiedBy: verifiedBy, trust: trust, limit: r.MaxSize, signed: signed}, nil, it)
}

// fetchWithFallback fetches r; when r's own URL cannot be had (upstream
// moved or deleted it: HTTP 404, a redirect the catalog does not allow; the
// mirror does not hold or list it; the host cannot be reached) it tries
// r.Archive, the same pinned file where upstream keeps it afterwards, then
// r.Fallback. It does not go on when a source answered with the wrong file
// (a digest mismatch, or a mirror manifest that contradicts the catalog
// pin): that is a broken or hostile source, not a missing file, and is
// reported. A fallback already in the cache is taken before the network is
// tried for r, when r itself is not cached: r was gone when that copy was
// fetched (dated releases do not come back), and reusing it keeps a cluster
// on one base image. The error when every source fails names each.
func (f *Fetcher) fetchWithFallback(ctx context.Context, run *fetchRun, r Resolved, it *pitem) (Fetched, error) {
	if r.Fallback == nil && r.Archive == nil {
		return f.fetchURL(ctx, run, r, it)
	}
	if fb := r.Fallback; fb != nil {
		if _, ok := run.cache.lookup(CacheKey(r)); !ok {
			if res, ok := run.fromCache(*fb, CacheKey(*fb), ""); ok {
				res.Fallback, res.FallbackReason = true, "the cache holds the fallback "+fb.URL+" (fetched when "+r.URL+" could not be had) and not "+r.URL
				return res, nil
			}
		}
	}
	final := func(err error) bool {
		var mm *DigestMismatchError
		var pc pinConflictError
		return err == nil || ctx.Err() != nil || errors.As(err, &mm) || errors.As(err, &pc)
	}
	res, err := f.fetchURL(ctx, run, r, it)
	if final(err) {
		return res, err
	}
	if ar := r.Archive; ar != nil {
		run.prog.note(fmt.Sprintf("%s %s: %v; trying the archive %s", r.Artifact.Name, r.Version, err, ar.URL))
		res, aerr := f.fetchURL(ctx, run, *ar, it)
		if aerr == nil {
			res.Archive, res.ArchiveReason = true, err.Error()
			return res, nil
		}
		err = fmt.Errorf("%w; and the archive %s: %w", err, ar.URL, aerr)
		if final(aerr) {
			return Fetched{}, err
		}
	}
	fb := r.Fallback
	if fb == nil {
		return Fetched{}, err
	}
	run.prog.note(fmt.Sprintf("%s %s: %v; trying the fallback %s", r.Artifact.Name, r.Version, err, fb.URL))
	res, ferr := f.fetchURL(ctx, run, *fb, it)
	if ferr != nil {
		return Fetched{}, fmt.Errorf("%w; and the fallback %s: %w", err, fb.URL, ferr)
	}
	res.Fallback, res.FallbackReason = true, err.Error()
	return res, nil
}

// pinConflictError is a mirror manifest that lists another digest for a
// file than the catalog pins: the mirror holds the wrong file.
type pinConflictError struct{ error }

func (e pinConflictError) Unwrap() error { return e.error }

// download is what downloadVerified needs to accept a file: the SHA-256 (hex)
// a trusted source named, how it was named (IndexEntry.VerifiedBy and
// .Trust), and the most bytes the transfer may bring (0: no bound).
type download struct {
	want, verifiedBy, trust string
	limit                   int64
	// signed is the signed checksum file that named want, if any: the cache
	// keeps it for export.
	signed *signedSums
}

// manifestEntry is the pinned manifest's entry for r and the byte bound of
// its download.
func (f *Fetcher) manifestEntry(ctx context.Context, run *fetchRun, r Resolved) (*pinnedManifest, MirrorEntry, int64, error) {
	man, err := f.pinned(ctx, run)
	if err != nil {
		return nil, MirrorEntry{}, 0, err
	}
	e, err := man.lookup(r)
	if err != nil {
		return nil, MirrorEntry{}, 0, err
	}
	limit, err := manifestLimit(r, e)
	return man, e, limit, err
}

// manifestLimit is the byte bound of a mirror download: the size the pinned
// manifest lists, refused when that is beyond the catalog's bound.
func manifestLimit(r Resolved, e MirrorEntry) (int64, error) {
	if r.MaxSize > 0 && e.Size > r.MaxSize {
		return 0, permanentError{fmt.Errorf("the mirror manifest lists %s with %d bytes, more than the catalog's bound of %d MiB for %s: khw does not download it (fix: check the mirror; if the release really grew, raise maxMiB in catalog.yaml)",
			e.Path, e.Size, r.MaxSize>>20, r.Artifact.Name)}
	}
	return max(e.Size, 1), nil // 0 would mean no bound; a listed empty file may bring 1 byte, which then fails the digest
}

// tooBig is the error of a transfer cut off at its bound.
func tooBig(loc string, limit int64) error {
	return permanentError{fmt.Errorf("%s: more than %d bytes, the most this artifact may have (its catalog bound, or the size the pinned mirror manifest lists); "+
		"the transfer was stopped and nothing was kept (fix: the source is broken or hostile; export the mirror again, or check the release)", loc, limit)}
}

// downloadVerified gets loc into the partial file of key, checks its SHA-256
// against want, runs inspect (images: open the tarball, check the platform)
// and moves it into the cache. A partial file left by an earlier run is
// resumed; if the resumed result does not verify, the download starts once
// more from byte 0 before a mismatch is reported.
func (f *Fetcher) downloadVerified(ctx context.Context, run *fetchRun, r Resolved, key, official, loc string, isFile bool,
	dl download, inspect func(string) (imageInfo, error), it *pitem) (Fetched, error) {
	want, verifiedBy := dl.want, dl.verifiedBy
	record := func(p string, size int64, cached bool) (Fetched, error) {
		var info imageInfo
		if inspect != nil {
			var err error
			if info, err = inspect(p); err != nil {
				if !cached {
					os.Remove(p)
				}
				return Fetched{}, err
			}
		}
		if !cached {
			var err error
			if p, err = run.cache.store(p, want); err != nil {
				return Fetched{}, err
			}
		}
		e := IndexEntry{SHA256: want, Size: size, Source: run.source(loc), VerifiedBy: verifiedBy, Trust: dl.trust, ImageDigest: info.digest, ImageID: info.id, Fetched: time.Now().UTC()}
		if dl.signed != nil {
			var err error
			if e.SignedChecksum, e.ChecksumSignature, err = run.cache.storeSigned(dl.signed); err != nil {
				return Fetched{}, err
			}
		}
		if err := run.cache.update(key, &e); err != nil {
			return Fetched{}, err
		}
		res := run.cachedResult(r, e)
		res.Cached = cached
		return res, nil
	}
	// The same content may already be cached under another key, or the index
	// may have been lost: a verified blob is as good as a download.
	if st, err := os.Stat(run.cache.blobPath(want)); err == nil {
		if run.cache.verifyBlob(want, st.Size()) == nil {
			return record(run.cache.blobPath(want), st.Size(), true)
		}
		os.Remove(run.cache.blobPath(want))
	}
	part := run.cache.partialPath(key)
	for try := 0; ; try++ {
		resumed := false
		if st, err := os.Stat(part); err == nil && st.Size() > 0 && !isFile {
			resumed = true
			if got, n, err := hashFile(part); err == nil && got == want {
				return record(part, n, false)
			}
		}
		if err := f.download(ctx, run, loc, isFile, part, dl.limit, it); err != nil {
			var pe permanentError
			if errors.As(err, &pe) {
				os.Remove(part)
			}
			return Fetched{}, err
		}
		got, n, err := hashFile(part)
		if err != nil {
			os.Remove(part)
			return Fetched{}, err
		}
		if got == want {
			return record(part, n, false)
		}
		os.Remove(part)
		if resumed && try == 0 {
			run.prog.note(fmt.Sprintf("resumed download of %s did not verify; downloading it again from the start", official))
			continue
		}
		return Fetched{}, &DigestMismatchError{URL: official, Source: loc, Expected: want, Actual: got, ExpectedFrom: verifiedBy}
	}
}
