package nspawn

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/vm"
)

// nodeUID is the uid and gid of vm.NodeUser on nspawn nodes.
const nodeUID = 1000

// Unit files written into every nspawn node (see
// shared/design/test-environment.md for why each is needed).
const (
	// unitCgroupRW remounts the node's cgroup v1 controllers read-write
	// (nspawn mounts them read-only; `remount,rw` alone says busy) and
	// re-executes systemd so it picks the writable controllers up, which
	// kubelet's systemd cgroup driver needs.
	unitCgroupRW = `[Unit]
Description=khw: make the cgroup v1 controllers writable
DefaultDependencies=no
Before=sysinit.target
ConditionPathIsMountPoint=/sys/fs/cgroup/memory

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for d in /sys/fs/cgroup/*/; do mount -o remount,bind,rw "$d" || true; done'
ExecStartPost=/bin/systemctl daemon-reexec

[Install]
WantedBy=sysinit.target
`
	// unitProcSys shows kubelet the values it insists on for four host-wide
	// sysctls without changing the host: small files bind-mounted over the
	// /proc/sys entries, inside the node's mount namespace only.
	unitProcSys = `[Unit]
Description=khw: node-local values for host-wide sysctls kubelet checks
DefaultDependencies=no
Before=sysinit.target systemd-sysctl.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for f in /etc/khw/sysctl/*; do mount --bind "$f" "/proc/sys/$(basename "$f" | tr . /)"; done'

[Install]
WantedBy=sysinit.target
`
	// unitHost0 gives host0 (the node end of the veth systemd-nspawn
	// attached to the bridge) the node's static address and default route.
	unitHost0 = `[Unit]
Description=khw: static address of node %s on host0
DefaultDependencies=no
After=sysinit.target
Before=network.target ssh.service
Wants=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/sbin/ip link set host0 up
ExecStart=/sbin/ip addr replace %s dev host0
ExecStart=/sbin/ip route replace default via %s dev host0

[Install]
WantedBy=multi-user.target
`
	systemConf = "[Manager]\n# khw: keep power-off short (a stuck service would hold it 90 s).\nDefaultTimeoutStopSec=15s\n"
)

// nodeSysctls are the values kubelet requires (pkg/kubelet/cm/container_manager_linux.go,
// setupKernelTunables), keyed by /proc/sys path with dots.
var nodeSysctls = map[string]string{
	"vm.overcommit_memory": "1",
	"vm.panic_on_oom":      "0",
	"kernel.panic":         "10",
	"kernel.panic_on_oops": "1",
}

// seedNode writes the node's identity and khw's access into root, the node's
// root directory: hostname, /etc/hosts, machine-id, the khw units, user
// ubuntu with authorizedKey, and the SSH host key hostKey (seedHostKey).
// Idempotent: files are rewritten only when changed. keptOwnKey: the root
// has an SSH host key of its own, kept (see seedHostKey).
func seedNode(root string, c *config.Cluster, n config.Node, authorizedKey, imageMachineID string, hostKey *remote.HostKey) (keptOwnKey bool, err error) {
	w := func(rel, content string, perm fs.FileMode) error {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if _, err := fsutil.WriteIfChanged(p, []byte(content), perm); err != nil {
			return fmt.Errorf("node %s: write %s: %w", n.Name, rel, err)
		}
		return nil
	}
	link := func(rel, target string) error {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if cur, err := os.Readlink(p); err == nil && cur == target {
			return nil
		}
		_ = os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			return fmt.Errorf("node %s: enable %s: %w", n.Name, rel, err)
		}
		return nil
	}
	prefix, err := vm.NodePrefix(c, n)
	if err != nil {
		return false, err
	}

	if err := w("etc/hostname", n.Name+"\n", 0o644); err != nil {
		return false, err
	}
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\n# khw: cluster nodes\n")
	for _, m := range c.Nodes {
		fmt.Fprintf(&hosts, "%s\t%s %s\n", m.IP, c.FQDN(m), m.Name)
	}
	if err := w("etc/hosts", hosts.String(), 0o644); err != nil {
		return false, err
	}

	// A node keeps its machine-id once it has its own.
	cur, _ := os.ReadFile(filepath.Join(root, "etc/machine-id"))
	if id := strings.TrimSpace(string(cur)); len(id) != 32 || id == imageMachineID {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return false, err
		}
		if err := w("etc/machine-id", hex.EncodeToString(b)+"\n", 0o444); err != nil {
			return false, err
		}
	}

	// systemd-networkd is not used: with SYSTEMD_NSPAWN_API_VFS_WRITABLE=1
	// /sys is writable, so networkd waits for udev to initialise host0,
	// and there is no udev in a container; host0 stays "pending" forever.
	if err := w("etc/systemd/system/khw-host0.service", fmt.Sprintf(unitHost0, n.Name, prefix, c.Network.Gateway), 0o644); err != nil {
		return false, err
	}
	for rel, target := range map[string]string{
		"etc/systemd/system/multi-user.target.wants/khw-host0.service":  "/etc/systemd/system/khw-host0.service",
		"etc/systemd/system/multi-user.target.wants/ssh.service":        "/lib/systemd/system/ssh.service",
		"etc/systemd/system/sysinit.target.wants/khw-cgroup-rw.service": "/etc/systemd/system/khw-cgroup-rw.service",
		"etc/systemd/system/sysinit.target.wants/khw-proc-sys.service":  "/etc/systemd/system/khw-proc-sys.service",
	} {
		if err := link(rel, target); err != nil {
			return false, err
		}
	}
	for rel, content := range map[string]string{
		"etc/systemd/system/khw-cgroup-rw.service": unitCgroupRW,
		"etc/systemd/system/khw-proc-sys.service":  unitProcSys,
		"etc/systemd/system.conf.d/khw.conf":       systemConf,
	} {
		if err := w(rel, content, 0o644); err != nil {
			return false, err
		}
	}
	for k, v := range nodeSysctls {
		if err := w("etc/khw/sysctl/"+k, v+"\n", 0o644); err != nil {
			return false, err
		}
	}
	kept, err := seedHostKey(root, n.Name, hostKey)
	if err != nil {
		return false, err
	}
	return kept, seedUser(root, n.Name, authorizedKey)
}

// Paths inside a node root of its SSH host key and of the sshd_config(5)
// drop-in that makes it the only one sshd offers (Debian's sshd_config
// starts with "Include /etc/ssh/sshd_config.d/*.conf"; with a HostKey line
// sshd loads only the keys listed, none of its default list).
const (
	nodeHostKeyPath  = "etc/ssh/" + remote.HostKeyFile
	nodeSSHDDropIn   = "etc/ssh/sshd_config.d/khw-hostkey.conf"
	nodeSSHDHostKeys = "# khw: this node's SSH host key, generated on the jumpbox and pinned there\n" +
		"# before the first boot (<state>/ssh/hostkeys/<node>). Offer no other.\n" +
		"HostKey /" + nodeHostKeyPath + "\n"
	// legacyHostKeyUnit is the first-boot ssh-keygen -A unit older khw
	// versions wrote; it is removed with the node's own keys.
	legacyHostKeyUnit = "etc/systemd/system/khw-ssh-hostkeys.service"
)

// seedHostKey installs hostKey as the node's only SSH host key:
// /etc/ssh/ssh_host_ed25519_key (0600) and .pub (0644), both root:root, the
// drop-in nodeSSHDDropIn (HostKey naming only that file, 0644), every other
// /etc/ssh/ssh_host_* file removed. Nothing on the node generates host keys
// (Debian's ssh.service does not; khw's old first-boot ssh-keygen -A unit
// is removed), so the node presents exactly the key pinned on the jumpbox.
//
// A node root whose ed25519 host key is another one (made by an older khw,
// whose node generated its keys on first boot and whose key was pinned on
// first contact) is left as it is: it keeps its identity and its pin until
// `khw down`. kept reports that case.
func seedHostKey(root, node string, hostKey *remote.HostKey) (kept bool, err error) {
	if hostKey == nil || len(hostKey.Private) == 0 || hostKey.Public == nil {
		return false, fmt.Errorf("node %s: no SSH host key to install; pass remote.EnsureHostKey's key (Options.HostKey)", node)
	}
	priv := filepath.Join(root, nodeHostKeyPath)
	if cur, err := os.ReadFile(priv); err == nil {
		s, perr := ssh.ParsePrivateKey(cur)
		if perr != nil || !bytes.Equal(s.PublicKey().Marshal(), hostKey.Public.Marshal()) {
			return true, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("node %s: read %s: %w", node, priv, err)
	}
	for _, f := range []struct {
		rel     string
		content []byte
		perm    fs.FileMode
	}{
		{nodeHostKeyPath, hostKey.Private, 0o600},
		{nodeHostKeyPath + ".pub", []byte(hostKey.PublicLine() + "\n"), 0o644},
		{nodeSSHDDropIn, []byte(nodeSSHDHostKeys), 0o644},
	} {
		p := filepath.Join(root, f.rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return false, fmt.Errorf("node %s: %w", node, err)
		}
		if _, err := fsutil.WriteIfChanged(p, f.content, f.perm); err != nil {
			return false, fmt.Errorf("node %s: write %s: %w", node, f.rel, err)
		}
		if err := os.Lchown(p, 0, 0); err != nil {
			return false, fmt.Errorf("node %s: chown %s: %w", node, f.rel, err)
		}
	}
	others, _ := filepath.Glob(filepath.Join(root, "etc/ssh/ssh_host_*"))
	others = append(others, filepath.Join(root, legacyHostKeyUnit),
		filepath.Join(root, "etc/systemd/system/multi-user.target.wants/khw-ssh-hostkeys.service"))
	for _, o := range others {
		if o == priv || o == priv+".pub" {
			continue
		}
		if err := os.Remove(o); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("node %s: remove %s: %w", node, o, err)
		}
	}
	return false, nil
}

// seedUser adds vm.NodeUser (uid/gid 1000, home /home/ubuntu, no password,
// login by key only) to passwd/shadow/group/gshadow unless present, installs
// authorizedKey and a sudoers.d NOPASSWD rule.
func seedUser(root, node, authorizedKey string) error {
	if strings.TrimSpace(authorizedKey) == "" {
		return fmt.Errorf("node %s: no SSH public key to install; pass the authorized_keys line from remote.EnsureKey", node)
	}
	ids := strconv.Itoa(nodeUID)
	entries := []struct{ file, line string }{
		{"etc/passwd", vm.NodeUser + ":x:" + ids + ":" + ids + ":khw:/home/" + vm.NodeUser + ":/bin/bash"},
		{"etc/shadow", vm.NodeUser + ":*:19000:0:99999:7:::"},
		{"etc/group", vm.NodeUser + ":x:" + ids + ":"},
		{"etc/gshadow", vm.NodeUser + ":!::"},
	}
	for _, e := range entries {
		p := filepath.Join(root, e.file)
		data, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("node %s: read %s: %w", node, e.file, err)
		}
		if hasEntry(string(data), vm.NodeUser) {
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		s := string(data)
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		if err := fsutil.WriteFileAtomic(p, []byte(s+e.line+"\n"), st.Mode().Perm()); err != nil {
			return fmt.Errorf("node %s: add %s to %s: %w", node, vm.NodeUser, e.file, err)
		}
	}
	home := filepath.Join(root, "home", vm.NodeUser)
	sshDir := filepath.Join(home, ".ssh")
	if err := os.MkdirAll(sshDir, 0o700); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	if _, err := fsutil.WriteIfChanged(filepath.Join(sshDir, "authorized_keys"), []byte(strings.TrimSpace(authorizedKey)+"\n"), 0o600); err != nil {
		return fmt.Errorf("node %s: write authorized_keys: %w", node, err)
	}
	for _, p := range []string{home, sshDir, filepath.Join(sshDir, "authorized_keys")} {
		if err := os.Lchown(p, nodeUID, nodeUID); err != nil {
			return fmt.Errorf("node %s: chown %s: %w", node, p, err)
		}
	}
	if err := os.Chmod(home, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/sudoers.d"), 0o755); err != nil {
		return err
	}
	if _, err := fsutil.WriteIfChanged(filepath.Join(root, "etc/sudoers.d/khw"),
		[]byte("# khw: the login user runs root steps through sudo -n\n"+vm.NodeUser+" ALL=(ALL) NOPASSWD:ALL\n"), 0o440); err != nil {
		return fmt.Errorf("node %s: write sudoers rule: %w", node, err)
	}
	return nil
}

func hasEntry(file, name string) bool {
	for _, l := range strings.Split(file, "\n") {
		if strings.HasPrefix(l, name+":") {
			return true
		}
	}
	return false
}
