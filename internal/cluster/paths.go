package cluster

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm"
	"github.com/khw-dev/khw/internal/vm/libvirt"
	"github.com/khw-dev/khw/internal/vm/nspawn"
)

// KeyPath is <state>/ssh/id_ed25519, khw's SSH private key for the nodes
// (made by remote.EnsureKey on first use).
func KeyPath(d state.Dir) string { return filepath.Join(d.Root, "ssh", "id_ed25519") }

// KnownHostsPath is <state>/ssh/known_hosts, where the nodes' SSH host keys
// are pinned (one "<ip> ssh-ed25519 AAAA…" line per node) before their
// first boot; khw's SSH pool and `ssh -F <state>/ssh/config` accept no other.
func KnownHostsPath(d state.Dir) string { return filepath.Join(d.Root, "ssh", "known_hosts") }

// HostKeysDir is <state>/ssh/hostkeys, one directory per node holding the
// SSH host key khw generated for it (HostKeyDir).
func HostKeysDir(d state.Dir) string { return filepath.Join(d.Root, "ssh", "hostkeys") }

// HostKeyDir is <state>/ssh/hostkeys/<node>: ssh_host_ed25519_key (0600)
// and ssh_host_ed25519_key.pub, made once by EnsureHostKey.
func HostKeyDir(d state.Dir, node string) string { return filepath.Join(HostKeysDir(d), node) }

// EnsureHostKey returns node's SSH host key from HostKeyDir, generating it
// on first use (remote.EnsureHostKey: ed25519, created once, never
// replaced). The providers install it on the node (nspawn: in the node
// root; libvirt: cloud-init's ssh_keys) and 01-machines pins it in
// KnownHostsPath before the node first boots.
func EnsureHostKey(d state.Dir, node string) (*remote.HostKey, error) {
	return remote.EnsureHostKey(HostKeyDir(d, node), node)
}

// NewProvider returns the VM provider named by c.Provider for cluster c with
// state directory d. authorizedKey is the authorized_keys line put on the
// nodes, and each node's SSH host key is EnsureHostKey's; it may be "" for a
// provider used only for Status and Destroy (Create then fails naming the
// missing key). log receives long-running output such as debootstrap's (nil
// discards it).
//
// Provider libvirt talks to libvirtd (cluster.yaml libvirt.uri, default
// qemu:///system) only when first used; its base image is libvirt.image or
// the catalog's cloud image (fetched on Create, mirror from KHW_MIRROR).
//
// Errors: an unknown provider names the valid ones; the nspawn and libvirt
// constructors' errors (not root, systemd-nspawn missing, arch mismatch, bad
// libvirt options) are returned as they are.
func NewProvider(c *config.Cluster, d state.Dir, authorizedKey string, log io.Writer) (vm.Provider, error) {
	hostKeys := func(node string) (*remote.HostKey, error) { return EnsureHostKey(d, node) }
	switch c.Provider {
	case config.ProviderNspawn:
		p, err := nspawn.New(c, nspawn.Options{StateDir: d.Root, AuthorizedKey: authorizedKey, HostKey: hostKeys, Log: log})
		if err != nil {
			return nil, err
		}
		return p, nil
	case config.ProviderLibvirt:
		p, err := libvirt.New(c, libvirt.Options{StateDir: d.Root, AuthorizedKey: authorizedKey, HostKey: hostKeys, Log: log,
			ResolveImage: libvirt.CatalogImage(c, components.EnvFetcher(), log)})
		if err != nil {
			return nil, err
		}
		return p, nil
	default:
		return nil, fmt.Errorf("cluster %s: provider %q is unknown; use one of: %s, %s", c.Name, c.Provider, config.ProviderLibvirt, config.ProviderNspawn)
	}
}
