package libvirt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// Storage: the "khw" pool, the shared base-image volumes and the
// per-node volumes (disk overlay, cloud-init seed).

// ensurePool returns the storage pool, defining (a dir pool at PoolPath),
// building and starting it when needed.
func (p *Provider) ensurePool(l *golibvirt.Libvirt) (golibvirt.StoragePool, error) {
	pool, err := l.StoragePoolLookupByName(p.opts.Pool)
	if isLibvirtErr(err, golibvirt.ErrNoStoragePool) {
		doc, merr := PoolXML(p.opts.Pool, p.opts.PoolPath).Marshal()
		if merr != nil {
			return pool, merr
		}
		pool, err = l.StoragePoolDefineXML(doc, 0)
		if err != nil {
			return pool, fmt.Errorf("define storage pool %s at %s: %w", p.opts.Pool, p.opts.PoolPath, err)
		}
		if err := l.StoragePoolBuild(pool, golibvirt.StoragePoolBuildNew); err != nil {
			return pool, fmt.Errorf("build storage pool %s (mkdir %s): %w", p.opts.Pool, p.opts.PoolPath, err)
		}
		_ = l.StoragePoolSetAutostart(pool, 1)
		fmt.Fprintf(p.opts.Log, "libvirt: created storage pool %s at %s\n", p.opts.Pool, p.opts.PoolPath)
	} else if err != nil {
		return pool, fmt.Errorf("look up storage pool %s: %w", p.opts.Pool, err)
	}
	active, err := l.StoragePoolIsActive(pool)
	if err != nil {
		return pool, err
	}
	if active == 0 {
		if err := l.StoragePoolCreate(pool, 0); err != nil {
			return pool, fmt.Errorf("start storage pool %s: %w", p.opts.Pool, err)
		}
	}
	if err := l.StoragePoolRefresh(pool, 0); err != nil {
		return pool, fmt.Errorf("refresh storage pool %s: %w", p.opts.Pool, err)
	}
	return pool, nil
}

// baseVolumes are the pool paths of the uploaded base image.
type baseVolumes struct {
	disk, format   string
	capacity       uint64
	kernel, initrd string
}

// ensureBase uploads the base image (and kernel/initrd) into the pool once:
// volumes khw-base-<first 16 hex of sha256>.<format>, …-vmlinuz, …-initrd.
func (p *Provider) ensureBase(ctx context.Context, l *golibvirt.Libvirt, pool golibvirt.StoragePool, img Image) (baseVolumes, error) {
	var b baseVolumes
	var err error
	b.format = img.Format
	b.disk, b.capacity, err = p.uploadOnce(ctx, l, pool, img.Path, "."+img.Format, img.Format)
	if err != nil {
		return b, err
	}
	if img.Kernel != "" {
		if b.kernel, _, err = p.uploadOnce(ctx, l, pool, img.Kernel, "-vmlinuz", "raw"); err != nil {
			return b, err
		}
	}
	if img.Initrd != "" {
		if b.initrd, _, err = p.uploadOnce(ctx, l, pool, img.Initrd, "-initrd", "raw"); err != nil {
			return b, err
		}
	}
	return b, nil
}

// uploadOnce uploads the file at path into volume khw-base-<hash><suffix>
// unless it exists, and returns the volume's path and capacity. For a qcow2
// image the capacity is its virtual size, which libvirt reads from the
// header after the upload.
func (p *Provider) uploadOnce(ctx context.Context, l *golibvirt.Libvirt, pool golibvirt.StoragePool, path, suffix, format string) (string, uint64, error) {
	sum, size, err := fileSHA256(path)
	if err != nil {
		return "", 0, err
	}
	name := "khw-base-" + sum[:16] + suffix
	vol, err := l.StorageVolLookupByName(pool, name)
	if isLibvirtErr(err, golibvirt.ErrNoStorageVol) {
		start := time.Now()
		doc, merr := PlainVolumeXML(name, uint64(size), format).Marshal()
		if merr != nil {
			return "", 0, merr
		}
		if vol, err = l.StorageVolCreateXML(pool, doc, 0); err != nil {
			return "", 0, fmt.Errorf("create volume %s in pool %s: %w", name, p.opts.Pool, err)
		}
		f, err := os.Open(path)
		if err != nil {
			return "", 0, err
		}
		err = l.StorageVolUpload(vol, &ctxReader{ctx: ctx, r: f}, 0, uint64(size), 0)
		f.Close()
		if err != nil {
			_ = l.StorageVolDelete(vol, golibvirt.StorageVolDeleteNormal)
			return "", 0, fmt.Errorf("upload %s into volume %s: %w", path, name, err)
		}
		if err := l.StoragePoolRefresh(pool, 0); err != nil {
			return "", 0, err
		}
		if vol, err = l.StorageVolLookupByName(pool, name); err != nil {
			return "", 0, err
		}
		fmt.Fprintf(p.opts.Log, "libvirt: uploaded %s (%d MiB) as volume %s in %s\n", path, size>>20, name, time.Since(start).Round(time.Millisecond))
	} else if err != nil {
		return "", 0, fmt.Errorf("look up volume %s: %w", name, err)
	}
	volPath, err := l.StorageVolGetPath(vol)
	if err != nil {
		return "", 0, err
	}
	_, capacity, _, err := l.StorageVolGetInfo(vol)
	if err != nil {
		return "", 0, err
	}
	return volPath, capacity, nil
}

// ctxReader stops an upload when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// putSeed writes iso into the seed volume unless it already holds exactly
// that.
func (p *Provider) putSeed(ctx context.Context, l *golibvirt.Libvirt, pool golibvirt.StoragePool, name string, iso []byte) error {
	vol, err := l.StorageVolLookupByName(pool, name)
	if err == nil {
		var cur bytes.Buffer
		if derr := l.StorageVolDownload(vol, &cur, 0, 0, 0); derr == nil && bytes.Equal(cur.Bytes(), iso) {
			return nil
		}
		if err := l.StorageVolDelete(vol, golibvirt.StorageVolDeleteNormal); err != nil {
			return fmt.Errorf("replace seed volume %s: %w", name, err)
		}
	} else if !isLibvirtErr(err, golibvirt.ErrNoStorageVol) {
		return fmt.Errorf("look up seed volume %s: %w", name, err)
	}
	v := PlainVolumeXML(name, uint64(len(iso)), "raw")
	// The seed carries the node's private SSH host key.
	v.Target.Permissions = &libvirtxml.StorageVolumeTargetPermissions{Mode: "0600"}
	doc, err := v.Marshal()
	if err != nil {
		return err
	}
	vol, err = l.StorageVolCreateXML(pool, doc, 0)
	if err != nil {
		return fmt.Errorf("create seed volume %s: %w", name, err)
	}
	if err := l.StorageVolUpload(vol, &ctxReader{ctx: ctx, r: bytes.NewReader(iso)}, 0, uint64(len(iso)), 0); err != nil {
		return fmt.Errorf("upload seed volume %s: %w", name, err)
	}
	return nil
}

func (p *Provider) deleteVolumes(l *golibvirt.Libvirt, node string) []error {
	pool, err := l.StoragePoolLookupByName(p.opts.Pool)
	if isLibvirtErr(err, golibvirt.ErrNoStoragePool) {
		return nil
	}
	if err != nil {
		return []error{err}
	}
	_ = l.StoragePoolRefresh(pool, 0)
	var errs []error
	for _, name := range []string{p.DiskVolume(node), p.SeedVolume(node)} {
		v, err := l.StorageVolLookupByName(pool, name)
		if isLibvirtErr(err, golibvirt.ErrNoStorageVol) {
			continue
		}
		if err == nil {
			err = l.StorageVolDelete(v, golibvirt.StorageVolDeleteNormal)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: delete volume %s: %w", node, name, err))
		}
	}
	return errs
}
