package components

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
)

// A mirror without a pin is refused before anything is read from it, for a
// directory and for plain HTTP alike, and the error says how to pin it.
func TestFetchRefusesUnpinnedMirror(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	srv := newDirServer(t, w.root)
	rs := pick(w.rs[config.ArchAMD64], "etcd")
	for _, mirror := range []string{w.root, srv.URL} {
		f := testFetcher(t, mirror)
		f.MirrorDigest = ""
		_, err := f.Fetch(context.Background(), rs)
		if err == nil {
			t.Fatalf("%s: an unpinned mirror was used", mirror)
		}
		for _, want := range []string{"is not pinned", "--mirror-digest sha256:", EnvMirrorDigest, MirrorManifestFile} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error does not say %q:\n%v", mirror, want, err)
			}
		}
		if e := dirEntries(t, filepath.Join(f.CacheDir, "sha256")); len(e) != 0 {
			t.Errorf("%s: cached %v", mirror, e)
		}
	}
	if srv.total.Load() != 0 {
		t.Errorf("%d requests reached the unpinned mirror", srv.total.Load())
	}
	f := testFetcher(t, srv.URL)
	f.MirrorDigest = "md5:abc"
	if _, err := f.Fetch(context.Background(), rs); err == nil || !strings.Contains(err.Error(), "want sha256:<64 hex digits>") {
		t.Errorf("malformed pin: %v", err)
	}
}

// The attack of the issue: the mirror serves a tampered etcd tarball with a
// SHA256SUMS that matches it, and even rewrites its manifest. With the pin
// of the real manifest nothing is fetched; after the mirror goes away
// nothing is "cached" either.
func TestFetchTamperedMirrorIsRefused(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	r := pick(w.rs[config.ArchAMD64], "etcd")[0]
	pin := w.pin
	evil := tarGz(t, map[string][]byte{r.Files[0].Path: []byte("#!/bin/sh\necho owned\n")})
	w.replace(t, r, evil) // tarball, SHA256SUMS and khw-mirror.json all agree with each other
	srv := newDirServer(t, w.root)

	f := testFetcher(t, srv.URL)
	f.MirrorDigest = pin
	_, err := f.Fetch(context.Background(), []Resolved{r})
	if err == nil || !strings.Contains(err.Error(), "but the pin") || !strings.Contains(err.Error(), pin) {
		t.Fatalf("a mirror whose manifest is not the pinned one was used: %v", err)
	}
	if n := srv.count(urlPath(r.URL)); n != 0 {
		t.Errorf("the tarball was requested %d times before the manifest was checked", n)
	}
	if e := dirEntries(t, filepath.Join(f.CacheDir, "sha256")); len(e) != 0 {
		t.Errorf("cached %v", e)
	}
	srv.Close()
	off := &offlineTransport{}
	f.Mirror, f.MirrorDigest, f.HTTPClient = "", "", &http.Client{Transport: off}
	if res, err := f.Fetch(context.Background(), []Resolved{r}); err == nil || res[0].Cached {
		t.Fatalf("offline after the refusal: %v %+v", err, res)
	}
}

// An index entry that no trusted source vouches for (an older khw's entry
// for a mirror's own checksum file, or one planted by hand) is not used:
// the blob is verified again from a trusted source.
func TestCacheEntryWithoutTrustIsNotUsed(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	r := pick(w.rs[config.ArchAMD64], "kubectl")[0]
	srv := newDirServer(t, w.root)
	f, tr := officialFetcher(t, srv)
	c, err := openCache(f.CacheDir)
	if err != nil {
		t.Fatal(err)
	}
	planted := []byte("#!/bin/sh\necho planted kubectl\n")
	sum := sum256(planted)
	writeFile(t, c.blobPath(sum), planted)
	if err := c.update(r.URL, &IndexEntry{SHA256: sum, Size: int64(len(planted)), Source: "/somewhere", VerifiedBy: "checksum file /somewhere/kubectl.sha256"}); err != nil {
		t.Fatal(err)
	}
	res, err := f.Fetch(context.Background(), []Resolved{r})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Cached || res[0].SHA256 == sum || !bytes.Equal(readFile(t, res[0].Path), w.content[r.URL]) || res[0].Trust != TrustOfficial {
		t.Fatalf("the untrusted entry was used: %+v", res[0])
	}
	if tr.n.Load() == 0 {
		t.Fatal("no request to the official site")
	}
	// Now it is trusted: offline, it comes from the cache.
	g := &Fetcher{CacheDir: f.CacheDir, HTTPClient: &http.Client{Transport: &offlineTransport{}}}
	if res, err := g.Fetch(context.Background(), []Resolved{r}); err != nil || !res[0].Cached || res[0].Trust != TrustOfficial {
		t.Fatalf("trusted entry offline: %v %+v", err, res)
	}
}

// Without a mirror, the checksum file must come over HTTPS.
func TestOfficialChecksumOverHTTPOnly(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	r := pick(w.rs[config.ArchAMD64], "kubectl")[0]
	srv := newDirServer(t, w.root)
	f, _ := officialFetcher(t, srv)
	r.ChecksumURL = strings.Replace(r.ChecksumURL, "https://", "http://", 1)
	if _, err := f.Fetch(context.Background(), []Resolved{r}); err == nil || !strings.Contains(err.Error(), "is not on HTTPS") {
		t.Fatalf("http checksum file: %v", err)
	}
}

// A cache that another user can change is refused, naming the path and the
// fix; so are a group-writable parent without the sticky bit and an index
// file writable by others. A sticky world-writable parent (/tmp) is fine.
func TestCacheWritableByOthersIsRefused(t *testing.T) {
	base := t.TempDir() // under /tmp, which is 1777
	w := newWorld(t, config.ArchAMD64)
	r := pick(w.rs[config.ArchAMD64], "kubectl")[0]
	fetch := func(cacheDir string) error {
		f := testFetcher(t, w.root)
		f.CacheDir = cacheDir
		_, err := f.Fetch(context.Background(), []Resolved{r})
		return err
	}
	open := filepath.Join(base, "open")
	os.MkdirAll(open, 0o700)
	os.Chmod(open, 0o777)
	if err := fetch(open); err == nil || !strings.Contains(err.Error(), "can be changed by another user") || !strings.Contains(err.Error(), "chmod go-w "+open) {
		t.Errorf("0777 cache: %v", err)
	}
	parent := filepath.Join(base, "parent")
	os.MkdirAll(filepath.Join(parent, "cache"), 0o700)
	os.Chmod(parent, 0o775)
	if err := fetch(filepath.Join(parent, "cache")); err == nil || !strings.Contains(err.Error(), "its parent directory "+parent) {
		t.Errorf("group-writable parent: %v", err)
	}
	sticky := filepath.Join(base, "sticky")
	os.MkdirAll(sticky, 0o700)
	os.Chmod(sticky, 0o777|os.ModeSticky)
	good := filepath.Join(sticky, "cache")
	if err := fetch(good); err != nil {
		t.Errorf("cache under a sticky directory: %v", err)
	}
	os.Chmod(filepath.Join(good, cacheIndexFile), 0o666)
	if err := fetch(good); err == nil || !strings.Contains(err.Error(), cacheIndexFile) {
		t.Errorf("world-writable index: %v", err)
	}
	os.Chmod(filepath.Join(good, cacheIndexFile), 0o644)
	// A blob replaced by a symlink is not followed.
	c := &cache{dir: good}
	e, _ := c.lookup(r.URL)
	os.Remove(c.blobPath(e.SHA256))
	target := filepath.Join(base, "elsewhere")
	writeFile(t, target, w.content[r.URL])
	os.Symlink(target, c.blobPath(e.SHA256))
	if err := c.verifyBlob(e.SHA256, e.Size); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("symlinked blob: %v", err)
	}
}

// A transfer longer than its bound is cut off there: an endless body from a
// hostile server, a manifest that lists more than the catalog allows, and a
// directory-mirror file larger than the manifest says.
func TestDownloadIsCutOffAtItsBound(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	r := pick(w.rs[config.ArchAMD64], "kubectl")[0]
	srv := newDirServer(t, w.root)
	var sent int64
	srv.setHook(func(rw http.ResponseWriter, req *http.Request) bool {
		if req.URL.Path != urlPath(r.URL) {
			return false
		}
		rw.WriteHeader(http.StatusOK) // no Content-Length: chunked, endless
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for sent < 64<<20 {
			if _, err := rw.Write(chunk); err != nil {
				return true
			}
			sent += int64(len(chunk))
		}
		return true
	})
	f := testFetcher(t, srv.URL)
	_, err := f.Fetch(context.Background(), []Resolved{r})
	if err == nil || !strings.Contains(err.Error(), "more than 8192 bytes") {
		t.Fatalf("endless body: %v", err)
	}
	if e := dirEntries(t, filepath.Join(f.CacheDir, "partial")); len(e) != 0 {
		t.Errorf("partial download kept: %v", e)
	}
	if sent >= 64<<20 {
		t.Errorf("the client read the whole endless body (%d bytes)", sent)
	}

	// The manifest lists more than the catalog's bound: refused unread.
	small := r
	small.MaxSize = 4096
	g := testFetcher(t, w.root)
	if _, err := g.Fetch(context.Background(), []Resolved{small}); err == nil || !strings.Contains(err.Error(), "more than the catalog's bound") {
		t.Errorf("manifest over the bound: %v", err)
	}
	// Without a mirror the catalog's bound applies to the official download.
	o, _ := officialFetcher(t, newDirServer(t, w.root))
	if _, err := o.Fetch(context.Background(), []Resolved{small}); err == nil || !strings.Contains(err.Error(), "more than 4096 bytes") {
		t.Errorf("official over the bound: %v", err)
	}
	// A directory mirror's file grew after the manifest was written.
	writeFile(t, w.path(r.URL), append(w.content[r.URL], 'x'))
	if _, err := testFetcher(t, w.root).Fetch(context.Background(), []Resolved{r}); err == nil || !strings.Contains(err.Error(), "more than 8192 bytes") {
		t.Errorf("grown file: %v", err)
	}
}

// Every catalog artifact has a size bound.
func TestCatalogBoundsEveryArtifact(t *testing.T) {
	cat, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cat.Components {
		for _, a := range c.Artifacts {
			if a.MaxMiB <= 0 {
				t.Errorf("%s/%s has no maxMiB", c.Name, a.Name)
			}
		}
	}
}

// The mirror server lists no hidden or temporary files, quotes request paths
// in its log, and drops a client that stops reading.
func TestMirrorServerHidesAndTimesOut(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	dir := filepath.Join(w.root, "dl.k8s.io")
	writeFile(t, filepath.Join(dir, ".kubectl.tmp-123"), []byte("half an export"))
	writeFile(t, filepath.Join(dir, ".hidden"), []byte("x"))
	big := filepath.Join(dir, "big")
	fh, _ := os.Create(big)
	fh.Truncate(256 << 20) // sparse
	fh.Close()

	defer func(d time.Duration) { mirrorWriteIdle = d }(mirrorWriteIdle)
	mirrorWriteIdle = 300 * time.Millisecond
	var logs syncBuffer
	srv, err := MirrorServer(w.root, &logs)
	if err != nil {
		t.Fatal(err)
	}
	if srv.ReadHeaderTimeout == 0 || srv.ReadTimeout == 0 || srv.IdleTimeout == 0 {
		t.Errorf("timeouts %v %v %v", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	resp, err := http.Get(base + "/dl.k8s.io/")
	if err != nil {
		t.Fatal(err)
	}
	listing, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(listing), "release/") || strings.Contains(string(listing), ".kubectl.tmp") || strings.Contains(string(listing), ".hidden") {
		t.Errorf("listing:\n%s", listing)
	}

	// A path with a newline and an escape sequence is logged quoted.
	resp, err = http.Get(base + "/dl.k8s.io/x%0aFAKE%201.2.3.4%20GET%20/ok%20200%1b[2J")
	if err == nil {
		resp.Body.Close()
	}
	if l := logs.String(); strings.Contains(l, "\nFAKE") || strings.Contains(l, "\x1b") || !strings.Contains(l, `\nFAKE`) {
		t.Errorf("log not quoted:\n%q", l)
	}

	// A client that reads the headers and then nothing is dropped.
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(64 << 10)
	io.WriteString(conn, "GET /dl.k8s.io/big HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(2 * time.Second)
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, _ := io.Copy(io.Discard, conn)
	if n >= 256<<20 {
		t.Errorf("a stalled client still got the whole file (%d bytes)", n)
	}
}

// The manifest `khw mirror export` writes is what the builder in hack/
// writes too (one writer), and its digest is sha256sum's.
func TestWriteMirrorManifestDigest(t *testing.T) {
	dir := t.TempDir()
	e := []MirrorEntry{{Path: "b", URL: "https://x/b", SHA256: strings.Repeat("1", 64), Size: 1}, {Path: "a", URL: "https://x/a", SHA256: strings.Repeat("2", 64), Size: 2}}
	w, d, err := WriteMirrorManifest(dir, e)
	if err != nil || !w {
		t.Fatal(err)
	}
	data := readFile(t, filepath.Join(dir, MirrorManifestFile))
	if d != "sha256:"+sum256(data) {
		t.Errorf("digest %s, file %s", d, sum256(data))
	}
	var m MirrorManifest
	if json.Unmarshal(data, &m); len(m.Artifacts) != 2 || m.Artifacts[0].Path != "a" {
		t.Errorf("manifest %+v", m)
	}
	if w, d2, _ := WriteMirrorManifest(dir, e); w || d2 != d {
		t.Errorf("rewrite: %v %s", w, d2)
	}
	if got, _ := ManifestDigest(dir); got != d {
		t.Errorf("ManifestDigest %s", got)
	}
	if _, err := ParseMirrorDigest(d); err != nil {
		t.Error(err)
	}
	if _, err := ParseMirrorDigest(strings.ToUpper(d[7:])); err == nil || !strings.Contains(err.Error(), "add the prefix: sha256:") {
		t.Errorf("a pin without sha256: %v", err)
	}
	if h, err := ParseMirrorDigest(" SHA256:" + strings.ToUpper(d[7:]) + " "); err != nil || "sha256:"+h != d {
		t.Errorf("upper-case pin: %s %v", h, err)
	}
}

// A cache reached through a symlink is used under the path that was
// checked, not the link, which another user could swap after the check.
func TestCacheUsesTheCheckedPath(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "private")
	os.Mkdir(real, 0o700)
	ww := filepath.Join(base, "ww")
	os.Mkdir(ww, 0o700)
	os.Chmod(ww, 0o777|os.ModeSticky)
	link := filepath.Join(ww, "link")
	os.Symlink(real, link)
	c, err := openCache(link)
	if err != nil {
		t.Fatal(err)
	}
	if c.dir != real {
		t.Errorf("cache dir %s, want the resolved %s", c.dir, real)
	}
}
