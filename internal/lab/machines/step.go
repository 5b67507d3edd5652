// Package machines is lab 01-machines: the step that makes every node of
// cluster.yaml exist, run and answer SSH (the provider creates them; khw
// pins each node's host key before its first boot). It has no detectors:
// the step's own Check is its grading.
//
// Text: labs/01-machines.md. Nodes come from internal/vm (libvirt, nspawn).
package machines

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm"
	"github.com/khw-dev/khw/internal/vm/libvirt"
	"github.com/khw-dev/khw/internal/vm/nspawn"
)

// Default timeouts of Step.
const (
	// DefaultProbeTimeout bounds Check's `true` over SSH on one running node.
	DefaultProbeTimeout = 5 * time.Second
	// DefaultBootTimeout bounds Apply's wait, per node, for SSH to answer
	// after the node was started (nspawn nodes answer in ~1-3 s).
	DefaultBootTimeout = 60 * time.Second
)

// Step is lab 01-machines: every node of cluster.yaml exists, is
// powered on and answers SSH (`true` as user ubuntu with khw's key).
type Step struct {
	M *nodeplan.Machines
	// ProbeTimeout and BootTimeout: see DefaultProbeTimeout and
	// DefaultBootTimeout (used when zero).
	ProbeTimeout, BootTimeout time.Duration
}

var _ steps.Step = (*Step)(nil)

// NewStep returns the 01-machines step working through m.
func NewStep(m *nodeplan.Machines) *Step { return &Step{M: m} }

// ID returns "01-machines".
func (s *Step) ID() string { return labid.Machines }

// Title returns "Create the machines".
func (s *Step) Title() string { return "Create the machines" }

// Diff texts of this step; Apply reads them back from the diffs it gets.
const (
	whatNotRunning = "machine is not running"
	whatNoSSH      = "SSH does not answer"
	fixCreateBoot  = "create and boot it"
	fixBoot        = "boot it"
	fixWait        = "wait for it to boot"
)

// Check asks the provider for every node's power state: a node that is not
// running is one diff ("machine is not running (absent)", fix "create and
// boot it"; "(stopped)", fix "boot it"). Each running node must answer
// `true` over SSH within ProbeTimeout, else one diff ("SSH does not answer:
// <error>", fix "wait for it to boot"). The probes run in parallel. Check
// changes nothing, on the nodes or in the state directory: a node whose
// host key is not pinned yet is refused by the pool (no trust on first use)
// and shows as a diff that Apply fixes by pinning it.
func (s *Step) Check(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
	st, err := s.M.Provider.Status(ctx)
	if err != nil {
		return nil, err
	}
	var diffs []steps.Diff
	var running []vm.NodeStatus
	for _, n := range st {
		switch n.State {
		case vm.StateRunning:
			running = append(running, n)
		case vm.StateAbsent:
			diffs = append(diffs, steps.Diff{Kind: steps.DiffMachineAbsent, Node: n.Name, What: whatNotRunning + " (absent)", Fix: fixCreateBoot})
		default:
			diffs = append(diffs, steps.Diff{Kind: steps.DiffMachineStopped, Node: n.Name, What: whatNotRunning + " (" + string(n.State) + ")", Fix: fixBoot})
		}
	}
	probe := s.ProbeTimeout
	if probe <= 0 {
		probe = DefaultProbeTimeout * vm.Slowdown(s.M.Provider)
	}
	errs := steps.Parallel(len(running), func(i int) error { return s.sshTrue(ctx, running[i], probe) })
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i, n := range running {
		if errs[i] != nil {
			fmt.Fprintf(env.NodeLog(n.Name), "%s "+labid.Machines+" check: SSH probe: %v\n", time.Now().Format(time.RFC3339), errs[i])
			diffs = append(diffs, steps.Diff{Node: n.Name, What: whatNoSSH + ": " + oneLine(errs[i].Error()), Fix: fixWait})
		}
	}
	sortDiffs(diffs, st)
	return diffs, nil
}

// sshTrue proves that node n answers SSH within timeout: it measures the
// node's facts over the pool (nodeplan.Machines.MeasureFacts), which later
// steps then need not ask for.
func (s *Step) sshTrue(ctx context.Context, n vm.NodeStatus, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cloudInit := s.M.Provider.Name() != config.ProviderNspawn
	// One Pool.Get gives up after the pool's own connect budget (3 min);
	// a VM under TCG takes longer to boot: keep asking until timeout.
	for {
		cl, err := s.M.Pool.Get(ctx, remote.Node{Name: n.Name, Addr: n.IP.String()})
		if err == nil {
			if _, err = s.M.MeasureFacts(ctx, cl, n.Name); err == nil {
				if !cloudInit {
					return nil
				}
				// sshd answers before cloud-init's later modules ran, and one
				// of them (set_passwords) may restart sshd: a node is up once
				// cloud-init wrote boot-finished, its last act.
				_, _, err = cl.Run(ctx, cloudInitDone, remote.RunOptions{})
				if err == nil {
					return nil
				}
				err = fmt.Errorf("cloud-init has not finished (no %s yet): %w", cloudInitFinished, err)
			}
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(2 * time.Second):
		}
	}
}

// cloudInitFinished is the file cloud-init's final stage writes when every
// module ran (cloudinit/config/cc_final_message.py, "boot-finished").
const cloudInitFinished = "/var/lib/cloud/instance/boot-finished"

// cloudInitDone fails until cloudInitFinished exists.
const cloudInitDone = "test -e " + cloudInitFinished

// preflight runs the libvirt provider's host checks before machines are
// made: each finding that is not OK is printed under the step (a warning
// such as "KVM is not usable, nodes run under TCG" too), and a blocking one
// (libvirtd unreachable, no UEFI firmware for aarch64, the subnet taken by
// another network …) stops the step with its fix. nspawn checks its host in
// its constructor.
func preflight(ctx context.Context, p vm.Provider, env *steps.Env) error {
	lp, ok := p.(*libvirt.Provider)
	if !ok {
		return nil
	}
	fs := lp.Preflight(ctx)
	var blocking []string
	for _, f := range fs {
		if f.OK {
			continue
		}
		env.Notef("preflight %s", f)
		if !f.Warning {
			blocking = append(blocking, f.String())
		}
	}
	if len(blocking) > 0 {
		return fmt.Errorf("the libvirt host is not ready:\n  %s", strings.Join(blocking, "\n  "))
	}
	return nil
}

// pinHostKeys makes (once) every node's SSH host key (EnsureHostKey) and
// pins it in KnownHostsPath, before Create installs it on the node and
// before any connection, so no key is ever trusted on first use. A node
// whose address already has another pin (a node an older khw made, pinned
// on first contact) keeps it: that node was not given the generated key
// either (the providers keep its own), and `khw down` ends both. Those
// nodes are named in the node's log.
func (s *Step) pinHostKeys(env *steps.Env) error {
	for _, n := range env.Cluster.Nodes {
		hk, err := cluster.EnsureHostKey(env.State, n.Name)
		if err != nil {
			return steps.OnNode(n.Name, err)
		}
		others, err := s.M.Pool.PinHostKey(remote.Node{Name: n.Name, Addr: n.IP}, hk.Public)
		if err != nil {
			return steps.OnNode(n.Name, err)
		}
		if others != nil {
			fmt.Fprintf(env.NodeLog(n.Name), "%s "+labid.Machines+": %s already pins %d other host key(s) for %s (a node made by an older khw, pinned on first contact); kept until khw down\n",
				time.Now().Format(time.RFC3339), cluster.KnownHostsPath(env.State), len(others), n.IP)
		}
	}
	return nil
}

// Apply pins every node's generated SSH host key (pinHostKeys), makes the
// machines (Provider.Create, idempotent; only when a diff says a node is
// not running), starts every node that is not running, then waits for each
// node named in diffs to answer `true` over SSH, at most BootTimeout per
// node (the nodes boot in parallel, so the whole wait is bounded by one
// BootTimeout). Errors name the node and point at its console log through
// the provider's message.
func (s *Step) Apply(ctx context.Context, env *steps.Env, diffs []steps.Diff) error {
	if err := s.pinHostKeys(env); err != nil {
		return err
	}
	// Facts measured before the nodes were made or booted are not theirs.
	defer s.M.ForgetFacts()
	needCreate := false
	wait := map[string]bool{}
	for _, d := range diffs {
		wait[d.Node] = true
		if d.Kind == steps.DiffMachineAbsent || d.Kind == steps.DiffMachineStopped {
			needCreate = true
		}
	}
	log := env.NodeLog("")
	if needCreate {
		if err := preflight(ctx, s.M.Provider, env); err != nil {
			return err
		}
		fmt.Fprintf(log, "%s "+labid.Machines+": %s Create\n", time.Now().Format(time.RFC3339), s.M.Provider.Name())
		if err := s.M.Provider.Create(ctx); err != nil {
			return err
		}
		// Which image the nodes boot from, and how it was verified (the
		// catalog may have fallen back from its pinned release).
		if b, ok := s.M.Provider.(interface{ BaseImage() string }); ok && b.BaseImage() != "" {
			env.Notef("base image: %s", b.BaseImage())
		}
	}
	st, err := s.M.Provider.Status(ctx)
	if err != nil {
		return err
	}
	for _, n := range st {
		if n.State == vm.StateRunning {
			continue
		}
		fmt.Fprintf(env.NodeLog(n.Name), "%s "+labid.Machines+": start (was %s)\n", time.Now().Format(time.RFC3339), n.State)
		if err := s.M.Provider.Start(ctx, n.Name); err != nil {
			return steps.OnNode(n.Name, err)
		}
		wait[n.Name] = true
	}
	boot := s.BootTimeout
	if boot <= 0 {
		boot = DefaultBootTimeout * vm.Slowdown(s.M.Provider)
	}
	var waitFor []vm.NodeStatus
	for _, n := range st {
		if wait[n.Name] {
			waitFor = append(waitFor, n)
		}
	}
	if len(waitFor) > 0 && s.M.Provider.Name() != config.ProviderNspawn {
		// A VM takes a while (cloud-init makes host keys, TCG is slow): say
		// what is awaited so a quiet terminal does not look hung.
		var names []string
		for _, n := range waitFor {
			names = append(names, n.Name)
		}
		env.Notef("waiting for SSH on %s (boot and cloud-init; at most %v)", strings.Join(names, ", "), boot)
	}
	started := time.Now()
	errs := steps.Parallel(len(waitFor), func(i int) error {
		n := waitFor[i]
		if err := s.sshTrue(ctx, n, boot); err != nil {
			return steps.OnNode(n.Name, fmt.Errorf("SSH did not answer within %v after boot: %w", boot, err))
		}
		fmt.Fprintf(env.NodeLog(n.Name), "%s "+labid.Machines+": SSH answers\n", time.Now().Format(time.RFC3339))
		if s.M.Provider.Name() != config.ProviderNspawn {
			env.Notef("%s: SSH answers, cloud-init done after %v", n.Name, time.Since(started).Round(time.Second))
		}
		return nil
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	var failed []error
	for _, e := range errs {
		if e != nil {
			failed = append(failed, e)
		}
	}
	if h, ok := s.M.Provider.(interface{ BootHint() string }); ok && len(failed) > 0 {
		if hint := h.BootHint(); hint != "" {
			env.Notef("%s", hint)
		}
	}
	if len(failed) == 1 {
		return failed[0] // keeps the *NodeError so the Runner names the node
	}
	return errors.Join(failed...)
}

// Commands returns the shell equivalent of Apply for the nspawn provider
// (what nspawn.Provider does through netlink and exec): the namespace and bridge,
// one root directory per node copied from the cached image, the boot with
// systemd-nspawn, and an SSH probe. With diffs, only the nodes named in them
// (and the network when a node must be created). Other providers get a
// one-line note.
func (s *Step) Commands(env *steps.Env, diffs []steps.Diff) []steps.Command {
	c := env.Cluster
	ns := vm.NetnsName(c.Name)
	nodes := map[string]bool{}
	create, boot := map[string]bool{}, map[string]bool{}
	for _, n := range c.Nodes {
		if diffs == nil {
			nodes[n.Name], create[n.Name], boot[n.Name] = true, true, true
		}
	}
	for _, d := range diffs {
		nodes[d.Node] = true
		if d.Kind == steps.DiffMachineAbsent || d.Kind == steps.DiffMachineStopped {
			boot[d.Node] = true
			create[d.Node] = d.Kind == steps.DiffMachineAbsent
		}
	}
	if c.Provider == config.ProviderLibvirt {
		return libvirtCommands(env, nodes, create, boot)
	}
	if c.Provider != config.ProviderNspawn {
		return []steps.Command{{Shell: "# provider " + c.Provider + ": no shell equivalent yet", Why: "Create the machines"}}
	}
	var cmds []steps.Command
	if len(create) > 0 && anyTrue(create) {
		gw := c.Network.Gateway
		if p, err := netip.ParsePrefix(c.Network.CIDR); err == nil {
			gw = fmt.Sprintf("%s/%d", gw, p.Bits())
		}
		cmds = append(cmds, steps.Command{
			Why: "A network namespace of its own with a bridge: the node network exists only in there",
			Shell: fmt.Sprintf("ip netns add %s\nip -n %s link set lo up\nip -n %s link add %s type bridge\nip -n %s addr add %s dev %s\nip -n %s link set %s up",
				ns, ns, ns, vm.BridgeName, ns, gw, vm.BridgeName, ns, vm.BridgeName),
		})
	}
	cache, _ := nspawn.CacheDir()
	image := nspawn.RootfsPath(cache, c.Arch)
	if c.Arch == "" {
		image = nspawn.RootfsPath(cache, runtime.GOARCH)
	}
	key := cluster.KeyPath(env.State)
	for _, n := range c.Nodes {
		if !nodes[n.Name] {
			continue
		}
		root := filepath.Join(env.State.Root, "nspawn", n.Name, "root")
		machine := c.Name + "-" + n.Name
		if create[n.Name] {
			hk := filepath.Join(cluster.HostKeyDir(env.State, n.Name), remote.HostKeyFile)
			cmds = append(cmds, hostKeyCommand(env, n), steps.Command{
				Why: n.Name + ": its own root file system, copied from the Debian image without the image's SSH host keys, then the generated one as its only one (khw also seeds hostname, /etc/hosts, a static IP and user ubuntu with " + key + ".pub)",
				Shell: fmt.Sprintf("cp -a --reflink=auto %s %s\nrm -f %s/etc/ssh/ssh_host_*\ninstall -m 0600 -o root -g root %s %s/etc/ssh/\ninstall -m 0644 -o root -g root %s %s/etc/ssh/\necho 'HostKey /etc/ssh/%s' > %s/etc/ssh/sshd_config.d/khw-hostkey.conf",
					steps.Quote(image), steps.Quote(root), steps.Quote(root), steps.Quote(hk), steps.Quote(root), steps.Quote(hk+".pub"), steps.Quote(root), remote.HostKeyFile, steps.Quote(root)),
			})
		}
		if boot[n.Name] {
			cmds = append(cmds, steps.Command{
				Why: n.Name + ": boot it (systemd as PID 1) on the bridge, in the background",
				Shell: fmt.Sprintf("nsenter --net=%s systemd-nspawn --register=no --keep-unit -M %s -D %s --boot --network-bridge=%s --console=read-only --capability=all --bind=/dev/kmsg &",
					steps.Quote(vm.NetnsPath(c.Name)), steps.Quote(machine), steps.Quote(root), vm.BridgeName),
			})
		}
		cmds = append(cmds, steps.Command{
			Why:   n.Name + ": it is up when SSH answers",
			Shell: fmt.Sprintf("ip netns exec %s ssh -i %s %s %s@%s true", ns, steps.Quote(key), pinnedSSHOptions(env), remote.DefaultUser, n.IP),
		})
	}
	return cmds
}

// libvirtCommands is the shell equivalent of what the libvirt provider
// does through libvirt's API (go-libvirt): virsh, qemu-img's overlay as a
// volume, cloud-localds (package cloud-image-utils) for the NoCloud seed.
// The files they read are the ones Create leaves in D/libvirt/<node>
// (libvirt.NodeFilesDir), so the commands are exact once khw ran; the
// base image volume is whatever libvirt.image or the catalog's cloud image
// uploaded as khw-base-<sha256 prefix>.
func libvirtCommands(env *steps.Env, nodes, create, boot map[string]bool) []steps.Command {
	c := env.Cluster
	uri, network := libvirt.DefaultURI, ""
	if c.Libvirt != nil {
		if c.Libvirt.URI != "" {
			uri = c.Libvirt.URI
		}
		network = c.Libvirt.Network
	}
	virsh := "virsh -c " + uri
	var cmds []steps.Command
	if anyTrue(create) {
		why := "The node network " + c.Network.CIDR + ": khw reuses the libvirt network that holds it (usually \"default\", virbr0) or defines khw-" + c.Name
		if network != "" {
			why = "The node network: libvirt network " + network + " (libvirt.network in cluster.yaml)"
		}
		cmds = append(cmds,
			steps.Command{Why: why, Shell: virsh + " net-list --all\n" + virsh + " net-dumpxml default | grep -A2 '<ip '"},
			steps.Command{Why: "The base disk image, uploaded once into the storage pool " + libvirt.DefaultPool + " (" + libvirt.DefaultPoolPath + ")",
				Shell: virsh + " vol-list " + libvirt.DefaultPool + " | grep khw-base-"},
		)
	}
	key := cluster.KeyPath(env.State)
	for _, n := range c.Nodes {
		if !nodes[n.Name] {
			continue
		}
		dom := libvirt.DomainName(c.Name, n.Name)
		files := libvirt.NodeFilesDir(env.State.Root, n.Name)
		if create[n.Name] {
			seed := filepath.Join(libvirt.DefaultPoolPath, dom+"-seed.iso")
			cmds = append(cmds, hostKeyCommand(env, n),
				steps.Command{
					Why:   n.Name + ": its disk, a qcow2 overlay of " + fmt.Sprint(n.DiskGiB) + " GiB on the base image (copy-on-write: the base stays untouched)",
					Shell: virsh + " vol-create " + libvirt.DefaultPool + " " + steps.Quote(filepath.Join(files, "disk-volume.xml")),
				},
				steps.Command{
					Why: n.Name + ": the cloud-init NoCloud seed (ISO labelled cidata): hostname, /etc/hosts, user ubuntu with " + key + ".pub and sudo, static IP " + n.IP + ", the generated SSH host key as the only one (ssh_keys, ssh_deletekeys, ssh_genkeytypes: [])",
					Shell: fmt.Sprintf("cloud-localds --network-config=%s %s %s %s\n%s pool-refresh %s",
						steps.Quote(filepath.Join(files, libvirt.SeedNetworkConfig)), steps.Quote(seed), steps.Quote(filepath.Join(files, libvirt.SeedUserData)), steps.Quote(filepath.Join(files, libvirt.SeedMetaData)), virsh, libvirt.DefaultPool),
				},
				steps.Command{
					Why:   n.Name + ": define the VM (" + fmt.Sprint(n.CPUs) + " vCPU, " + fmt.Sprint(n.MemoryMiB) + " MiB, virtio disk and NIC, serial console)",
					Shell: virsh + " define " + steps.Quote(filepath.Join(files, "domain.xml")),
				},
			)
		}
		if boot[n.Name] {
			cmds = append(cmds, steps.Command{
				Why:   n.Name + ": boot it; cloud-init applies the seed on the first boot (watch with virsh console " + dom + ")",
				Shell: virsh + " start " + dom,
			})
		}
		cmds = append(cmds, steps.Command{
			Why:   n.Name + ": it is up when SSH answers and cloud-init has finished (it writes " + cloudInitFinished + " last)",
			Shell: fmt.Sprintf("ssh -i %s %s %s@%s %s", steps.Quote(key), pinnedSSHOptions(env), remote.DefaultUser, n.IP, cloudInitDone),
		})
	}
	return cmds
}

// hostKeyCommand is the shell equivalent of pinHostKeys for node n: an
// ed25519 host key made on the jumpbox, pinned before the node first boots.
func hostKeyCommand(env *steps.Env, n config.Node) steps.Command {
	hk := filepath.Join(cluster.HostKeyDir(env.State, n.Name), remote.HostKeyFile)
	return steps.Command{
		Why: n.Name + ": its SSH host key, made on the jumpbox and pinned before the node ever runs (no trust on first use)",
		Shell: fmt.Sprintf("mkdir -p -m 0700 %s\ntest -e %s || ssh-keygen -q -t ed25519 -N '' -C root@%s -f %s\necho \"%s $(cut -d' ' -f1,2 %s)\" >> %s",
			steps.Quote(filepath.Dir(hk)), steps.Quote(hk), n.Name, steps.Quote(hk), n.IP, steps.Quote(hk+".pub"), steps.Quote(cluster.KnownHostsPath(env.State))),
	}
}

// pinnedSSHOptions are the OpenSSH options that accept only the pinned key.
// The known-hosts path is one shell word, and in double quotes for ssh
// when it has a space (ssh splits an option's value at spaces).
func pinnedSSHOptions(env *steps.Env) string {
	known := cluster.KnownHostsPath(env.State)
	if strings.ContainsAny(known, " \t") {
		known = `"` + known + `"`
	}
	return "-o " + steps.Quote("UserKnownHostsFile="+known) + " -o StrictHostKeyChecking=yes -o HostKeyAlgorithms=ssh-ed25519"
}

func anyTrue(m map[string]bool) bool {
	for _, v := range m {
		if v {
			return true
		}
	}
	return false
}

// sortDiffs orders diffs by the nodes' order in cluster.yaml.
func sortDiffs(diffs []steps.Diff, order []vm.NodeStatus) {
	idx := map[string]int{}
	for i, n := range order {
		idx[n.Name] = i
	}
	sort.SliceStable(diffs, func(i, j int) bool { return idx[diffs[i].Node] < idx[diffs[j].Node] })
}

// oneLine keeps the first line of a multi-line error for a Diff.
func oneLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
