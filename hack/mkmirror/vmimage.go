package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
)

// vmImageFlag registers --vm-image on fs.
func vmImageFlag(fs *flag.FlagSet) *string {
	return fs.String("vm-image", "", "directory made by hack/libvirt-cloud-image.sh (disk.qcow2, manifest): put it into the mirror as the catalog's fallback cloud image, cloud-images.ubuntu.com/releases/noble/release/ubuntu-24.04-server-cloudimg-<arch>.img, with SHA256SUMS and .manifest")
}

// cloudDirRE matches the output directory of hack/libvirt-cloud-image.sh,
// cloud-<arch>-<hash>, which names the image's arch.
var cloudDirRE = regexp.MustCompile(`^cloud-(amd64|arm64)-[0-9a-f]+$`)

// vmImageArch is the arch of the image in dir: from its name when it is
// hack/libvirt-cloud-image.sh's cloud-<arch>-<hash>, else the one arch of
// --arch. Errors name the flag.
func vmImageArch(dir string, arches []string) (string, error) {
	if m := cloudDirRE.FindStringSubmatch(filepath.Base(filepath.Clean(dir))); m != nil {
		return m[1], nil
	}
	if len(arches) == 1 {
		return arches[0], nil
	}
	return "", fmt.Errorf("--vm-image %s: cannot tell the image's arch: the directory is not named cloud-<arch>-<hash> (as hack/libvirt-cloud-image.sh names it) and --arch lists %d arches (fix: pass --arch amd64 or --arch arm64)", dir, len(arches))
}

// placeVMImage puts the image hack/libvirt-cloud-image.sh made in dir into
// the mirror out where the catalog's vm-image artifact for arch has its
// fallback (Resolved.Fallback: Ubuntu's releases/noble/release/, which the
// fetcher tries when the pinned dated release is missing; a local image
// cannot have the pinned dated release's digest). Files written, relative
// to out:
//
//	<fallback path>/ubuntu-24.04-server-cloudimg-<arch>.img       dir/disk.qcow2 (qcow2, as Ubuntu's .img is), hard-linked when possible
//	<fallback path>/SHA256SUMS                                   "<hex> *<file>" as Ubuntu writes it, merged with the lines already there
//	<fallback path>/ubuntu-24.04-server-cloudimg-<arch>.manifest dir/manifest ("package TAB version" lines)
//
// The caller then writes khw-mirror.json (components.ManifestFromDir lists
// fallbacks too). It returns the image's path in the mirror. Errors: dir
// lacks disk.qcow2 or manifest, the catalog has no vm-image fallback, a
// file-system error naming the path.
func placeVMImage(out, dir, arch string, cl *config.Cluster) (string, error) {
	cat, err := components.Load()
	if err != nil {
		return "", err
	}
	rs, err := cat.Resolve(cl, arch)
	if err != nil {
		return "", err
	}
	imgs := components.ForRole(rs, components.RoleVMImage)
	if len(imgs) != 1 || imgs[0].Fallback == nil {
		return "", fmt.Errorf("--vm-image: the catalog has no vm-image artifact with a fallback for %s", arch)
	}
	fb := *imgs[0].Fallback
	disk, manifest := filepath.Join(dir, "disk.qcow2"), filepath.Join(dir, "manifest")
	for _, p := range []string{disk, manifest} {
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			return "", fmt.Errorf("--vm-image %s: no file %s (fix: pass the directory hack/libvirt-cloud-image.sh prints on its last line; rebuild it if it predates the manifest)", dir, filepath.Base(p))
		}
	}
	rel, err := mirrorRelPath(fb.URL)
	if err != nil {
		return "", err
	}
	sumRel, err := mirrorRelPath(fb.ChecksumURL)
	if err != nil {
		return "", err
	}
	dst := abs(out, rel)
	if err := linkOrCopy(disk, dst); err != nil {
		return "", err
	}
	sum, err := fileSHA256(dst)
	if err != nil {
		return "", err
	}
	if err := mergeBinarySum(abs(out, sumRel), fb.FileName, sum); err != nil {
		return "", err
	}
	manName := strings.TrimSuffix(fb.FileName, ".img") + ".manifest"
	if err := linkOrCopy(manifest, filepath.Join(filepath.Dir(dst), manName)); err != nil {
		return "", err
	}
	return dst, nil
}

// mergeBinarySum sets name's line in the sha256sum file p to
// "<sum> *<name>" (binary mode, as Ubuntu's SHA256SUMS), keeping the lines
// of other files, sorted by name; written through a temporary file.
func mergeBinarySum(p, name, sum string) error {
	data, err := components.MergeSHA256Sum(p, name, sum, true)
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
