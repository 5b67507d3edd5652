package components_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/components/debtest"
)

var testArchive = components.DebArchive{OS: "debian", Codename: "bookworm", Arches: []string{"amd64"},
	URL: "https://deb.debian.org/debian", Suites: []string{"bookworm", "bookworm-updates"}, Components: []string{"main"}}

// testPkgs: haproxy needs libc6 (installed), liblua (real) and
// "libssl3t64 | libssl3" (neither installed: the first the index has,
// libssl3, is taken), and "debconf | debconf-2.0" (virtual, provided by
// cdebconf and debconf-b, installed as debconf-b's provides on the node).
var testPkgs = []debtest.Pkg{
	{Name: "haproxy", Version: "2.6.12-1", Depends: "libc6 (>= 2.34), liblua5.3-0 (>= 5.3.6), libssl3t64 | libssl3 (>= 3.0.0), debconf (>= 0.5) | debconf-2.0",
		PreDepends: "adduser", Files: map[string]string{"/usr/sbin/haproxy": "#!/bin/sh\necho haproxy\n"}},
	{Name: "liblua5.3-0", Version: "5.3.6-2", Depends: "libc6:any"},
	{Name: "libssl3", Version: "3.0.15-1", Depends: "libc6"},
	{Name: "adduser", Version: "3.134", Depends: "passwd"},
	{Name: "cdebconf", Version: "0.270", Provides: "debconf-2.0"},
	{Name: "jq", Version: "1.6-2.1", Depends: "libjq1 (= 1.6-2.1)"},
	{Name: "libjq1", Version: "1.6-2.1", Depends: "libonig5"},
}

func TestMain(m *testing.M) {
	code := m.Run()
	if archiveTmpl != "" {
		os.RemoveAll(archiveTmpl)
	}
	os.Exit(code)
}

func needDpkgDeb(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("SKIP: no dpkg-deb to build test packages")
	}
}

var (
	archiveOnce sync.Once
	archiveTmpl string
	archiveArch *debtest.Archive
	archiveErr  error
)

// writeArchive gives each test its own copy of the test archive (built
// once: dpkg-deb takes a while).
func writeArchive(t *testing.T) (*debtest.Archive, components.Fetcher) {
	t.Helper()
	needDpkgDeb(t)
	archiveOnce.Do(func() {
		archiveTmpl, archiveErr = os.MkdirTemp("", "khw-debtest-")
		if archiveErr == nil {
			archiveArch, archiveErr = debtest.Write(archiveTmpl, testArchive, "amd64", testPkgs)
		}
	})
	if archiveErr != nil {
		t.Fatal(archiveErr)
	}
	dir := t.TempDir()
	if out, err := exec.Command("cp", "-a", archiveTmpl+"/.", dir).CombinedOutput(); err != nil {
		t.Fatalf("copy the test archive: %v: %s", err, out)
	}
	moved := func(p string) string { return dir + strings.TrimPrefix(p, archiveTmpl) }
	a := *archiveArch
	a.Mirror, a.Release, a.Packages, a.PackagesXZ = dir, moved(a.Release), moved(a.Packages), moved(a.PackagesXZ)
	a.Debs = map[string]string{}
	for n, p := range archiveArch.Debs {
		a.Debs[n] = moved(p)
	}
	pin, err := debtest.Pin(dir, a.Entries, false)
	if err != nil {
		t.Fatal(err)
	}
	return &a, components.Fetcher{Mirror: dir, MirrorDigest: pin, CacheDir: t.TempDir()}
}

func names(ps []components.DebPackage) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return strings.Join(out, " ")
}

func TestDebIndexClosureAndFetch(t *testing.T) {
	a, f := writeArchive(t)
	ctx := context.Background()
	ix, err := f.DebIndex(ctx, testArchive, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if ix.Len() != len(testPkgs) {
		t.Fatalf("index has %d packages, want %d", ix.Len(), len(testPkgs))
	}
	// The node has libc6, passwd and something providing debconf-2.0.
	installed := components.InstalledFromDpkg([]byte("ii \tlibc6\t\nii \tpasswd\t\nii \tdebconf-b\tdebconf-2.0\nrc \tadduser\t\n"))
	got, err := ix.Closure([]string{"haproxy"}, installed)
	if err != nil {
		t.Fatal(err)
	}
	// adduser was removed (rc: config files only), so it is needed again;
	// cdebconf is not, the node provides debconf-2.0.
	if want := "haproxy liblua5.3-0 libssl3 adduser"; names(got) != want {
		t.Errorf("closure = %q, want %q", names(got), want)
	}
	// Without a provider on the node the first provider is taken.
	got, err = ix.Closure([]string{"haproxy"}, map[string]bool{"libc6": true, "passwd": true})
	if err != nil || !strings.Contains(names(got), "cdebconf") {
		t.Errorf("closure without debconf = %q, %v; want cdebconf for debconf-2.0", names(got), err)
	}
	// Already installed: nothing to do.
	if got, err := ix.Closure([]string{"haproxy"}, map[string]bool{"haproxy": true}); err != nil || len(got) != 0 {
		t.Errorf("closure of an installed package = %q, %v; want nothing", names(got), err)
	}
	// A dependency nobody has: the error names it and who needs it.
	_, err = ix.Closure([]string{"jq"}, installed)
	var miss *components.DebMissingError
	if !errors.As(err, &miss) || miss.Package != "libonig5" || miss.NeededBy != "libjq1" ||
		!strings.Contains(err.Error(), "debian bookworm amd64") || !strings.Contains(err.Error(), "--node-debs") {
		t.Errorf("closure of jq: err = %v, want a DebMissingError for libonig5 needed by libjq1 naming the OS/arch and the fix", err)
	}
	if _, err := ix.Closure([]string{"nosuch"}, installed); !errors.As(err, &miss) || miss.Package != "nosuch" {
		t.Errorf("closure of nosuch: err = %v", err)
	}

	got, _ = ix.Closure([]string{"haproxy"}, installed)
	files, err := ix.FetchDebs(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	for _, df := range files {
		want, _ := os.ReadFile(a.Debs[df.Package.Name])
		if string(df.Data) != string(want) {
			t.Errorf("%s: fetched bytes differ from the .deb", df.Package.Name)
		}
	}
}

func TestDebIndexRefusesTampering(t *testing.T) {
	ctx := context.Background()
	t.Run("Packages not matching Release", func(t *testing.T) {
		a, f := writeArchive(t)
		// A Packages.xz the manifest vouches for but the Release file does not.
		if err := os.WriteFile(a.PackagesXZ, []byte("not the index"), 0o644); err != nil {
			t.Fatal(err)
		}
		pin, err := debtest.Pin(a.Mirror, a.Entries, true)
		if err != nil {
			t.Fatal(err)
		}
		f.MirrorDigest = pin
		_, err = f.DebIndex(ctx, testArchive, "amd64")
		var dm *components.DigestMismatchError
		if !errors.As(err, &dm) || !strings.Contains(dm.ExpectedFrom, "Release") {
			t.Errorf("err = %v, want a digest mismatch against the Release file", err)
		}
	})
	t.Run("Release not matching the manifest", func(t *testing.T) {
		a, f := writeArchive(t)
		if err := os.WriteFile(a.Release, []byte("Suite: bookworm\nSHA256:\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := f.DebIndex(ctx, testArchive, "amd64")
		var dm *components.DigestMismatchError
		if !errors.As(err, &dm) || !strings.Contains(dm.ExpectedFrom, "mirror manifest") {
			t.Errorf("err = %v, want a digest mismatch against the pinned manifest", err)
		}
	})
	t.Run("deb not matching Packages", func(t *testing.T) {
		a, f := writeArchive(t)
		if err := os.WriteFile(a.Debs["libssl3"], []byte("evil"), 0o644); err != nil {
			t.Fatal(err)
		}
		pin, err := debtest.Pin(a.Mirror, a.Entries, true)
		if err != nil {
			t.Fatal(err)
		}
		f.MirrorDigest = pin
		ix, err := f.DebIndex(ctx, testArchive, "amd64")
		if err != nil {
			t.Fatal(err)
		}
		p, _ := ix.Package("libssl3")
		_, err = ix.FetchDebs(ctx, []components.DebPackage{p})
		if err == nil || !strings.Contains(err.Error(), "inconsistent") {
			t.Errorf("err = %v, want the manifest/Packages disagreement", err)
		}
	})
	t.Run("deb not matching the manifest", func(t *testing.T) {
		a, f := writeArchive(t)
		if err := os.WriteFile(a.Debs["libssl3"], []byte("evil"), 0o644); err != nil {
			t.Fatal(err)
		}
		ix, err := f.DebIndex(ctx, testArchive, "amd64")
		if err != nil {
			t.Fatal(err)
		}
		p, _ := ix.Package("libssl3")
		_, err = ix.FetchDebs(ctx, []components.DebPackage{p})
		var dm *components.DigestMismatchError
		if !errors.As(err, &dm) {
			t.Errorf("err = %v, want a digest mismatch", err)
		}
	})
	t.Run("missing deb", func(t *testing.T) {
		a, f := writeArchive(t)
		var keep []components.MirrorEntry
		for _, e := range a.Entries {
			if e.Name != "liblua5.3-0" {
				keep = append(keep, e)
			}
		}
		os.Remove(a.Debs["liblua5.3-0"])
		pin, err := debtest.Pin(a.Mirror, keep, false)
		if err != nil {
			t.Fatal(err)
		}
		f.MirrorDigest = pin
		ix, err := f.DebIndex(ctx, testArchive, "amd64")
		if err != nil {
			t.Fatal(err)
		}
		got, err := ix.Closure([]string{"haproxy"}, map[string]bool{"libc6": true, "passwd": true})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ix.FetchDebs(ctx, got)
		var miss *components.DebMissingError
		if !errors.As(err, &miss) || !strings.HasPrefix(miss.Package, "liblua5.3-0") || !strings.Contains(err.Error(), "does not hold its .deb") {
			t.Errorf("err = %v, want a DebMissingError naming liblua5.3-0", err)
		}
	})
	t.Run("no archive in the mirror", func(t *testing.T) {
		_, f := writeArchive(t)
		other := testArchive
		other.URL, other.OS, other.Codename, other.Suites = "http://archive.ubuntu.com/ubuntu", "ubuntu", "noble", []string{"noble"}
		_, err := f.DebIndex(ctx, other, "amd64")
		if err == nil || !strings.Contains(err.Error(), "ubuntu noble") || !strings.Contains(err.Error(), "rebuild the mirror") {
			t.Errorf("err = %v, want one naming ubuntu noble and the fix", err)
		}
	})
	t.Run("unpinned", func(t *testing.T) {
		_, f := writeArchive(t)
		f.MirrorDigest = ""
		if _, err := f.DebIndex(ctx, testArchive, "amd64"); err == nil || !strings.Contains(err.Error(), "not pinned") {
			t.Errorf("err = %v, want the pin refusal", err)
		}
	})
}

func TestFindDebArchive(t *testing.T) {
	for _, c := range []struct{ os, code, arch, url string }{
		{"debian", "bookworm", "amd64", "https://deb.debian.org/debian"},
		{"ubuntu", "noble", "amd64", "http://archive.ubuntu.com/ubuntu"},
		{"ubuntu", "noble", "arm64", "http://ports.ubuntu.com/ubuntu-ports"},
	} {
		a, err := components.FindDebArchive(c.os, c.code, c.arch)
		if err != nil || a.URL != c.url {
			t.Errorf("%s %s %s: %v %v, want %s", c.os, c.code, c.arch, a.URL, err, c.url)
		}
	}
	if _, err := components.FindDebArchive("fedora", "40", "amd64"); err == nil || !strings.Contains(err.Error(), "fedora 40 amd64") {
		t.Errorf("fedora: %v", err)
	}
}

func TestParseReleaseClearSigned(t *testing.T) {
	in := "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\nSuite: noble\nCodename: noble\nSHA256:\n " +
		strings.Repeat("ab", 32) + " 12 main/binary-amd64/Packages.xz\n- Label: dash-escaped\n-----BEGIN PGP SIGNATURE-----\nxx\n-----END PGP SIGNATURE-----\n"
	rel, err := components.ParseRelease([]byte(in))
	if err != nil || rel.Suite != "noble" || rel.Files["main/binary-amd64/Packages.xz"].Size != 12 {
		t.Fatalf("ParseRelease = %+v, %v", rel, err)
	}
}

// The real bookworm InRelease apt downloaded on this host verifies against
// the host's Debian keyring with the pinned keys, and not with other pins.
func TestVerifyInReleaseDebian(t *testing.T) {
	in, err := os.ReadFile("/var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_InRelease")
	if err != nil {
		t.Skip("SKIP: no bookworm InRelease in /var/lib/apt/lists (apt-get update on a Debian 12 host)")
	}
	a, _ := components.FindDebArchive("debian", "bookworm", "amd64")
	kr, err := os.ReadFile(a.Keyring)
	if err != nil {
		t.Skipf("SKIP: no %s", a.Keyring)
	}
	rel, err := components.VerifyInRelease(in, kr, a.Keys)
	if err != nil {
		t.Fatal(err)
	}
	r, err := components.ParseRelease(rel)
	if err != nil || r.Codename != "bookworm" || r.Files["main/binary-amd64/Packages.xz"].SHA256 == "" {
		t.Errorf("verified Release: %+v, %v", r, err)
	}
	if _, err := components.VerifyInRelease(in, kr, []string{strings.Repeat("0", 40)}); err == nil || !strings.Contains(err.Error(), "none of the pinned keys") {
		t.Errorf("other pin: err = %v", err)
	}
	bad := bytes.Replace(in, []byte("Codename: bookworm"), []byte("Codename: bookwurm"), 1)
	if _, err := components.VerifyInRelease(bad, kr, a.Keys); err == nil {
		t.Error("an altered InRelease verified")
	}
}

// signingKey is a throw-away archive key: its public keyring and
// fingerprint, and a function that clear-signs a file as InRelease.
func signingKey(t *testing.T) (keyring []byte, fpr string, clearSign func(in []byte) []byte) {
	t.Helper()
	e, err := openpgp.NewEntity("khw test archive", "", "archive@example.invalid", nil)
	if err != nil {
		t.Fatal(err)
	}
	var kr bytes.Buffer
	if err := e.Serialize(&kr); err != nil {
		t.Fatal(err)
	}
	return kr.Bytes(), hex.EncodeToString(e.PrimaryKey.Fingerprint), func(in []byte) []byte {
		var out bytes.Buffer
		w, err := clearsign.Encode(&out, e.PrivateKey, nil)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(in)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
}

// TestExportNodeDebs exports node packages from a fake official archive
// over HTTP whose InRelease is signed by a pinned key; khw then installs
// from the export through its pin. A signature by an unpinned key, and an
// InRelease changed after signing, are refused and nothing is written.
func TestExportNodeDebs(t *testing.T) {
	needDpkgDeb(t)
	root := t.TempDir()
	var files http.Handler = http.NotFoundHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { files.ServeHTTP(w, r) }))
	defer srv.Close()
	a := components.DebArchive{OS: "ubuntu", Codename: "noble", Arches: []string{"amd64"}, URL: srv.URL + "/ubuntu",
		Suites: []string{"noble", "noble-updates"}, Components: []string{"main"}}
	host := strings.TrimPrefix(srv.URL, "http://")
	// debtest lays the archive out as a mirror: HOST/ubuntu/...; serve HOST/.
	arch, err := debtest.Write(root, a, "amd64", []debtest.Pkg{
		{Name: "haproxy", Version: "2.8.5-1ubuntu3", Depends: "libc6, liblua5.4-0"},
		{Name: "liblua5.4-0", Version: "5.4.6-3"},
		{Name: "iptables", Version: "1.8.10-3ubuntu2"},
		{Name: "iproute2", Version: "6.1.0-1ubuntu6"},
		{Name: "jq", Version: "1.7.1-3build1", Depends: "libjq1"},
		{Name: "libjq1", Version: "1.7.1-3build1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	files = http.FileServer(http.Dir(filepath.Join(root, host)))
	kr, fpr, sign := signingKey(t)
	a.Keys = []string{fpr}
	release, _ := os.ReadFile(arch.Release)
	inRelease := filepath.Join(filepath.Dir(arch.Release), "InRelease")
	if err := os.WriteFile(inRelease, sign(release), 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := []byte("libc6\t2.39-0ubuntu8\niproute2\t6.1.0-1ubuntu6\niptables\t1.8.10-3ubuntu2\n")
	f := components.Fetcher{CacheDir: t.TempDir(), Retries: -1}
	ctx := context.Background()

	// Refusals first, into empty directories.
	other, _, _ := signingKey(t)
	for name, c := range map[string]struct {
		keyring []byte
		in      []byte
		want    string
	}{
		"unpinned key":  {other, sign(release), "none of the pinned keys"},
		"altered after": {kr, bytes.Replace(sign(release), []byte("Suite: noble"), []byte("Suite: nobel"), 1), "does not verify"},
	} {
		if err := os.WriteFile(inRelease, c.in, 0o644); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if _, err := f.ExportNodeDebs(ctx, dir, a, "amd64", manifest, c.keyring, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%s: %d entries written", name, len(ents))
		}
	}

	if err := os.WriteFile(inRelease, sign(release), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rep, err := f.ExportNodeDebs(ctx, dir, a, "amd64", manifest, kr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(rep.Debs); got != "haproxy liblua5.4-0 jq libjq1" {
		t.Errorf("exported %q, want haproxy liblua5.4-0 jq libjq1", got)
	}
	m := components.Fetcher{Mirror: dir, MirrorDigest: rep.Digest}
	ix, err := m.DebIndex(ctx, a, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := ix.Closure([]string{"haproxy"}, map[string]bool{"libc6": true})
	if err != nil {
		t.Fatal(err)
	}
	if fs, err := ix.FetchDebs(ctx, cl); err != nil || len(fs) != 2 {
		t.Errorf("khw reads %d .deb(s) from the export, %v; want 2", len(fs), err)
	}
	if _, err := os.Stat(filepath.Join(dir, host, "ubuntu/dists/noble/InRelease")); err != nil {
		t.Errorf("the export lacks the InRelease as published: %v", err)
	}
}
