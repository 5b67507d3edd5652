package components

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A port nothing listens on (connections are refused at once).
const refusedURL = "http://127.0.0.1:1"

func refusedFetcher(t *testing.T, mirror string) *Fetcher {
	t.Helper()
	f := &Fetcher{CacheDir: filepath.Join(t.TempDir(), "cache"), Mirror: mirror, Retries: 1, RetryWait: time.Millisecond,
		HTTPClient: &http.Client{Transport: localOnly{}}}
	if mirror != "" {
		f.MirrorDigest = "sha256:" + strings.Repeat("0", 64)
	}
	return f
}

func refusedArtifacts() []Resolved {
	var rs []Resolved
	for _, name := range []string{"kubectl", "kubelet"} {
		rs = append(rs, Resolved{Component: "kubernetes", Version: "v1.37.2", Arch: "amd64", Artifact: Artifact{Name: name},
			URL: refusedURL + "/" + name, SHA256: strings.Repeat("a", 64)})
	}
	return rs
}

// Without a mirror, a download site that cannot be reached gets the fix
// for working offline, and several failures are counted once at the end
// (the table above the error lists each).
func TestFetchAllUnreachableSaysHowToWorkOffline(t *testing.T) {
	err := refusedFetcher(t, "").FetchAll(context.Background(), refusedArtifacts(), io.Discard)
	if err == nil {
		t.Fatal("FetchAll from a refused port succeeded")
	}
	msg := err.Error()
	for _, want := range []string{"2 of 2 artifacts failed", "the first: kubectl v1.37.2", "connection refused", "KHW_MIRROR and KHW_MIRROR_DIGEST"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q: %s", want, msg)
		}
	}
	if strings.Count(msg, "connection refused") != 1 {
		t.Errorf("the error repeats each failure: %s", msg)
	}
}

// A mirror that does not answer is not a mirror made wrongly: the fix is
// about the address and khw mirror serve, not khw mirror export.
func TestFetchAllMirrorUnreachableNamesTheServer(t *testing.T) {
	err := refusedFetcher(t, refusedURL).FetchAll(context.Background(), refusedArtifacts()[:1], io.Discard)
	if err == nil {
		t.Fatal("FetchAll from a refused mirror succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, "nothing answers there") || !strings.Contains(msg, "khw mirror serve") || strings.Contains(msg, "must be made by") {
		t.Errorf("error: %s", msg)
	}
	if strings.Contains(msg, "KHW_MIRROR and") {
		t.Errorf("with a mirror given, the error suggests giving one: %s", msg)
	}
}
