package components

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/khw-dev/khw/internal/config"
)

// world is a fake upstream: every artifact of the real catalog (resolved for
// the default cluster) with tiny made-up content, laid out in a directory
// under the official paths exactly as a mirror holds them, with checksum
// files in the published formats.
type world struct {
	root    string
	rs      map[string][]Resolved // by arch
	content map[string][]byte     // by CacheKey: the file bytes (images: the tarball)
	images  map[string]v1.Image   // by CacheKey
	pin     string                // sha256:<hex> of its khw-mirror.json
}

func sum256(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func randBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// tarGz builds a gzip-compressed tar with the given regular files (and the
// directories above them).
func tarGz(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	dirs := map[string]bool{}
	for _, n := range names {
		if d := filepath.Dir(strings.TrimPrefix(n, "./")); d != "." && !dirs[d] {
			dirs[d] = true
			tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755})
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(files[n]))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(files[n])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

// testImage is a random one-layer image whose config says linux/arch.
func testImage(t *testing.T, arch string) v1.Image {
	t.Helper()
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func imageTarball(t *testing.T, ref string, img v1.Image) []byte {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeFile(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// newWorld builds the fake upstream for the given arches.
func newWorld(t *testing.T, arches ...string) *world {
	t.Helper()
	cat, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	w := &world{root: t.TempDir(), rs: map[string][]Resolved{}, content: map[string][]byte{}, images: map[string]v1.Image{}}
	c := config.Default("khw", config.ArchARM64, config.ProviderLibvirt)
	sumLines := map[string][]string{} // checksum URL -> lines (sha256sum format)
	for _, arch := range arches {
		rs, err := cat.Resolve(c, arch)
		if err != nil {
			t.Fatal(err)
		}
		// The fake upstream cannot make a file with the digest the catalog
		// pins for the real Ubuntu image: it stands for that release with
		// the pin taken out (TestFetchFallback keeps the pin).
		for i := range rs {
			rs[i].SHA256 = ""
		}
		w.rs[arch] = rs
		for _, r := range rs {
			key := CacheKey(r)
			var data []byte
			switch r.Artifact.Format {
			case FormatImage:
				img := testImage(t, arch)
				data = imageTarball(t, r.Image, img)
				w.images[key] = img
				rel, err := ImageMirrorPath(r.Image, arch)
				if err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(w.root, rel), data)
				writeFile(t, filepath.Join(w.root, rel+".sha256"), []byte(sum256(data)+"\n"))
				w.content[key] = data
				continue
			case FormatTarGz:
				files := map[string][]byte{"README.md": []byte("fake " + r.Artifact.Name)}
				for _, f := range r.Files {
					files[f.Path] = []byte(fmt.Sprintf("#!/bin/sh\necho %s %s %s\n", f.Path, r.Version, arch))
				}
				data = tarGz(t, files)
			default:
				data = randBytes(t, 8<<10)
			}
			w.content[key] = data
			writeFile(t, w.path(r.URL), data)
			switch r.ChecksumFormat {
			case ChecksumHex:
				writeFile(t, w.path(r.ChecksumURL), []byte(sum256(data))) // dl.k8s.io style, no newline
			case ChecksumSHA256Sum:
				sep := "  "
				if strings.Contains(r.ChecksumURL, "cloud-images.ubuntu.com") {
					sep = " *" // Ubuntu's SHA256SUMS use binary mode
				}
				sumLines[r.ChecksumURL] = append(sumLines[r.ChecksumURL], sum256(data)+sep+r.FileName)
			}
		}
	}
	for u, lines := range sumLines {
		// Other files of the release, as the real SHA256SUMS list them.
		lines = append(lines, sum256([]byte(u))+"  some-other-file.zip")
		sort.Strings(lines)
		writeFile(t, w.path(u), []byte(strings.Join(lines, "\n")+"\n"))
	}
	w.writeManifest(t)
	return w
}

// replace makes the world hold data for r (a download): the file, its
// official checksum file, and the manifest (w.pin changes).
func (w *world) replace(t *testing.T, r Resolved, data []byte) {
	t.Helper()
	writeFile(t, w.path(r.URL), data)
	if r.ChecksumFormat == ChecksumHex {
		writeFile(t, w.path(r.ChecksumURL), []byte(sum256(data)+"\n"))
	} else {
		writeFile(t, w.path(r.ChecksumURL), []byte(sum256(data)+"  "+r.FileName+"\n"))
	}
	w.content[CacheKey(r)] = data
	w.writeManifest(t)
}

// replaceImage makes the world hold the image tarball data for r.
func (w *world) replaceImage(t *testing.T, r Resolved, data []byte) {
	t.Helper()
	rel, _ := ImageMirrorPath(r.Image, r.Arch)
	writeFile(t, filepath.Join(w.root, rel), data)
	writeFile(t, filepath.Join(w.root, rel+".sha256"), []byte(sum256(data)+"\n"))
	w.content[CacheKey(r)] = data
	w.writeManifest(t)
}

// officialTransport answers requests for any official https:// URL from
// the test server srv (which serves a directory in the mirror layout), so a
// Fetcher without a mirror can be tested offline; it counts requests.
type officialTransport struct {
	srv *server
	n   atomic.Int64
}

func (o *officialTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	o.n.Add(1)
	if r.URL.Scheme != "https" && r.URL.Host != "cloud-images-archive.ubuntu.com" {
		return nil, errors.New("test: the official path must use https, not " + r.URL.String())
	}
	u := *r.URL
	u.Scheme, u.Host, u.Path, u.RawPath = "http", strings.TrimPrefix(o.srv.URL, "http://"), "/"+r.URL.Host+r.URL.Path, ""
	req := r.Clone(r.Context())
	req.URL, req.Host = &u, u.Host
	resp, err := http.DefaultTransport.RoundTrip(req)
	if resp != nil {
		resp.Request = r // as a real transport answers: for the request it was given
	}
	return resp, err
}

// officialFetcher is a Fetcher without a mirror whose "internet" is srv.
func officialFetcher(t *testing.T, srv *server) (*Fetcher, *officialTransport) {
	tr := &officialTransport{srv: srv}
	return &Fetcher{CacheDir: filepath.Join(t.TempDir(), "cache"), RetryWait: time.Millisecond, HTTPClient: &http.Client{Transport: tr}}, tr
}

// writeManifest writes the world's khw-mirror.json for what it holds now and
// sets w.pin to its digest.
func (w *world) writeManifest(t *testing.T) {
	t.Helper()
	var es []MirrorEntry
	for arch, rs := range w.rs {
		for _, r := range rs {
			data := w.content[CacheKey(r)]
			e := MirrorEntry{Name: r.Artifact.Name, Version: r.Version, Arch: arch, URL: r.URL, Image: r.Image, SHA256: sum256(data), Size: int64(len(data))}
			if r.Artifact.Format == FormatImage {
				e.Path, _ = ImageMirrorPath(r.Image, arch)
			} else {
				e.Path = strings.TrimPrefix(urlPath(r.URL), "/")
			}
			es = append(es, e)
		}
	}
	_, pin, err := WriteMirrorManifest(w.root, es)
	if err != nil {
		t.Fatal(err)
	}
	w.pin = pin
}

// path is where the fake upstream keeps an official URL.
func (w *world) path(official string) string {
	p, isFile, err := MirrorLocation(w.root, official)
	if err != nil || !isFile {
		panic(fmt.Sprintf("MirrorLocation(%s): %v", official, err))
	}
	return p
}

func pick(rs []Resolved, names ...string) []Resolved {
	var out []Resolved
	for _, n := range names {
		for _, r := range rs {
			if r.Artifact.Name == n {
				out = append(out, r)
			}
		}
	}
	return out
}

// server is an httptest server in front of a directory, counting requests
// and body bytes per path; hook can take over a request.
type server struct {
	*httptest.Server
	mu       sync.Mutex
	requests map[string]int
	ranges   map[string][]string
	total    atomic.Int64
	bytes    atomic.Int64
	hook     func(w http.ResponseWriter, r *http.Request) bool
}

func newServer(t *testing.T, h http.Handler) *server {
	s := &server{requests: map[string]int{}, ranges: map[string][]string{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(pinProbe) != "" { // testFetcher reading the pin: not the Fetcher's traffic
			h.ServeHTTP(w, r)
			return
		}
		s.total.Add(1)
		s.mu.Lock()
		s.requests[r.URL.Path]++
		s.ranges[r.URL.Path] = append(s.ranges[r.URL.Path], r.Header.Get("Range"))
		hook := s.hook
		s.mu.Unlock()
		cw := &countingRW{ResponseWriter: w, n: &s.bytes}
		if hook != nil && hook(cw, r) {
			return
		}
		h.ServeHTTP(cw, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func newDirServer(t *testing.T, dir string) *server {
	return newServer(t, http.FileServer(http.Dir(dir)))
}

func (s *server) setHook(h func(w http.ResponseWriter, r *http.Request) bool) {
	s.mu.Lock()
	s.hook = h
	s.mu.Unlock()
}

func (s *server) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[path]
}

type countingRW struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingRW) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingRW) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// urlPath is the path an official URL has on a URL mirror.
func urlPath(official string) string {
	rel, err := mirrorRel(official)
	if err != nil {
		panic(err)
	}
	return "/" + rel
}

// offlineClient fails every request and counts them: a Fetcher using it
// must not touch the network.
type offlineTransport struct{ n atomic.Int64 }

func (o *offlineTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	o.n.Add(1)
	return nil, errors.New("test: network access not allowed: " + r.URL.String())
}

// localOnly lets requests reach 127.0.0.1 only, so no test can reach the
// internet even by mistake.
type localOnly struct{}

func (localOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Hostname() != "127.0.0.1" {
		return nil, errors.New("test: only 127.0.0.1 is allowed, not " + r.URL.Host)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// testFetcher is a Fetcher with a fresh cache that reaches 127.0.0.1 only.
// A mirror is pinned to the manifest it serves when the Fetcher is made
// (tests of the pin itself change MirrorDigest).
func testFetcher(t *testing.T, mirror string) *Fetcher {
	t.Helper()
	f := &Fetcher{CacheDir: filepath.Join(t.TempDir(), "cache"), Mirror: mirror, RetryWait: time.Millisecond,
		HTTPClient: &http.Client{Transport: localOnly{}}}
	if mirror != "" {
		f.MirrorDigest = servedPin(t, f.HTTPClient, mirror)
	}
	return f
}

// pinProbe marks servedPin's request, which test servers do not count.
const pinProbe = "X-Test-Pin-Probe"

// servedPin is "sha256:<hex>" of the khw-mirror.json mirror holds now, or ""
// when it has none.
func servedPin(t *testing.T, c *http.Client, mirror string) string {
	t.Helper()
	var data []byte
	if isURLMirror(mirror) {
		req, _ := http.NewRequest(http.MethodGet, strings.TrimRight(mirror, "/")+"/"+MirrorManifestFile, nil)
		req.Header.Set(pinProbe, "1")
		resp, err := c.Do(req)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return ""
		}
		data, _ = io.ReadAll(resp.Body)
	} else {
		var err error
		if data, err = os.ReadFile(filepath.Join(mirrorDir(mirror), MirrorManifestFile)); err != nil {
			return ""
		}
	}
	return "sha256:" + sum256(data)
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}
