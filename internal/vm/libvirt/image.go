package libvirt

import (
	"context"
	"fmt"
	"io"

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
		f := from
		f.Progress = progress
		got, err := f.Fetch(ctx, imgs[:1])
		if err != nil {
			return Image{}, err
		}
		if len(got) != 1 || got[0].Err != nil {
			if len(got) == 1 {
				return Image{}, got[0].Err
			}
			return Image{}, fmt.Errorf("fetch %s: no result", imgs[0].URL)
		}
		return Image{Path: got[0].Path, Format: "qcow2"}, nil
	}
}
