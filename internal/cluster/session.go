// Package cluster opens one cluster for the commands that work on it: a
// Session holds its cluster.yaml, its state directory, the VM provider that
// runs its nodes and the SSH pool that reaches them, and derives from them
// how to reach the apiservers and etcd (Target) and the admin client
// (AdminRESTConfig, Clientset). khw up's steps, the drills, khw status,
// khw smoke, khw shell and the labs all work through one.
//
// Where khw keeps the SSH material of a cluster (KeyPath, KnownHostsPath,
// HostKeyDir) is defined here too, because opening the SSH pool is the
// first thing that needs it.
package cluster

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/kube"
	"github.com/khw-dev/khw/internal/kubeconfig"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm"
)

// Access says what opening a Session may write and whether it opens an SSH
// pool.
type Access int

const (
	// ReadWrite loads khw's SSH key (KeyPath), generating it on first use,
	// and opens the SSH pool: for commands that change the cluster.
	ReadWrite Access = iota
	// ReadOnly writes nothing in the state directory (khw up --dry-run,
	// khw status, khw lab list): khw's SSH key is read when it exists, and
	// otherwise a key made in memory for this run stands in, since no node
	// can hold a key that was never written.
	ReadOnly
	// ProviderOnly opens no SSH pool and reads no key (khw down, khw power,
	// khw smoke): Session.Pool is nil.
	ProviderOnly
)

// Session is one open cluster. Close it when done; the nodes keep running.
type Session struct {
	// Dir is the cluster's state directory.
	Dir state.Dir
	// Config is the parsed cluster.yaml.
	Config *config.Cluster
	// Provider runs the nodes (nspawn containers or libvirt VMs).
	Provider vm.Provider
	// Pool reaches the nodes over SSH as user ubuntu with khw's key,
	// accepting only the host keys pinned in KnownHostsPath, connecting
	// through Provider.Dialer. Nil when opened with ProviderOnly.
	Pool *remote.Pool
}

// Open opens cluster c with state directory d: the provider for c.Provider
// (NewProvider) and, unless access is ProviderOnly, the SSH pool. log
// receives the provider's long-running output (debootstrap, image
// downloads); nil discards it.
//
// Errors: an unreadable or invalid SSH key file (with its path), and
// NewProvider's.
func Open(c *config.Cluster, d state.Dir, access Access, log io.Writer) (*Session, error) {
	if log == nil {
		log = io.Discard
	}
	s := &Session{Dir: d, Config: c}
	var (
		signer   ssh.Signer
		authLine string
		err      error
	)
	switch access {
	case ReadWrite:
		signer, authLine, err = remote.EnsureKey(KeyPath(d))
	case ReadOnly:
		signer, authLine, err = readKey(KeyPath(d))
	case ProviderOnly:
	default:
		return nil, fmt.Errorf("cluster %s: unknown session access %d", c.Name, access)
	}
	if err != nil {
		return nil, err
	}
	if s.Provider, err = NewProvider(c, d, authLine, log); err != nil {
		return nil, err
	}
	if access == ProviderOnly {
		return s, nil
	}
	s.Pool, err = remote.NewPool(remote.Config{
		Signer:         signer,
		KnownHostsFile: KnownHostsPath(d),
		Dial:           s.Provider.Dialer(),
		InitialBackoff: remote.DefaultInitialBackoff,
		MaxBackoff:     time.Second,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Close closes the SSH connections (a nil Session or one without a pool is
// fine). The nodes keep running.
func (s *Session) Close() error {
	if s == nil || s.Pool == nil {
		return nil
	}
	return s.Pool.Close()
}

// Slowdown is how many times slower than nspawn nodes this cluster's nodes
// answer (vm.Slowdown: 1 for nspawn and KVM, 15 for TCG VMs).
func (s *Session) Slowdown() int { return int(vm.Slowdown(s.Provider)) }

// Target is how health probes, drills and clients reach the apiservers and
// etcd: node names resolved from cluster.yaml, connections opened through
// the provider's dialer, timeouts grown by Slowdown.
func (s *Session) Target() health.Target {
	return health.Target{Cluster: s.Config, PKIDir: s.Dir.PKIDir(), Dial: s.Provider.Dialer(), Slowdown: s.Slowdown()}
}

// AdminKubeconfig is the path of <state>/kubeconfigs/admin.kubeconfig
// (user admin through the load balancer).
func (s *Session) AdminKubeconfig() string {
	return filepath.Join(s.Dir.KubeconfigDir(), kubeconfig.AdminFile)
}

// AdminRESTConfig is the client config of AdminKubeconfig, dialing through
// Target, with a 10 s timeout per request (up to 30 s on slow nodes). A
// missing or bad kubeconfig names the fix (khw kubeconfig).
func (s *Session) AdminRESTConfig() (*rest.Config, error) { return s.AdminRESTConfigVia("") }

// AdminRESTConfigVia is AdminRESTConfig with the server URL replaced by
// server ("" keeps the kubeconfig's, the load balancer): one apiserver
// directly, for what runs before the load balancer exists.
func (s *Session) AdminRESTConfigVia(server string) (*rest.Config, error) {
	t := s.Target()
	cfg, err := kube.RESTConfig(s.AdminKubeconfig(), server)
	if err != nil {
		return nil, fmt.Errorf("%w (fix: khw kubeconfig)", err)
	}
	cfg.Dial = t.Dialer()
	cfg.Timeout = t.Scaled(10*time.Second, 30*time.Second)
	return cfg, nil
}

// DialFrom opens TCP connections from node itself, through its SSH
// connection in the pool (a tunnel): how the jumpbox reaches what a node
// serves on its loopback only, such as HAProxy's stats page on lb.
func (s *Session) DialFrom(node config.Node) remote.DialFunc {
	rn := remote.Node{Name: node.Name, Addr: node.IP}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cl, err := s.Pool.Get(ctx, rn)
		if err != nil {
			return nil, err
		}
		return cl.DialContext(ctx, network, addr)
	}
}

// Clientset is a Kubernetes client for AdminRESTConfig.
func (s *Session) Clientset() (kubernetes.Interface, error) { return s.ClientsetVia("") }

// ClientsetVia is Clientset through server (see AdminRESTConfigVia).
func (s *Session) ClientsetVia(server string) (kubernetes.Interface, error) {
	cfg, err := s.AdminRESTConfigVia(server)
	if err != nil {
		return nil, err
	}
	return kube.Clientset(cfg)
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
