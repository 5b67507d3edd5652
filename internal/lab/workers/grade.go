package workers

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/steps"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// WorkerSel picks the workers a lab sets up: 07-workers the ones with a
// cert from khw, 10-tls-bootstrap the ones that join by TLS bootstrap.
func WorkerSel(bootstrap bool) func(*labcheck.Env) []config.Node {
	return func(e *labcheck.Env) []config.Node {
		var out []config.Node
		for _, n := range e.Cluster.Workers() {
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
func readContainerd(e *labcheck.Env, node string) (containerdConfig, error) {
	cc := containerdConfig{path: "/etc/containerd/config.toml", confDir: "/etc/cni/net.d", binDirs: []string{"/opt/cni/bin"}}
	if u, ok, err := e.ReadUnit(node, "containerd.service"); err != nil {
		return cc, err
	} else if ok {
		if p, ok := u.Flag("config"); ok {
			cc.path = p
		} else if p, ok := u.Flag("c"); ok {
			cc.path = p
		}
	}
	data, ok, err := e.Read(node, cc.path)
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
func workerRuntime() func(*labcheck.Env) ([]labcheck.Mistake, error) {
	return func(e *labcheck.Env) ([]labcheck.Mistake, error) {
		lab := labid.Workers
		var out []labcheck.Mistake
		for _, n := range e.Cluster.Workers() {
			_, ms, err := e.ReadKubelet(lab, n.Name)
			if err != nil {
				return nil, err
			}
			if !n.TLSBootstrap { // w3's kubelet is lab 10's (bootstrap-identity)
				out = append(out, ms...)
			}
			cc, err := readContainerd(e, n.Name)
			if err != nil {
				return nil, err
			}
			if !cc.found {
				out = append(out, labcheck.Missing(lab, n.Name, cc.path, "containerd's config; containerd then runs with runc's cgroupfs driver", "write it with SystemdCgroup = true in the runc options (containerd config default > "+cc.path+" gives a start)"))
			}
			ms, err = cniConfig(e, lab, n, cc)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
		return out, nil
	}
}

// cniConfig checks the CNI config of node n.
func cniConfig(e *labcheck.Env, lab string, n config.Node, cc containerdConfig) ([]labcheck.Mistake, error) {
	ls, err := e.Run(n.Name, labcheck.LsShell(cc.confDir))
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
		return []labcheck.Mistake{{Lab: lab, Node: n.Name, What: "there is no CNI config in " + cc.confDir + ": the node stays NotReady (\"cni plugin not initialized\") and no pod gets an address",
			Evidence: "ls " + cc.confDir + ": " + labcheck.OrDefault(strings.Join(strings.Fields(ls), " "), "(empty or missing)"),
			Fix:      "write " + cc.confDir + "/10-bridge.conf (type bridge, ipam host-local with subnet " + n.PodCIDR + ") and 99-loopback.conf"}}, nil
	}
	first := path.Join(cc.confDir, confs[0])
	data, ok, err := e.Read(n.Name, first)
	if err != nil || !ok {
		return nil, err
	}
	var conf map[string]any
	if err := json.Unmarshal(data, &conf); err != nil {
		return []labcheck.Mistake{{Lab: lab, Node: n.Name, What: first + " (the CNI config containerd loads: the first in name order) is not valid JSON", Evidence: first + ": " + err.Error(), Fix: "fix its JSON (jq . " + first + ")"}}, nil
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
		out, err := e.Run(n.Name, labcheck.ExecsShell(d))
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(out) {
			have[f] = true
		}
	}
	var out []labcheck.Mistake
	binEv := "executables in " + strings.Join(cc.binDirs, ", ") + ": " + labcheck.OrDefault(strings.Join(labcheck.SortedKeys(have), " "), "none")
	for _, t := range types {
		if !have[t] {
			out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("%s names the CNI plugin %q, but there is no executable %s in %s: every pod sandbox fails (\"failed to find plugin %q\")", first, t, t, strings.Join(cc.binDirs, ", "), t),
				Evidence: first + ": type " + t + "; " + binEv,
				Fix:      "install the CNI plugins into " + cc.binDirs[0] + " (tar -xzf cni-plugins-linux-<arch>-<version>.tgz -C " + cc.binDirs[0] + "), or fix the type; a script needs chmod +x"})
		}
	}
	for _, s := range subnets {
		if n.PodCIDR != "" && s != n.PodCIDR {
			out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("%s gives pods addresses from %s, but %s's podCIDR is %s: the other workers route %s to this node, so its pods are unreachable from them", first, s, n.Name, n.PodCIDR, n.PodCIDR),
				Evidence: first + ": subnet " + s, Fix: "set the subnet to " + n.PodCIDR + " in " + first + ", then restart the pods on " + n.Name})
		}
	}
	return out, nil
}

// WorkerDNS checks the kubelet's clusterDNS: it must list the kube-dns
// Service IP of cluster.yaml, and, once the Service exists, its ClusterIP;
// otherwise pods with dnsPolicy ClusterFirst ask a nameserver that is not
// there (https://kubernetes.io/docs/tasks/administer-cluster/dns-custom-nameservers/).
func WorkerDNS(bootstrap bool) func(*labcheck.Env) ([]labcheck.Mistake, error) {
	return func(e *labcheck.Env) ([]labcheck.Mistake, error) {
		lab := labOf(bootstrap)
		svcIP := ""
		if e.API != nil {
			svc, err := e.API.CoreV1().Services(metav1.NamespaceSystem).Get(e.Ctx, "kube-dns", metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nil, fmt.Errorf("get Service kube-system/kube-dns: %w", err)
			default:
				svcIP = svc.Spec.ClusterIP
			}
		}
		var out []labcheck.Mistake
		for _, n := range WorkerSel(bootstrap)(e) {
			k, _, err := e.ReadKubelet(lab, n.Name)
			if err != nil {
				return nil, err
			}
			if k == nil || k.ConfigPath == "" {
				continue
			}
			ev := k.ConfigPath + ": clusterDNS " + fmt.Sprint(k.Config.ClusterDNS)
			if !slices.Contains(k.Config.ClusterDNS, e.Cluster.Kubernetes.ClusterDNS) {
				out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("the kubelet's clusterDNS does not list %s, the kube-dns Service IP of cluster.yaml: pods on %s cannot resolve Service names", e.Cluster.Kubernetes.ClusterDNS, n.Name),
					Evidence: ev, Fix: "clusterDNS: [" + e.Cluster.Kubernetes.ClusterDNS + "] in " + k.ConfigPath + ", restart the kubelet and recreate the pods"})
			} else if svcIP != "" && !slices.Contains(k.Config.ClusterDNS, svcIP) {
				out = append(out, labcheck.Mistake{Lab: labid.CoreDNS, Node: n.Name, What: fmt.Sprintf("the kube-dns Service has ClusterIP %s, but the kubelet's clusterDNS is %v: pods ask a nameserver nobody serves", svcIP, k.Config.ClusterDNS),
					Evidence: ev + "; Service kube-system/kube-dns clusterIP " + svcIP, Fix: "recreate the kube-dns Service with clusterIP: " + e.Cluster.Kubernetes.ClusterDNS})
			}
			ms, err := resolvConf(e, lab, n.Name, k)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
		return out, nil
	}
}

// WorkerIdentity checks who each kubelet and kube-proxy is: the node name
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
func WorkerIdentity(bootstrap bool) func(*labcheck.Env) ([]labcheck.Mistake, error) {
	return func(e *labcheck.Env) ([]labcheck.Mistake, error) {
		lab := labOf(bootstrap)
		var out []labcheck.Mistake
		ca, caWhat, err := e.ClusterCA()
		if err != nil {
			return nil, err
		}
		for _, n := range WorkerSel(bootstrap)(e) {
			k, _, err := e.ReadKubelet(lab, n.Name)
			if err != nil {
				return nil, err
			}
			if k == nil {
				continue // workerRuntime reports the missing unit
			}
			name, nameEv := "", ""
			if v, ok := k.Unit.Flag("hostname-override"); ok {
				name, nameEv = v, k.Unit.Evidence("hostname-override")
			} else {
				h, ok, err := e.Read(n.Name, "/proc/sys/kernel/hostname")
				if err != nil {
					return nil, err
				}
				if ok {
					name = strings.ToLower(strings.TrimSpace(string(h)))
					nameEv = "host name " + name + " (no --hostname-override)"
				}
			}
			if name != "" && name != n.Name {
				out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("the kubelet on %s registers as node %q, not %q: the Node authorizer lets a kubelet touch only the Node named in its cert (system:node:%s), and the cluster expects node %s", n.Name, name, n.Name, n.Name, n.Name),
					Evidence: nameEv, Fix: "--hostname-override=" + n.Name + " in kubelet.service (or hostnamectl set-hostname " + n.Name + "), then restart the kubelet"})
			}
			// The cert must name the node cluster.yaml knows; a wrong node
			// name is reported above.
			name = n.Name
			if k.Kubeconfig == "" {
				out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: "the kubelet has no --kubeconfig: it runs standalone and never registers with the apiserver",
					Evidence: k.Unit.Evidence("kubeconfig"), Fix: "--kubeconfig=/var/lib/kubelet/kubeconfig"})
			} else {
				ms, err := nodeKubeconfig(e, lab, n.Name, k.Kubeconfig, "the kubelet's kubeconfig", labcheck.NodeUserPrefix+name, labcheck.GroupNodes, nameEv, bootstrap)
				if err != nil {
					return nil, err
				}
				out = append(out, ms...)
			}
			if !k.Config.ServerTLSBootstrap && k.ConfigPath != "" {
				if k.Config.TLSCertFile == "" {
					out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: "the kubelet has no tlsCertFile and no serverTLSBootstrap: it serves a self-signed cert, which the apiserver (--kubelet-certificate-authority) rejects, so logs and exec fail",
						Evidence: k.ConfigPath + ": no tlsCertFile", Fix: "tlsCertFile: /var/lib/kubelet/kubelet.pem and tlsPrivateKeyFile: /var/lib/kubelet/kubelet-key.pem (the node's cert from $KHW_STATE_DIR/$KHW_CLUSTER/pki)"})
				} else {
					fix := "copy $KHW_STATE_DIR/$KHW_CLUSTER/pki/" + n.Name + ".pem and " + n.Name + "-key.pem to " + path.Dir(k.Config.TLSCertFile) + " and restart the kubelet"
					cert, ms, err := e.LoadCert(lab, n.Name, k.Config.TLSCertFile, "the kubelet serving cert (tlsCertFile)", fix)
					if err != nil {
						return nil, err
					}
					out = append(out, ms...)
					if other := otherNode(cert, n.Name); other != "" {
						// Another node's cert copied here: name that, not the
						// SANs it lacks as a consequence.
						out = append(out, labcheck.Mistake{Lab: labid.Workers, Node: n.Name, What: fmt.Sprintf("%s holds %s's identity (CN=%s), not %s's: it was copied from the wrong node", k.Config.TLSCertFile, other, cert.Subject.CommonName, n.Name),
							Evidence: k.Config.TLSCertFile + ": " + labcheck.Describe(cert), Fix: fix})
					} else if cert != nil {
						out = append(out, e.CheckCert(n.Name, k.Config.TLSCertFile, cert, labcheck.CertWant{Lab: labid.PKI, What: "the kubelet serving cert " + k.Config.TLSCertFile, Node: true, Server: true,
							SANs: []labcheck.SANWant{{Host: n.IP, Why: "the apiserver dials the kubelet at its InternalIP for logs, exec and port-forward"}}, CA: ca, CAWhat: caWhat, Fix: fix})...)
						if k.Config.TLSPrivateKeyFile != "" {
							ms, err := e.CheckKey(lab, n.Name, k.Config.TLSCertFile, k.Config.TLSPrivateKeyFile, cert, fix)
							if err != nil {
								return nil, err
							}
							out = append(out, ms...)
						}
					}
				}
			}
			ms, err := kubeProxyIdentity(e, lab, n)
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
func nodeKubeconfig(e *labcheck.Env, lab, node, p, what, cn, org, nameEv string, bootstrap bool) ([]labcheck.Mistake, error) {
	return e.ComponentKubeconfig(lab, node, p, what, cn, org, nameEv, bootstrap, labcheck.ViaLB)
}

// kubeProxyIdentity reads kube-proxy's kubeconfig (--kubeconfig, or
// clientConnection.kubeconfig of its --config) and checks it.
// otherNode returns the node name in cert's CN when it is a node identity
// (system:node:<name>) of another node than node, else "".
func otherNode(cert *x509.Certificate, node string) string {
	if cert == nil {
		return ""
	}
	other, ok := strings.CutPrefix(cert.Subject.CommonName, labcheck.NodeUserPrefix)
	if !ok || other == node {
		return ""
	}
	return other
}

func kubeProxyIdentity(e *labcheck.Env, lab string, n config.Node) ([]labcheck.Mistake, error) {
	u, ok, err := e.ReadUnit(n.Name, "kube-proxy.service")
	if err != nil || !ok {
		if err != nil {
			return nil, err
		}
		return []labcheck.Mistake{{Lab: lab, Node: n.Name, What: "kube-proxy.service is not known to systemd: Services (ClusterIPs, NodePorts) do not work on " + n.Name,
			Evidence: "`systemctl cat kube-proxy.service` printed no ExecStart", Fix: "write /etc/systemd/system/kube-proxy.service (kube-proxy --config=/var/lib/kube-proxy/kube-proxy-config.yaml), then systemctl enable --now kube-proxy"}}, nil
	}
	kc, ok := u.Flag("kubeconfig")
	if !ok {
		if cp, ok := u.Flag("config"); ok {
			data, found, err := e.Read(n.Name, cp)
			if err != nil {
				return nil, err
			}
			if !found {
				return []labcheck.Mistake{labcheck.Missing(lab, n.Name, cp, "kube-proxy's --config", "write a KubeProxyConfiguration there")}, nil
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
		return []labcheck.Mistake{{Lab: lab, Node: n.Name, What: "kube-proxy has no kubeconfig: it cannot watch Services and Endpoints",
			Evidence: u.Evidence("kubeconfig") + " and no clientConnection.kubeconfig in its --config", Fix: "clientConnection.kubeconfig: /var/lib/kube-proxy/kubeconfig"}}, nil
	}
	return nodeKubeconfig(e, lab, n.Name, kc, "kube-proxy's kubeconfig", "system:kube-proxy", "", "", false)
}

// resolvConf checks the file the kubelet gives pods with dnsPolicy Default,
// CoreDNS among them (resolvConf, default /etc/resolv.conf; "" turns it
// off): it must exist, and list no loopback nameserver such as
// systemd-resolved's 127.0.0.53, which inside a pod is the pod itself, so
// CoreDNS forwards to itself and its loop plugin stops it
// (https://coredns.io/plugins/loop/#troubleshooting,
// https://kubernetes.io/docs/tasks/administer-cluster/dns-debugging-resolution/#known-issues).
func resolvConf(e *labcheck.Env, lab, node string, k *labcheck.Kubelet) ([]labcheck.Mistake, error) {
	p := "/etc/resolv.conf"
	if k.Config.ResolvConf != nil {
		p = *k.Config.ResolvConf
	}
	if v, ok := k.Unit.Flag("resolv-conf"); ok {
		p = v
	}
	if p == "" {
		return nil, nil
	}
	data, ok, err := e.Read(node, p)
	if err != nil {
		return nil, err
	}
	if !ok {
		return []labcheck.Mistake{{Lab: lab, Node: node, What: "the kubelet's resolvConf " + p + " does not exist: pods with dnsPolicy Default (CoreDNS) fail to start",
			Evidence: k.ConfigPath + ": resolvConf " + p + "; no such file on " + node, Fix: "resolvConf: /run/systemd/resolve/resolv.conf on a node with systemd-resolved, else /etc/resolv.conf"}}, nil
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
	return []labcheck.Mistake{{Lab: lab, Node: node, What: "the kubelet gives pods the resolver file " + p + ", whose nameserver " + strings.Join(loop, ", ") + " is a loopback address: inside a pod that is the pod itself, so CoreDNS forwards to itself and stops (\"Loop … detected\")",
		Evidence: p + " on " + node + ": nameserver " + strings.Join(loop, ", "), Fix: "resolvConf: /run/systemd/resolve/resolv.conf (the real upstream servers) in " + labcheck.OrDefault(k.ConfigPath, "the kubelet config") + ", restart the kubelet, then kubectl -n kube-system rollout restart deploy/coredns"}}, nil
}

// workersDetectors are the detectors of lab Workers, in the order they run.
var Detectors = []labcheck.Detector{
	{Name: "worker-runtime", Lab: labid.Workers, Doc: "every worker (w3 too): containerd's config present; CNI config present, its plugin binaries exist, its subnet = the podCIDR", Run: workerRuntime()},
	{Name: "worker-dns", Lab: labid.Workers, Doc: "kubelet clusterDNS = the kube-dns Service IP", Run: WorkerDNS(false)},
	{Name: "worker-identity", Lab: labid.Workers, Doc: "node name = cluster.yaml = kubelet client cert CN system:node:<name>; kubeconfigs via the lb with the cluster CA; serving cert SANs; kube-proxy identity", Run: WorkerIdentity(false)},
}

// Excuse says whether a kernel-settings difference of the workers' step
// (steps.DiffRequired) is a correct variant on its node: swap on, or in
// /etc/fstab, is when the node's kubelet is told to run with it
// (KubeletConfiguration failSwapOn: false;
// https://kubernetes.io/docs/concepts/cluster-administration/swap-memory-management/).
// Every other required setting is never excused. Errors: the kubelet's
// config could not be read from the node.
func Excuse(ctx context.Context, d steps.Diff, src labcheck.Source) (grade.Finding, bool, error) {
	if d.Subject != SubjectSwap && d.Subject != SubjectSwapFstab {
		return grade.Finding{}, false, nil
	}
	// ReadKubelet reads only through the source: no cluster, API or clock.
	k, ms, err := labcheck.NewEnv(ctx, nil, src, nil, nil, time.Time{}).ReadKubelet(labid.Workers, d.Node)
	if err != nil || len(ms) > 0 || k.Config.FailSwapOn == nil || *k.Config.FailSwapOn {
		return grade.Finding{}, false, err
	}
	return grade.Finding{Lab: labid.Workers, Node: d.Node, Kind: grade.Variant, Subject: d.Subject,
		What:     d.Subject + " is on, and the kubelet is told to run with it (failSwapOn: false in " + k.ConfigPath + ")",
		Why:      "the kubelet then starts with swap; by default pods still may not use it (memorySwap.swapBehavior NoSwap)",
		Evidence: d.Evidence}, true, nil
}
