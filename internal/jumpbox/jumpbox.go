// Package jumpbox makes the host that runs khw behave like the jumpbox of
// "Kubernetes the Hard Way": a place where the node names resolve, the node
// network is reachable, kubectl is installed and talks to the cluster as
// admin, and ssh reaches every node as user ubuntu.
//
// With provider nspawn the nodes live in the cluster's own network namespace
// khw-<cluster> (see internal/vm), which nothing in the host's root
// namespace routes to. A Session therefore runs a program the way
// `ip netns exec khw-<cluster>` does (ip-netns(8)): in a private mount
// namespace where a hosts file generated from cluster.yaml is bind-mounted
// over /etc/hosts, switched into the cluster's network namespace, with
// KUBECONFIG, PATH and KHW_CLUSTER set. With provider libvirt the VMs are
// reachable from the host itself, so only the network namespace step is
// skipped.
//
// Files it writes in the state directory D (all regenerated from
// cluster.yaml, rewritten only when their content changes):
//
//	D/hosts          the hosts file bind-mounted over /etc/hosts (0644)
//	D/ssh/config     ssh_config(5) for `ssh -F D/ssh/config cp1` (0600)
//	D/bin/kubectl    kubectl for the host's architecture (0755)
package jumpbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm"
)

// Environment variables a Session sets besides KUBECONFIG and PATH.
const (
	// EnvSSHConfig holds the path of D/ssh/config, for `ssh -F "$KHW_SSH_CONFIG" cp1`.
	EnvSSHConfig = "KHW_SSH_CONFIG"
	// EnvNetns holds the network namespace name (khw-<cluster>) inside a
	// Session of provider nspawn and is unset otherwise; a shell prompt can
	// show it.
	EnvNetns = "KHW_NETNS"
)

// SSHUser is the login user on every node (passwordless sudo), as made by
// the providers.
const SSHUser = "ubuntu"

// defaultPath is used when the environment has no PATH: the PATH of Debian's
// and Ubuntu's root login (/etc/login.defs ENV_SUPATH).
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ErrNotUp is returned (wrapped) by Prepare when the cluster's network
// namespace does not exist, i.e. `khw up` has not made the machines (or
// `khw down` removed them).
var ErrNotUp = errors.New("cluster is not up")

// BinDir is D/bin, where khw keeps the jumpbox's own tools (kubectl). A
// Session puts it first in PATH.
func BinDir(d state.Dir) string { return filepath.Join(d.Root, "bin") }

// KubectlPath is D/bin/kubectl.
func KubectlPath(d state.Dir) string { return filepath.Join(BinDir(d), "kubectl") }

// HostsPath is D/hosts, the file a Session bind-mounts over /etc/hosts.
func HostsPath(d state.Dir) string { return filepath.Join(d.Root, "hosts") }

// SSHConfigPath is D/ssh/config, next to khw's key and known_hosts.
func SSHConfigPath(d state.Dir) string { return filepath.Join(d.Root, "ssh", "config") }

// AdminKubeconfigPath is D/kubeconfigs/admin.kubeconfig (user admin, group
// system:masters, server https://lb:6443), made by `khw kubeconfig`.
func AdminKubeconfigPath(d state.Dir) string {
	return filepath.Join(d.KubeconfigDir(), "admin.kubeconfig")
}

// HostsFile returns the content of D/hosts for cluster c: the usual
// localhost entries, hostname (the host's own name, "" to leave it out) on
// 127.0.1.1 as Debian's installer writes it, so that sudo and `hostname -f`
// keep working, and one line per node of cluster.yaml in file order,
// "IP<TAB>FQDN NAME" (c.FQDN), the same lines the nodes' own /etc/hosts
// have (internal/render, templates/node/all/hosts.tmpl). A hostname equal to
// a node name or FQDN is left out, so the node wins. Format: hosts(5).
func HostsFile(c *config.Cluster, hostname string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by khw for `khw shell` and `khw kubectl` of cluster %s, from cluster.yaml.\n", c.Name)
	b.WriteString("# It is bind-mounted over /etc/hosts in the private mount namespace of those\n")
	b.WriteString("# commands only (like `ip netns exec` does with /etc/netns/<ns>/hosts), so the\n")
	b.WriteString("# node names resolve there as they do on the nodes. The host's /etc/hosts is\n")
	b.WriteString("# not changed. khw rewrites this file: change cluster.yaml, not this file.\n")
	b.WriteString("127.0.0.1\tlocalhost\n")
	taken := map[string]bool{}
	for _, n := range c.Nodes {
		taken[n.Name], taken[c.FQDN(n)] = true, true
	}
	if hostname != "" && hostname != "localhost" && !taken[hostname] {
		fmt.Fprintf(&b, "127.0.1.1\t%s\n", hostname)
	}
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("ff02::1\tip6-allnodes\n")
	b.WriteString("ff02::2\tip6-allrouters\n\n")
	for _, n := range c.Nodes {
		names := n.Name
		if f := c.FQDN(n); f != n.Name {
			names = f + " " + n.Name
		}
		fmt.Fprintf(&b, "%s\t%s\n", n.IP, names)
	}
	return []byte(b.String())
}

// SSHConfig returns the content of D/ssh/config for cluster c: one Host
// block per node mapping its name and FQDN to its IP (HostName) and naming
// the host key type pinned for it (HostKeyAlgorithms: ssh-ed25519, the key
// khw generated for the node and pinned before its first boot; for a node
// an older khw made and pinned on first contact, the type of that pin, read
// from cluster.KnownHostsPath), then one block for all of them with User
// ubuntu, khw's key (cluster.KeyPath, IdentitiesOnly), the pins
// (UserKnownHostsFile cluster.KnownHostsPath and no global file,
// StrictHostKeyChecking yes: a node presenting another key is refused, and
// no new key is accepted silently; UpdateHostKeys no: ssh never adds keys
// a node offers) and ConnectTimeout 15 (a node that is down or unreachable
// fails in 15 s, connect and banner exchange, instead of hanging a lab's
// commands). The nodes' keys are pinned under their IPs, which is why
// HostName is the IP. Format: ssh_config(5); the first value obtained for
// an option wins, so the per-node blocks come first.
func SSHConfig(c *config.Cluster, d state.Dir) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by khw for cluster %s, from cluster.yaml. Use it with\n", c.Name)
	fmt.Fprintf(&b, "#   ssh -F %s cp1\n", quoteSSH(SSHConfigPath(d)))
	b.WriteString("# where the node network is reachable (inside `khw shell`, where it is\n")
	fmt.Fprintf(&b, "# also $%s). User %s has passwordless sudo on every node. khw rewrites\n", EnvSSHConfig, SSHUser)
	b.WriteString("# this file: change cluster.yaml, not this file.\n")
	var all []string
	for _, n := range c.Nodes {
		names := []string{n.Name}
		if f := c.FQDN(n); f != n.Name {
			names = append(names, f)
		}
		all = append(all, names...)
		algos := remote.PinnedHostKeyAlgorithms(cluster.KnownHostsPath(d), n.IP)
		if len(algos) == 0 {
			algos = []string{ssh.KeyAlgoED25519}
		}
		fmt.Fprintf(&b, "\nHost %s\n    HostName %s\n    HostKeyAlgorithms %s\n", strings.Join(names, " "), n.IP, strings.Join(algos, ","))
	}
	fmt.Fprintf(&b, "\nHost %s\n", strings.Join(all, " "))
	fmt.Fprintf(&b, "    User %s\n", SSHUser)
	fmt.Fprintf(&b, "    IdentityFile %s\n", quoteSSH(cluster.KeyPath(d)))
	b.WriteString("    IdentitiesOnly yes\n")
	fmt.Fprintf(&b, "    UserKnownHostsFile %s\n", quoteSSH(cluster.KnownHostsPath(d)))
	b.WriteString("    GlobalKnownHostsFile /dev/null\n")
	b.WriteString("    StrictHostKeyChecking yes\n")
	b.WriteString("    UpdateHostKeys no\n")
	b.WriteString("    ConnectTimeout 15\n")
	return []byte(b.String())
}

// quoteSSH double-quotes a path for ssh_config when it contains a space.
func quoteSSH(p string) string {
	if strings.ContainsAny(p, " \t") {
		return `"` + p + `"`
	}
	return p
}

// Session is how `khw shell` and `khw kubectl` run a program for one
// cluster. Make it with Prepare; run a program with Exec.
type Session struct {
	// Cluster is the cluster name.
	Cluster string
	// Netns is the path of the network namespace to enter
	// (/run/netns/khw-<cluster>), "" to stay in the current one (provider
	// libvirt).
	Netns string
	// Hosts is the file bind-mounted over /etc/hosts (D/hosts), "" for none.
	Hosts string
	// Vars are the variables set on top of the caller's environment, as
	// NAME=value: KUBECONFIG, PATH (D/bin first), KHW_CLUSTER, KHW_STATE_DIR,
	// KHW_SSH_CONFIG and, with a namespace, KHW_NETNS.
	Vars []string
	// Kubeconfig is the admin kubeconfig path (also in Vars as KUBECONFIG).
	Kubeconfig string
	// SSHConfig is D/ssh/config (also in Vars as KHW_SSH_CONFIG).
	SSHConfig string
}

// Prepare writes D/hosts and D/ssh/config (only when their content changed)
// and returns the Session for cluster c. path is the caller's PATH (""
// means defaultPath); the Session's PATH is D/bin followed by it.
//
// Provider nspawn: the Session enters the network namespace
// /run/netns/khw-<cluster>; when that does not exist the error wraps
// ErrNotUp and says to run khw up. Provider libvirt: no namespace. Any other
// provider is an error naming the valid ones.
func Prepare(c *config.Cluster, d state.Dir, path string) (*Session, error) {
	s := &Session{Cluster: c.Name, Hosts: HostsPath(d), Kubeconfig: AdminKubeconfigPath(d), SSHConfig: SSHConfigPath(d)}
	switch c.Provider {
	case config.ProviderNspawn:
		s.Netns = vm.NetnsPath(c.Name)
		if _, err := os.Stat(s.Netns); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: cluster %s has no network namespace %s (fix: run `khw up`)", ErrNotUp, c.Name, s.Netns)
		} else if err != nil {
			return nil, fmt.Errorf("cluster %s: network namespace %s: %w", c.Name, s.Netns, err)
		}
	case config.ProviderLibvirt:
		// The VMs sit on a host bridge: nothing to enter.
	default:
		return nil, fmt.Errorf("cluster %s: provider %q is unknown; use one of: %s, %s", c.Name, c.Provider, config.ProviderLibvirt, config.ProviderNspawn)
	}
	hostname, _ := os.Hostname()
	if _, err := fsutil.WriteIfChanged(s.Hosts, HostsFile(c, hostname), fsutil.PublicMode); err != nil {
		return nil, err
	}
	if _, err := fsutil.WriteIfChanged(s.SSHConfig, SSHConfig(c, d), fsutil.SecretMode); err != nil {
		return nil, err
	}
	if path == "" {
		path = defaultPath
	}
	s.Vars = []string{
		"KUBECONFIG=" + s.Kubeconfig,
		"PATH=" + BinDir(d) + string(os.PathListSeparator) + path,
		state.EnvCluster + "=" + c.Name,
		state.EnvStateDir + "=" + filepath.Dir(d.Root),
		EnvSSHConfig + "=" + s.SSHConfig,
	}
	if s.Netns != "" {
		s.Vars = append(s.Vars, EnvNetns+"="+vm.NetnsName(c.Name))
	}
	return s, nil
}

// Environ returns base (NAME=value entries, e.g. os.Environ()) with the
// Session's variables replacing any of the same name; the Session's come
// last, in Vars order. KHW_NETNS is removed from base when the Session has
// no namespace, so a nested shell does not claim one.
func (s *Session) Environ(base []string) []string {
	set := map[string]bool{EnvNetns: true}
	for _, v := range s.Vars {
		set[v[:strings.IndexByte(v, '=')]] = true
	}
	out := make([]string, 0, len(base)+len(s.Vars))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !set[name] {
			out = append(out, kv)
		}
	}
	return append(out, s.Vars...)
}

// Getenv returns the value of name in the Session's Vars ("" if unset).
func (s *Session) Getenv(name string) string {
	for _, v := range s.Vars {
		if n, val, _ := strings.Cut(v, "="); n == name {
			return val
		}
	}
	return ""
}

// LookPath finds the executable file named file in the directories of path
// (a PATH value), the way execvp(3) does; a file containing a slash is used
// as it is. Errors name the file and the PATH searched.
func LookPath(file, path string) (string, error) {
	if file == "" {
		return "", errors.New("no command given")
	}
	if strings.Contains(file, "/") {
		if err := isExecutable(file); err != nil {
			return "", fmt.Errorf("command %s: %w", file, err)
		}
		return file, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if isExecutable(p) == nil {
			return p, nil
		}
	}
	return "", &NotFoundError{File: file, Path: path}
}

// NotFoundError is LookPath's error for a command found nowhere in PATH;
// khw exits 127 for it, as shells do.
type NotFoundError struct{ File, Path string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("command %q not found in PATH %s", e.File, e.Path)
}

func isExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%s is a directory", p)
	}
	if st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable (mode %s)", p, strconv.FormatUint(uint64(st.Mode().Perm()), 8))
	}
	return nil
}

// LoginShell is the shell khw shell starts without a command: $SHELL when
// it is found in the session's PATH, else bash, else /bin/sh.
func (s *Session) LoginShell() string {
	if sh := os.Getenv("SHELL"); sh != "" {
		if _, err := LookPath(sh, s.Getenv("PATH")); err == nil {
			return sh
		}
	}
	if p, err := LookPath("bash", s.Getenv("PATH")); err == nil {
		return p
	}
	return "/bin/sh"
}
