package components

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
)

// ubuntuImage is the catalog's Ubuntu cloud image for arch, as Resolve
// gives it: a dated release with its pinned digest, and the fallback
// releases/noble/release/ with its own SHA256SUMS.
func ubuntuImage(t *testing.T, arch string) Resolved {
	t.Helper()
	cat, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := cat.Resolve(config.Default("khw", arch, config.ProviderLibvirt), arch)
	if err != nil {
		t.Fatal(err)
	}
	imgs := ForRole(rs, RoleVMImage)
	if len(imgs) != 1 {
		t.Fatalf("catalog has %d vm-image artifacts", len(imgs))
	}
	return testSigned(imgs[0])
}

// testSigned is r with its fallback's checksum file signed by the tests'
// key (testSigner) instead of Ubuntu's, which no test can sign with.
func testSigned(r Resolved) Resolved {
	if r.Fallback != nil && r.Fallback.SignatureURL != "" {
		fb := *r.Fallback
		fb.SignatureKeys = []string{testSigner.fingerprint}
		r.Fallback = &fb
	}
	return r
}

func TestCatalogPinsUbuntuImageWithFallback(t *testing.T) {
	// The digests are release-20260725's as Ubuntu signed them
	// (TestUbuntuPinIsWhatUbuntuSigned).
	want := map[string]string{
		config.ArchAMD64: "d1940f7d69d343355e183dff1e08a59852d32e7309baa7a4bad8365b11b005ac",
		config.ArchARM64: "2eaec7286c49fdea713dddabcf5012cafa7097a658e916acb48f4bc5fdc8e419",
	}
	for arch, sum := range want {
		r := ubuntuImage(t, arch)
		if r.URL != "https://cloud-images.ubuntu.com/releases/noble/release-20260725/ubuntu-24.04-server-cloudimg-"+arch+".img" || r.SHA256 != sum {
			t.Errorf("%s: %s pinned %q, want release-20260725 pinned %s", arch, r.URL, r.SHA256, sum)
		}
		ar := r.Archive
		if ar == nil || ar.URL != "http://cloud-images-archive.ubuntu.com/releases/noble/release-20260725/ubuntu-24.04-server-cloudimg-"+arch+".img" ||
			ar.SHA256 != sum || ar.ChecksumURL != "" || ar.Fallback != nil || ar.Archive != nil {
			t.Errorf("%s: archive %+v, want the same pinned file on cloud-images-archive.ubuntu.com", arch, ar)
		}
		if strings.Join(r.Redirects, ",") != "cloud-images-archive.ubuntu.com" {
			t.Errorf("%s: redirects %v, want the archive host only", arch, r.Redirects)
		}
		fb := r.Fallback
		if fb == nil {
			t.Fatalf("%s: no fallback", arch)
		}
		if fb.URL != "https://cloud-images.ubuntu.com/releases/noble/release/ubuntu-24.04-server-cloudimg-"+arch+".img" ||
			fb.ChecksumURL != "https://cloud-images.ubuntu.com/releases/noble/release/SHA256SUMS" || fb.ChecksumFormat != ChecksumSHA256Sum ||
			fb.SignatureURL != "https://cloud-images.ubuntu.com/releases/noble/release/SHA256SUMS.gpg" ||
			fb.SHA256 != "" || fb.FileName != "ubuntu-24.04-server-cloudimg-"+arch+".img" || fb.Fallback != nil || fb.Archive != nil || fb.Arch != arch {
			t.Errorf("%s: fallback %+v", arch, fb)
		}
	}
}

// ubuntuDir is a directory in the mirror layout standing in for
// cloud-images.ubuntu.com: optionally the dated release (file dated, with
// SHA256SUMS) and optionally releases/noble/release/ (file current, with
// SHA256SUMS in Ubuntu's binary mode), and a khw-mirror.json listing what it
// holds.
func ubuntuDir(t *testing.T, r Resolved, dated, current []byte) string {
	t.Helper()
	root := t.TempDir()
	var es []MirrorEntry
	for _, s := range []struct {
		r    Resolved
		data []byte
	}{{r, dated}, {*r.Fallback, current}} {
		if s.data == nil {
			continue
		}
		p, _, _ := MirrorLocation(root, s.r.URL)
		writeFile(t, p, s.data)
		sums, _, _ := MirrorLocation(root, s.r.ChecksumURL)
		list := []byte(sum256([]byte("other")) + " *ubuntu-24.04-server-cloudimg-riscv64.img\n" + sum256(s.data) + " *" + s.r.FileName + "\n")
		writeFile(t, sums, list)
		if s.r.SignatureURL != "" {
			sig, _, _ := MirrorLocation(root, s.r.SignatureURL)
			writeFile(t, sig, testSigner.sign(t, list))
		}
		rel, _ := mirrorRel(s.r.URL)
		es = append(es, MirrorEntry{Path: rel, Name: s.r.Artifact.Name, Version: s.r.Version, Arch: s.r.Arch, URL: s.r.URL, SHA256: sum256(s.data), Size: int64(len(s.data))})
	}
	if _, _, err := WriteMirrorManifest(root, es); err != nil {
		t.Fatal(err)
	}
	return root
}

// A mirror without the dated directory: the fallback is fetched, verified
// by the pinned manifest, cached under its own URL, and the progress says
// so; a second Fetch takes it from the cache. Export puts it back at the
// fallback's path.
func TestFetchFallsBackWhenMirrorLacksDatedRelease(t *testing.T) {
	r := ubuntuImage(t, config.ArchAMD64)
	current := randBytes(t, 64<<10)
	root := ubuntuDir(t, r, nil, current)
	for _, mirror := range []string{"dir", "url"} {
		t.Run(mirror, func(t *testing.T) {
			m := root
			if mirror == "url" {
				m = newDirServer(t, root).URL
			}
			f := testFetcher(t, m)
			var log bytes.Buffer
			f.Progress = &log
			res, err := f.Fetch(context.Background(), []Resolved{r})
			if err != nil {
				t.Fatal(err)
			}
			got := res[0]
			if !got.Fallback || !strings.Contains(got.FallbackReason, "does not list "+r.URL) || got.SHA256 != sum256(current) || got.Trust != TrustMirror {
				t.Errorf("fetched %+v; want the fallback, verified by the mirror manifest, with the reason", got)
			}
			if !bytes.Equal(readFile(t, got.Path), current) {
				t.Error("cached file is not the mirror's releases/noble/release/ image")
			}
			if !strings.Contains(log.String(), "trying the fallback "+r.Fallback.URL) {
				t.Errorf("progress does not say it falls back:\n%s", log.String())
			}
			c := &cache{dir: f.CacheDir}
			if e, ok := c.lookup(r.Fallback.URL); !ok || e.SHA256 != sum256(current) {
				t.Errorf("index entry for %s: %+v %v", r.Fallback.URL, e, ok)
			}
			if _, ok := c.lookup(r.URL); ok {
				t.Errorf("the index records the fallback under the pinned URL %s", r.URL)
			}
			again, err := f.Fetch(context.Background(), []Resolved{r})
			if err != nil || !again[0].Cached || !again[0].Fallback || again[0].Path != got.Path {
				t.Errorf("second Fetch = %+v, %v; want the cached fallback", again[0], err)
			}
			out := t.TempDir()
			if _, err := Export(context.Background(), res, out); err != nil {
				t.Fatal(err)
			}
			p, _, _ := MirrorLocation(out, r.Fallback.URL)
			if !bytes.Equal(readFile(t, p), current) {
				t.Errorf("export did not write the fallback at %s", p)
			}
			// The signed list and its signature, as the mirror had them.
			for _, u := range []string{r.Fallback.ChecksumURL, r.Fallback.SignatureURL} {
				src, _, _ := MirrorLocation(root, u)
				dst, _, _ := MirrorLocation(out, u)
				if !bytes.Equal(readFile(t, dst), readFile(t, src)) {
					t.Errorf("exported %s differs from the signed original", dst)
				}
			}
		})
	}
}

// A mirror with neither: the error names both URLs, nothing is cached.
func TestFetchFallbackBothMissing(t *testing.T) {
	r := ubuntuImage(t, config.ArchARM64)
	root := ubuntuDir(t, r, nil, nil)
	f := testFetcher(t, root)
	res, err := f.Fetch(context.Background(), []Resolved{r})
	if err == nil {
		t.Fatalf("Fetch = %+v, want an error", res[0])
	}
	for _, s := range []string{"does not list " + r.URL, "the fallback " + r.Fallback.URL, "does not list " + r.Fallback.URL} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q:\n%v", s, err)
		}
	}
	if e := dirEntries(t, filepath.Join(f.CacheDir, "sha256")); len(e) != 0 {
		t.Errorf("cache holds %v", e)
	}
}

// Without a mirror, against a stand-in for cloud-images.ubuntu.com: the
// dated release is gone (HTTP 404), so releases/noble/release/ is fetched
// and checked against that directory's own SHA256SUMS; once cached it is
// used without a request. A dated release that is there but holds other
// bytes than the pin is a digest mismatch, and no fallback hides it; one
// that has the pinned bytes is used, not the fallback.
func TestFetchFallbackOfficial(t *testing.T) {
	r := ubuntuImage(t, config.ArchAMD64)
	current := randBytes(t, 64<<10)

	t.Run("dated release gone", func(t *testing.T) {
		srv := newDirServer(t, ubuntuDir(t, r, nil, current))
		f, tr := officialFetcher(t, srv)
		res, err := f.Fetch(context.Background(), []Resolved{r})
		if err != nil {
			t.Fatal(err)
		}
		got := res[0]
		if !got.Fallback || !strings.Contains(got.FallbackReason, "404") || got.Trust != TrustOfficial ||
			got.VerifiedBy != "checksum file "+r.Fallback.ChecksumURL+", signed by "+testSigner.fingerprint+" ("+r.Fallback.SignatureURL+")" || got.SHA256 != sum256(current) {
			t.Errorf("fetched %+v; want the fallback verified by its SHA256SUMS after a 404", got)
		}
		if srv.count(urlPath(r.URL)) != 1 || srv.count(urlPath(r.Fallback.ChecksumURL)) != 1 {
			t.Errorf("requests: dated %d, fallback SHA256SUMS %d", srv.count(urlPath(r.URL)), srv.count(urlPath(r.Fallback.ChecksumURL)))
		}
		n := tr.n.Load()
		again, err := f.Fetch(context.Background(), []Resolved{r})
		if err != nil || !again[0].Cached || !again[0].Fallback || tr.n.Load() != n {
			t.Errorf("second Fetch = %+v, %v after %d requests; want the cached fallback without a request", again[0], err, tr.n.Load()-n)
		}
	})
	t.Run("dated release with other bytes", func(t *testing.T) {
		srv := newDirServer(t, ubuntuDir(t, r, randBytes(t, 4096), current))
		f, _ := officialFetcher(t, srv)
		_, err := f.Fetch(context.Background(), []Resolved{r})
		var mm *DigestMismatchError
		if !errors.As(err, &mm) || mm.Expected != r.SHA256 || mm.ExpectedFrom != "pinned in catalog" {
			t.Fatalf("want a DigestMismatchError against the pin, got %v", err)
		}
		if srv.count(urlPath(r.Fallback.URL)) != 0 {
			t.Error("a digest mismatch fell back to releases/noble/release/")
		}
	})
	t.Run("dated release present", func(t *testing.T) {
		dated := randBytes(t, 4096)
		pinned := r
		pinned.SHA256 = sum256(dated) // stands for the real pin
		srv := newDirServer(t, ubuntuDir(t, pinned, dated, current))
		f, _ := officialFetcher(t, srv)
		res, err := f.Fetch(context.Background(), []Resolved{pinned})
		if err != nil || res[0].Fallback || res[0].SHA256 != sum256(dated) || res[0].VerifiedBy != "pinned in catalog" {
			t.Fatalf("Fetch = %+v, %v; want the dated release, verified by the pin", res[0], err)
		}
		if srv.count(urlPath(r.Fallback.URL)) != 0 {
			t.Error("the fallback was fetched although the dated release is there")
		}
	})
}
