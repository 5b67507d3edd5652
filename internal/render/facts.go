package render

import (
	"bufio"
	"bytes"
	"fmt"
	"path"
	"strings"

	"github.com/khw-dev/khw/internal/config"
)

// NodeFacts are the properties of one machine that change its files but are
// not in cluster.yaml, because they depend on how the machine was made. The
// zero value is a plain VM on cgroup v2 without ResolvConf, which Validate
// rejects: start from DefaultFacts or ParseFacts.
type NodeFacts struct {
	// CgroupV1 is true when /sys/fs/cgroup is a cgroup v1 (or hybrid) tree,
	// i.e. `stat -fc %T /sys/fs/cgroup` prints tmpfs rather than cgroup2fs.
	// kubelet ≥ 1.35 refuses to start on v1 unless its config says
	// failCgroupV1: false, which is rendered only then
	// (KubeletConfiguration.failCgroupV1,
	// https://kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1/).
	CgroupV1 bool
	// Container is true when the node is a system container (systemd-nspawn)
	// rather than a VM. Such a node lacks CAP_SYS_RESOURCE: nothing in it can
	// lower oom_score_adj or raise the open-files hard limit, and
	// nf_conntrack_max is global to the host. Rendered consequences:
	// containerd restrict_oom_score_adj = true and no OOMScoreAdjust/Limit*
	// in containerd.service; kubelet maxOpenFiles: 20000 and oomScoreAdj: 0;
	// kube-proxy conntrack.maxPerCore: 0 and oomScoreAdj: 0
	// (shared/design/test-environment.md).
	Container bool
	// ResolvConf is the kubelet's resolvConf: the absolute path of the
	// resolv.conf whose upstream nameservers pods with dnsPolicy Default (and
	// so CoreDNS) use. On a node running systemd-resolved, /etc/resolv.conf
	// names the stub 127.0.0.53, which means nothing inside a pod; use
	// /run/systemd/resolve/resolv.conf there, as kubeadm does
	// (https://kubernetes.io/docs/tasks/administer-cluster/dns-debugging-resolution/#known-issues).
	ResolvConf string
}

// Resolv.conf paths.
const (
	// ResolvConfSystemd lists the real upstream servers on a node running
	// systemd-resolved (Ubuntu cloud images).
	ResolvConfSystemd = "/run/systemd/resolve/resolv.conf"
	// ResolvConfPlain is the usual file, right on nodes without
	// systemd-resolved.
	ResolvConfPlain = "/etc/resolv.conf"
)

// DefaultFacts returns the facts expected of a node made by provider before
// anything was measured:
//   - libvirt: an Ubuntu VM, cgroup v2, systemd-resolved → {CgroupV1: false,
//     Container: false, ResolvConf: /run/systemd/resolve/resolv.conf};
//   - nspawn: a systemd-nspawn system container on a host with cgroup v1, no
//     systemd-resolved → {CgroupV1: true, Container: true, ResolvConf:
//     /etc/resolv.conf} (as measured, shared/design/test-environment.md).
//
// An unknown provider is an error naming the known ones.
func DefaultFacts(provider string) (NodeFacts, error) {
	switch provider {
	case config.ProviderLibvirt:
		return NodeFacts{ResolvConf: ResolvConfSystemd}, nil
	case config.ProviderNspawn:
		return NodeFacts{CgroupV1: true, Container: true, ResolvConf: ResolvConfPlain}, nil
	}
	return NodeFacts{}, fmt.Errorf("render: no default node facts for provider %q (fix: use %s or %s, or pass measured facts)",
		provider, config.ProviderLibvirt, config.ProviderNspawn)
}

// DefaultFactsFor returns DefaultFacts(c.Provider) for every node of c, keyed
// by node name: the input of All before facts were measured.
func DefaultFactsFor(c *config.Cluster) (map[string]NodeFacts, error) {
	f, err := DefaultFacts(c.Provider)
	if err != nil {
		return nil, err
	}
	out := make(map[string]NodeFacts, len(c.Nodes))
	for _, n := range c.Nodes {
		out[n.Name] = f
	}
	return out, nil
}

// Validate reports facts that cannot be rendered: ResolvConf must be a clean
// absolute path.
func (f NodeFacts) Validate() error {
	if f.ResolvConf == "" || !path.IsAbs(f.ResolvConf) || path.Clean(f.ResolvConf) != f.ResolvConf {
		return fmt.Errorf("node facts: ResolvConf %q is not a clean absolute path (fix: %s or %s)",
			f.ResolvConf, ResolvConfSystemd, ResolvConfPlain)
	}
	return nil
}

// FactsProbe is a POSIX shell script that measures NodeFacts on a node. Run it
// there (as any user) and give its standard output to ParseFacts. It prints
// three key=value lines:
//
//	cgroupfs=<file system type of /sys/fs/cgroup: cgroup2fs, or tmpfs for v1>
//	container=<systemd-detect-virt --container: none, or e.g. systemd-nspawn>
//	resolved=<yes when systemd-resolved is active and writes its upstream file>
const FactsProbe = `printf 'cgroupfs=%s\n' "$(stat -fc %T /sys/fs/cgroup)"
printf 'container=%s\n' "$(systemd-detect-virt --container 2>/dev/null || true)"
if [ -s /run/systemd/resolve/resolv.conf ] && systemctl is-active --quiet systemd-resolved 2>/dev/null; then
  echo resolved=yes
else
  echo resolved=no
fi
`

// ParseFacts turns the output of FactsProbe into NodeFacts. It fails, naming
// the line or key, when a key is missing or repeated or a value is not one the
// probe prints (e.g. /sys/fs/cgroup is neither cgroup2fs nor tmpfs).
func ParseFacts(out []byte) (NodeFacts, error) {
	vals := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return NodeFacts{}, fmt.Errorf("node facts: line %q is not key=value (fix: give ParseFacts the output of render.FactsProbe)", line)
		}
		if _, dup := vals[k]; dup {
			return NodeFacts{}, fmt.Errorf("node facts: key %q appears twice (fix: give ParseFacts the output of one run of render.FactsProbe)", k)
		}
		vals[k] = v
	}
	for _, k := range []string{"cgroupfs", "container", "resolved"} {
		if _, ok := vals[k]; !ok {
			return NodeFacts{}, fmt.Errorf("node facts: key %q is missing from the probe output (fix: run render.FactsProbe unchanged with sh)", k)
		}
	}
	var f NodeFacts
	switch vals["cgroupfs"] {
	case "cgroup2fs":
	case "tmpfs":
		f.CgroupV1 = true
	default:
		return NodeFacts{}, fmt.Errorf("node facts: /sys/fs/cgroup has file system type %q, want cgroup2fs (v2) or tmpfs (v1) (fix: mount the cgroup hierarchy on the node)", vals["cgroupfs"])
	}
	switch c := vals["container"]; c {
	case "", "none":
	default:
		f.Container = true
	}
	switch vals["resolved"] {
	case "yes":
		f.ResolvConf = ResolvConfSystemd
	case "no":
		f.ResolvConf = ResolvConfPlain
	default:
		return NodeFacts{}, fmt.Errorf("node facts: resolved=%q, want yes or no", vals["resolved"])
	}
	return f, nil
}
