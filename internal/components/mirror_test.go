package components

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/khw-dev/khw/internal/config"
)

// An image pulled from a registry (go-containerregistry's in-memory
// registry behind httptest) for one platform of a multi-arch index.
func TestFetchImageFromRegistry(t *testing.T) {
	var regRequests atomic.Int64
	reg := registryHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		regRequests.Add(1)
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/coredns/coredns:v1.14.6"
	images := map[string]v1.Image{}
	var adds []mutate.IndexAddendum
	for _, arch := range []string{config.ArchAMD64, config.ArchARM64} {
		img := testImage(t, arch)
		images[arch] = img
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tag, mutate.AppendManifests(empty.Index, adds...)); err != nil {
		t.Fatal(err)
	}

	r := Resolved{Component: "coredns", Version: "v1.14.6", Arch: config.ArchARM64, Image: ref,
		Artifact: Artifact{Name: "coredns-image", Format: FormatImage, Roles: []string{config.RoleWorker}}}
	f := testFetcher(t, "")
	var progress bytes.Buffer
	f.Progress = &progress
	regRequests.Store(0)
	res, err := f.Fetch(context.Background(), []Resolved{r})
	if err != nil {
		t.Fatal(err)
	}
	wantDigest, _ := images[config.ArchARM64].Digest()
	wantID, _ := images[config.ArchARM64].ConfigName()
	if res[0].ImageDigest != wantDigest.String() || res[0].ImageID != wantID.String() {
		t.Errorf("digest %s id %s, want the arm64 image's %s %s", res[0].ImageDigest, res[0].ImageID, wantDigest, wantID)
	}
	if !strings.Contains(res[0].VerifiedBy, wantDigest.String()) || res[0].Source != "registry "+host {
		t.Errorf("verifiedBy %q source %q", res[0].VerifiedBy, res[0].Source)
	}
	if got, _, _ := hashFile(res[0].Path); got != res[0].SHA256 || filepath.Base(res[0].Path) != got {
		t.Errorf("blob %s does not hash to %s", res[0].Path, res[0].SHA256)
	}
	img, err := tarball.ImageFromPath(res[0].Path, &tag)
	if err != nil {
		t.Fatalf("saved tarball: %v", err)
	}
	if cf, _ := img.ConfigFile(); cf.Architecture != config.ArchARM64 {
		t.Errorf("saved image is %s", cf.Architecture)
	}
	if regRequests.Load() == 0 {
		t.Fatal("registry not contacted")
	}
	if !strings.Contains(progress.String(), "fetched coredns-image v1.14.6") {
		t.Errorf("progress: %s", progress.String())
	}
	// Cached: no registry request the second time.
	regRequests.Store(0)
	again, err := f.Fetch(context.Background(), []Resolved{r})
	if err != nil || !again[0].Cached || again[0].ImageDigest != res[0].ImageDigest || regRequests.Load() != 0 {
		t.Errorf("second fetch: %v cached=%v, %d registry requests", err, again[0].Cached, regRequests.Load())
	}
	// A platform the index lacks is an error naming the image.
	r2 := r
	r2.Arch = "s390x"
	if _, err := f.Fetch(context.Background(), []Resolved{r2}); err == nil || !strings.Contains(err.Error(), ref) {
		t.Errorf("missing platform: %v", err)
	}
}

// mirror export, then a fetch from the export with no network at all.
func TestExportThenFetchOffline(t *testing.T) {
	w := newWorld(t, config.ArchAMD64, config.ArchARM64)
	srv := newDirServer(t, w.root)
	f := testFetcher(t, srv.URL)
	amd, err := f.Fetch(context.Background(), w.rs[config.ArchAMD64])
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "mirror")
	rep, err := Export(context.Background(), amd, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Written) == 0 || len(rep.Unchanged) != 0 {
		t.Errorf("first export: %+v", rep)
	}
	kubectl := pick(w.rs[config.ArchAMD64], "kubectl")[0]
	etcd := pick(w.rs[config.ArchAMD64], "etcd")[0]
	check := func(rel, want string) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(rel)))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q (%v), want %q", rel, got, err, want)
		}
	}
	check("dl.k8s.io/release/v1.37.2/bin/linux/amd64/kubectl", string(w.content[kubectl.URL]))
	check("dl.k8s.io/release/v1.37.2/bin/linux/amd64/kubectl.sha256", sum256(w.content[kubectl.URL])+"\n")
	check("github.com/etcd-io/etcd/releases/download/v3.7.4/SHA256SUMS", sum256(w.content[etcd.URL])+"  etcd-v3.7.4-linux-amd64.tar.gz\n")
	pause := pick(w.rs[config.ArchAMD64], "pause-image")[0]
	check("registry.k8s.io/pause/3.10.2/image-linux-amd64.tar.sha256", sum256(w.content[CacheKey(pause)])+"\n")
	if st, err := os.Stat(filepath.Join(out, "dl.k8s.io")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("mirror directories must be world-readable to be served: %v %v", st, err)
	}

	// A second export of the same things changes nothing; a second arch
	// merges its lines into the shared checksum files.
	rep, err = Export(context.Background(), amd, out)
	if err != nil || len(rep.Written) != 0 {
		t.Errorf("re-export wrote %v (%v)", rep.Written, err)
	}
	arm, err := f.Fetch(context.Background(), w.rs[config.ArchARM64])
	if err != nil {
		t.Fatal(err)
	}
	rep, err = ExportKeeping(context.Background(), arm, out, rep.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := ManifestDigest(out); err != nil || d != rep.Digest || !strings.HasPrefix(d, "sha256:") {
		t.Errorf("export's digest %s, the manifest's %s (%v)", rep.Digest, d, err)
	}
	etcdArm := pick(w.rs[config.ArchARM64], "etcd")[0]
	check("github.com/etcd-io/etcd/releases/download/v3.7.4/SHA256SUMS",
		sum256(w.content[etcd.URL])+"  etcd-v3.7.4-linux-amd64.tar.gz\n"+sum256(w.content[etcdArm.URL])+"  etcd-v3.7.4-linux-arm64.tar.gz\n")
	var man MirrorManifest
	if err := json.Unmarshal(readFile(t, filepath.Join(out, MirrorManifestFile)), &man); err != nil {
		t.Fatal(err)
	}
	if len(man.Artifacts) != len(amd)+len(arm) || man.Format != "khw-mirror/v1" {
		t.Errorf("manifest lists %d artifacts, want %d", len(man.Artifacts), len(amd)+len(arm))
	}

	// Another machine: empty cache, no network, --mirror = the export.
	for _, arch := range []string{config.ArchAMD64, config.ArchARM64} {
		off := &offlineTransport{}
		g := &Fetcher{CacheDir: filepath.Join(t.TempDir(), "c"), Mirror: out, MirrorDigest: rep.Digest, HTTPClient: &http.Client{Transport: off}}
		res, err := g.Fetch(context.Background(), w.rs[arch])
		if err != nil {
			t.Fatal(err)
		}
		if off.n.Load() != 0 {
			t.Fatalf("fetch from an exported mirror made %d HTTP requests", off.n.Load())
		}
		for i, r := range res {
			if r.Cached || r.SHA256 != sum256(w.content[CacheKey(w.rs[arch][i])]) {
				t.Errorf("%s %s: %+v", arch, r.Resolved.Artifact.Name, r)
			}
		}
	}
	// An export refuses failed fetches.
	if _, err := Export(context.Background(), []Fetched{{Resolved: kubectl, Err: io.ErrUnexpectedEOF}}, out); err == nil || !strings.Contains(err.Error(), "kubectl") {
		t.Errorf("export of a failed fetch: %v", err)
	}
}

func TestMirrorHandler(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	if err := CheckMirrorDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "does not look like a khw mirror") || !strings.Contains(err.Error(), "dl.k8s.io") {
		t.Errorf("empty dir: %v", err)
	}
	if _, err := MirrorHandler(t.TempDir(), nil); err == nil {
		t.Error("MirrorHandler served an empty directory")
	}
	secret := filepath.Join(t.TempDir(), "secret")
	writeFile(t, secret, []byte("do-not-serve"))
	os.Symlink(secret, filepath.Join(w.root, "dl.k8s.io", "escape"))
	writeFile(t, filepath.Join(w.root, "dl.k8s.io", ".tmp-partial"), []byte("hidden"))

	var logs syncBuffer
	h, err := MirrorHandler(w.root, &logs)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	f := testFetcher(t, srv.URL)
	rs := pick(w.rs[config.ArchAMD64], "kubectl", "etcd", "runc", "coredns-image")
	res, err := f.Fetch(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !bytes.Equal(readFile(t, r.Path), w.content[CacheKey(rs[i])]) {
			t.Errorf("%s differs", rs[i].Artifact.Name)
		}
	}
	if !strings.Contains(logs.String(), "GET \""+urlPath(rs[0].URL)+"\" 200 ") {
		t.Errorf("request log:\n%s", logs.String())
	}
	get := func(method, p string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+p, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(http.MethodPut, urlPath(rs[0].URL)); code != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d", code)
	}
	if code, _ := get(http.MethodDelete, urlPath(rs[0].URL)); code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: %d", code)
	}
	if code, _ := get(http.MethodGet, "/dl.k8s.io/.tmp-partial"); code != http.StatusNotFound {
		t.Errorf("hidden file: %d", code)
	}
	// Refused with 404 (final), not 500 (which clients retry): no path
	// through a symlink is served.
	if code, body := get(http.MethodGet, "/dl.k8s.io/escape"); code != http.StatusNotFound || strings.Contains(body, "do-not-serve") {
		t.Errorf("symlink out of the mirror: want 404, got %d %q", code, body)
	}
	// A relative link to a hidden file inside the mirror, and a file at the
	// top that no catalog host holds, are not served or listed either.
	writeFile(t, filepath.Join(w.root, "dl.k8s.io", ".env"), []byte("SECRET=1"))
	os.Symlink(".env", filepath.Join(w.root, "dl.k8s.io", "dotlink"))
	writeFile(t, filepath.Join(w.root, "private.txt"), []byte("top secret"))
	for _, p := range []string{"/dl.k8s.io/dotlink", "/private.txt"} {
		if code, body := get(http.MethodGet, p); code != http.StatusNotFound || strings.Contains(body, "SECRET") || strings.Contains(body, "top secret") {
			t.Errorf("%s: want 404, got %d %q", p, code, body)
		}
	}
	if _, body := get(http.MethodGet, "/"); strings.Contains(body, "private.txt") || !strings.Contains(body, "dl.k8s.io") {
		t.Errorf("top listing:\n%s", body)
	}
	if _, body := get(http.MethodGet, "/dl.k8s.io/"); strings.Contains(body, "dotlink") || strings.Contains(body, "escape") {
		t.Errorf("listing shows links:\n%s", body)
	}
	// A manifest that is not one is refused at start.
	bogus := t.TempDir()
	writeFile(t, filepath.Join(bogus, MirrorManifestFile), []byte("{}"))
	if _, err := MirrorHandler(bogus, nil); err == nil {
		t.Error("a directory whose khw-mirror.json is {} was served")
	}
	if code, body := get(http.MethodGet, "/../../../../etc/passwd"); code == http.StatusOK && strings.Contains(body, "root:") {
		t.Error("path traversal")
	}
}

// registryHandler is go-containerregistry's in-memory registry, quiet.
func registryHandler() http.Handler {
	return registry.New(registry.Logger(log.New(io.Discard, "", 0)))
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func TestExportStopsWhenCanceled(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	f := testFetcher(t, w.root)
	res, err := f.Fetch(context.Background(), w.rs[config.ArchAMD64])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(t.TempDir(), "export")
	if _, err := Export(ctx, res, out); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled export: %v", err)
	}
	var files []string
	filepath.Walk(out, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 0 {
		t.Fatalf("a canceled export wrote %v", files)
	}
}

// TestExportDropsOldEntriesThatDoNotHold: entries of the manifest already
// in the mirror that a new export does not replace are pinned again only
// when they hold (a clean relative path, a 64-hex SHA-256, a size above
// 0, the file there with that digest, no symbolic link, a URL or image to
// be looked up by); the others are left out and named with why, and the
// entries that hold are kept. MergeMirrorManifest refuses such a manifest
// without changing it.
func TestExportDropsOldEntriesThatDoNotHold(t *testing.T) {
	w := newWorld(t, config.ArchAMD64, config.ArchARM64)
	f := testFetcher(t, w.root)
	amd, err := f.Fetch(context.Background(), w.rs[config.ArchAMD64])
	if err != nil {
		t.Fatal(err)
	}
	arm, err := f.Fetch(context.Background(), w.rs[config.ArchARM64])
	if err != nil {
		t.Fatal(err)
	}
	top := t.TempDir()
	out := filepath.Join(top, "mirror")
	if _, err := Export(context.Background(), amd, out); err != nil {
		t.Fatal(err)
	}
	var man MirrorManifest
	if err := json.Unmarshal(readFile(t, filepath.Join(out, MirrorManifestFile)), &man); err != nil {
		t.Fatal(err)
	}
	good := man.Artifacts
	// One exported file changed since; files for the hand-made entries.
	changed := good[0]
	if err := os.WriteFile(filepath.Join(out, filepath.FromSlash(changed.Path)), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	content := []byte("some release file\n")
	sum := sum256(content)
	for _, p := range []string{filepath.Join(top, "outside"), filepath.Join(out, "example.org", "real"), filepath.Join(out, "example.org", "empty")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data := content
		if filepath.Base(p) == "empty" {
			data = nil
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("real", filepath.Join(out, "example.org", "link")); err != nil {
		t.Fatal(err)
	}
	entry := func(path, sha string, size int64) MirrorEntry {
		return MirrorEntry{Path: path, Name: "x", Version: "v1", Arch: "amd64", URL: "https://" + path, SHA256: sha, Size: size}
	}
	noURL := entry("example.org/real", sum, int64(len(content)))
	noURL.URL = ""
	bad := map[string]string{
		"../outside":        "its path is not a clean relative path inside the mirror",
		"example.org/./x":   "its path is not a clean relative path inside the mirror",
		"example.org/upper": `its sha256 "` + strings.ToUpper(sum) + `" is not 64 lower-case hex digits`,
		"example.org/empty": "its size is 0 bytes, not above 0",
		"example.org/gone":  "its file is not in the mirror",
		"example.org/link":  "example.org/link is a symbolic link, which khw mirror serve does not follow",
		changed.Path:        fmt.Sprintf("its file has 7 bytes and sha256 %s, not the %d bytes and %s listed", sum256([]byte("changed")), changed.Size, changed.SHA256),
		"example.org/real":  "it names neither a URL nor an image, so nothing would look it up",
	}
	man.Artifacts = append(man.Artifacts,
		entry("../outside", sum, int64(len(content))),
		entry("example.org/./x", sum, int64(len(content))),
		entry("example.org/upper", strings.ToUpper(sum), int64(len(content))),
		entry("example.org/empty", sum256(nil), 0),
		entry("example.org/gone", sum, int64(len(content))),
		entry("example.org/link", sum, int64(len(content))),
		noURL)
	data, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, MirrorManifestFile), data, 0o644); err != nil {
		t.Fatal(err)
	}

	// The mirror builder's merge refuses it and leaves it as it was.
	if _, err := MergeMirrorManifest(out, nil); err == nil || !strings.Contains(err.Error(), "../outside: its path is not a clean relative path") || !strings.Contains(err.Error(), "fix: ") {
		t.Errorf("MergeMirrorManifest: %v", err)
	}
	if got := readFile(t, filepath.Join(out, MirrorManifestFile)); !bytes.Equal(got, data) {
		t.Errorf("MergeMirrorManifest changed the manifest it refused")
	}

	// An export of the other arch, by someone who vouches for the manifest
	// that is there, keeps the entries that hold.
	rep, err := ExportKeeping(context.Background(), arm, out, "sha256:"+sum256(data))
	if err != nil {
		t.Fatal(err)
	}
	var after MirrorManifest
	if err := json.Unmarshal(readFile(t, filepath.Join(out, MirrorManifestFile)), &after); err != nil {
		t.Fatal(err)
	}
	listed := map[string]MirrorEntry{}
	for _, e := range after.Artifacts {
		listed[e.Path] = e
	}
	for p := range bad {
		if e, ok := listed[p]; ok {
			t.Errorf("the new manifest still lists %s: %+v", p, e)
		}
	}
	for _, e := range good[1:] {
		if listed[e.Path] != e {
			t.Errorf("the new manifest lost %s, which holds", e.Path)
		}
	}
	if len(after.Artifacts) != len(good)-1+len(arm) {
		t.Errorf("the new manifest lists %d entries, want %d", len(after.Artifacts), len(good)-1+len(arm))
	}
	if len(rep.Dropped) != len(bad) {
		t.Errorf("dropped %d entries, want %d:\n%s", len(rep.Dropped), len(bad), strings.Join(rep.Dropped, "\n"))
	}
	for p, why := range bad {
		if !slices.Contains(rep.Dropped, p+": "+why) {
			t.Errorf("Dropped lacks %q:\n%s", p+": "+why, strings.Join(rep.Dropped, "\n"))
		}
	}
	var warn bytes.Buffer
	WriteDropped(&warn, "m/khw-mirror.json", rep.Dropped)
	if !strings.HasPrefix(warn.String(), "khw: warning: left out of m/khw-mirror.json, so no longer pinned") || !strings.Contains(warn.String(), "\n  - ../outside: ") {
		t.Errorf("warning:\n%s", warn.String())
	}
}

// An export carries over the entries of the manifest it finds in the
// directory only when the person exporting pins that manifest (--keep):
// a file someone put there beforehand, with an entry of its own that holds,
// is otherwise left out and listed, not pinned by the new manifest; with
// another pin too; and an entry whose path is not where its URL maps is
// left out even when pinned.
func TestExportPinsOnlyWhatItWasToldToKeep(t *testing.T) {
	w := newWorld(t, config.ArchAMD64)
	f := testFetcher(t, w.root)
	kubectl, err := f.Fetch(context.Background(), pick(w.rs[config.ArchAMD64], "kubectl"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "mirror")
	first, err := Export(context.Background(), kubectl, out)
	if err != nil {
		t.Fatal(err)
	}
	evil := []byte("evil\n")
	planted := MirrorEntry{Path: "dl.k8s.io/release/v1.37.2/bin/linux/arm64/kubectl", Name: "kubectl", Version: "v1.37.2", Arch: "arm64",
		URL: "https://dl.k8s.io/release/v1.37.2/bin/linux/arm64/kubectl", SHA256: sum256(evil), Size: int64(len(evil))}
	elsewhere := planted
	elsewhere.Path, elsewhere.URL = "evil/f", "https://dl.k8s.io/release/v1.37.2/bin/linux/arm64/kube-proxy"
	for _, p := range []string{planted.Path, elsewhere.Path} {
		writeFile(t, filepath.Join(out, filepath.FromSlash(p)), evil)
	}
	var man MirrorManifest
	if err := json.Unmarshal(readFile(t, filepath.Join(out, MirrorManifestFile)), &man); err != nil {
		t.Fatal(err)
	}
	man.Artifacts = append(man.Artifacts, planted, elsewhere)
	data, _ := json.MarshalIndent(man, "", "  ")
	listed := func(d string) bool {
		var m MirrorManifest
		if err := json.Unmarshal(readFile(t, filepath.Join(d, MirrorManifestFile)), &m); err != nil {
			t.Fatal(err)
		}
		for _, e := range m.Artifacts {
			if e.Path == planted.Path {
				return true
			}
		}
		return false
	}
	for _, keep := range []string{"", first.Digest} {
		if err := os.WriteFile(filepath.Join(out, MirrorManifestFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err := ExportKeeping(context.Background(), kubectl, out, keep)
		if err != nil {
			t.Fatal(err)
		}
		if listed(out) || !strings.Contains(strings.Join(rep.Dropped, "\n"), planted.Path+": not carried over") {
			t.Errorf("keep %q: the planted entry was pinned (dropped: %v)", keep, rep.Dropped)
		}
	}
	if err := os.WriteFile(filepath.Join(out, MirrorManifestFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := ExportKeeping(context.Background(), kubectl, out, "sha256:"+sum256(data))
	if err != nil {
		t.Fatal(err)
	}
	if !listed(out) || !strings.Contains(strings.Join(rep.Dropped, "\n"), "evil/f: its path is not where its URL maps") {
		t.Errorf("vouched: planted listed %v, dropped %v; want the vouched entry kept and the misplaced one left out", listed(out), rep.Dropped)
	}
}
