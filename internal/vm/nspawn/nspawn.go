// Package nspawn is the provider that runs a cluster's nodes as
// systemd-nspawn system containers (Debian from debootstrap, booted by
// systemd) on a bridge inside the cluster's own network namespace
// khw-<cluster>: for hosts without KVM and for khw's own end-to-end runs.
// It implements vm.Provider, as vm/libvirt does for VMs.
package nspawn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/vm"
)

// Options configures the nspawn provider.
type Options struct {
	// StateDir is the cluster's state directory D; the provider keeps
	// D/nspawn/<node>/{root/,pid,cgroups,console.log}.
	StateDir string
	// CacheDir holds the shared node image (default CacheDir()).
	CacheDir string
	// AuthorizedKey is the authorized_keys line for vm.NodeUser (from
	// remote.EnsureKey). Required by Create.
	AuthorizedKey string
	// HostKey returns the SSH host key khw generated for a node
	// (remote.EnsureHostKey; khw keeps them in
	// <state>/ssh/hostkeys/<node>). Create installs it as the node's only
	// host key, and the caller pins it before the node's first boot.
	// Required by Create.
	HostKey func(node string) (*remote.HostKey, error)
	// Mirror is the Debian mirror for debootstrap (default AptMirror("/")).
	Mirror string
	// Log receives debootstrap's output (nil: discarded).
	Log io.Writer
}

// Provider runs the nodes of one cluster as systemd-nspawn system containers on
// bridge vm.BridgeName inside network namespace khw-<cluster>. Each node is a
// systemd-nspawn process started by khw (not by systemd: --register=no
// --keep-unit), detached into its own session so it outlives the khw
// command; its pid is kept in D/nspawn/<node>/pid.
type Provider struct {
	c    *config.Cluster
	opts Options

	mu    sync.Mutex
	procs map[string]*exec.Cmd // started by this process, reaped by a goroutine
	// lastFrozen/lastFrozenFor: when the last Snapshot froze the nodes and
	// for how long (LastFreeze).
	lastFrozen    time.Time
	lastFrozenFor time.Duration
}

var _ vm.Provider = (*Provider)(nil)

// New returns the provider for c. It checks that the host can run it
// (root, systemd-nspawn and nsenter on PATH, node arch = host arch) but
// changes nothing.
func New(c *config.Cluster, opts Options) (*Provider, error) {
	if c == nil || c.Name == "" {
		return nil, errors.New("nspawn: cluster has no name")
	}
	if opts.StateDir == "" {
		return nil, fmt.Errorf("cluster %s: nspawn provider needs the state directory", c.Name)
	}
	if opts.CacheDir == "" {
		d, err := CacheDir()
		if err != nil {
			return nil, err
		}
		opts.CacheDir = d
	}
	if c.Arch != runtime.GOARCH {
		return nil, fmt.Errorf("cluster %s: arch %q, but nspawn nodes run on this host's CPU (%s); set arch: %s in cluster.yaml or use provider: libvirt",
			c.Name, c.Arch, runtime.GOARCH, runtime.GOARCH)
	}
	if err := CheckHost(); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	return &Provider{c: c, opts: opts, procs: map[string]*exec.Cmd{}}, nil
}

// CheckHost reports why this host cannot run nspawn nodes, or nil: khw must
// be root (network namespaces, cgroups, systemd-nspawn) and systemd-nspawn,
// nsenter and cp (node roots are copied with cp -a) must be installed.
func CheckHost() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("provider nspawn needs root (network namespaces, systemd-nspawn); run khw with sudo")
	}
	for _, tool := range []string{"systemd-nspawn", "nsenter", "cp"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found; install it (apt-get install systemd-container util-linux coreutils)", tool)
		}
	}
	return nil
}

// Name returns config.ProviderNspawn.
func (p *Provider) Name() string { return config.ProviderNspawn }

func (p *Provider) nodeDir(node string) string {
	return filepath.Join(p.opts.StateDir, "nspawn", node)
}

// NodeRoot is the node's root directory D/nspawn/<node>/root.
func (p *Provider) NodeRoot(node string) string { return filepath.Join(p.nodeDir(node), "root") }

// MachineName is the systemd-nspawn machine name: <cluster>-<node>.
func (p *Provider) MachineName(node string) string { return p.c.Name + "-" + node }

func (p *Provider) node(name string) (config.Node, error) {
	n, ok := p.c.Node(name)
	if !ok {
		return n, fmt.Errorf("cluster %s: node %q: %w", p.c.Name, name, vm.ErrUnknownNode)
	}
	return n, nil
}

// Create builds the node image when missing (EnsureRootfs), the namespace
// and bridge (EnsureNetwork), then for each node a root directory copied
// from the image (`cp -a --reflink=auto` into a temporary directory, renamed
// into place; the image's SSH host keys are dropped) and its seed (hostname,
// /etc/hosts, machine-id, static IP on host0, user ubuntu with khw's key and
// sudo, the khw units, and the SSH host key from HostKey as the only one
// sshd offers). Running nodes are not touched beyond their seed files. A
// node root made by an older khw, with an ed25519 host key of its own,
// keeps that key (and its pin) until Destroy; Log says so.
func (p *Provider) Create(ctx context.Context) error {
	if p.opts.AuthorizedKey == "" {
		return fmt.Errorf("cluster %s: no SSH public key for the nodes; pass remote.EnsureKey's authorized_keys line in Options.AuthorizedKey", p.c.Name)
	}
	if p.opts.HostKey == nil {
		return fmt.Errorf("cluster %s: no SSH host keys for the nodes; set Options.HostKey (remote.EnsureHostKey per node)", p.c.Name)
	}
	image, err := EnsureRootfs(ctx, p.opts.CacheDir, p.c.Arch, p.opts.Mirror, p.opts.Log)
	if err != nil {
		return err
	}
	cidr, err := netip.ParsePrefix(p.c.Network.CIDR)
	if err != nil {
		return fmt.Errorf("cluster %s: network.cidr %q: %w", p.c.Name, p.c.Network.CIDR, err)
	}
	gw, err := netip.ParseAddr(p.c.Network.Gateway)
	if err != nil || !cidr.Contains(gw) {
		return fmt.Errorf("cluster %s: network.gateway %q is not an address inside network.cidr %s", p.c.Name, p.c.Network.Gateway, cidr)
	}
	if err := p.checkOwner(); err != nil {
		return err
	}
	if err := vm.EnsureNetwork(p.c.Name, netip.PrefixFrom(gw, cidr.Bits())); err != nil {
		return err
	}
	if err := p.claim(); err != nil {
		return err
	}
	imageID, _ := os.ReadFile(filepath.Join(image, "etc/machine-id"))
	for _, n := range p.c.Nodes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := p.ensureNodeRoot(ctx, image, n.Name); err != nil {
			return err
		}
		hk, err := p.opts.HostKey(n.Name)
		if err != nil {
			return err
		}
		own, err := seedNode(p.NodeRoot(n.Name), p.c, n, p.opts.AuthorizedKey, strings.TrimSpace(string(imageID)), hk)
		if err != nil {
			return err
		}
		if own && p.opts.Log != nil {
			fmt.Fprintf(p.opts.Log, "node %s: keeps the SSH host key it made itself (an older khw made it); khw down and khw up give it a generated, pinned one\n", n.Name)
		}
	}
	return nil
}

func (p *Provider) ensureNodeRoot(ctx context.Context, image, node string) error {
	root := p.NodeRoot(node)
	if _, err := os.Stat(filepath.Join(root, "usr/bin/systemctl")); err == nil {
		return nil
	}
	if err := fsutil.EnsureDir(p.nodeDir(node)); err != nil {
		return err
	}
	tmp := root + ".tmp"
	_ = os.RemoveAll(tmp)
	out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", image, tmp).CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("node %s: copy image %s to %s: %v: %s", node, image, tmp, err, bytes.TrimSpace(out))
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // the node's "/"
		return err
	}
	keys, _ := filepath.Glob(filepath.Join(tmp, "etc/ssh/ssh_host_*"))
	for _, k := range keys {
		if err := os.Remove(k); err != nil {
			return fmt.Errorf("node %s: drop the image's SSH host key %s: %w", node, k, err)
		}
	}
	if err := os.RemoveAll(root); err != nil {
		return err
	}
	if err := os.Rename(tmp, root); err != nil {
		return fmt.Errorf("node %s: move root into place: %w", node, err)
	}
	return nil
}

// nspawnPid returns the pid in the node's pid file when that process is a
// live systemd-nspawn (or the nsenter about to exec it) for this machine,
// else 0. A recycled pid is not mistaken for the node: its command line must
// name the machine.
func (p *Provider) nspawnPid(node string) int {
	data, err := os.ReadFile(filepath.Join(p.nodeDir(node), "pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte("systemd-nspawn\x00")) ||
		!bytes.Contains(cmdline, []byte("\x00-M\x00"+p.MachineName(node)+"\x00")) {
		return 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return 0
	}
	return pid
}

func (p *Provider) cgroupDirs(node string) []string {
	data, err := os.ReadFile(filepath.Join(p.nodeDir(node), "cgroups"))
	if err != nil {
		return nil
	}
	return strings.Fields(string(data))
}

// Start launches the node:
//
//	SYSTEMD_SECCOMP=0 SYSTEMD_NSPAWN_API_VFS_WRITABLE=1 nsenter --net=/run/netns/khw-<cluster> \
//	  systemd-nspawn --register=no --keep-unit -M <cluster>-<node> -D <root> --boot \
//	  --network-bridge=khw0 --console=read-only --capability=all --bind=/dev/kmsg
//
// from a thread placed in a fresh child cgroup khw-<cluster>-<node> of every
// cgroup v1 hierarchy, and cloned into the same child of the cgroup2
// hierarchy when one is mounted (so nodes do not share one cgroup), detached (own
// session, output appended to D/nspawn/<node>/console.log). It returns once
// the process runs; the node is reachable over SSH ~1-2 s later.
func (p *Provider) Start(ctx context.Context, node string) error {
	if _, err := p.node(node); err != nil {
		return err
	}
	if err := p.checkOwner(); err != nil {
		return err
	}
	if p.nspawnPid(node) != 0 {
		return nil
	}
	raiseInotifyLimits(p.opts.Log)
	root := p.NodeRoot(node)
	if _, err := os.Stat(filepath.Join(root, "usr/bin/systemctl")); err != nil {
		return fmt.Errorf("node %s: no root directory at %s; run Create (khw up) first", node, root)
	}
	if _, err := os.Stat(vm.NetnsPath(p.c.Name)); err != nil {
		return fmt.Errorf("node %s: network namespace %s missing; run Create (khw up) first", node, vm.NetnsPath(p.c.Name))
	}
	// Leftovers of an earlier boot (the node's systemd made sub-cgroups).
	if old := p.cgroupDirs(node); len(old) > 0 {
		if left := killCgroups(old, 5*time.Second); len(left) > 0 {
			return fmt.Errorf("node %s: processes %v still in its old cgroups; stop them first", node, left)
		}
		if err := removeCgroups(old); err != nil {
			return fmt.Errorf("node %s: %w", node, err)
		}
	}
	leaf := "khw-" + p.MachineName(node)
	dirs, err := makeNodeCgroups(leaf)
	if err != nil {
		_ = removeCgroups(dirs)
		return fmt.Errorf("node %s: %w", node, err)
	}
	unified, err := makeUnifiedCgroup(leaf)
	if err != nil {
		_ = removeCgroups(dirs)
		return fmt.Errorf("node %s: %w", node, err)
	}
	all := dirs
	if unified != "" {
		all = append(append([]string{}, dirs...), unified)
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(p.nodeDir(node), "cgroups"), []byte(strings.Join(all, "\n")+"\n"), fsutil.SecretMode); err != nil {
		return err
	}
	// A node powered off with force a moment ago may still own its veth
	// (the kernel removes it when the old network namespace is finally
	// freed): systemd-nspawn then exits at once with "Failed to add new veth
	// interfaces … File exists". Remove that veth when its name is known,
	// else try again for a while.
	if err := vm.RemoveStaleVeth(vm.NetnsPath(p.c.Name), p.MachineName(node)); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		exited, err := p.launch(ctx, node, root, dirs, unified)
		if err == nil || !exited || time.Now().After(deadline) || !strings.Contains(consoleTail(p.nodeDir(node)), "File exists") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// consoleTail is the end of the node's console.log.
func consoleTail(nodeDir string) string {
	data, _ := os.ReadFile(filepath.Join(nodeDir, "console.log"))
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}

// launch starts systemd-nspawn once; exited is true when it exited at once.
func (p *Provider) launch(ctx context.Context, node, root string, dirs []string, unified string) (exited bool, err error) {
	logf, err := os.OpenFile(filepath.Join(p.nodeDir(node), "console.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, fsutil.SecretMode)
	if err != nil {
		return false, fmt.Errorf("node %s: open console log: %w", node, err)
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", "--net="+vm.NetnsPath(p.c.Name), "systemd-nspawn",
		"--register=no", "--keep-unit", "-M", p.MachineName(node), "-D", root, "--boot",
		"--network-bridge="+vm.BridgeName, "--console=read-only", "--capability=all", "--bind=/dev/kmsg")
	cmd.Env = append(os.Environ(), "SYSTEMD_SECCOMP=0", "SYSTEMD_NSPAWN_API_VFS_WRITABLE=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if unified != "" {
		// cgroup2 membership is per process, so the child is cloned
		// straight into it (clone3 CLONE_INTO_CGROUP, Linux >= 5.7).
		fd, err := syscall.Open(unified, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return false, fmt.Errorf("node %s: open cgroup %s: %w", node, unified, err)
		}
		defer syscall.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	if err := startInCgroups(dirs, cmd.Start); err != nil {
		return false, fmt.Errorf("node %s: start systemd-nspawn: %w", node, err)
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(p.nodeDir(node), "pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), fsutil.SecretMode); err != nil {
		_ = cmd.Process.Kill()
		return false, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.procs[node] = cmd
	p.mu.Unlock()
	// systemd-nspawn fails fast on a bad root or bridge: report that here.
	select {
	case <-done:
		return true, fmt.Errorf("node %s: systemd-nspawn exited at once (%v); see %s", node, cmd.ProcessState,
			filepath.Join(p.nodeDir(node), "console.log"))
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
	}
	return false, nil
}

// Stop powers the node off.
//
// Graceful: SIGTERM to systemd-nspawn, which forwards its --kill-signal
// (SIGRTMIN+3 with --boot, systemd-nspawn(1)) to the node's systemd: an
// orderly shutdown, units stopped with DefaultTimeoutStopSec=15s. Stop waits
// until the process is gone or ctx ends (then it returns an error; the node
// keeps shutting down, call Stop with force to cut it).
//
// Force: SIGKILL to every process in the node's cgroups (the node's
// processes and systemd-nspawn itself), like pulling the plug.
//
// Either way the node's cgroups are removed afterwards.
func (p *Provider) Stop(ctx context.Context, node string, force bool) error {
	if _, err := p.node(node); err != nil {
		return err
	}
	if err := p.checkOwner(); err != nil {
		return err
	}
	pid := p.nspawnPid(node)
	dirs := p.cgroupDirs(node)
	if force {
		if pid != 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if left := killCgroups(dirs, 10*time.Second); len(left) > 0 {
			return fmt.Errorf("node %s: processes %v survive SIGKILL in its cgroups", node, left)
		}
	} else if pid != 0 {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("node %s: signal systemd-nspawn (pid %d): %w", node, pid, err)
		}
		for p.nspawnPid(node) != 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("node %s: still shutting down (systemd-nspawn pid %d): %w; stop it with force", node, pid, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		if left := killCgroups(dirs, 5*time.Second); len(left) > 0 {
			return fmt.Errorf("node %s: processes %v left in its cgroups after power-off", node, left)
		}
	}
	for p.nspawnPid(node) != 0 { // reaped by Start's goroutine or by init
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: systemd-nspawn pid %d not reaped: %w", node, pid, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := removeCgroups(dirs); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	p.removeRunLeftovers(node)
	_ = os.Remove(filepath.Join(p.nodeDir(node), "cgroups"))
	_ = os.Remove(filepath.Join(p.nodeDir(node), "pid"))
	return nil
}

// Status reports each node: running (live systemd-nspawn from the pid
// file), stopped (root directory exists) or absent.
func (p *Provider) Status(ctx context.Context) ([]vm.NodeStatus, error) {
	var out []vm.NodeStatus
	foreign := p.checkOwner() != nil
	for _, n := range p.c.Nodes {
		s := vm.NodeStatus{Name: n.Name, IP: n.Addr(), State: vm.StateAbsent}
		if foreign {
			// The running machines of that name are another state
			// directory's (see OwnerDir); Create says so.
		} else if pid := p.nspawnPid(n.Name); pid != 0 {
			s.State, s.PID = vm.StateRunning, pid
		} else if _, err := os.Stat(filepath.Join(p.NodeRoot(n.Name), "usr/bin/systemctl")); err == nil {
			s.State = vm.StateStopped
		}
		out = append(out, s)
	}
	return out, nil
}

// Addresses maps node names to their cluster.yaml IPs.
func (p *Provider) Addresses() map[string]netip.Addr { return vm.Addresses(p.c) }

// Snapshot, Revert and DeleteSnapshot: see snapshot.go.

// Destroy force-stops every node, removes D/nspawn (node roots, pid files,
// logs) and the network namespace. The shared image in CacheDir stays. It
// refuses to delete a node root that still has something mounted below it.
func (p *Provider) Destroy(ctx context.Context) error {
	if err := p.checkOwner(); err != nil {
		return err
	}
	var errs []error
	for _, n := range p.c.Nodes {
		if err := p.Stop(ctx, n.Name, true); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		base := filepath.Join(p.opts.StateDir, "nspawn")
		if m := mountsBelow(base); len(m) > 0 {
			errs = append(errs, fmt.Errorf("cluster %s: not removing %s: still mounted below it: %s; unmount them first", p.c.Name, base, strings.Join(m, ", ")))
		} else if err := os.RemoveAll(base); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cluster %s: remove %s: %w", p.c.Name, base, err))
		}
	}
	if err := vm.DeleteNetwork(p.c.Name); err != nil {
		errs = append(errs, err)
	} else if err := os.Remove(ownerPath(p.c.Name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// OwnerDir holds one file per cluster network namespace made by khw,
// <OwnerDir>/khw-<cluster>.owner, naming the state directory of the cluster
// that made it. Namespaces and machine names are per host, state
// directories are not: two state directories with a cluster of the same
// name (two students on one server, both keeping the default name "khw")
// would otherwise share a namespace, and one's khw down would destroy the
// other's nodes. /run is a tmpfs, like the namespaces themselves.
const OwnerDir = "/run/khw"

// Inotify limits a host running nspawn nodes needs: every node's systemd,
// containerd (its CNI config watcher) and kubelet take inotify instances
// from one per-user host-wide pool, 128 by default, and containerd's CRI
// plugin fails to load without one ("failed to create fsnotify watcher: too
// many open files"). kind documents the same host settings
// (https://kind.sigs.k8s.io/docs/user/known-issues/#pod-errors-due-to-too-many-open-files).
const (
	MinInotifyInstances = 1024
	MinInotifyWatches   = 524288
)

// Dialer dials inside the cluster's namespace (NetnsDialer).
func (p *Provider) Dialer() remote.DialFunc { return vm.NetnsDialer(vm.NetnsPath(p.c.Name)) }

// NspawnRunDir is where systemd-nspawn keeps per-machine runtime files on the
// host.
const NspawnRunDir = "/run/systemd/nspawn"
