package libvirt

import (
	"context"
	"fmt"
	"path/filepath"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
)

// Domains: each node's disk, seed and domain definition, and the files
// khw keeps of what it gave libvirt.

// ensureNode makes node n's overlay, seed and domain when missing.
func (p *Provider) ensureNode(ctx context.Context, l *golibvirt.Libvirt, pool golibvirt.StoragePool, base baseVolumes, n config.Node, spec DomainSpec) error {
	// Overlay: diskGiB, but never smaller than the base image.
	capacity := uint64(n.DiskGiB) << 30
	if capacity < base.capacity {
		capacity = base.capacity
	}
	v, err := OverlayVolumeXML(spec.DiskVolume, capacity, base.disk, base.format)
	if err != nil {
		return err
	}
	volDoc, err := v.Marshal()
	if err != nil {
		return err
	}
	if _, err := l.StorageVolLookupByName(pool, spec.DiskVolume); isLibvirtErr(err, golibvirt.ErrNoStorageVol) {
		if _, err := l.StorageVolCreateXML(pool, volDoc, 0); err != nil {
			return fmt.Errorf("node %s: create disk volume %s (%d GiB on %s): %w", n.Name, spec.DiskVolume, capacity>>30, base.disk, err)
		}
	} else if err != nil {
		return fmt.Errorf("node %s: look up volume %s: %w", n.Name, spec.DiskVolume, err)
	}

	hk, err := p.opts.HostKey(n.Name)
	if err != nil {
		return err
	}
	files, err := SeedFiles(p.c, n, spec.MAC, p.opts.AuthorizedKey, hk)
	if err != nil {
		return err
	}
	iso, err := SeedISO(files, "")
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if err := p.putSeed(ctx, l, pool, spec.SeedVolume, iso); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}

	dx, err := DomainXML(spec)
	if err != nil {
		return err
	}
	doc, err := dx.Marshal()
	if err != nil {
		return err
	}
	if err := p.writeNodeFiles(n.Name, files, doc, volDoc); err != nil {
		return err
	}
	if _, found, err := p.lookupDomain(l, n.Name); err != nil {
		return err
	} else if found {
		return nil
	}
	if _, err := l.DomainDefineXMLFlags(doc, golibvirt.DomainDefineValidate); err != nil {
		return fmt.Errorf("node %s: define domain %s: %w", n.Name, spec.Name, err)
	}
	fmt.Fprintf(p.opts.Log, "libvirt: defined %s (%s, %s, %d CPU, %d MiB, %d GiB)\n", spec.Name, Arches[p.c.Arch].Arch, spec.Type, spec.CPUs, spec.MemoryMiB, capacity>>30)
	return nil
}

// NodeFilesDir is D/libvirt/<node>: where Create leaves, for the person
// reading along, what it gave libvirt for the node: the cloud-init NoCloud
// files (user-data, meta-data, network-config; the seed ISO is made from
// them), the disk's overlay volume (disk-volume.xml, as `virsh vol-create`
// takes it) and the domain definition (domain.xml, as `virsh define` takes
// it). khw reads none of them back; Destroy removes them.
func NodeFilesDir(stateDir, node string) string {
	return filepath.Join(stateDir, "libvirt", node)
}

// writeNodeFiles writes the seed files, the domain and volume XML of node into
// NodeFilesDir (atomically, 0600: user-data holds the node's SSH
// authorized key and sudo rule), rewriting only what changed.
func (p *Provider) writeNodeFiles(node string, seed map[string][]byte, domainXML, volumeXML string) error {
	dir := NodeFilesDir(p.opts.StateDir, node)
	if err := fsutil.EnsureDir(dir); err != nil {
		return err
	}
	files := map[string][]byte{"domain.xml": []byte(domainXML + "\n"), "disk-volume.xml": []byte(volumeXML + "\n")}
	for name, b := range seed {
		files[name] = b
	}
	for name, b := range files {
		if _, err := fsutil.WriteIfChanged(filepath.Join(dir, name), b, fsutil.SecretMode); err != nil {
			return fmt.Errorf("node %s: %w", node, err)
		}
	}
	return nil
}

// ConsoleLogPath is where libvirt's QEMU driver on this host keeps a
// domain's log (QEMU's stderr and, with a serial log, the console).
func ConsoleLogPath(domain string) string {
	return filepath.Join("/var/log/libvirt/qemu", domain+".log")
}
