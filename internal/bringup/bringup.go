// Package bringup holds the steps of `khw up`, in lab order (01-machines,
// later 02-pki … 12-smoke-test), and the wiring they share: the cluster's VM
// provider and its SSH pool.
package bringup

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm"
	"github.com/khw-dev/khw/internal/vm/libvirt"
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
// nodes, and each node's SSH host key is EnsureHostKey's; it may be "" for a provider used only for Status and Destroy
// (Create then fails naming the missing key). log receives long-running
// output such as debootstrap's (nil discards it).
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
		p, err := vm.NewNspawn(c, vm.NspawnOptions{StateDir: d.Root, AuthorizedKey: authorizedKey, HostKey: hostKeys, Log: log})
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

// Machines is the provider plus the SSH pool that reaches its nodes: what
// every step of `khw up` works through. Close it when done.
type Machines struct {
	Provider vm.Provider
	Pool     *remote.Pool

	art        artifacts
	factsMu    sync.Mutex
	factsCache map[string]render.NodeFacts

	// Node packages (debs.go), per run: the mirror's archive indexes by
	// URL and arch, the offline install plan and whether apt-get update
	// ran, by node.
	debMu      sync.Mutex
	debIdx     map[string]*components.DebIndex
	debPlans   map[string]*debPlan
	aptUpdated map[string]bool
}

// remoteRunNoSudo runs a command as the login user.
var remoteRunNoSudo = remote.RunOptions{}

// Open loads or creates khw's SSH key (KeyPath), builds the provider for
// c.Provider (NewProvider) with that key's authorized_keys line, and an SSH
// pool (user ubuntu, host keys pinned in KnownHostsPath, connections opened
// with the provider's Dialer). The pool reaches only nodes pinned there:
// 01-machines writes the pins (MachinesStep.Apply).
func Open(c *config.Cluster, d state.Dir, log io.Writer) (*Machines, error) {
	signer, authLine, err := remote.EnsureKey(KeyPath(d))
	if err != nil {
		return nil, err
	}
	return open(c, d, log, signer, authLine)
}

// OpenReadOnly is Open for what must not write the state directory (khw up
// --dry-run, khw status, khw lab list): it reads khw's SSH key when it
// exists and otherwise uses a key made in memory for this run only, since
// no node can hold a key that was never written (nodes are created by a
// later khw up, with the key Open writes). Nothing is written to
// <state>/ssh. Errors: an unreadable or invalid key file, with its path.
func OpenReadOnly(c *config.Cluster, d state.Dir, log io.Writer) (*Machines, error) {
	signer, authLine, err := readKey(KeyPath(d))
	if err != nil {
		return nil, err
	}
	return open(c, d, log, signer, authLine)
}

func open(c *config.Cluster, d state.Dir, log io.Writer, signer ssh.Signer, authLine string) (*Machines, error) {
	p, err := NewProvider(c, d, authLine, log)
	if err != nil {
		return nil, err
	}
	pool, err := remote.NewPool(remote.Config{
		Signer:         signer,
		KnownHostsFile: KnownHostsPath(d),
		Dial:           p.Dialer(),
		InitialBackoff: remote.DefaultInitialBackoff,
		MaxBackoff:     time.Second,
	})
	if err != nil {
		return nil, err
	}
	return &Machines{Provider: p, Pool: pool}, nil
}

// readKey loads the OpenSSH private key at path without writing anything, or
// returns a fresh in-memory ed25519 key when path does not exist. The second
// result is the key's authorized_keys line, as remote.EnsureKey's.
func readKey(path string) (ssh.Signer, string, error) {
	var signer ssh.Signer
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		_, priv, gerr := ed25519.GenerateKey(rand.Reader)
		if gerr != nil {
			return nil, "", fmt.Errorf("generate an SSH key in memory: %w", gerr)
		}
		if signer, err = ssh.NewSignerFromKey(priv); err != nil {
			return nil, "", err
		}
	case err != nil:
		return nil, "", fmt.Errorf("read SSH key %s: %w", path, err)
	default:
		if signer, err = ssh.ParsePrivateKey(data); err != nil {
			return nil, "", fmt.Errorf("SSH key %s is not an unencrypted OpenSSH private key: %w (move it away and khw up generates a new one)", path, err)
		}
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " " + remote.KeyComment
	return signer, line, nil
}

// Close closes the SSH connections. The machines keep running.
func (m *Machines) Close() error {
	if m == nil || m.Pool == nil {
		return nil
	}
	return m.Pool.Close()
}

// Steps returns the steps of `khw up` for cluster c in order: 01-machines,
// 02-pki, 03-kubeconfig, 04-etcd, 05-control-plane, 06-lb, 07-workers,
// 08-pod-network, 09-coredns, 10-tls-bootstrap, 11-smoke.
func Steps(m *Machines, c *config.Cluster) []steps.Step {
	return []steps.Step{
		NewMachinesStep(m),
		NewPKIStep(m),
		NewKubeconfigStep(m),
		NewEtcdStep(m),
		NewControlPlaneStep(m),
		NewLBStep(m),
		NewWorkersStep(m, c),
		NewPodNetworkStep(m, c),
		NewCoreDNSStep(m),
		NewTLSBootstrapStep(m, c),
		NewSmokeStep(m),
	}
}
