package libvirt

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
)

// EnvNetns names a network namespace (a path such as
// /run/netns/khwlv-test-1) that Options.NetnsPath defaults to: khw then
// dials the nodes from inside it. For tests and hack/e2e-libvirt.sh, which
// run libvirtd in a namespace of their own; unset on a real host.
const EnvNetns = "KHW_LIBVIRT_NETNS"

// CatalogImage returns an Options.ResolveImage that fetches the base image
// of the artifact catalog (role vm-image: the Ubuntu 24.04 cloud image for
// c.Arch) with a copy of from (its cache, mirror and mirror pin), verified
// as components.Fetcher verifies every download, progress to progress. The
// cloud image boots from its own disk (no direct kernel boot).
//
// The catalog pins a dated release; Ubuntu moves dated directories to its
// archive host after some months, so when it cannot be had the fetcher
// takes the same pinned file from there, and then falls back to
// releases/noble/release/ (verified by that directory's SHA256SUMS and
// Ubuntu's signature over it, or by the pinned mirror manifest). One line to
// progress says which image was used, where its bytes came from and, for the
// archive or the fallback, why. When neither can be had the error says
// so and names the two ways out: libvirt.image in cluster.yaml, or
// a mirror that holds the image (KHW_MIRROR and its pin; khw fetch --mirror).
func CatalogImage(c *config.Cluster, from components.Fetcher, progress io.Writer) func(ctx context.Context) (Image, error) {
	return func(ctx context.Context) (Image, error) {
		cat, err := components.Load()
		if err != nil {
			return Image{}, err
		}
		rs, err := cat.Resolve(c, c.Arch)
		if err != nil {
			return Image{}, err
		}
		imgs := components.ForRole(rs, components.RoleVMImage)
		if len(imgs) == 0 {
			return Image{}, fmt.Errorf("the artifact catalog has no %s for %s; set libvirt.image in cluster.yaml", components.RoleVMImage, c.Arch)
		}
		r := imgs[0]
		f := from
		f.Progress = progress
		got, err := f.Fetch(ctx, imgs[:1])
		if err == nil && (len(got) != 1 || got[0].Err != nil) {
			err = fmt.Errorf("fetch %s: no result", r.URL)
		}
		if err != nil {
			if ctx.Err() != nil {
				return Image{}, err
			}
			what := r.URL + " could not be fetched"
			if r.Fallback != nil {
				what = "neither the pinned " + r.URL + " nor the fallback " + r.Fallback.URL + " could be fetched"
			}
			mirror := "or use a mirror that holds it: set " + components.EnvMirror + " and " + components.EnvMirrorDigest + " (khw fetch --mirror … --mirror-digest … checks one)"
			if f.Mirror != "" {
				mirror = "or export the mirror " + f.Mirror + " again with the image (khw mirror export on a machine with internet; khw fetch --mirror checks it) and set the new pin in " + components.EnvMirrorDigest
			}
			return Image{}, fmt.Errorf("base image for %s: %s: %w (fix: set libvirt.image in cluster.yaml to a local qcow2 cloud image with cloud-init, %s)", c.Arch, what, err, mirror)
		}
		res := got[0]
		src := fmt.Sprintf("%s (the pinned %s, sha256 %s, verified by %s)", res.Source, r.Version, res.SHA256, res.VerifiedBy)
		switch {
		case res.Archive:
			src = fmt.Sprintf("%s (the pinned %s from Ubuntu's archive host, sha256 %s, verified by %s); %s: %s",
				res.Source, r.Version, res.SHA256, res.VerifiedBy, r.URL, res.ArchiveReason)
		case res.Fallback:
			src = fmt.Sprintf("%s (the current noble release, sha256 %s, verified by %s); not the pinned %s %s: %s",
				r.Fallback.URL, res.SHA256, res.VerifiedBy, r.Version, r.URL, res.FallbackReason)
		}
		if progress != nil {
			fmt.Fprintf(progress, "base image: %s\n", src)
		}
		return Image{Path: res.Path, Format: "qcow2", Source: src}, nil
	}
}

// image returns the base image to use.
func (p *Provider) image(ctx context.Context) (Image, error) {
	img := p.opts.Image
	if img.Path == "" {
		if p.opts.ResolveImage == nil {
			return img, fmt.Errorf("cluster %s: no base image: set libvirt.image in cluster.yaml (a qcow2 or raw disk image with cloud-init) or let khw fetch the Ubuntu cloud image from the artifact catalog", p.c.Name)
		}
		var err error
		if img, err = p.opts.ResolveImage(ctx); err != nil {
			return img, fmt.Errorf("cluster %s: base image: %w", p.c.Name, err)
		}
		p.mu.Lock()
		p.imageSource = img.Source
		p.mu.Unlock()
	}
	if img.Format == "" {
		f, err := detectFormat(img.Path)
		if err != nil {
			return img, fmt.Errorf("cluster %s: base image: %w", p.c.Name, err)
		}
		img.Format = f
	}
	return img, nil
}

// detectFormat returns qcow2 when path starts with the qcow2 magic "QFI\xfb",
// else raw.
func detectFormat(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open image %s: %w; check libvirt.image in cluster.yaml", path, err)
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil {
		return "", fmt.Errorf("read image %s: %w", path, err)
	}
	if bytes.Equal(magic, []byte{'Q', 'F', 'I', 0xfb}) {
		return "qcow2", nil
	}
	return "raw", nil
}
