package components

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
)

// The first transfer is cut half-way; the retry asks for the rest with a
// Range request and the result verifies.
func TestFetchResumesCutTransfer(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	r := pick(w.rs[config.ArchAMD64], "kube-proxy")[0]
	big := randBytes(t, 1<<20)
	w.replace(t, r, big)
	srv := newDirServer(t, w.root)
	p := urlPath(r.URL)
	half := len(big) / 2
	var cut atomic.Bool
	srv.setHook(func(rw http.ResponseWriter, req *http.Request) bool {
		if req.URL.Path != p || cut.Swap(true) {
			return false
		}
		rw.Header().Set("Content-Length", strconv.Itoa(len(big)))
		rw.WriteHeader(http.StatusOK)
		rw.Write(big[:half])
		rw.(http.Flusher).Flush()
		time.Sleep(50 * time.Millisecond)
		panic(http.ErrAbortHandler) // drop the connection mid-body
	})
	f := testFetcher(t, srv.URL)
	before := srv.bytes.Load()
	res, err := f.Fetch(context.Background(), []Resolved{r})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readFile(t, res[0].Path), big) {
		t.Fatal("resumed download differs")
	}
	srv.mu.Lock()
	ranges := srv.ranges[p]
	srv.mu.Unlock()
	if len(ranges) != 2 || ranges[0] != "" || ranges[1] != fmt.Sprintf("bytes=%d-", half) {
		t.Fatalf("Range headers %q, want [\"\" \"bytes=%d-\"]", ranges, half)
	}
	// Bytes sent: half, then the other half (plus the manifest).
	sent := srv.bytes.Load() - before
	if man := int64(len(readFile(t, filepath.Join(w.root, MirrorManifestFile)))); sent < int64(len(big)) || sent > int64(len(big))+man {
		t.Errorf("server sent %d bytes for a %d-byte file; a resume sends each byte once", sent, len(big))
	}
}

// A server that ignores Range (answers 200 with the whole file) still works.
func TestFetchServerWithoutRange(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	r := pick(w.rs[config.ArchAMD64], "kubelet")[0]
	srv := newDirServer(t, w.root)
	p := urlPath(r.URL)
	var n atomic.Int32
	srv.setHook(func(rw http.ResponseWriter, req *http.Request) bool {
		if req.URL.Path != p {
			return false
		}
		data := w.content[r.URL]
		rw.Header().Set("Content-Length", strconv.Itoa(len(data)))
		rw.WriteHeader(http.StatusOK)
		if n.Add(1) == 1 {
			rw.Write(data[:100])
			rw.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		rw.Write(data)
		return true
	})
	f := testFetcher(t, srv.URL)
	res, err := f.Fetch(context.Background(), []Resolved{r})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readFile(t, res[0].Path), w.content[r.URL]) {
		t.Fatal("content differs after a restart from byte 0")
	}
}

func TestFetchRetriesTransientAndNotPermanentErrors(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	rs := pick(w.rs[config.ArchAMD64], "kubelet", "crictl")
	srv := newDirServer(t, w.root)
	flaky := urlPath(rs[0].URL)
	var fails atomic.Int32
	srv.setHook(func(rw http.ResponseWriter, req *http.Request) bool {
		if req.URL.Path == flaky && fails.Add(1) <= 2 {
			http.Error(rw, "try later", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	os.Remove(w.path(rs[1].URL)) // crictl: 404
	f := testFetcher(t, srv.URL)
	res, err := f.Fetch(context.Background(), rs)
	if res[0].Err != nil || srv.count(flaky) != 3 {
		t.Errorf("kubelet after two 503s: %v, %d requests (want 3)", res[0].Err, srv.count(flaky))
	}
	if err == nil || res[1].Err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), urlPath(rs[1].URL)) {
		t.Fatalf("crictl 404: %v", err)
	}
	if n := srv.count(urlPath(rs[1].URL)); n != 1 {
		t.Errorf("a 404 was requested %d times; it is not transient", n)
	}
	// Retries exhausted: the error says so.
	f2 := testFetcher(t, srv.URL)
	f2.Retries = 1
	fails.Store(-100)
	_, err = f2.Fetch(context.Background(), rs[:1])
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "gave up after 2 attempts") {
		t.Errorf("exhausted retries: %v", err)
	}
}

func TestFetchFollowsRedirects(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	r := pick(w.rs[config.ArchAMD64], "kubectl")[0]
	srv := newDirServer(t, w.root)
	srv.setHook(func(rw http.ResponseWriter, req *http.Request) bool {
		if rest, ok := strings.CutPrefix(req.URL.Path, "/cdn"); ok {
			http.ServeFile(rw, req, filepath.Join(w.root, filepath.FromSlash(rest)))
			return true
		}
		if strings.HasPrefix(req.URL.Path, "/dl.k8s.io/") {
			http.Redirect(rw, req, "/cdn"+req.URL.Path, http.StatusFound)
			return true
		}
		return false
	})
	f := testFetcher(t, srv.URL)
	res, err := f.Fetch(context.Background(), []Resolved{r})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readFile(t, res[0].Path), w.content[r.URL]) || srv.count("/cdn"+urlPath(r.URL)) != 1 {
		t.Fatal("redirect not followed")
	}
}

func TestMirrorLocation(t *testing.T) {
	cases := []struct {
		mirror, official, want string
		isFile                 bool
		err                    string
	}{
		{"", "https://dl.k8s.io/release/v1/bin/kubectl", "https://dl.k8s.io/release/v1/bin/kubectl", false, ""},
		{"http://10.0.0.1:8080/", "https://dl.k8s.io/release/v1/bin/kubectl", "http://10.0.0.1:8080/dl.k8s.io/release/v1/bin/kubectl", false, ""},
		{"https://m.example/base", "https://github.com/a/b/releases/download/v1/x.tar.gz", "https://m.example/base/github.com/a/b/releases/download/v1/x.tar.gz", false, ""},
		{"/srv/mirror", "https://dl.k8s.io/a/b", "/srv/mirror/dl.k8s.io/a/b", true, ""},
		{"file:///srv/mirror", "https://dl.k8s.io/a/b", "/srv/mirror/dl.k8s.io/a/b", true, ""},
		{"/srv/mirror", "https://dl.k8s.io/a/../../../etc/passwd", "", false, "not clean"},
		{"/srv/mirror", "dl.k8s.io/a", "", false, "absolute http(s) URL"},
		{"/srv/mirror", "https://dl.k8s.io/a?x=1", "", false, "without a query"},
	}
	for _, c := range cases {
		got, isFile, err := MirrorLocation(c.mirror, c.official)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("MirrorLocation(%q, %q): err %v, want %q", c.mirror, c.official, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want || isFile != c.isFile {
			t.Errorf("MirrorLocation(%q, %q) = %q, %v, %v; want %q, %v", c.mirror, c.official, got, isFile, err, c.want, c.isFile)
		}
	}
	if p, err := ImageMirrorPath("registry.k8s.io/coredns/coredns:v1.14.6", "arm64"); err != nil || p != "registry.k8s.io/coredns/coredns/v1.14.6/image-linux-arm64.tar" {
		t.Errorf("ImageMirrorPath: %q %v", p, err)
	}
	d := "registry.k8s.io/pause@sha256:" + strings.Repeat("a", 64)
	if p, err := ImageMirrorPath(d, "amd64"); err != nil || p != "registry.k8s.io/pause/sha256-"+strings.Repeat("a", 64)+"/image-linux-amd64.tar" {
		t.Errorf("ImageMirrorPath(digest): %q %v", p, err)
	}
}
