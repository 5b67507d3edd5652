package labcheck

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/labid"
)

// workerSel picks the workers a lab sets up: 07-workers the ones with a
// cert from khw, 10-tls-bootstrap the ones that join by TLS bootstrap.
func workerSel(bootstrap bool) func(*env) []config.Node {
	return func(e *env) []config.Node {
		var out []config.Node
		for _, n := range e.c.Workers() {
			if n.TLSBootstrap == bootstrap {
				out = append(out, n)
			}
		}
		return out
	}
}

func labOf(bootstrap bool) string {
	if bootstrap {
		return labid.TLSBootstrap
	}
	return labid.Workers
}

// kubeletConfig is the part of a KubeletConfiguration the detectors read
// (https://kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1/).
type kubeletConfig struct {
	CgroupDriver       string   `json:"cgroupDriver"`
	ClusterDNS         []string `json:"clusterDNS"`
	FailSwapOn         *bool    `json:"failSwapOn"`
	TLSCertFile        string   `json:"tlsCertFile"`
	TLSPrivateKeyFile  string   `json:"tlsPrivateKeyFile"`
	ServerTLSBootstrap bool     `json:"serverTLSBootstrap"`
	ResolvConf         *string  `json:"resolvConf"`
}

// kubelet is what the kubelet on a node runs with.
type kubelet struct {
	unit       unitCmd
	cfg        kubeletConfig
	cfgPath    string
	cfgEv      string
	kubeconfig string
}

// readKubelet reads kubelet.service and its --config on node. Deprecated
// flags that duplicate a config field win over it, as in the kubelet.
func (e *env) readKubelet(lab, node string) (*kubelet, []Mistake, error) {
	u, ok, err := e.readUnit(node, "kubelet.service")
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, []Mistake{{Lab: lab, Node: node, What: "kubelet.service is not known to systemd (or has no ExecStart)", Evidence: "`systemctl cat kubelet.service` printed no ExecStart",
			Fix: "write /etc/systemd/system/kubelet.service (ExecStart=/usr/local/bin/kubelet --config=/var/lib/kubelet/kubelet-config.yaml --kubeconfig=/var/lib/kubelet/kubeconfig …), then systemctl daemon-reload && systemctl enable --now kubelet"}}, nil
	}
	k := &kubelet{unit: u}
	k.kubeconfig, _ = u.flag("kubeconfig")
	p, ok := u.flag("config")
	if !ok {
		return k, []Mistake{{Lab: lab, Node: node, What: "the kubelet runs without --config: every setting falls back to its default (cgroupfs driver, no clusterDNS, anonymous auth on)",
			Evidence: u.evidence("config"), Fix: "--config=/var/lib/kubelet/kubelet-config.yaml with a KubeletConfiguration"}}, nil
	}
	k.cfgPath = p
	data, found, err := e.read(node, p)
	if err != nil {
		return nil, nil, err
	}
	if !found {
		return k, []Mistake{missing(lab, node, p, "the kubelet's --config; it does not start", "write a KubeletConfiguration there")}, nil
	}
	if err := yaml.Unmarshal(data, &k.cfg); err != nil {
		return k, []Mistake{{Lab: lab, Node: node, What: p + " is not a valid KubeletConfiguration: the kubelet does not start", Evidence: p + ": " + err.Error(), Fix: "fix its YAML"}}, nil
	}
	k.cfgEv = p
	if v, ok := u.flag("cgroup-driver"); ok {
		k.cfg.CgroupDriver = v
		k.cfgEv = "kubelet.service --cgroup-driver"
	}
	if v, ok := u.flag("cluster-dns"); ok {
		k.cfg.ClusterDNS = strings.Split(v, ",")
	}
	if v, ok := u.flag("tls-cert-file"); ok {
		k.cfg.TLSCertFile = v
	}
	return k, nil, nil
}

// workerHost checks the kernel side of each worker: swap off unless the
// kubelet is told to tolerate it (failSwapOn: false; the kubelet refuses to
// start otherwise: https://kubernetes.io/docs/concepts/cluster-administration/swap-memory-management/),
// br_netfilter loaded with net.bridge.bridge-nf-call-iptables = 1 and
// net.ipv4.ip_forward = 1 (https://kubernetes.io/docs/setup/production-environment/container-runtimes/#network-configuration),
// read from /proc.
func workerHost() func(*env) ([]Mistake, error) {
	return func(e *env) ([]Mistake, error) {
		lab := labid.Workers
		var out []Mistake
		for _, n := range e.c.Workers() {
			k, _, err := e.readKubelet(lab, n.Name)
			if err != nil {
				return nil, err
			}
			swaps, ok, err := e.read(n.Name, "/proc/swaps")
			if err != nil {
				return nil, err
			}
			if ok {
				var active []string
				for _, l := range strings.Split(strings.TrimSpace(string(swaps)), "\n")[1:] {
					if f := strings.Fields(l); len(f) > 0 {
						active = append(active, f[0])
					}
				}
				tolerated := k != nil && k.cfg.FailSwapOn != nil && !*k.cfg.FailSwapOn
				if len(active) > 0 && !tolerated {
					out = append(out, Mistake{Lab: lab, Node: n.Name, What: "swap is on: the kubelet refuses to start (failSwapOn defaults to true)",
						Evidence: "/proc/swaps lists " + strings.Join(active, ", "), Fix: "sudo swapoff -a, and comment out the swap lines of /etc/fstab (sudo sed -i '/ swap / s/^/#/' /etc/fstab)"})
				}
			}
			br, ok, err := e.read(n.Name, "/proc/sys/net/bridge/bridge-nf-call-iptables")
			if err != nil {
				return nil, err
			}
			switch {
			case !ok:
				out = append(out, Mistake{Lab: lab, Node: n.Name, What: "the br_netfilter module is not loaded: traffic between pods on one bridge skips iptables, so Services (kube-proxy's rules) do not work for it",
					Evidence: "/proc/sys/net/bridge/bridge-nf-call-iptables does not exist", Fix: "sudo modprobe br_netfilter; echo br_netfilter | sudo tee /etc/modules-load.d/k8s.conf"})
			case strings.TrimSpace(string(br)) != "1":
				out = append(out, Mistake{Lab: lab, Node: n.Name, What: "net.bridge.bridge-nf-call-iptables is not 1: bridged pod traffic skips iptables, so Services do not work for it",
					Evidence: "/proc/sys/net/bridge/bridge-nf-call-iptables = " + strings.TrimSpace(string(br)), Fix: "sudo sysctl -w net.bridge.bridge-nf-call-iptables=1 now, and keep net.bridge.bridge-nf-call-iptables = 1 in a file under /etc/sysctl.d/ (e.g. k8s.conf) so it survives a reboot"})
			}
			fw, ok, err := e.read(n.Name, "/proc/sys/net/ipv4/ip_forward")
			if err != nil {
				return nil, err
			}
			if v := strings.TrimSpace(string(fw)); ok && v != "1" {
				out = append(out, Mistake{Lab: lab, Node: n.Name, What: "net.ipv4.ip_forward is not 1: the node does not route packets between pods and the network, so pods on other nodes and Services are unreachable",
					Evidence: "/proc/sys/net/ipv4/ip_forward = " + v, Fix: "sudo sysctl -w net.ipv4.ip_forward=1 now, and keep net.ipv4.ip_forward = 1 in a file under /etc/sysctl.d/ (e.g. k8s.conf) so it survives a reboot"})
			}
		}
		return out, nil
	}
}

// containerdConfig is what the detectors read of containerd's config.
type containerdConfig struct {
	path                string
	found               bool
	systemdCgroup       bool
	systemdCgroupLine   string
	confDir             string
	binDirs             []string
	binDirsLine, cdLine string
}

var (
	reSystemdCgroup = regexp.MustCompile(`(?m)^\s*SystemdCgroup\s*=\s*(true|false)\b.*$`)
	reConfDir       = regexp.MustCompile(`(?m)^\s*conf_dir\s*=\s*['"]([^'"]+)['"]`)
	reBinDir        = regexp.MustCompile(`(?m)^\s*bin_dir\s*=\s*['"]([^'"]+)['"]`)
	reBinDirs       = regexp.MustCompile(`(?m)^\s*bin_dirs\s*=\s*\[([^\]]*)\]`)
	reQuoted        = regexp.MustCompile(`['"]([^'"]+)['"]`)
)

// readContainerd reads containerd's config (--config of containerd.service,
// else /etc/containerd/config.toml). Defaults follow containerd
// (docs/cri/config.md): SystemdCgroup false, CNI in /etc/cni/net.d and
// /opt/cni/bin.
func (e *env) readContainerd(node string) (containerdConfig, error) {
	cc := containerdConfig{path: "/etc/containerd/config.toml", confDir: "/etc/cni/net.d", binDirs: []string{"/opt/cni/bin"}}
	if u, ok, err := e.readUnit(node, "containerd.service"); err != nil {
		return cc, err
	} else if ok {
		if p, ok := u.flag("config"); ok {
			cc.path = p
		} else if p, ok := u.flag("c"); ok {
			cc.path = p
		}
	}
	data, ok, err := e.read(node, cc.path)
	if err != nil || !ok {
		return cc, err
	}
	cc.found = true
	text := stripTOMLComments(string(data))
	if m := reSystemdCgroup.FindStringSubmatch(text); m != nil {
		cc.systemdCgroup, cc.systemdCgroupLine = m[1] == "true", strings.TrimSpace(m[0])
	}
	if m := reConfDir.FindStringSubmatch(text); m != nil {
		cc.confDir, cc.cdLine = m[1], strings.TrimSpace(m[0])
	}
	if m := reBinDirs.FindStringSubmatch(text); m != nil {
		cc.binDirs, cc.binDirsLine = nil, strings.TrimSpace(m[0])
		for _, q := range reQuoted.FindAllStringSubmatch(m[1], -1) {
			cc.binDirs = append(cc.binDirs, q[1])
		}
	} else if m := reBinDir.FindStringSubmatch(text); m != nil {
		cc.binDirs, cc.binDirsLine = []string{m[1]}, strings.TrimSpace(m[0])
	}
	return cc, nil
}

func stripTOMLComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "#") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// workerRuntime checks that containerd has its config (whether it agrees
// with the kubelet on the cgroup driver is a rule of internal/lab/grade),
// and that the CNI config containerd loads (the first file of its
// conf_dir, in name order, as libcni's ConfFiles sorts them) names plugin
// binaries that exist in its bin dirs and gives pods addresses from the
// node's podCIDR (https://www.cni.dev/docs/spec/).
func workerRuntime() func(*env) ([]Mistake, error) {
	return func(e *env) ([]Mistake, error) {
		lab := labid.Workers
		var out []Mistake
		for _, n := range e.c.Workers() {
			_, ms, err := e.readKubelet(lab, n.Name)
			if err != nil {
				return nil, err
			}
			if !n.TLSBootstrap { // w3's kubelet is lab 10's (bootstrap-identity)
				out = append(out, ms...)
			}
			cc, err := e.readContainerd(n.Name)
			if err != nil {
				return nil, err
			}
			if !cc.found {
				out = append(out, missing(lab, n.Name, cc.path, "containerd's config; containerd then runs with runc's cgroupfs driver", "write it with SystemdCgroup = true in the runc options (containerd config default > "+cc.path+" gives a start)"))
			}
			ms, err = e.cniConfig(lab, n, cc)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
		return out, nil
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// execsShell lists the executable files of dir by name.
func execsShell(dir string) string {
	return `for f in '` + dir + `'/*; do [ -f "$f" ] && [ -x "$f" ] && echo "${f##*/}"; done; true`
}

func lsShell(dir string) string { return "ls -1A '" + dir + "' 2>/dev/null || true" }

// cniConfig checks the CNI config of node n.
func (e *env) cniConfig(lab string, n config.Node, cc containerdConfig) ([]Mistake, error) {
	ls, err := e.run(n.Name, lsShell(cc.confDir))
	if err != nil {
		return nil, err
	}
	var confs []string
	for _, f := range strings.Fields(ls) {
		switch path.Ext(f) {
		case ".conf", ".conflist", ".json":
			confs = append(confs, f)
		}
	}
	sort.Strings(confs)
	if len(confs) == 0 {
		return []Mistake{{Lab: lab, Node: n.Name, What: "there is no CNI config in " + cc.confDir + ": the node stays NotReady (\"cni plugin not initialized\") and no pod gets an address",
			Evidence: "ls " + cc.confDir + ": " + orDefault(strings.Join(strings.Fields(ls), " "), "(empty or missing)"),
			Fix:      "write " + cc.confDir + "/10-bridge.conf (type bridge, ipam host-local with subnet " + n.PodCIDR + ") and 99-loopback.conf"}}, nil
	}
	first := path.Join(cc.confDir, confs[0])
	data, ok, err := e.read(n.Name, first)
	if err != nil || !ok {
		return nil, err
	}
	var conf map[string]any
	if err := json.Unmarshal(data, &conf); err != nil {
		return []Mistake{{Lab: lab, Node: n.Name, What: first + " (the CNI config containerd loads: the first in name order) is not valid JSON", Evidence: first + ": " + err.Error(), Fix: "fix its JSON (jq . " + first + ")"}}, nil
	}
	plugins := []map[string]any{conf}
	if list, ok := conf["plugins"].([]any); ok {
		plugins = nil
		for _, p := range list {
			if m, ok := p.(map[string]any); ok {
				plugins = append(plugins, m)
			}
		}
	}
	var types, subnets []string
	for _, p := range plugins {
		if t, ok := p["type"].(string); ok {
			types = append(types, t)
		}
		if s, ok := p["subnet"].(string); ok {
			subnets = append(subnets, s)
		}
		if ipam, ok := p["ipam"].(map[string]any); ok {
			if t, ok := ipam["type"].(string); ok {
				types = append(types, t)
			}
			if s, ok := ipam["subnet"].(string); ok {
				subnets = append(subnets, s)
			}
			if rs, ok := ipam["ranges"].([]any); ok {
				for _, r := range rs {
					set, _ := r.([]any)
					for _, x := range set {
						if m, ok := x.(map[string]any); ok {
							if s, ok := m["subnet"].(string); ok {
								subnets = append(subnets, s)
							}
						}
					}
				}
			}
		}
	}
	have := map[string]bool{}
	for _, d := range cc.binDirs {
		out, err := e.run(n.Name, execsShell(d))
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(out) {
			have[f] = true
		}
	}
	var out []Mistake
	binEv := "executables in " + strings.Join(cc.binDirs, ", ") + ": " + orDefault(strings.Join(sortedKeys(have), " "), "none")
	for _, t := range types {
		if !have[t] {
			out = append(out, Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("%s names the CNI plugin %q, but there is no executable %s in %s: every pod sandbox fails (\"failed to find plugin %q\")", first, t, t, strings.Join(cc.binDirs, ", "), t),
				Evidence: first + ": type " + t + "; " + binEv,
				Fix:      "install the CNI plugins into " + cc.binDirs[0] + " (tar -xzf cni-plugins-linux-<arch>-<version>.tgz -C " + cc.binDirs[0] + "), or fix the type; a script needs chmod +x"})
		}
	}
	for _, s := range subnets {
		if n.PodCIDR != "" && s != n.PodCIDR {
			out = append(out, Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("%s gives pods addresses from %s, but %s's podCIDR is %s: the other workers route %s to this node, so its pods are unreachable from them", first, s, n.Name, n.PodCIDR, n.PodCIDR),
				Evidence: first + ": subnet " + s, Fix: "set the subnet to " + n.PodCIDR + " in " + first + ", then restart the pods on " + n.Name})
		}
	}
	return out, nil
}

// workerDNS checks the kubelet's clusterDNS: it must list the kube-dns
// Service IP of cluster.yaml, and, once the Service exists, its ClusterIP;
// otherwise pods with dnsPolicy ClusterFirst ask a nameserver that is not
// there (https://kubernetes.io/docs/tasks/administer-cluster/dns-custom-nameservers/).
func workerDNS(bootstrap bool) func(*env) ([]Mistake, error) {
	return func(e *env) ([]Mistake, error) {
		lab := labOf(bootstrap)
		svcIP := ""
		if e.cs != nil {
			svc, err := e.cs.CoreV1().Services(metav1.NamespaceSystem).Get(e.ctx, "kube-dns", metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nil, fmt.Errorf("get Service kube-system/kube-dns: %w", err)
			default:
				svcIP = svc.Spec.ClusterIP
			}
		}
		var out []Mistake
		for _, n := range workerSel(bootstrap)(e) {
			k, _, err := e.readKubelet(lab, n.Name)
			if err != nil {
				return nil, err
			}
			if k == nil || k.cfgPath == "" {
				continue
			}
			ev := k.cfgPath + ": clusterDNS " + fmt.Sprint(k.cfg.ClusterDNS)
			if !slices.Contains(k.cfg.ClusterDNS, e.c.Kubernetes.ClusterDNS) {
				out = append(out, Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("the kubelet's clusterDNS does not list %s, the kube-dns Service IP of cluster.yaml: pods on %s cannot resolve Service names", e.c.Kubernetes.ClusterDNS, n.Name),
					Evidence: ev, Fix: "clusterDNS: [" + e.c.Kubernetes.ClusterDNS + "] in " + k.cfgPath + ", restart the kubelet and recreate the pods"})
			} else if svcIP != "" && !slices.Contains(k.cfg.ClusterDNS, svcIP) {
				out = append(out, Mistake{Lab: labid.CoreDNS, Node: n.Name, What: fmt.Sprintf("the kube-dns Service has ClusterIP %s, but the kubelet's clusterDNS is %v: pods ask a nameserver nobody serves", svcIP, k.cfg.ClusterDNS),
					Evidence: ev + "; Service kube-system/kube-dns clusterIP " + svcIP, Fix: "recreate the kube-dns Service with clusterIP: " + e.c.Kubernetes.ClusterDNS})
			}
			ms, err := e.resolvConf(lab, n.Name, k)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
		return out, nil
	}
}

// workerIdentity checks who each kubelet and kube-proxy is: the node name
// (--hostname-override, else the host name) must be the node's name in
// cluster.yaml, and the kubelet's client cert must be CN=system:node:<that
// name>, O=system:nodes (the Node authorizer and NodeRestriction let a
// kubelet touch only the Node of its own name:
// https://kubernetes.io/docs/reference/access-authn-authz/node/); the
// kubeconfigs must reach the apiservers through the load balancer and trust
// the cluster CA; kube-proxy must be system:kube-proxy (bound to
// system:node-proxier); the kubelet's serving cert must name the node's IP,
// which the apiserver dials and verifies
// (https://kubernetes.io/docs/reference/access-authn-authz/kubelet-authn-authz/).
func workerIdentity(bootstrap bool) func(*env) ([]Mistake, error) {
	return func(e *env) ([]Mistake, error) {
		lab := labOf(bootstrap)
		var out []Mistake
		ca, caWhat, err := e.clusterCA()
		if err != nil {
			return nil, err
		}
		for _, n := range workerSel(bootstrap)(e) {
			k, _, err := e.readKubelet(lab, n.Name)
			if err != nil {
				return nil, err
			}
			if k == nil {
				continue // workerRuntime reports the missing unit
			}
			name, nameEv := "", ""
			if v, ok := k.unit.flag("hostname-override"); ok {
				name, nameEv = v, k.unit.evidence("hostname-override")
			} else {
				h, ok, err := e.read(n.Name, "/proc/sys/kernel/hostname")
				if err != nil {
					return nil, err
				}
				if ok {
					name = strings.ToLower(strings.TrimSpace(string(h)))
					nameEv = "host name " + name + " (no --hostname-override)"
				}
			}
			if name != "" && name != n.Name {
				out = append(out, Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("the kubelet on %s registers as node %q, not %q: the Node authorizer lets a kubelet touch only the Node named in its cert (system:node:%s), and the cluster expects node %s", n.Name, name, n.Name, n.Name, n.Name),
					Evidence: nameEv, Fix: "--hostname-override=" + n.Name + " in kubelet.service (or hostnamectl set-hostname " + n.Name + "), then restart the kubelet"})
			}
			// The cert must name the node cluster.yaml knows; a wrong node
			// name is reported above.
			name = n.Name
			if k.kubeconfig == "" {
				out = append(out, Mistake{Lab: lab, Node: n.Name, What: "the kubelet has no --kubeconfig: it runs standalone and never registers with the apiserver",
					Evidence: k.unit.evidence("kubeconfig"), Fix: "--kubeconfig=/var/lib/kubelet/kubeconfig"})
			} else {
				ms, err := e.nodeKubeconfig(lab, n.Name, k.kubeconfig, "the kubelet's kubeconfig", nodeUserPrefix+name, groupNodes, nameEv, bootstrap)
				if err != nil {
					return nil, err
				}
				out = append(out, ms...)
			}
			if !k.cfg.ServerTLSBootstrap && k.cfgPath != "" {
				if k.cfg.TLSCertFile == "" {
					out = append(out, Mistake{Lab: lab, Node: n.Name, What: "the kubelet has no tlsCertFile and no serverTLSBootstrap: it serves a self-signed cert, which the apiserver (--kubelet-certificate-authority) rejects, so logs and exec fail",
						Evidence: k.cfgPath + ": no tlsCertFile", Fix: "tlsCertFile: /var/lib/kubelet/kubelet.pem and tlsPrivateKeyFile: /var/lib/kubelet/kubelet-key.pem (the node's cert from $KHW_STATE_DIR/$KHW_CLUSTER/pki)"})
				} else {
					fix := "copy $KHW_STATE_DIR/$KHW_CLUSTER/pki/" + n.Name + ".pem and " + n.Name + "-key.pem to " + path.Dir(k.cfg.TLSCertFile) + " and restart the kubelet"
					cert, ms, err := e.loadCert(lab, n.Name, k.cfg.TLSCertFile, "the kubelet serving cert (tlsCertFile)", fix)
					if err != nil {
						return nil, err
					}
					out = append(out, ms...)
					if other := otherNode(cert, n.Name); other != "" {
						// Another node's cert copied here: name that, not the
						// SANs it lacks as a consequence.
						out = append(out, Mistake{Lab: labid.Workers, Node: n.Name, What: fmt.Sprintf("%s holds %s's identity (CN=%s), not %s's: it was copied from the wrong node", k.cfg.TLSCertFile, other, cert.Subject.CommonName, n.Name),
							Evidence: k.cfg.TLSCertFile + ": " + describe(cert), Fix: fix})
					} else if cert != nil {
						out = append(out, e.checkCert(n.Name, k.cfg.TLSCertFile, cert, certWant{lab: labid.PKI, what: "the kubelet serving cert " + k.cfg.TLSCertFile, node: true, server: true,
							sans: []sanWant{{n.IP, "the apiserver dials the kubelet at its InternalIP for logs, exec and port-forward"}}, ca: ca, caWhat: caWhat, fix: fix})...)
						if k.cfg.TLSPrivateKeyFile != "" {
							ms, err := e.checkKey(lab, n.Name, k.cfg.TLSCertFile, k.cfg.TLSPrivateKeyFile, cert, fix)
							if err != nil {
								return nil, err
							}
							out = append(out, ms...)
						}
					}
				}
			}
			ms, err := e.kubeProxyIdentity(lab, n)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
		return out, nil
	}
}

// nodeKubeconfig checks a kubeconfig on a worker: server through the load
// balancer, the cluster CA, a client cert CN=cn (O=org when given) signed
// by the cluster CA with its key. For a TLS-bootstrap worker a missing
// kubeconfig is not a mistake here (the kubelet writes it once its CSR is
// approved; 10-tls-bootstrap's detectors look at why it has not).
func (e *env) nodeKubeconfig(lab, node, p, what, cn, org, nameEv string, bootstrap bool) ([]Mistake, error) {
	return e.componentKubeconfig(lab, node, p, what, cn, org, nameEv, bootstrap, viaLB)
}

// componentKubeconfig is nodeKubeconfig with the server rule given.
func (e *env) componentKubeconfig(lab, node, p, what, cn, org, nameEv string, bootstrap bool, rule serverRule) ([]Mistake, error) {
	if bootstrap {
		if _, ok, err := e.read(node, p); err != nil || !ok {
			return nil, err
		}
	}
	fix := "; khw lab " + lab + " shows how it is made"
	k, ms, err := e.loadKubeconfig(lab, node, p, what, "copy the right kubeconfig there"+fix)
	if err != nil || k == nil {
		return ms, err
	}
	out := e.checkServer(lab, node, k, rule, fix)
	ms, err = e.kubeconfigCA(lab, node, k, fix)
	if err != nil {
		return nil, err
	}
	out = append(out, ms...)
	cert, where, ms, err := e.kubeconfigCert(lab, node, k, "embed the right cert and key"+fix)
	if err != nil {
		return nil, err
	}
	out = append(out, ms...)
	if cert == nil {
		return out, nil
	}
	if cert.Subject.CommonName != cn {
		ev := where + ": " + describe(cert)
		if nameEv != "" {
			ev += "; " + nameEv
		}
		why := "RBAC gives it the rights of that other user, not of " + cn
		if strings.HasPrefix(cn, nodeUserPrefix) {
			why = "the Node authorizer and NodeRestriction let it touch only the Node named in the cert"
		}
		out = append(out, Mistake{Lab: lab, Node: node, What: fmt.Sprintf("%s logs in as %q, but must be %q: %s", what, cert.Subject.CommonName, cn, why),
			Evidence: ev, Fix: "embed a client cert with CN=" + cn + " in " + p + " ($KHW_STATE_DIR/$KHW_CLUSTER/kubeconfigs has the right kubeconfig for each component)"})
	}
	ca, caWhat, _ := e.clusterCA()
	out = append(out, e.checkCert(node, where, cert, certWant{lab: labid.PKI, what: "the client cert of " + p, org: org, node: org == groupNodes, client: true, ca: ca, caWhat: caWhat,
		fix: "embed the right cert and key in " + p})...)
	return out, nil
}

// kubeProxyIdentity reads kube-proxy's kubeconfig (--kubeconfig, or
// clientConnection.kubeconfig of its --config) and checks it.
// otherNode returns the node name in cert's CN when it is a node identity
// (system:node:<name>) of another node than node, else "".
func otherNode(cert *x509.Certificate, node string) string {
	if cert == nil {
		return ""
	}
	other, ok := strings.CutPrefix(cert.Subject.CommonName, nodeUserPrefix)
	if !ok || other == node {
		return ""
	}
	return other
}

func (e *env) kubeProxyIdentity(lab string, n config.Node) ([]Mistake, error) {
	u, ok, err := e.readUnit(n.Name, "kube-proxy.service")
	if err != nil || !ok {
		if err != nil {
			return nil, err
		}
		return []Mistake{{Lab: lab, Node: n.Name, What: "kube-proxy.service is not known to systemd: Services (ClusterIPs, NodePorts) do not work on " + n.Name,
			Evidence: "`systemctl cat kube-proxy.service` printed no ExecStart", Fix: "write /etc/systemd/system/kube-proxy.service (kube-proxy --config=/var/lib/kube-proxy/kube-proxy-config.yaml), then systemctl enable --now kube-proxy"}}, nil
	}
	kc, ok := u.flag("kubeconfig")
	if !ok {
		if cp, ok := u.flag("config"); ok {
			data, found, err := e.read(n.Name, cp)
			if err != nil {
				return nil, err
			}
			if !found {
				return []Mistake{missing(lab, n.Name, cp, "kube-proxy's --config", "write a KubeProxyConfiguration there")}, nil
			}
			var c struct {
				ClientConnection struct {
					Kubeconfig string `json:"kubeconfig"`
				} `json:"clientConnection"`
			}
			if err := yaml.Unmarshal(data, &c); err == nil {
				kc = c.ClientConnection.Kubeconfig
			}
		}
	}
	if kc == "" {
		return []Mistake{{Lab: lab, Node: n.Name, What: "kube-proxy has no kubeconfig: it cannot watch Services and Endpoints",
			Evidence: u.evidence("kubeconfig") + " and no clientConnection.kubeconfig in its --config", Fix: "clientConnection.kubeconfig: /var/lib/kube-proxy/kubeconfig"}}, nil
	}
	return e.nodeKubeconfig(lab, n.Name, kc, "kube-proxy's kubeconfig", "system:kube-proxy", "", "", false)
}

// resolvConf checks the file the kubelet gives pods with dnsPolicy Default,
// CoreDNS among them (resolvConf, default /etc/resolv.conf; "" turns it
// off): it must exist, and list no loopback nameserver such as
// systemd-resolved's 127.0.0.53, which inside a pod is the pod itself, so
// CoreDNS forwards to itself and its loop plugin stops it
// (https://coredns.io/plugins/loop/#troubleshooting,
// https://kubernetes.io/docs/tasks/administer-cluster/dns-debugging-resolution/#known-issues).
func (e *env) resolvConf(lab, node string, k *kubelet) ([]Mistake, error) {
	p := "/etc/resolv.conf"
	if k.cfg.ResolvConf != nil {
		p = *k.cfg.ResolvConf
	}
	if v, ok := k.unit.flag("resolv-conf"); ok {
		p = v
	}
	if p == "" {
		return nil, nil
	}
	data, ok, err := e.read(node, p)
	if err != nil {
		return nil, err
	}
	if !ok {
		return []Mistake{{Lab: lab, Node: node, What: "the kubelet's resolvConf " + p + " does not exist: pods with dnsPolicy Default (CoreDNS) fail to start",
			Evidence: k.cfgPath + ": resolvConf " + p + "; no such file on " + node, Fix: "resolvConf: /run/systemd/resolve/resolv.conf on a node with systemd-resolved, else /etc/resolv.conf"}}, nil
	}
	var loop []string
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "nameserver" {
			if ip := net.ParseIP(f[1]); ip != nil && ip.IsLoopback() {
				loop = append(loop, f[1])
			}
		}
	}
	if len(loop) == 0 {
		return nil, nil
	}
	return []Mistake{{Lab: lab, Node: node, What: "the kubelet gives pods the resolver file " + p + ", whose nameserver " + strings.Join(loop, ", ") + " is a loopback address: inside a pod that is the pod itself, so CoreDNS forwards to itself and stops (\"Loop … detected\")",
		Evidence: p + " on " + node + ": nameserver " + strings.Join(loop, ", "), Fix: "resolvConf: /run/systemd/resolve/resolv.conf (the real upstream servers) in " + orDefault(k.cfgPath, "the kubelet config") + ", restart the kubelet, then kubectl -n kube-system rollout restart deploy/coredns"}}, nil
}
