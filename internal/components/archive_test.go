package components

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
)

// pinnedUbuntu is the catalog's image for amd64 with its pin replaced by the
// digest of dated (the test's stand-in for Ubuntu's file), on the dated URL
// and the archive alike.
func pinnedUbuntu(t *testing.T, dated []byte) Resolved {
	r := ubuntuImage(t, config.ArchAMD64)
	r.SHA256 = sum256(dated)
	ar := *r.Archive
	ar.SHA256 = r.SHA256
	r.Archive = &ar
	return r
}

// ubuntuSite is a stand-in for cloud-images.ubuntu.com and
// cloud-images-archive.ubuntu.com in the mirror layout: the archive holds
// the dated file; the dated URL answers as hook says; the current release is
// there, signed by testSigner.
func ubuntuSite(t *testing.T, r Resolved, dated, current []byte, hook func(w http.ResponseWriter, req *http.Request) bool) *server {
	root := ubuntuDir(t, r, nil, current)
	p, _, _ := MirrorLocation(root, r.Archive.URL)
	writeFile(t, p, dated)
	srv := newDirServer(t, root)
	srv.setHook(hook)
	return srv
}

// at matches a request for the official URL u on the stand-in server.
func at(req *http.Request, u string) bool { return req.URL.Path == urlPath(u) }

// The three answers a moved dated directory can give, without a mirror:
// a redirect to the archive host (followed: the catalog allows that host,
// and the pin vouches for the plain-http bytes; khw says where they came
// from), a 404 (the archive URL is tried by name), a redirect elsewhere
// (refused, then the archive by name), and 200 with other bytes (a digest
// mismatch: neither the archive nor the fallback is tried).
func TestFetchDatedReleaseMoved(t *testing.T) {
	dated, current := randBytes(t, 8192), randBytes(t, 4096)
	r := pinnedUbuntu(t, dated)

	t.Run("redirect to the archive", func(t *testing.T) {
		srv := ubuntuSite(t, r, dated, current, func(w http.ResponseWriter, req *http.Request) bool {
			if at(req, r.URL) {
				http.Redirect(w, req, r.Archive.URL, http.StatusMovedPermanently)
				return true
			}
			return false
		})
		f, _ := officialFetcher(t, srv)
		res, err := f.Fetch(context.Background(), []Resolved{r})
		if err != nil {
			t.Fatal(err)
		}
		got := res[0]
		if got.Fallback || got.Archive || got.SHA256 != r.SHA256 || got.VerifiedBy != "pinned in catalog" {
			t.Errorf("fetched %+v; want the pinned file through the redirect", got)
		}
		if want := r.Archive.URL + " (redirected from " + r.URL + ")"; got.Source != want {
			t.Errorf("source %q, want %q", got.Source, want)
		}
		if srv.count(urlPath(r.Fallback.URL)) != 0 {
			t.Error("the fallback was fetched")
		}
	})
	t.Run("404, then the archive by name", func(t *testing.T) {
		srv := ubuntuSite(t, r, dated, current, nil)
		f, _ := officialFetcher(t, srv)
		var log bytes.Buffer
		f.Progress = &log
		res, err := f.Fetch(context.Background(), []Resolved{r})
		if err != nil {
			t.Fatal(err)
		}
		got := res[0]
		if !got.Archive || got.Fallback || !strings.Contains(got.ArchiveReason, "404") || got.Source != r.Archive.URL || got.SHA256 != r.SHA256 {
			t.Errorf("fetched %+v; want the archive after a 404", got)
		}
		if !strings.Contains(log.String(), "trying the archive "+r.Archive.URL) {
			t.Errorf("progress does not say it tries the archive:\n%s", log.String())
		}
	})
	t.Run("redirect elsewhere", func(t *testing.T) {
		srv := ubuntuSite(t, r, dated, current, func(w http.ResponseWriter, req *http.Request) bool {
			if at(req, r.URL) {
				http.Redirect(w, req, "https://downloads.example.invalid/ubuntu.img", http.StatusFound)
				return true
			}
			return false
		})
		f, tr := officialFetcher(t, srv)
		res, err := f.Fetch(context.Background(), []Resolved{r})
		if err != nil {
			t.Fatal(err)
		}
		got := res[0]
		if !got.Archive || !strings.Contains(got.ArchiveReason, "a host the catalog does not allow") || got.Source != r.Archive.URL {
			t.Errorf("fetched %+v; want the redirect refused and the archive taken by name", got)
		}
		if n := srv.count("/downloads.example.invalid/ubuntu.img"); n != 0 {
			t.Errorf("the refused redirect was followed %d times", n)
		}
		_ = tr
	})
	t.Run("200 with other bytes", func(t *testing.T) {
		srv := ubuntuSite(t, r, dated, current, func(w http.ResponseWriter, req *http.Request) bool {
			if at(req, r.URL) {
				w.Write(randBytes(t, 8192))
				return true
			}
			return false
		})
		f, _ := officialFetcher(t, srv)
		_, err := f.Fetch(context.Background(), []Resolved{r})
		var mm *DigestMismatchError
		if !errors.As(err, &mm) || mm.Expected != r.SHA256 {
			t.Fatalf("want a digest mismatch against the pin, got %v", err)
		}
		if srv.count(urlPath(r.Archive.URL)) != 0 || srv.count(urlPath(r.Fallback.URL)) != 0 {
			t.Error("a digest mismatch went on to the archive or the fallback")
		}
	})
}

// The current release is taken only when Ubuntu's signature over its
// SHA256SUMS verifies: a list without a signature, with one by another key,
// or changed after signing is refused, the error saying what was checked;
// nothing is cached.
func TestFetchFallbackNeedsSignedList(t *testing.T) {
	r := ubuntuImage(t, config.ArchAMD64)
	current := randBytes(t, 4096)
	cases := map[string]func(root string){
		"no signature": func(root string) {
			p, _, _ := MirrorLocation(root, r.Fallback.SignatureURL)
			os.Remove(p)
		},
		"another key": func(root string) {
			sums, _, _ := MirrorLocation(root, r.Fallback.ChecksumURL)
			p, _, _ := MirrorLocation(root, r.Fallback.SignatureURL)
			writeFile(t, p, otherSigner.sign(t, readFile(t, sums)))
		},
		"signed before the pinned release": func(root string) {
			sums, _, _ := MirrorLocation(root, r.Fallback.ChecksumURL)
			p, _, _ := MirrorLocation(root, r.Fallback.SignatureURL)
			writeFile(t, p, testSigner.signAt(t, readFile(t, sums), time.Date(2026, 7, 24, 12, 0, 0, 0, time.UTC)))
		},
		"list changed after signing": func(root string) {
			sums, _, _ := MirrorLocation(root, r.Fallback.ChecksumURL)
			writeFile(t, sums, append(readFile(t, sums), []byte(sum256([]byte("x"))+" *extra.img\n")...))
		},
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			root := ubuntuDir(t, r, nil, current)
			spoil(root)
			f, _ := officialFetcher(t, newDirServer(t, root))
			_, err := f.Fetch(context.Background(), []Resolved{r})
			if err == nil {
				t.Fatal("the current release was taken")
			}
			for _, want := range []string{"checked " + r.Fallback.ChecksumURL + " against its signature " + r.Fallback.SignatureURL, testSigner.fingerprint, "refused"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			if e := dirEntries(t, f.CacheDir+"/sha256"); len(e) != 0 {
				t.Errorf("cache holds %v", e)
			}
		})
	}
}

// Offline: a mirror keeps the signed list and its signature beside the
// image, and the fetch through the mirror checks them; a signature that does
// not verify, or a signed list that names another digest than the manifest,
// is refused; a mirror without a signature (the builder's stand-in image) is
// trusted through its pinned manifest alone, and VerifiedBy says so.
func TestFetchFallbackMirrorSignature(t *testing.T) {
	r := ubuntuImage(t, config.ArchARM64)
	current := randBytes(t, 4096)

	root := ubuntuDir(t, r, nil, current)
	res, err := testFetcher(t, root).Fetch(context.Background(), []Resolved{r})
	if err != nil {
		t.Fatal(err)
	}
	if vb := res[0].VerifiedBy; !strings.Contains(vb, "mirror manifest") || !strings.HasSuffix(vb, " and "+r.Fallback.ChecksumURL+" signed by "+testSigner.fingerprint) {
		t.Errorf("verified by %q, want the manifest and the signed list", vb)
	}

	sig, _, _ := MirrorLocation(root, r.Fallback.SignatureURL)
	sums, _, _ := MirrorLocation(root, r.Fallback.ChecksumURL)
	good := readFile(t, sig)
	writeFile(t, sig, otherSigner.sign(t, readFile(t, sums)))
	if _, err := testFetcher(t, root).Fetch(context.Background(), []Resolved{r}); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a mirror signature by another key: %v, want refused", err)
	}

	list := []byte(sum256([]byte("other bytes")) + " *" + r.Fallback.FileName + "\n")
	writeFile(t, sums, list)
	writeFile(t, sig, testSigner.sign(t, list))
	if _, err := testFetcher(t, root).Fetch(context.Background(), []Resolved{r}); err == nil || !strings.Contains(err.Error(), "another file than its publisher signed") {
		t.Errorf("a signed list naming another digest: %v, want refused", err)
	}
	_ = good

	os.Remove(sig)
	res, err = testFetcher(t, root).Fetch(context.Background(), []Resolved{r})
	if err != nil {
		t.Fatal(err)
	}
	if vb := res[0].VerifiedBy; !strings.Contains(vb, "trusted through the pinned manifest alone") {
		t.Errorf("no signature in the mirror: verified by %q, want it to say the manifest alone vouches", vb)
	}
}

// checkRedirect: https to plain http only to a host the rule names and for
// a pinned digest; a rule with hosts allows no other host; no rule allows
// any https host.
func TestCheckRedirect(t *testing.T) {
	req := func(ctx context.Context, u string) *http.Request {
		r, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		return r
	}
	from := []*http.Request{req(context.Background(), "https://cloud-images.ubuntu.com/a.img")}
	withRule := func(hosts []string, pinned bool) context.Context {
		return withRedirects(context.Background(), Resolved{Redirects: hosts}, pinned)
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
		to   string
		ok   bool
	}{
		{"archive over http, pinned", withRule([]string{"cloud-images-archive.ubuntu.com"}, true), "http://cloud-images-archive.ubuntu.com/a.img", true},
		{"archive over http, not pinned", withRule([]string{"cloud-images-archive.ubuntu.com"}, false), "http://cloud-images-archive.ubuntu.com/a.img", false},
		{"other host with a rule", withRule([]string{"cloud-images-archive.ubuntu.com"}, true), "https://evil.example/a.img", false},
		{"same host with a rule", withRule([]string{"cloud-images-archive.ubuntu.com"}, true), "https://cloud-images.ubuntu.com/b.img", true},
		{"any https host without a rule", context.Background(), "https://cdn.dl.k8s.io/x", true},
		{"plain http without a rule", context.Background(), "http://cdn.dl.k8s.io/x", false},
	} {
		err := checkRedirect(req(c.ctx, c.to), from)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// khw fetch's table does not show the fallback under the pinned version,
// and says after the table what was taken and what vouched for it.
func TestWriteFetchedNamesTheFallback(t *testing.T) {
	r := ubuntuImage(t, config.ArchAMD64)
	var b bytes.Buffer
	WriteFetched(&b, []Fetched{{Resolved: r, SHA256: sum256([]byte("x")), Size: 1, Source: r.Fallback.URL, VerifiedBy: "mirror manifest m; trusted through the pinned manifest alone", Fallback: true}})
	out := b.String()
	if strings.Contains(out, "release-20260725  amd64") || !strings.Contains(out, "current (fallback)") ||
		!strings.Contains(out, "note: ubuntu-24.04 amd64: not the pinned release-20260725 but its fallback "+r.Fallback.URL+", verified by mirror manifest m; trusted through the pinned manifest alone") {
		t.Errorf("WriteFetched:\n%s", out)
	}
}
