// Package vm is what the steps know of the machines of a cluster: the
// Provider interface and what its two implementations share (the network
// namespace helpers, the node user, the node address). The providers are
// its sub-packages: vm/libvirt (VMs from a cloud image and cloud-init) and
// vm/nspawn (systemd-nspawn system containers on a bridge inside the
// cluster's own network namespace khw-<cluster>, see
// shared/design/test-environment.md).
//
// Both give the steps the same thing: nodes with a static IP from
// cluster.yaml, sshd with khw's key for user ubuntu (sudo NOPASSWD), systemd
// as PID 1, and a way to power them off and on.
package vm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/khw-dev/khw/internal/remote"
)

// State is the power state of one node as its provider sees it.
type State string

const (
	// StateRunning: the node's machine exists and is powered on (for nspawn:
	// the systemd-nspawn process recorded in the pid file is alive).
	StateRunning State = "running"
	// StateStopped: the machine exists (disk / root directory made by
	// Create) but is powered off.
	StateStopped State = "stopped"
	// StateAbsent: Create has not made this node (or Destroy removed it).
	StateAbsent State = "absent"
)

// NodeStatus is one node in Provider.Status.
type NodeStatus struct {
	// Name is the node name from cluster.yaml (lb, cp1 …).
	Name string
	// State is running, stopped or absent.
	State State
	// IP is the node's static address from cluster.yaml (nodes[].ip). It is
	// reachable only through Provider.Dialer.
	IP netip.Addr
	// PID is the host process that holds the running machine (nspawn: the
	// systemd-nspawn process), 0 when not running or unknown.
	PID int
}

// ErrNotSupported is returned (wrapped, test with errors.Is) by an operation
// a provider does not implement, e.g. Snapshot on nspawn.
var ErrNotSupported = errors.New("operation not supported by this provider")

// ErrUnknownNode is returned (wrapped) when a node name is not in the
// cluster the provider was made for.
var ErrUnknownNode = errors.New("no such node in cluster.yaml")

// Provider makes, powers and removes the machines of ONE cluster (the
// *config.Cluster given to the provider's constructor). Every method is safe
// to call again after a partial failure; none of them touches anything the
// provider did not make.
type Provider interface {
	// Name is the provider name as written in cluster.yaml (provider:).
	Name() string

	// Create makes every node of the cluster and the network they sit on,
	// without starting them. It is idempotent: what already exists is kept
	// (its seed files are rewritten only when they changed), what is missing
	// is made. The first call may take minutes (nspawn: debootstrap of the
	// node root file system into the cache).
	Create(ctx context.Context) error

	// Start powers node on. Starting a running node is a no-op. Errors wrap
	// ErrUnknownNode for a name not in cluster.yaml; a node Create has not
	// made is an error naming the fix (run Create).
	Start(ctx context.Context, node string) error

	// Stop powers node off: gracefully (the node's init shuts down, units
	// are stopped; bounded by ctx) or, with force, at once like pulling the
	// plug. Stopping a stopped node is a no-op.
	Stop(ctx context.Context, node string, force bool) error

	// Status returns every node of cluster.yaml in file order.
	Status(ctx context.Context) ([]NodeStatus, error)

	// Addresses maps node name to its IP (from cluster.yaml), for
	// remote.Node{Name: name, Addr: ip.String()}.
	Addresses() map[string]netip.Addr

	// Snapshot, Revert and DeleteSnapshot manage named checkpoints of all
	// nodes for labs. Providers without them return an error wrapping
	// ErrNotSupported.
	Snapshot(ctx context.Context, name string) error
	Revert(ctx context.Context, name string) error
	DeleteSnapshot(ctx context.Context, name string) error

	// Destroy powers off (forcefully) and removes every node and the
	// network the provider made for this cluster. Shared caches (the nspawn
	// root file system image) are kept. Destroying nothing is not an error.
	Destroy(ctx context.Context) error

	// Dialer returns the function khw uses to open TCP connections to node
	// IPs (remote.Config.Dial). For nspawn it connects from inside the
	// cluster's network namespace, because the node network does not exist
	// in the host's root namespace.
	Dialer() remote.DialFunc
}

// Timing is implemented by providers whose machines are slower than
// nspawn nodes (VMs, and much slower under QEMU's TCG emulation when KVM is
// not usable). The bring-up multiplies its waits (boot, SSH probe, units
// becoming active, pods becoming ready) by Slowdown; 1 means nspawn speed.
type Timing interface {
	Slowdown() int
}

// Slowdown returns p's Timing factor, 1 when p does not implement Timing.
func Slowdown(p Provider) time.Duration {
	if t, ok := p.(Timing); ok && t.Slowdown() > 1 {
		return time.Duration(t.Slowdown())
	}
	return 1
}

// Scaled returns d multiplied by p's Slowdown, at most limit (and never
// less than d). Waits that a failing check spends in full use it, so that
// on a slow provider they stay long enough for a healthy node and a real
// failure is still reported within limit.
func Scaled(p Provider, d, limit time.Duration) time.Duration {
	return max(d, min(d*Slowdown(p), limit))
}

// ForeignOwnerError says that what makes the cluster's machines on this
// host (Resource: a noun phrase such as "the network namespace khw-lab" or
// "the libvirt domain khw-lab-cp1") belongs to another state directory.
type ForeignOwnerError struct {
	Cluster, Resource, Owner, StateDir string
}

func (e *ForeignOwnerError) Error() string {
	return fmt.Sprintf("cluster %s: %s on this host belongs to the cluster in %s, not to this state directory (%s); give this cluster another name (khw init --name <other> in a new state directory) or run khw down with --state-dir for that one",
		e.Cluster, e.Resource, e.Owner, e.StateDir)
}
