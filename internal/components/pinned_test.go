package components

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
)

// TestPinnedDigests: PinnedDigests gives, for each artifact, the digest
// the pinned manifest lists (what Fetch requires), whatever the checksum
// files beside the mirror's files say; an artifact the manifest does not
// list, or lists against the catalog's pin, gets an error of its own; an
// unpinned mirror or a manifest that does not match the pin is refused as
// Fetch refuses it; a URL mirror's password is in no answer.
func TestPinnedDigests(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, config.ArchAMD64)
	rs := pick(w.rs[config.ArchAMD64], "kubectl", "etcd", "pause-image")
	f := testFetcher(t, w.root)
	// The mirror's checksum files name other digests: they are not read.
	for _, r := range rs[:2] {
		writeFile(t, w.path(r.ChecksumURL), []byte(sum256([]byte("other"))+"  "+r.FileName+"\n"))
	}
	sums, from, err := f.PinnedDigests(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if want := sum256(w.content[CacheKey(r)]); sums[i].SHA256 != want || sums[i].Err != nil {
			t.Errorf("%s: %+v, want %s", r.Artifact.Name, sums[i], want)
		}
	}
	if !strings.Contains(from, strings.TrimPrefix(w.pin, "sha256:")) || !strings.Contains(from, MirrorManifestFile) {
		t.Errorf("from %q names neither the manifest nor the pin %s", from, w.pin)
	}

	unlisted, pinned := rs[0], rs[0]
	unlisted.URL = strings.Replace(unlisted.URL, "kubectl", "kubectl-other", 1)
	pinned.SHA256 = sum256([]byte("the catalog pins another file"))
	sums, _, err = f.PinnedDigests(ctx, []Resolved{unlisted, pinned, rs[1]})
	if err != nil {
		t.Fatal(err)
	}
	if sums[0].SHA256 != "" || sums[0].Err == nil || !strings.Contains(sums[0].Err.Error(), "does not list") {
		t.Errorf("an artifact the manifest does not list: %+v", sums[0])
	}
	if sums[1].SHA256 != "" || sums[1].Err == nil || !strings.Contains(sums[1].Err.Error(), "the catalog pins") {
		t.Errorf("a manifest entry against the catalog's pin: %+v", sums[1])
	}
	if sums[2].SHA256 == "" {
		t.Errorf("the others keep their digest: %+v", sums[2])
	}

	for _, tc := range []struct{ pin, want string }{
		{"", "is not pinned"},
		{"sha256:" + strings.Repeat("0", 64), "nothing was fetched from it"},
	} {
		g := *f
		g.MirrorDigest = tc.pin
		if _, _, err := g.PinnedDigests(ctx, rs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pin %q: %v, want %q", tc.pin, err, tc.want)
		}
	}
	if _, _, err := (&Fetcher{}).PinnedDigests(ctx, rs); err == nil {
		t.Error("no mirror: no error")
	}

	files := http.FileServer(http.Dir(w.root))
	srv := newServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "teacher" || p != "s3cretpw" {
			http.Error(rw, "auth", http.StatusUnauthorized)
			return
		}
		files.ServeHTTP(rw, r)
	}))
	g := testFetcher(t, strings.Replace(srv.URL, "http://", "http://teacher:s3cretpw@", 1))
	sums, from, err = g.PinnedDigests(ctx, rs)
	if err != nil || sums[0].SHA256 != sum256(w.content[CacheKey(rs[0])]) {
		t.Fatalf("URL mirror with credentials: %+v, %v", sums, err)
	}
	if strings.Contains(from, "s3cretpw") {
		t.Errorf("the mirror password is in %q", from)
	}
	if got := RedactMirror(g.Mirror); strings.Contains(got, "s3cretpw") || !MirrorHasCredentials(g.Mirror) || MirrorHasCredentials(srv.URL) || RedactMirror(w.root) != w.root {
		t.Errorf("RedactMirror(%s) = %q", g.Mirror, got)
	}
}
