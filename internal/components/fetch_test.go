package components

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/khw-dev/khw/internal/config"
)

// Every artifact of the catalog, through a URL mirror with the official
// layout; then again, which must be served from the cache without a single
// HTTP request.
func TestFetchURLMirrorThenCacheHit(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	srv := newDirServer(t, w.root)
	f := testFetcher(t, srv.URL)
	var log bytes.Buffer
	f.Progress = &log
	rs := w.rs[config.ArchAMD64]
	res, err := f.Fetch(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(rs) {
		t.Fatalf("%d results for %d artifacts", len(res), len(rs))
	}
	for i, r := range res {
		key := CacheKey(rs[i])
		if r.Resolved.Artifact.Name != rs[i].Artifact.Name || r.Cached || r.Err != nil {
			t.Errorf("%s: %+v", key, r)
		}
		want := w.content[key]
		if got := readFile(t, r.Path); !bytes.Equal(got, want) {
			t.Errorf("%s: cached blob differs from the served file", key)
		}
		if r.SHA256 != sum256(want) || r.Size != int64(len(want)) || filepath.Base(r.Path) != r.SHA256 {
			t.Errorf("%s: digest %s size %d path %s", key, r.SHA256, r.Size, r.Path)
		}
		if !strings.HasPrefix(r.Source, srv.URL+"/") {
			t.Errorf("%s: source %s is not the mirror", key, r.Source)
		}
		if r.Resolved.Artifact.Format == FormatImage {
			id, _ := w.images[key].ConfigName()
			if r.ImageID != id.String() || r.ImageDigest != "" {
				t.Errorf("%s: image id %q (want %s), digest %q", key, r.ImageID, id, r.ImageDigest)
			}
		}
	}
	// Progress: not a terminal, so one line per finished item.
	if n := strings.Count(log.String(), "fetched "); n != len(rs) {
		t.Errorf("progress has %d 'fetched' lines for %d artifacts:\n%s", n, len(rs), log.String())
	}
	// The index maps official URLs (not mirror URLs) to digests.
	var idx cacheIndex
	if err := json.Unmarshal(readFile(t, filepath.Join(f.CacheDir, "index.json")), &idx); err != nil {
		t.Fatal(err)
	}
	kubectl := pick(rs, "kubectl")[0]
	if e := idx.Entries[kubectl.URL]; e.SHA256 != sum256(w.content[kubectl.URL]) || !strings.Contains(e.VerifiedBy, srv.URL+"/"+MirrorManifestFile) || e.Trust != TrustMirror {
		t.Errorf("index entry for %s: %+v", kubectl.URL, e)
	}

	before := srv.total.Load()
	log.Reset()
	again, err := f.Fetch(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	if n := srv.total.Load() - before; n != 0 {
		t.Fatalf("second fetch made %d HTTP requests, want 0", n)
	}
	for i, r := range again {
		if !r.Cached || r.Path != res[i].Path || r.SHA256 != res[i].SHA256 || r.ImageID != res[i].ImageID {
			t.Errorf("%s: second fetch %+v", r.Resolved.Artifact.Name, r)
		}
	}
	if n := strings.Count(log.String(), "cached "); n != len(rs) {
		t.Errorf("second run printed %d 'cached' lines:\n%s", n, log.String())
	}
}

// A cached blob is re-hashed before use: a damaged one is fetched again.
func TestFetchRehashesCachedBlob(t *testing.T) {
	w := newWorld(t, config.ArchARM64)
	srv := newDirServer(t, w.root)
	f := testFetcher(t, srv.URL)
	rs := pick(w.rs[config.ArchARM64], "kubelet", "etcd")
	res, err := f.Fetch(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	// Same size, one byte flipped.
	b := readFile(t, res[0].Path)
	b[10] ^= 0xff
	os.Chmod(res[0].Path, 0o644)
	if err := os.WriteFile(res[0].Path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	f.Progress = &log
	before := srv.count(urlPath(rs[0].URL))
	again, err := f.Fetch(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Cached || srv.count(urlPath(rs[0].URL)) != before+1 {
		t.Errorf("damaged kubelet blob was not fetched again: %+v", again[0])
	}
	if !bytes.Equal(readFile(t, again[0].Path), w.content[rs[0].URL]) {
		t.Error("kubelet blob still damaged")
	}
	if !again[1].Cached {
		t.Error("intact etcd blob was fetched again")
	}
	if !strings.Contains(log.String(), "has SHA-256") {
		t.Errorf("no note about the damaged blob:\n%s", log.String())
	}
}

func TestFetchChecksumMismatch(t *testing.T) {
	for _, name := range []string{"kubectl", "etcd", "ubuntu-24.04"} { // hex, sha256sum, sha256sum with '*'
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, config.ArchAMD64)
			r := pick(w.rs[config.ArchAMD64], name)[0]
			// The mirror serves other bytes (of the same size) than its pinned
			// manifest lists, and has rewritten its checksum file to match
			// them: the checksum file must not matter.
			f := testFetcher(t, w.root) // pinned to the manifest as exported
			bad := append([]byte(nil), w.content[r.URL]...)
			copy(bad, "tampered")
			writeFile(t, w.path(r.URL), bad)
			if r.ChecksumFormat == ChecksumHex {
				writeFile(t, w.path(r.ChecksumURL), []byte(sum256(bad)))
			} else {
				writeFile(t, w.path(r.ChecksumURL), []byte(sum256(bad)+"  "+r.FileName+"\n"))
			}
			srv := newDirServer(t, w.root)
			f.Mirror = srv.URL
			res, err := f.Fetch(context.Background(), []Resolved{r})
			var mm *DigestMismatchError
			if !errors.As(err, &mm) || !errors.As(res[0].Err, &mm) {
				t.Fatalf("want a DigestMismatchError, got %v", err)
			}
			want, got := sum256(w.content[r.URL]), sum256(bad)
			for _, s := range []string{r.URL, "expected " + want, "actual " + got, srv.URL + urlPath(r.URL), srv.URL + "/" + MirrorManifestFile} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not name %q:\n%v", s, err)
				}
			}
			if mm.Expected != want || mm.Actual != got || mm.URL != r.URL {
				t.Errorf("mismatch fields %+v", mm)
			}
			if e := dirEntries(t, filepath.Join(f.CacheDir, "sha256")); len(e) != 0 {
				t.Errorf("bad download kept in the cache: %v", e)
			}
			if e := dirEntries(t, filepath.Join(f.CacheDir, "partial")); len(e) != 0 {
				t.Errorf("bad download kept as partial: %v", e)
			}
			if _, ok := (&cache{dir: f.CacheDir}).lookup(r.URL); ok {
				t.Error("index has an entry for the bad download")
			}
		})
	}
}

func TestFetchDirectoryMirror(t *testing.T) {
	w := newWorld(t, config.ArchARM64)
	f := testFetcher(t, w.root)
	off := &offlineTransport{}
	f.HTTPClient = &http.Client{Transport: off}
	rs := w.rs[config.ArchARM64]
	res, err := f.Fetch(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	if off.n.Load() != 0 {
		t.Fatalf("a directory mirror made %d HTTP requests", off.n.Load())
	}
	for i, r := range res {
		if !bytes.Equal(readFile(t, r.Path), w.content[CacheKey(rs[i])]) || !strings.HasPrefix(r.Source, w.root+string(os.PathSeparator)) {
			t.Errorf("%s: %+v", rs[i].Artifact.Name, r)
		}
	}
	// file:// works too and finds everything cached.
	f.Mirror = "file://" + w.root
	res, err = f.Fetch(context.Background(), rs)
	if err != nil || !res[0].Cached {
		t.Fatalf("file:// mirror: %v %+v", err, res[0])
	}
	// A missing file names the path and the fix.
	f2 := testFetcher(t, w.root)
	os.Remove(w.path(pick(rs, "runc")[0].URL))
	_, err = f2.Fetch(context.Background(), pick(rs, "runc"))
	if err == nil || !strings.Contains(err.Error(), w.path(pick(rs, "runc")[0].URL)) || !strings.Contains(err.Error(), "khw mirror export") {
		t.Errorf("missing mirror file: %v", err)
	}
	// Not a directory.
	f3 := testFetcher(t, filepath.Join(w.root, "nope"))
	if _, err := f3.Fetch(context.Background(), rs[:1]); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("bad mirror dir: %v", err)
	}
}

// Many artifacts: at most Parallel transfers at a time, and more than one.
func TestFetchParallelIsBounded(t *testing.T) {
	dir := t.TempDir()
	var rs []Resolved
	var man []MirrorEntry
	content := map[string][]byte{}
	for i := range 12 {
		u := fmt.Sprintf("https://example.test/files/v1/bin-%02d", i)
		data := randBytes(t, 4096+i)
		content[u] = data
		p, _, _ := MirrorLocation(dir, u)
		writeFile(t, p, data)
		writeFile(t, p+".sha256", []byte(sum256(data)+"\n"))
		rs = append(rs, Resolved{Component: "test", Version: "v1", Arch: "amd64", URL: u, ChecksumURL: u + ".sha256",
			ChecksumFormat: ChecksumHex, FileName: filepath.Base(u), Artifact: Artifact{Name: filepath.Base(u), Format: FormatBinary}})
		man = append(man, MirrorEntry{Path: strings.TrimPrefix(urlPath(u), "/"), URL: u, Arch: "amd64", SHA256: sum256(data), Size: int64(len(data))})
	}
	if _, _, err := WriteMirrorManifest(dir, man); err != nil {
		t.Fatal(err)
	}
	srv := newDirServer(t, dir)
	var inflight, peak, started atomic.Int32
	srv.setHook(func(rw http.ResponseWriter, req *http.Request) bool {
		if strings.HasSuffix(req.URL.Path, ".sha256") || strings.HasSuffix(req.URL.Path, MirrorManifestFile) {
			return false
		}
		first := started.Add(1) <= 4
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		// Hold the first transfers until a second one is running (or 2 s passed).
		for deadline := time.Now().Add(2 * time.Second); first && inflight.Load() < 2 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		return false
	})
	f := testFetcher(t, srv.URL)
	f.Parallel = 3
	res, err := f.Fetch(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !bytes.Equal(readFile(t, r.Path), content[rs[i].URL]) {
			t.Errorf("%s: wrong content", rs[i].URL)
		}
	}
	if p := peak.Load(); p < 2 || p > 3 {
		t.Errorf("peak concurrent transfers %d, want 2..3 with Parallel=3", p)
	}
	// The same artifact twice is fetched once.
	f2 := testFetcher(t, srv.URL)
	res, err = f2.Fetch(context.Background(), []Resolved{rs[0], rs[0]})
	if err != nil || res[0].Path != res[1].Path || srv.count(urlPath(rs[0].URL)) != 2 {
		t.Errorf("duplicate: %v, %d requests in total", err, srv.count(urlPath(rs[0].URL)))
	}
}

// Ctrl-C half-way: no cache entry, no blob; the next run resumes.
func TestFetchCancelLeavesNoCacheEntry(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	r := pick(w.rs[config.ArchAMD64], "kube-apiserver")[0]
	big := randBytes(t, 256<<10)
	w.replace(t, r, big)
	srv := newDirServer(t, w.root)
	p := urlPath(r.URL)
	halfSent := make(chan struct{})
	var once sync.Once
	var blocked atomic.Bool
	srv.setHook(func(rw http.ResponseWriter, req *http.Request) bool {
		if req.URL.Path != p || blocked.Swap(true) {
			return false
		}
		rw.Header().Set("Content-Length", strconv.Itoa(len(big)))
		rw.Write(big[:len(big)/2])
		rw.(http.Flusher).Flush()
		once.Do(func() { close(halfSent) })
		<-req.Context().Done()
		return true
	})
	f := testFetcher(t, srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-halfSent
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	res, err := f.Fetch(ctx, []Resolved{r})
	if !errors.Is(err, context.Canceled) || !errors.Is(res[0].Err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if e := dirEntries(t, filepath.Join(f.CacheDir, "sha256")); len(e) != 0 {
		t.Fatalf("cancelled fetch left blobs %v", e)
	}
	if _, ok := (&cache{dir: f.CacheDir}).lookup(r.URL); ok {
		t.Fatal("cancelled fetch left an index entry")
	}
	part := (&cache{dir: f.CacheDir}).partialPath(r.URL)
	st, err := os.Stat(part)
	if err != nil || st.Size() != int64(len(big)/2) {
		t.Fatalf("partial download: %v %v", st, err)
	}
	// Next run: resumes with a Range request and verifies.
	res, err = f.Fetch(context.Background(), []Resolved{r})
	if err != nil || !bytes.Equal(readFile(t, res[0].Path), big) {
		t.Fatalf("fetch after cancel: %v", err)
	}
	srv.mu.Lock()
	last := srv.ranges[p][len(srv.ranges[p])-1]
	srv.mu.Unlock()
	if last != fmt.Sprintf("bytes=%d-", len(big)/2) {
		t.Errorf("second run sent Range %q", last)
	}
	if e := dirEntries(t, filepath.Join(f.CacheDir, "partial")); len(e) != 0 {
		t.Errorf("partial left after success: %v", e)
	}
	// A context cancelled before the start fetches nothing.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	before := srv.total.Load()
	if _, err := testFetcher(t, srv.URL).Fetch(ctx2, []Resolved{r}); !errors.Is(err, context.Canceled) || srv.total.Load() != before {
		t.Errorf("pre-cancelled: %v, %d requests", err, srv.total.Load()-before)
	}
}

// A digest pinned in the catalog wins over the official checksum file; with
// a mirror, the manifest must agree with the pin, and the mirror's own
// checksum file is never read.
func TestFetchPinnedDigest(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	r := pick(w.rs[config.ArchAMD64], "kubectl")[0]
	good := sum256(w.content[r.URL])
	writeFile(t, w.path(r.ChecksumURL), []byte(strings.Repeat("0", 64))) // the published file is wrong
	srv := newDirServer(t, w.root)
	f, _ := officialFetcher(t, srv)

	pinned := r
	pinned.SHA256 = strings.ToUpper(good)
	res, err := f.Fetch(context.Background(), []Resolved{pinned})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].SHA256 != good || res[0].VerifiedBy != "pinned in catalog" || srv.count(urlPath(r.ChecksumURL)) != 0 {
		t.Errorf("pinned: %+v, checksum file requested %d times", res[0], srv.count(urlPath(r.ChecksumURL)))
	}
	// Without the pin the (wrong) published file is used and fails.
	f2, _ := officialFetcher(t, srv)
	if _, err := f2.Fetch(context.Background(), []Resolved{r}); err == nil || !strings.Contains(err.Error(), "expected "+strings.Repeat("0", 64)) {
		t.Errorf("unpinned: %v", err)
	}
	// A pin that differs from the cached digest is not satisfied by the cache.
	wrong := r
	wrong.SHA256 = strings.Repeat("ab", 32)
	before := srv.count(urlPath(r.URL))
	_, err = f.Fetch(context.Background(), []Resolved{wrong})
	var mm *DigestMismatchError
	if !errors.As(err, &mm) || mm.ExpectedFrom != "pinned in catalog" || mm.Expected != wrong.SHA256 || mm.Actual != good {
		t.Fatalf("wrong pin: %v", err)
	}
	if srv.count(urlPath(r.URL)) != before+1 {
		t.Error("a changed pin must re-download")
	}
	// The good blob is still cached under the good pin.
	res, err = f.Fetch(context.Background(), []Resolved{pinned})
	if err != nil || !res[0].Cached {
		t.Errorf("good pin after a bad one: %v %+v", err, res[0])
	}
	bad := r
	bad.SHA256 = "xyz"
	if _, err := f.Fetch(context.Background(), []Resolved{bad}); err == nil || !strings.Contains(err.Error(), "not a SHA-256 digest") {
		t.Errorf("malformed pin: %v", err)
	}

	// Through the mirror: its (wrong) checksum file is not read at all.
	m := testFetcher(t, srv.URL)
	res, err = m.Fetch(context.Background(), []Resolved{r})
	if err != nil || res[0].SHA256 != good || res[0].Trust != TrustMirror {
		t.Errorf("mirror: %v %+v", err, res[0])
	}
	if n := srv.count(urlPath(r.ChecksumURL)); n != 1 { // the unpinned official fetch above, none from the mirror
		t.Errorf("checksum file requested %d times, want 1", n)
	}
	// A catalog pin the manifest contradicts is refused.
	if _, err := testFetcher(t, srv.URL).Fetch(context.Background(), []Resolved{wrong}); err == nil || !strings.Contains(err.Error(), "but the catalog pins "+wrong.SHA256) {
		t.Errorf("manifest vs catalog pin: %v", err)
	}
}

func TestFetchImageFromMirrorChecksPlatform(t *testing.T) {
	w := newWorld(t, config.ArchARM64)
	r := pick(w.rs[config.ArchARM64], "pause-image")[0]
	srv := newDirServer(t, w.root)
	f := testFetcher(t, srv.URL)
	res, err := f.Fetch(context.Background(), []Resolved{r})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(res[0].Source, "/registry.k8s.io/pause/3.10.2/image-linux-arm64.tar") {
		t.Errorf("source %s", res[0].Source)
	}
	tag, _ := name.NewTag(r.Image)
	img, err := tarball.ImageFromPath(res[0].Path, &tag)
	if err != nil {
		t.Fatalf("cached image tarball does not load with its tag: %v", err)
	}
	got, _ := img.ConfigName()
	want, _ := w.images[CacheKey(r)].ConfigName()
	if got != want || res[0].ImageID != want.String() {
		t.Errorf("image id %s / %s, want %s", got, res[0].ImageID, want)
	}
	// An amd64 image where the arm64 one belongs is refused and not cached.
	wrong := imageTarball(t, r.Image, testImage(t, config.ArchAMD64))
	w.replaceImage(t, r, wrong)
	f2 := testFetcher(t, srv.URL)
	_, err = f2.Fetch(context.Background(), []Resolved{r})
	if err == nil || !strings.Contains(err.Error(), "is for linux/amd64, want linux/arm64") {
		t.Fatalf("wrong platform: %v", err)
	}
	if e := dirEntries(t, filepath.Join(f2.CacheDir, "sha256")); len(e) != 0 {
		t.Errorf("wrong-platform image cached: %v", e)
	}
	// A tarball tagged for another image is refused too.
	other := imageTarball(t, "registry.k8s.io/other:1", testImage(t, config.ArchARM64))
	w.replaceImage(t, r, other)
	if _, err := testFetcher(t, srv.URL).Fetch(context.Background(), []Resolved{r}); err == nil || !strings.Contains(err.Error(), "not found in tarball") {
		t.Errorf("wrongly tagged tarball: %v", err)
	}
}

// Two Fetch calls sharing a cache (two khw processes, say) download an
// artifact once: the second waits for the first and takes its blob.
func TestFetchConcurrentCallsShareTheCache(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	r := pick(w.rs[config.ArchAMD64], "kubelet")[0]
	srv := newDirServer(t, w.root)
	p := urlPath(r.URL)
	srv.setHook(func(rw http.ResponseWriter, req *http.Request) bool {
		if req.URL.Path == p {
			time.Sleep(300 * time.Millisecond)
		}
		return false
	})
	cacheDir := filepath.Join(t.TempDir(), "cache")
	var wg sync.WaitGroup
	results := make([][]Fetched, 2)
	errs := make([]error, 2)
	logs := make([]bytes.Buffer, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := testFetcher(t, srv.URL)
			f.CacheDir = cacheDir
			f.Progress = &logs[i]
			results[i], errs[i] = f.Fetch(context.Background(), []Resolved{r})
		}()
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil || !bytes.Equal(readFile(t, results[i][0].Path), w.content[r.URL]) {
			t.Fatalf("fetch %d: %v", i, errs[i])
		}
	}
	if n := srv.count(p); n != 1 {
		t.Errorf("kubelet downloaded %d times by two concurrent fetches, want 1", n)
	}
	if !results[1][0].Cached || !strings.Contains(logs[1].String(), "waiting for another khw process") {
		t.Errorf("second fetch: cached=%v, log %q", results[1][0].Cached, logs[1].String())
	}
}

// TestFetchMirrorCredentialsNeverShown: a mirror URL with user:password works
// (basic auth to the mirror host only) and the password appears in no
// progress line, result, error or cache index.
func TestFetchMirrorCredentialsNeverShown(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	files := http.FileServer(http.Dir(w.root))
	srv := newServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "teacher" || p != "s3cretpw" {
			http.Error(rw, "auth", http.StatusUnauthorized)
			return
		}
		files.ServeHTTP(rw, r)
	}))
	withCreds := strings.Replace(srv.URL, "http://", "http://teacher:s3cretpw@", 1)
	f := testFetcher(t, withCreds)
	var log bytes.Buffer
	f.Progress = &log
	rs := pick(w.rs[config.ArchAMD64], "etcd", "kubectl")
	res, err := f.Fetch(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	seen.WriteString(log.String())
	for _, r := range res {
		fmt.Fprintf(&seen, "%+v\n", r)
	}
	filepath.Walk(f.CacheDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && strings.HasSuffix(p, ".json") {
			b, _ := os.ReadFile(p)
			seen.Write(b)
		}
		return nil
	})
	// A failing fetch's error must not show it either.
	bad := testFetcher(t, strings.Replace(srv.URL, "http://", "http://teacher:wrongpw-s3cretpw@", 1))
	bad.Retries = -1
	_, err = bad.Fetch(context.Background(), pick(w.rs[config.ArchAMD64], "crictl"))
	if err == nil {
		t.Fatal("wrong password accepted")
	}
	seen.WriteString(err.Error())
	if strings.Contains(seen.String(), "s3cretpw") {
		t.Fatalf("the mirror password leaked:\n%s", seen.String())
	}
	for _, bad := range []string{"http://", "http://h:1?x=1", "https://h/#frag"} {
		if _, err := testFetcher(t, bad).Fetch(context.Background(), rs); err == nil || !strings.Contains(err.Error(), "not a usable base URL") {
			t.Errorf("mirror %q: %v", bad, err)
		}
	}
}
