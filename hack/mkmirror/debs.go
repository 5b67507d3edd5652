package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ulikunitz/xz"

	"github.com/khw-dev/khw/internal/components"
)

// Node packages (--node-debs): the .debs that khw installs offline on a
// node made from an image whose package manifest is given, i.e. the closure
// of components.NodeDebs minus what the image has, in the archive's
// official layout with the Release file and Packages index khw verifies
// them through (components.Fetcher.DebIndex). The archive's Release file
// is verified on this machine with gpgv against the distribution's keyring
// (Debian's debian-archive-keyring package ships it) from its clear-signed
// InRelease, then Packages against Release and each .deb against Packages.
// The mirror holds the signed text as Release (what khw reads, through the
// manifest) and InRelease as published (for people to check).

// debsOpts are the --node-debs settings.
type debsOpts struct {
	manifest string // the image's package manifest (name<TAB>version lines)
	distro   string // "debian/bookworm"
	from     string // archive URL to download from ("" = the archive's own)
	keyring  string // OpenPGP keyring for gpgv
	arches   []string
	extra    []string // more packages than components.NodeDebs
}

// debsClient downloads from the archive (proxy from the environment).
var debsClient = &http.Client{Timeout: 10 * time.Minute}

// httpGet reads url, at most limit bytes.
func httpGet(ctx context.Context, url string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := debsClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %s", url, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("GET %s: more than %d bytes", url, limit)
	}
	return data, nil
}

func hexSum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// gpgvClearSigned checks the clear-signed InRelease file with gpgv against
// keyring and returns the signed text (gpgv --output), which is the suite's
// Release file. InRelease rather than Release + Release.gpg: one file
// cannot be caught half-updated between the two downloads.
func gpgvClearSigned(keyring string, inRelease []byte) ([]byte, error) {
	dir, err := os.MkdirTemp("", "mkmirror-gpgv-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	in, body := filepath.Join(dir, "InRelease"), filepath.Join(dir, "Release")
	if err := os.WriteFile(in, inRelease, 0o600); err != nil {
		return nil, err
	}
	out, err := exec.Command("gpgv", "--keyring", keyring, "--output", body, in).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("gpgv --keyring %s: the InRelease signature does not verify: %v\n%s", keyring, err, out)
	}
	return os.ReadFile(body)
}

// debFile is one file to put into the mirror.
type debFile struct {
	url  string // official URL
	name string // manifest entry name
	arch string
	data []byte
}

// buildNodeDebs downloads and verifies the node packages for o and writes
// them into the mirror out; it returns the manifest entries of every file
// written (Release, Packages index, .debs) and one line per arch for the
// summary.
func buildNodeDebs(ctx context.Context, out string, o debsOpts) ([]components.MirrorEntry, []string, error) {
	osID, codename, ok := strings.Cut(o.distro, "/")
	if !ok {
		return nil, nil, fmt.Errorf("--distro %q: want ID/CODENAME as in /etc/os-release, e.g. debian/bookworm", o.distro)
	}
	manifest, err := os.ReadFile(o.manifest)
	if err != nil {
		return nil, nil, fmt.Errorf("--node-debs: %w", err)
	}
	var entries []components.MirrorEntry
	var summary []string
	for _, arch := range o.arches {
		a, err := components.FindDebArchive(osID, codename, arch)
		if err != nil {
			return nil, nil, fmt.Errorf("--distro %s --arch %s: %w", o.distro, arch, err)
		}
		from := strings.TrimRight(o.from, "/")
		if from == "" {
			from = a.URL
		}
		// The archive's URL as the mirror and khw name it, read from `from`.
		src := func(official string) string { return from + strings.TrimPrefix(official, a.URL) }
		files, pkgs, err := fetchIndexes(ctx, a, arch, o.keyring, src)
		if err != nil {
			return nil, nil, err
		}
		ix := components.NewDebIndex(a, arch, pkgs)
		installed, err := components.InstalledFromManifest(manifest, ix)
		if err != nil {
			return nil, nil, fmt.Errorf("--node-debs %s: %w", o.manifest, err)
		}
		want := append(append([]string(nil), components.NodeDebs...), o.extra...)
		closure, err := ix.Closure(want, installed)
		if err != nil {
			return nil, nil, fmt.Errorf("--node-debs %s for %s %s: %w", o.manifest, a, arch, err)
		}
		var total int64
		var names []string
		for _, p := range closure {
			u, err := a.PoolURL(p.Filename)
			if err != nil {
				return nil, nil, err
			}
			dst := filepath.Join(out, filepath.FromSlash(mustRel(u)))
			data, err := os.ReadFile(dst)
			if err != nil || hexSum(data) != p.SHA256 {
				if data, err = httpGet(ctx, src(u), p.Size); err != nil {
					return nil, nil, err
				}
			}
			if got := hexSum(data); got != p.SHA256 || int64(len(data)) != p.Size {
				return nil, nil, fmt.Errorf("%s: sha256 %s and %d bytes, but the Packages index says %s and %d bytes", src(u), got, len(data), p.SHA256, p.Size)
			}
			files = append(files, debFile{url: u, name: p.Name, arch: arch, data: data})
			total += p.Size
			names = append(names, p.Name)
		}
		for _, f := range files {
			rel := mustRel(f.url)
			if err := writeAtomic(filepath.Join(out, filepath.FromSlash(rel)), f.data); err != nil {
				return nil, nil, err
			}
			if f.name == "" {
				continue // InRelease: for people; khw trusts the manifest
			}
			e := components.MirrorEntry{Path: rel, Name: f.name, Arch: f.arch, URL: f.url, SHA256: hexSum(f.data), Size: int64(len(f.data))}
			for _, p := range closure {
				if p.Name == f.name {
					e.Version = p.Version
				}
			}
			entries = append(entries, e)
		}
		summary = append(summary, fmt.Sprintf("%s %s: %d .deb(s), %.1f MiB, for %s on an image with %d packages: %s",
			a, arch, len(closure), float64(total)/(1<<20), strings.Join(want, " "), len(installed), strings.Join(names, " ")))
	}
	return entries, summary, nil
}

// fetchIndexes downloads archive a's signed Release of each suite (an
// updates suite the source does not carry is skipped), checks its
// signature with keyring, and the Packages index of each component for
// arch against it; src maps an official URL to where it is read from.
func fetchIndexes(ctx context.Context, a components.DebArchive, arch, keyring string, src func(string) string) (files []debFile, pkgs []components.DebPackage, err error) {
	for i, suite := range a.Suites {
		relURL := a.ReleaseURL(suite)
		inURL := a.DistURL(suite, "InRelease")
		inRel, err := httpGet(ctx, src(inURL), 32<<20)
		if err != nil {
			if i > 0 {
				continue // an updates suite the source does not carry
			}
			return nil, nil, err
		}
		rel, err := gpgvClearSigned(keyring, inRel)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", src(inURL), err)
		}
		r, err := components.ParseRelease(rel)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", src(relURL), err)
		}
		files = append(files, debFile{url: relURL, name: "Release", arch: arch, data: rel}, debFile{url: inURL, arch: arch, data: inRel})
		for _, comp := range a.Components {
			ip := components.IndexPath(comp, arch)
			ext := ".xz"
			rf, ok := r.Files[ip+ext]
			if !ok {
				ext = ".gz"
				if rf, ok = r.Files[ip+ext]; !ok {
					return nil, nil, fmt.Errorf("%s lists no %s.xz or .gz", src(relURL), ip)
				}
			}
			u := a.DistURL(suite, ip+ext)
			data, err := httpGet(ctx, src(u), rf.Size)
			if err != nil {
				return nil, nil, err
			}
			if got := hexSum(data); got != rf.SHA256 {
				return nil, nil, fmt.Errorf("%s: sha256 %s, but the signed Release file says %s", src(u), got, rf.SHA256)
			}
			var zr io.Reader
			if ext == ".xz" {
				zr, err = xz.NewReader(bytes.NewReader(data))
			} else {
				zr, err = gzip.NewReader(bytes.NewReader(data))
			}
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", src(u), err)
			}
			ps, err := components.ParsePackages(zr)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", src(u), err)
			}
			pkgs = append(pkgs, ps...)
			files = append(files, debFile{url: u, name: "Packages", arch: arch, data: data})
		}
	}
	return files, pkgs, nil
}

// mustRel is the mirror path of an official URL (the URLs here are built
// from the archive table, so an error is a bug).
func mustRel(u string) string {
	rel, err := mirrorRelPath(u)
	if err != nil {
		panic(err)
	}
	return rel
}

// writeAtomic writes data to p (0644, parents 0755) through a temporary
// file and a rename, unless p already holds exactly data.
func writeAtomic(p string, data []byte) error {
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".tmp-mkmirror"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// debsFlags are the node-package flags of mkmirror.
type debsFlags struct {
	manifest, distro, from, keyring, extra *string
	only                                   *bool
}

func addDebsFlags(fs interface {
	String(name, value, usage string) *string
	Bool(name string, value bool, usage string) *bool
}) *debsFlags {
	return &debsFlags{
		manifest: fs.String("node-debs", "", "package manifest of the node image (lines name<TAB>version, as `dpkg-query -W -f='${Package}\\t${Version}\\n'` prints and Ubuntu publishes beside its cloud images): add the .debs khw installs offline on such nodes (the closure of haproxy, iproute2, iptables, jq minus what the image has), with the archive's Release and Packages files"),
		distro:   fs.String("distro", "debian/bookworm", "the node image's os-release ID/VERSION_CODENAME, for --node-debs (debian/bookworm, ubuntu/noble)"),
		from:     fs.String("debs-from", "", "download the archive from this URL instead of its official one (e.g. the URI of /etc/apt/sources.list.d/debian.sources); the files keep their official paths in the mirror"),
		keyring:  fs.String("debs-keyring", "/usr/share/keyrings/debian-archive-keyring.gpg", "OpenPGP keyring the archive's InRelease signature is checked with (gpgv)"),
		extra:    fs.String("debs-extra", "", "comma-separated packages to add beyond khw's own"),
		only:     fs.Bool("debs-only", false, "with --node-debs: build nothing else, only add the node packages to the existing mirror and its khw-mirror.json"),
	}
}

// runNodeDebs adds the node packages to the mirror out and merges their
// entries into its khw-mirror.json; it prints a summary and the new pin.
func runNodeDebs(ctx context.Context, out string, arches []string, f *debsFlags) error {
	t0 := time.Now()
	entries, summary, err := buildNodeDebs(ctx, out, debsOpts{manifest: *f.manifest, distro: *f.distro, from: *f.from, keyring: *f.keyring,
		arches: arches, extra: splitList(*f.extra)})
	if err != nil {
		return err
	}
	pin, err := components.MergeMirrorManifest(out, entries)
	if err != nil {
		return fmt.Errorf("writing the manifest: %w", err)
	}
	fmt.Printf("\n== node packages (%s, %.1fs) ==\n", *f.distro, time.Since(t0).Seconds())
	for _, s := range summary {
		fmt.Printf("  %s\n", s)
	}
	fmt.Printf("  mirror pin: %s\n  use: KHW_MIRROR=%s KHW_MIRROR_DIGEST=%s\n", pin, out, pin)
	return nil
}

// keptEntries returns the entries of dir's khw-mirror.json that are not
// among fresh (paths the manifest is being rebuilt from) and whose file
// still has the listed digest and size: node packages, and the catalog
// artifacts of other versions (a second Kubernetes release for khw
// upgrade). So a rebuild for one cluster.yaml's versions keeps what was
// built for another; an altered or removed file drops out.
func keptEntries(dir string, fresh map[string]bool) []components.MirrorEntry {
	data, err := os.ReadFile(filepath.Join(dir, components.MirrorManifestFile))
	if err != nil {
		return nil
	}
	var man components.MirrorManifest
	if json.Unmarshal(data, &man) != nil {
		return nil
	}
	var out []components.MirrorEntry
	for _, e := range man.Artifacts {
		if fresh[e.Path] || (e.URL == "" && e.Image == "") {
			continue
		}
		if sum, n, err := components.HashFile(filepath.Join(dir, filepath.FromSlash(e.Path))); err == nil && sum == e.SHA256 && n == e.Size {
			out = append(out, e)
		}
	}
	return out
}
