package nspawn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/khw-dev/khw/internal/fsutil"
)

// RootfsSuite is the Debian release every nspawn node runs.
const RootfsSuite = "bookworm"

// RootfsPackages are installed by debootstrap --variant=minbase --include=…:
// systemd as init, sshd for khw, the tools the steps use on nodes
// (iptables for kube-proxy, haproxy on the load balancer, jq for the
// mybridge CNI), and conntrack and socat, which no component calls any more
// (kube-proxy >= 1.32, containerd 2) but a learner may use to debug
// (conntrack -L lists the NAT entries of kube-proxy's rules).
var RootfsPackages = []string{
	"systemd", "systemd-sysv", "dbus", "openssh-server", "iproute2", "iptables",
	"conntrack", "socat", "haproxy", "jq", "sudo", "ca-certificates", "procps", "kmod", "curl",
}

// DefaultMirror is used when the host's apt configuration names none.
const DefaultMirror = "http://deb.debian.org/debian"

// CacheDir returns $XDG_CACHE_HOME/khw/nspawn (default ~/.cache/khw/nspawn).
func CacheDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find the cache directory: set XDG_CACHE_HOME or HOME: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "khw", "nspawn"), nil
}

// RootfsPath is <cacheDir>/rootfs-bookworm-<arch> (arch as in cluster.yaml).
func RootfsPath(cacheDir, arch string) string {
	return filepath.Join(cacheDir, "rootfs-"+RootfsSuite+"-"+arch)
}

// AptMirror returns the Debian mirror this host's apt uses for the main
// archive (the URI of a deb822 *.sources stanza or a one-line `deb` entry
// whose suites include bookworm itself, not bookworm-security), or
// DefaultMirror when none is found. root is "/" on a real host.
func AptMirror(root string) string {
	var files []string
	files = append(files, filepath.Join(root, "etc/apt/sources.list"))
	more, _ := filepath.Glob(filepath.Join(root, "etc/apt/sources.list.d/*.sources"))
	files = append(files, more...)
	more, _ = filepath.Glob(filepath.Join(root, "etc/apt/sources.list.d/*.list"))
	files = append(files, more...)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if m := mirrorIn(string(data)); m != "" {
			return m
		}
	}
	return DefaultMirror
}

func mirrorIn(text string) string {
	// deb822 stanzas are separated by blank lines.
	for _, stanza := range strings.Split(text, "\n\n") {
		var uris, suites []string
		sc := bufio.NewScanner(strings.NewReader(stanza))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			switch {
			case ok && strings.EqualFold(k, "URIs"):
				uris = strings.Fields(v)
			case ok && strings.EqualFold(k, "Suites"):
				suites = strings.Fields(v)
			case strings.HasPrefix(line, "deb "):
				f := strings.Fields(line)
				i := 1
				if i < len(f) && strings.HasPrefix(f[i], "[") {
					for i < len(f) && !strings.HasSuffix(f[i], "]") {
						i++
					}
					i++
				}
				if i+1 < len(f) && f[i+1] == RootfsSuite && strings.HasPrefix(f[i], "http") {
					return strings.TrimSuffix(f[i], "/")
				}
			}
		}
		for _, s := range suites {
			if s == RootfsSuite && len(uris) > 0 && strings.HasPrefix(uris[0], "http") {
				return strings.TrimSuffix(uris[0], "/")
			}
		}
	}
	return ""
}

// EnsureRootfs makes the node root file system at RootfsPath(cacheDir, arch)
// once: `debootstrap --variant=minbase --arch=<debian arch>
// --include=<RootfsPackages> bookworm <tmp> <mirror>` into a temporary
// directory beside it, renamed into place only when debootstrap succeeded,
// so a half-built tree is never used. An existing tree is kept. debootstrap
// output goes to log (nil: discarded). It takes ~5 minutes.
func EnsureRootfs(ctx context.Context, cacheDir, arch, mirror string, log io.Writer) (string, error) {
	dst := RootfsPath(cacheDir, arch)
	if _, err := os.Stat(filepath.Join(dst, "usr/bin/systemctl")); err == nil {
		return dst, nil
	} else if _, err2 := os.Stat(dst); err2 == nil {
		return "", fmt.Errorf("node root file system %s exists but has no usr/bin/systemctl; remove it and khw rebuilds it", dst)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", fmt.Errorf("debootstrap not found: install it (apt-get install debootstrap) to build the nspawn node image")
	}
	if err := fsutil.EnsureDir(cacheDir); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cacheDir, ".rootfs-"+RootfsSuite+"-"+arch+".tmp-")
	if err != nil {
		return "", fmt.Errorf("make temporary root in %s: %w", cacheDir, err)
	}
	defer os.RemoveAll(tmp) // no-op after the rename
	if mirror == "" {
		mirror = AptMirror("/")
	}
	if log == nil {
		log = io.Discard
	}
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--arch="+arch,
		"--include="+strings.Join(RootfsPackages, ","), RootfsSuite, tmp, mirror)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("debootstrap %s (%s) from %s into %s: %w; see its output above (debootstrap.log in that directory)",
			RootfsSuite, arch, mirror, tmp, err)
	}
	// MkdirTemp made tmp 0700; as the node's "/" it must be 0755, or every
	// non-root service on the node (networkd, dbus) gets EACCES.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("move node root file system into place %s: %w", dst, err)
	}
	return dst, nil
}
