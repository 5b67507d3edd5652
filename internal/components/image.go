package components

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/khw-dev/khw/internal/fsutil"
)

// ImageMirrorPath returns where a mirror holds image ref for linux/arch, as a
// slash-separated path relative to the mirror root:
//
//	<registry host>/<repository path>/<tag>/image-linux-<arch>.tar
//
// e.g. registry.k8s.io/coredns/coredns/v1.14.6/image-linux-arm64.tar. A
// reference by digest uses "sha256-<hex>" in place of the tag. The file is an
// image tarball as go-containerregistry's tarball.Write produces it (the
// `docker save` layout: manifest.json, the config blob, one file per layer),
// which `ctr -n k8s.io images import` accepts; next to it,
// image-linux-<arch>.tar.sha256 holds the tarball's SHA-256 in hex (for
// `sha256sum -c` by hand; khw itself takes the digest from the pinned
// manifest). Registries have no such file layout; it is khw's own
// (docs/catalog.md "Mirror layout").
func ImageMirrorPath(ref, arch string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return imageMirrorPath(r, arch), nil
}

func imageMirrorPath(r name.Reference, arch string) string {
	id := r.Identifier()
	if _, ok := r.(name.Digest); ok {
		id = strings.ReplaceAll(id, ":", "-")
	}
	return path.Join(r.Context().RegistryStr(), r.Context().RepositoryStr(), id, "image-linux-"+arch+".tar")
}

func (f *Fetcher) fetchImage(ctx context.Context, run *fetchRun, r Resolved, it *pitem) (Fetched, error) {
	if r.Arch == "" {
		return Fetched{}, fmt.Errorf("image %s: no arch (fix: resolve the catalog for amd64 or arm64)", r.Image)
	}
	if r.SHA256 != "" {
		return Fetched{}, fmt.Errorf("image %s: checksum.sha256 cannot pin an image (fix: pin it by digest in the reference, name:tag@sha256:<hex>)", r.Image)
	}
	ref, err := name.ParseReference(r.Image)
	if err != nil {
		return Fetched{}, fmt.Errorf("image reference %q: %w", r.Image, err)
	}
	key := CacheKey(r)
	if res, ok := run.fromCache(r, key, ""); ok {
		return res, nil
	}
	unlock, err := run.lock(ctx, key)
	if err != nil {
		return Fetched{}, err
	}
	defer unlock()
	if res, ok := run.fromCache(r, key, ""); ok { // fetched meanwhile by another process
		return res, nil
	}
	if f.Mirror != "" {
		return f.imageFromMirror(ctx, run, r, ref, key, it)
	}
	return f.imageFromRegistry(ctx, run, r, ref, key, it)
}

// imageFromMirror downloads MIRROR/ImageMirrorPath, checks it against the
// digest and size the pinned manifest lists, then opens it as an image
// tarball and checks that it holds the reference's tag for linux/<arch>.
func (f *Fetcher) imageFromMirror(ctx context.Context, run *fetchRun, r Resolved, ref name.Reference, key string, it *pitem) (Fetched, error) {
	rel := imageMirrorPath(ref, r.Arch)
	loc, isFile := f.mirrorFile(rel)
	man, e, limit, err := f.manifestEntry(ctx, run, r)
	if err != nil {
		return Fetched{}, err
	}
	if e.Path != rel {
		return Fetched{}, fmt.Errorf("the mirror manifest %s lists image %s for linux/%s at %s, not at %s (fix: export the mirror again with `khw mirror export`)", man.loc, r.Image, r.Arch, e.Path, rel)
	}
	inspect := func(p string) (imageInfo, error) {
		var tag *name.Tag
		if t, ok := ref.(name.Tag); ok {
			tag = &t
		}
		img, err := tarball.ImageFromPath(p, tag)
		if err != nil {
			return imageInfo{}, fmt.Errorf("image tarball %s: %w (fix: write it with go-containerregistry tarball.Write / `khw mirror export`, tagged %s)", loc, err, r.Image)
		}
		info, err := checkImage(img, r.Image, r.Arch)
		info.digest = "" // computed from the tarball, not the registry's manifest digest
		return info, err
	}
	return f.downloadVerified(ctx, run, r, key, r.Image, loc, isFile, download{want: e.SHA256, verifiedBy: man.verifiedBy(), trust: TrustMirror, limit: limit}, inspect, it)
}

// imageFromRegistry pulls linux/<arch> of ref with go-containerregistry and
// writes it as an image tarball into the cache. The registry's content
// addressing verifies it: go-containerregistry checks every blob it reads
// against the digest in the manifest.
func (f *Fetcher) imageFromRegistry(ctx context.Context, run *fetchRun, r Resolved, ref name.Reference, key string, it *pitem) (Fetched, error) {
	img, err := remote.Image(ref,
		remote.WithContext(ctx),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: r.Arch}),
		remote.WithTransport(run.transport()),
		remote.WithUserAgent(userAgent))
	if err != nil {
		if ctx.Err() != nil {
			return Fetched{}, ctxErr(ctx)
		}
		return Fetched{}, fmt.Errorf("pull %s for linux/%s: %w (fix: check access to %s, or use --mirror)", r.Image, r.Arch, err, ref.Context().RegistryStr())
	}
	info, err := checkImage(img, r.Image, r.Arch)
	if err != nil {
		return Fetched{}, err
	}
	part := run.cache.partialPath(key)
	os.Remove(part)
	out, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fsutil.PublicMode)
	if err != nil {
		return Fetched{}, fmt.Errorf("artifact cache: %w", err)
	}
	if size, err := tarball.CalculateSize(map[name.Reference]v1.Image{ref: img}); err == nil {
		it.set(0, size)
	}
	h := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(out, h), it: it, limit: r.MaxSize}
	fail := func(err error) (Fetched, error) {
		out.Close()
		os.Remove(part)
		if ctx.Err() != nil {
			return Fetched{}, fmt.Errorf("pull %s: %w", r.Image, ctxErr(ctx))
		}
		return Fetched{}, fmt.Errorf("pull %s for linux/%s: %w", r.Image, r.Arch, err)
	}
	if err := tarball.Write(ref, img, cw); err != nil {
		return fail(err)
	}
	if err := out.Sync(); err != nil {
		return fail(err)
	}
	if err := out.Close(); err != nil {
		return fail(err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	p, err := run.cache.store(part, sum)
	if err != nil {
		return Fetched{}, err
	}
	source := "registry " + ref.Context().RegistryStr()
	verified := "registry manifest " + info.digest
	e := IndexEntry{SHA256: sum, Size: cw.n, Source: source, VerifiedBy: verified, Trust: TrustRegistry, ImageDigest: info.digest, ImageID: info.id, Fetched: time.Now().UTC()}
	if err := run.cache.update(key, &e); err != nil {
		return Fetched{}, err
	}
	return Fetched{Resolved: r, Path: p, SHA256: sum, Size: cw.n, ImageDigest: info.digest, ImageID: info.id, Source: source, VerifiedBy: verified, Trust: TrustRegistry}, nil
}

// imageInfo is what khw records about an image.
type imageInfo struct {
	digest string // manifest digest, sha256:<hex>
	id     string // config digest, sha256:<hex>
}

// checkImage checks that img is for linux/arch and returns its digests.
func checkImage(img v1.Image, ref, arch string) (imageInfo, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return imageInfo{}, fmt.Errorf("image %s: config: %w", ref, err)
	}
	if cf.OS != "linux" || cf.Architecture != arch {
		return imageInfo{}, fmt.Errorf("image %s is for %s/%s, want linux/%s (fix: the registry or mirror holds the wrong platform; export the mirror again for --arch %s)", ref, cf.OS, cf.Architecture, arch, arch)
	}
	d, err := img.Digest()
	if err != nil {
		return imageInfo{}, fmt.Errorf("image %s: manifest: %w", ref, err)
	}
	id, err := img.ConfigName()
	if err != nil {
		return imageInfo{}, fmt.Errorf("image %s: config: %w", ref, err)
	}
	return imageInfo{digest: d.String(), id: id.String()}, nil
}

// countingWriter counts bytes and reports them to a progress item; past
// limit bytes (0: no bound) it fails, which stops tarball.Write.
type countingWriter struct {
	w     io.Writer
	it    *pitem
	n     int64
	limit int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.limit > 0 && c.n+int64(len(p)) > c.limit {
		return 0, fmt.Errorf("the image is larger than its catalog bound of %d MiB; stopped", c.limit>>20)
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.it.add(int64(n))
	return n, err
}
