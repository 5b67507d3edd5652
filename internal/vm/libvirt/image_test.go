package libvirt

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
)

// catalogVMImage is the catalog's vm-image artifact (the Ubuntu cloud
// image) for cluster c.
func catalogVMImage(t *testing.T, c *config.Cluster) components.Resolved {
	t.Helper()
	cat, err := components.Load()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := cat.Resolve(c, c.Arch)
	if err != nil {
		t.Fatal(err)
	}
	imgs := components.ForRole(rs, components.RoleVMImage)
	if len(imgs) != 1 || imgs[0].ChecksumURL == "" || imgs[0].ChecksumFormat != components.ChecksumSHA256Sum {
		t.Fatalf("catalog vm-image for %s: %+v (want one artifact with a sha256sum checksum file)", c.Arch, imgs)
	}
	return imgs[0]
}

// mirrorPath is where a directory mirror holds the official URL u:
// <mirror>/<host>/<path>, the layout docs/catalog.md and `khw mirror
// export` define (worked out here from the URL, not with the fetcher's own
// MirrorLocation, so a change of that mapping shows).
func mirrorPath(t *testing.T, mirror, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		t.Fatalf("catalog URL %q: %v", u, err)
	}
	return filepath.Join(mirror, p.Host, filepath.FromSlash(p.Path))
}

// writeCatalogImageMirror lays out mirror as hack/mkmirror --vm-image does
// for the cloud image r: the file image at the path of r's fallback
// (releases/noble/release/, hard-linked when possible, it may be ~1 GB) and
// SHA256SUMS at the fallback's checksum path, in `sha256sum --binary` format
// as Ubuntu publishes it, giving sum for the image and another digest for a
// file of the other arch; the pinned dated release is not in the mirror (a
// stand-in cannot have its digest), so the fetcher must fall back. An empty
// image leaves the image file out (the manifest still lists it); listed
// false leaves it out of the manifest too. Returns the manifest's path.
func writeCatalogImageMirror(t *testing.T, mirror string, r components.Resolved, image, sum string, listed bool) string {
	t.Helper()
	if r.Fallback == nil {
		t.Fatalf("catalog vm-image %s has no fallback", r.URL)
	}
	fb := *r.Fallback
	if image != "" {
		dst := mirrorPath(t, mirror, fb.URL)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(image, dst); err != nil {
			copyFile(t, image, dst)
		}
	}
	sums := mirrorPath(t, mirror, fb.ChecksumURL)
	if err := os.MkdirAll(filepath.Dir(sums), 0o755); err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(fb.FileName, fb.Arch, "riscv64", 1)
	content := strings.Repeat("0", 64) + " *" + other + "\n" + sum + " *" + fb.FileName + "\n"
	if err := os.WriteFile(sums, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	// The manifest a mirror is trusted through, listing sum as the image's
	// digest, pinned as a user would pin it.
	var size int64 = 1
	if st, err := os.Stat(image); err == nil {
		size = st.Size()
	}
	var es []components.MirrorEntry
	if listed {
		rel := strings.TrimPrefix(filepath.ToSlash(strings.TrimPrefix(mirrorPath(t, mirror, fb.URL), mirror)), "/")
		es = append(es, components.MirrorEntry{Path: rel, Name: fb.Artifact.Name, Version: fb.Version, Arch: fb.Arch, URL: fb.URL, SHA256: sum, Size: size})
	}
	_, pin, err := components.WriteMirrorManifest(mirror, es)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(components.EnvMirrorDigest, pin)
	return filepath.Join(mirror, components.MirrorManifestFile)
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// cacheIndexEntry returns the artifact cache's index.json record for key.
func cacheIndexEntry(t *testing.T, cache, key string) (components.IndexEntry, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cache, "index.json"))
	if errors.Is(err, os.ErrNotExist) {
		return components.IndexEntry{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Entries map[string]components.IndexEntry `json:"entries"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	e, ok := idx.Entries[key]
	return e, ok
}

// dirEntries lists the names in dir (none if it does not exist).
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestCatalogImageFromMirror runs CatalogImage as 01-machines wires it for a
// cluster without libvirt.image (mirror from KHW_MIRROR, artifact cache from
// KHW_CACHE_DIR) against a directory mirror that, like one hack/mkmirror
// --vm-image makes, lacks the pinned dated release and holds a stand-in at
// releases/noble/release/: the right digest gets it into the cache, verified
// by the pinned mirror manifest, and the log line says the fallback was used
// and why; a wrong digest, or a mirror without the image, fails naming the
// file, libvirt.image and --mirror, and caches nothing. The real boot of
// such an image is the catalog-image subtest of TestLibvirtIntegration.
func TestCatalogImageFromMirror(t *testing.T) {
	c := oneNodeCluster("cat", "192.168.153")
	r := catalogVMImage(t, c)
	if !strings.HasPrefix(r.URL, "https://cloud-images.ubuntu.com/") || !strings.HasSuffix(r.ChecksumURL, "/SHA256SUMS") || r.Fallback == nil {
		t.Fatalf("catalog vm-image %s (checksum %s, fallback %+v) is not the Ubuntu cloud image this test models", r.URL, r.ChecksumURL, r.Fallback)
	}
	fb := *r.Fallback
	src := filepath.Join(t.TempDir(), "image.qcow2")
	data := make([]byte, 1<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	copy(data, "QFI\xfb")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	good := hex.EncodeToString(h[:])
	bad := hex.EncodeToString(make([]byte, 32))
	ways := []string{"libvirt.image", "--mirror"}

	for _, tc := range []struct {
		name      string
		withImage bool
		listed    bool
		sum       string
		wantErr   []string // substrings of the error; none: success
	}{
		{"fallback with its published digest", true, true, good, nil},
		{"wrong digest", true, true, bad, append([]string{"sha256 mismatch", fb.URL, "expected " + bad, "actual " + good, components.MirrorManifestFile, "nothing was cached"}, ways...)},
		{"image missing from the mirror", false, true, good, append([]string{"mirror has no file", fb.FileName, "neither the pinned " + r.URL + " nor the fallback " + fb.URL}, ways...)},
		{"neither listed", false, false, good, append([]string{"does not list " + r.URL, "does not list " + fb.URL}, ways...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mirror, cache := t.TempDir(), t.TempDir()
			t.Setenv(components.EnvMirror, mirror)
			t.Setenv(components.EnvCacheDir, cache)
			image := ""
			if tc.withImage {
				image = src
			}
			sums := writeCatalogImageMirror(t, mirror, r, image, tc.sum, tc.listed)
			var log strings.Builder
			resolve := CatalogImage(c, components.EnvFetcher(), &log)

			img, err := resolve(t.Context())
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("CatalogImage = %+v, want an error", img)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%v", w, err)
					}
				}
				var dm *components.DigestMismatchError
				if tc.sum == bad && (!errors.As(err, &dm) || dm.Expected != bad || dm.Actual != good || !strings.Contains(dm.ExpectedFrom, sums)) {
					t.Errorf("want a DigestMismatchError expecting %s from %s, got %#v", bad, sums, dm)
				}
				if got := dirEntries(t, filepath.Join(cache, "sha256")); len(got) != 0 {
					t.Errorf("the cache kept blobs after a failed fetch: %v", got)
				}
				if got := dirEntries(t, filepath.Join(cache, "partial")); len(got) != 0 {
					t.Errorf("the cache kept partial downloads after a failed fetch: %v", got)
				}
				for _, u := range []string{r.URL, fb.URL} {
					if e, ok := cacheIndexEntry(t, cache, u); ok {
						t.Errorf("the cache index records %s after a failed fetch: %+v", u, e)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(cache, "sha256", good); img.Path != want || img.Format != "qcow2" || img.Kernel != "" || img.Initrd != "" || img.Cmdline != "" {
				t.Errorf("image = %+v, want %s as qcow2 booting from its own disk", img, want)
			}
			if got, err := os.ReadFile(img.Path); err != nil || sha256.Sum256(got) != h {
				t.Errorf("cached image differs from the mirror's: %v", err)
			}
			e, ok := cacheIndexEntry(t, cache, fb.URL)
			if !ok || e.SHA256 != good || !strings.Contains(e.VerifiedBy, sums) || e.Trust != components.TrustMirror || e.Source != mirrorPath(t, mirror, fb.URL) {
				t.Errorf("cache index entry for %s = %+v, %v; want it verified by %s and fetched from the mirror", fb.URL, e, ok, sums)
			}
			if want := "base image: " + fb.URL + " (the current noble release, sha256 " + good; !strings.Contains(log.String(), want) ||
				!strings.Contains(log.String(), "not the pinned "+r.Version+" "+r.URL+": ") || !strings.Contains(log.String(), "does not list "+r.URL) {
				t.Errorf("the log does not say that the fallback was used and why:\n%s", log.String())
			}
			// A second resolve uses the cache: it works with the mirror's
			// files gone, and says again which image it is.
			for _, f := range []string{mirrorPath(t, mirror, fb.URL), mirrorPath(t, mirror, fb.ChecksumURL)} {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
			log.Reset()
			if again, err := resolve(t.Context()); err != nil || again.Path != img.Path || again.Format != img.Format || !strings.HasPrefix(again.Source, fb.URL+" (the current noble release") || !strings.Contains(log.String(), "base image: "+fb.URL) {
				t.Errorf("second CatalogImage with an empty mirror = %+v, %v, log %q; want the cached %+v", again, err, log.String(), img)
			}
		})
	}
}
