package grade

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/khw-dev/khw/internal/config"
)

// Node paths of the config files the rules read.
const (
	etcdUnit       = "/etc/systemd/system/etcd.service"
	apiserverUnit  = "/etc/systemd/system/kube-apiserver.service"
	cmUnit         = "/etc/systemd/system/kube-controller-manager.service"
	schedulerYAML  = "/etc/kubernetes/config/kube-scheduler.yaml"
	haproxyCfg     = "/etc/haproxy/haproxy.cfg"
	kubeletUnit    = "/etc/systemd/system/kubelet.service"
	kubeletYAML    = "/var/lib/kubelet/kubelet-config.yaml"
	kubeProxyYAML  = "/var/lib/kube-proxy/kube-proxy-config.yaml"
	containerdTOML = "/etc/containerd/config.toml"
	sysctlConf     = "/etc/sysctl.d/k8s.conf"
	modulesConf    = "/etc/modules-load.d/k8s.conf"

	systemdCgroupKey = "plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options.SystemdCgroup"
	// systemdCgroupKeyV2 is the same setting in a config version 2 file,
	// which containerd 2.x still reads.
	systemdCgroupKeyV2 = "plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc.options.SystemdCgroup"
)

// value is one node's side of a setting, as a rule sees it.
type value struct {
	Ref, Got       string
	RefSet, GotSet bool
	Node           config.Node
	Cluster        *config.Cluster
	// Other reads another setting of a file on the same node (the node's
	// own file, or the reference when the node has none).
	Other func(path, key string) (string, bool)
}

// rule judges one setting of one file. Either check (this node's value
// alone) or peers (the value must be the same on every node that has the
// file) is set.
type rule struct {
	path, key string
	kind      Kind
	// check returns what is wrong with v, "" when nothing is.
	check func(v value) string
	peers bool
	// why says what the rule protects and cites the upstream source.
	why string
}

// rules are the settings whose change is a mistake, not a variant: what
// breaks the cluster, weakens its security, or must agree with the node's
// peers. Every other difference from the reference is a Variant. A rule
// about a setting the reference does not set applies only when the node
// sets it.
var rules = []rule{
	// etcd (https://etcd.io/docs/v3.7/op-guide/security/,
	// https://etcd.io/docs/v3.7/op-guide/configuration/).
	{path: etcdUnit, key: "--client-cert-auth", kind: Weakens, check: keep,
		why: "without it any client that reaches port 2379 reads and writes every key, Secrets included, with no certificate (etcd op-guide/security)"},
	{path: etcdUnit, key: "--peer-client-cert-auth", kind: Weakens, check: keep,
		why: "without it any host that reaches port 2380 can talk to this member as a peer (etcd op-guide/security)"},
	{path: etcdUnit, key: "--trusted-ca-file", kind: Weakens, check: set,
		why: "the CA that client certificates are checked against; without it client certificates are not verified (etcd op-guide/security)"},
	{path: etcdUnit, key: "--client-cert-allowed-hostname", kind: Weakens, check: keep,
		why: "only the apiserver's certificate carries the SAN `kubernetes`; without this check every kubelet and kube-proxy certificate signed by the same CA can read every Secret in etcd"},
	{path: etcdUnit, key: "--peer-cert-allowed-cn", kind: Weakens, check: keep,
		why: "without it any certificate of the cluster CA is accepted as a peer (etcd op-guide/security)"},
	{path: etcdUnit, key: "--listen-client-urls", kind: Breaks, check: listensOn("https", 2379),
		why: "the apiservers on every control plane reach this member at https://<its IP>:2379 (their --etcd-servers)"},
	{path: etcdUnit, key: "--listen-peer-urls", kind: Breaks, check: listensOn("https", 2380),
		why: "the other members reach this one at https://<its IP>:2380 (--initial-cluster)"},
	{path: etcdUnit, key: "--initial-advertise-peer-urls", kind: Breaks, check: keep,
		why: "it must be this member's URL in --initial-cluster, or the member refuses to start (etcd: \"--initial-cluster has ... but missing from --initial-advertise-peer-urls\")"},
	{path: etcdUnit, key: "--advertise-client-urls", kind: Breaks, check: keep,
		why: "clients that discover members (etcdctl --endpoints of one member, the member list) are sent to this URL"},
	{path: etcdUnit, key: "--initial-cluster", kind: Breaks, check: initialCluster,
		why: "the members of --initial-cluster must be the control planes of cluster.yaml at their peer URLs, or the members cannot find each other (etcd clustering guide, static bootstrap)"},
	{path: etcdUnit, key: "--initial-cluster", peers: true, kind: Inconsistent,
		why: "every member must be started with the same --initial-cluster, or they cannot form one cluster (etcd clustering guide, static bootstrap)"},
	{path: etcdUnit, key: "--initial-cluster-token", peers: true, kind: Inconsistent,
		why: "members with different tokens get different cluster IDs and refuse each other (etcd clustering guide)"},

	// kube-apiserver (https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/).
	{path: apiserverUnit, key: "--authorization-mode", kind: Weakens, check: hasAll("Node", "RBAC"),
		why: "Node limits each kubelet to its own node's objects and RBAC everyone else; AlwaysAllow lets every authenticated user do anything (https://kubernetes.io/docs/reference/access-authn-authz/authorization/)"},
	{path: apiserverUnit, key: "--enable-admission-plugins", kind: Weakens, check: hasAll("NodeRestriction"),
		why: "NodeRestriction, which is not on by default, stops a kubelet from changing other nodes and their pods (https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#noderestriction)"},
	{path: apiserverUnit, key: "--anonymous-auth", kind: Weakens, check: notTrueWithAlwaysAllow,
		why: "anonymous requests are user system:anonymous; with an authorizer that allows everything they can do anything"},
	{path: apiserverUnit, key: "--client-ca-file", kind: Breaks, check: set,
		why: "without it no client certificate authenticates: the admin, the kubelets, kube-proxy, the controller-manager and the scheduler are all anonymous"},
	{path: apiserverUnit, key: "--kubelet-certificate-authority", kind: Weakens, check: set,
		why: "without it the apiserver does not verify the kubelet's serving certificate when it calls logs, exec and port-forward"},
	{path: apiserverUnit, key: "--encryption-provider-config", kind: Weakens, check: set,
		why: "without it Secrets are written to etcd in plain text (https://kubernetes.io/docs/tasks/administer-cluster/encrypt-data/)"},
	{path: apiserverUnit, key: "--advertise-address", kind: Breaks, check: isNodeIP,
		why: "the `kubernetes` Service's endpoints are the advertised addresses: pods that reach the API through 10.32.0.1 are sent there"},
	{path: apiserverUnit, key: "--bind-address", kind: Breaks, check: anyOrNodeIP,
		why: "HAProxy on the load balancer and the other nodes connect to <this node's IP>:<port>"},
	{path: apiserverUnit, key: "--secure-port", kind: Breaks, check: keep,
		why: "HAProxy's servers and every kubeconfig name this port (cluster.yaml kubernetes.apiServerPort)"},
	{path: apiserverUnit, key: "--service-cluster-ip-range", kind: Breaks, check: keep,
		why: "the `kubernetes` Service IP (a SAN of the apiserver's certificate) and the kube-dns IP (the kubelets' clusterDNS) come from this range (cluster.yaml kubernetes.serviceCIDR)"},
	{path: apiserverUnit, key: "--service-account-issuer", peers: true, kind: Inconsistent,
		why: "a ServiceAccount token is accepted only by an apiserver that lists its issuer: with a different issuer here, pods' tokens fail on this apiserver, depending on which one the load balancer picks"},
	{path: apiserverUnit, key: "--enable-bootstrap-token-auth", kind: Breaks, check: keepIfBootstrap,
		why: "the TLS-bootstrap worker authenticates with a bootstrap token until it has its own certificate (https://kubernetes.io/docs/reference/access-authn-authz/bootstrap-tokens/)"},

	// kube-controller-manager and kube-scheduler.
	{path: cmUnit, key: "--use-service-account-credentials", kind: Weakens, check: keep,
		why: "each controller then acts with its own ServiceAccount and narrow RBAC role instead of the controller-manager's own broad identity (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#controller-roles)"},
	{path: cmUnit, key: "--root-ca-file", kind: Breaks, check: set,
		why: "it is the ca.crt of every ServiceAccount token volume: without it pods such as CoreDNS cannot verify the apiserver"},
	{path: cmUnit, key: "--cluster-signing-cert-file", kind: Breaks, check: setIfBootstrap,
		why: "the CA that signs approved CSRs: the TLS-bootstrap worker's kubelet certificates"},
	{path: cmUnit, key: "--leader-elect", kind: Breaks, check: keepOrUnsetIs("true"),
		why: "without a leader every controller-manager acts on every object at once"},
	{path: schedulerYAML, key: "leaderElection.leaderElect", kind: Breaks, check: keepOrUnsetIs("true"),
		why: "without a leader every scheduler binds pods at once and they race"},

	// HAProxy's listener and mode are the lb-health-check detector's
	// (internal/lab/labcheck), which reads them whatever the sections are named.

	// Workers (https://kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1/,
	// https://kubernetes.io/docs/reference/access-authn-authz/kubelet-authn-authz/).
	{path: kubeletYAML, key: "authentication.anonymous.enabled", kind: Weakens, check: keepOrUnsetIs("false"),
		why: "anonymous requests to the kubelet's port 10250 could then list pods, and with authorization.mode AlwaysAllow exec into them"},
	{path: kubeletYAML, key: "authorization.mode", kind: Weakens, check: keepOrUnsetIs("Webhook"),
		why: "Webhook asks the apiserver (a SubjectAccessReview) whether the caller may use nodes/proxy, nodes/log ...; AlwaysAllow lets any authenticated caller exec into every pod of the node"},
	{path: kubeletYAML, key: "authentication.x509.clientCAFile", kind: Breaks, check: set,
		why: "the apiserver calls the kubelet (logs, exec, port-forward) with a client certificate, which is checked against this CA"},
	{path: kubeletYAML, key: "cgroupDriver", kind: Inconsistent, check: ifChanged(sameDriver), why: cgroupWhy},
	{path: containerdTOML, key: systemdCgroupKey, kind: Inconsistent, check: ifChanged(sameDriver), why: cgroupWhy},
	{path: kubeletYAML, key: "clusterDNS", kind: Breaks, check: keep,
		why: "pods get this nameserver; it must be the kube-dns Service IP (cluster.yaml kubernetes.clusterDNS)"},
	{path: kubeletYAML, key: "clusterDomain", kind: Breaks, check: keep,
		why: "CoreDNS serves cluster.yaml's domain; pods' search path must be under it"},
	{path: kubeletYAML, key: "resolvConf", kind: Breaks, check: notStub,
		why: "the resolvers CoreDNS forwards to: a systemd-resolved stub (127.0.0.53) means CoreDNS itself inside its pod, a forwarding loop (https://coredns.io/plugins/loop/#troubleshooting-loops-in-kubernetes-clusters)"},
	{path: kubeletYAML, key: "tlsCertFile", kind: Breaks, check: set,
		why: "without it the kubelet serves a self-signed certificate that the apiserver's --kubelet-certificate-authority rejects: kubectl logs and exec fail"},
	{path: kubeletYAML, key: "serverTLSBootstrap", kind: Breaks, check: keep,
		why: "the TLS-bootstrap worker has no serving certificate but the one it asks for by a CSR"},
	{path: kubeletUnit, key: "--anonymous-auth", kind: Weakens, check: notValue("true"),
		why: "a flag overrides kubelet-config.yaml: anonymous requests to port 10250 could list pods, and with AlwaysAllow exec into them"},
	{path: kubeletUnit, key: "--authorization-mode", kind: Weakens, check: notValue("AlwaysAllow"),
		why: "a flag overrides kubelet-config.yaml: AlwaysAllow lets any authenticated caller exec into every pod of the node"},
	{path: kubeletUnit, key: "--read-only-port", kind: Weakens, check: zeroOrUnset,
		why: "the read-only port serves pods and node data over plain HTTP to anyone, with no authentication (KubeletConfiguration readOnlyPort; 0 turns it off)"},
	{path: kubeletYAML, key: "readOnlyPort", kind: Weakens, check: zeroOrUnset,
		why: "the read-only port serves pods and node data over plain HTTP to anyone, with no authentication (0, the config file's default, turns it off)"},
	{path: kubeletUnit, key: "--hostname-override", kind: Breaks, check: keep,
		why: "the Node name must be the name in the kubelet's certificate (system:node:<name>), or the Node authorizer refuses it"},
	{path: kubeletUnit, key: "--node-ip", kind: Breaks, check: isNodeIP,
		why: "the apiserver and the other workers reach this node at its InternalIP"},
	{path: kubeProxyYAML, key: "clusterCIDR", kind: Breaks, check: keep,
		why: "kube-proxy tells pod traffic from outside traffic by this range (cluster.yaml kubernetes.clusterCIDR)"},
	{path: kubeProxyYAML, key: "hostnameOverride", kind: Breaks, check: keep,
		why: "kube-proxy finds its own Node by this name"},
	{path: sysctlConf, key: "net.ipv4.ip_forward", kind: Breaks, check: keep,
		why: "without forwarding the node does not route pod traffic to the other workers"},
	{path: sysctlConf, key: "net.bridge.bridge-nf-call-iptables", kind: Breaks, check: keep,
		why: "without it traffic between pods on one bridge skips kube-proxy's iptables rules: a Service whose pod is on the same node does not answer"},
	{path: modulesConf, key: "br_netfilter", kind: Breaks, check: keep,
		why: "the bridge sysctls exist only with br_netfilter loaded: after a reboot they are gone"},
}

func init() {
	for i := range rules {
		if rules[i].check == nil && !rules[i].peers {
			panic("grade: rule " + rules[i].key + " has neither check nor peers")
		}
	}
}

// keep: the value must be the reference's.
func keep(v value) string {
	switch {
	case !v.RefSet:
		return ""
	case !v.GotSet:
		return "not set (want " + v.Ref + ")"
	case !sameValue(v.Got, v.Ref):
		return "is " + v.Got + ", want " + v.Ref
	}
	return ""
}

// ifChanged applies check only when the node's value is not the
// reference's: of two settings that must agree, the one that changed is
// the mistake.
func ifChanged(check func(value) string) func(value) string {
	return func(v value) string {
		if v.GotSet == v.RefSet && sameValue(v.Got, v.Ref) {
			return ""
		}
		return check(v)
	}
}

// notValue: the setting must not be bad (a boolean compared as one).
func notValue(bad string) func(value) string {
	return func(v value) string {
		if v.GotSet && sameValue(v.Got, bad) {
			return "is " + v.Got
		}
		return ""
	}
}

func zeroOrUnset(v value) string {
	if v.GotSet && strings.TrimSpace(v.Got) != "0" {
		return "is " + v.Got + ", want 0 (off)"
	}
	return ""
}

// initialCluster: --initial-cluster lists exactly the control planes of
// cluster.yaml, each at https://<its IP, name or FQDN>:2380, in any order.
func initialCluster(v value) string {
	if !v.GotSet {
		return ""
	}
	want := map[string]config.Node{}
	for _, n := range v.Cluster.ControlPlanes() {
		want[n.Name] = n
	}
	seen := map[string]bool{}
	for _, e := range strings.Split(v.Got, ",") {
		name, raw, ok := strings.Cut(strings.TrimSpace(e), "=")
		n, known := want[name]
		if !ok || !known {
			return "names " + orUnset(name) + ", which is not a control plane of cluster.yaml"
		}
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "https" || u.Port() != "2380" ||
			(u.Hostname() != n.IP && u.Hostname() != n.Name && u.Hostname() != v.Cluster.FQDN(n)) {
			return "has " + name + "=" + raw + ", want https://" + n.IP + ":2380"
		}
		seen[name] = true
	}
	for name := range want {
		if !seen[name] {
			return "lacks " + name
		}
	}
	return ""
}

// set: the node must set it (to any value) when the reference does.
func set(v value) string {
	if v.RefSet && !v.GotSet {
		return "not set"
	}
	return ""
}

// keepOrUnsetIs: as keep, but a node that leaves it out gets the upstream
// default, which is def.
func keepOrUnsetIs(def string) func(value) string {
	return func(v value) string {
		if !v.GotSet {
			if v.RefSet && def != v.Ref {
				return "not set: the default is " + def + ", want " + v.Ref
			}
			return ""
		}
		return keep(v)
	}
}

// hasAll: a comma-separated list that must hold every one of items, and
// never AlwaysAllow.
func hasAll(items ...string) func(value) string {
	return func(v value) string {
		if !v.GotSet {
			if v.RefSet {
				return "not set (want " + v.Ref + ")"
			}
			return ""
		}
		have := map[string]bool{}
		for _, s := range strings.Split(v.Got, ",") {
			have[strings.TrimSpace(s)] = true
		}
		if have["AlwaysAllow"] {
			return "is " + v.Got + ": AlwaysAllow authorizes every request"
		}
		var lack []string
		for _, it := range items {
			if !have[it] {
				lack = append(lack, it)
			}
		}
		if len(lack) > 0 {
			return "is " + v.Got + ", without " + strings.Join(lack, " and ")
		}
		return ""
	}
}

func notTrueWithAlwaysAllow(v value) string {
	mode, _ := v.Other(apiserverUnit, "--authorization-mode")
	if v.GotSet && v.Got == "true" && strings.Contains(mode, "AlwaysAllow") {
		return "is true while --authorization-mode allows everything"
	}
	return ""
}

func isNodeIP(v value) string {
	if !v.GotSet {
		return ""
	}
	if v.Got != v.Node.IP {
		return "is " + v.Got + ", not " + v.Node.Name + "'s IP " + v.Node.IP
	}
	return ""
}

func anyOrNodeIP(v value) string {
	if !v.GotSet {
		return ""
	}
	switch v.Got {
	case "0.0.0.0", "::", v.Node.IP:
		return ""
	}
	return "is " + v.Got + ": only " + v.Node.IP + " (or 0.0.0.0, every address) is reachable from the other nodes"
}

// listensOn: a comma-separated URL list that must include the node's IP
// (or every address) at port with scheme; a URL of another scheme is only
// fine on loopback.
func listensOn(scheme string, port int) func(value) string {
	return func(v value) string {
		if !v.GotSet {
			if v.RefSet {
				return "not set: etcd then listens on localhost only"
			}
			return ""
		}
		ok := false
		for _, s := range strings.Split(v.Got, ",") {
			u, err := url.Parse(strings.TrimSpace(s))
			if err != nil {
				return "has an unparsable URL " + s
			}
			a, _ := netip.ParseAddr(u.Hostname())
			loopback := a.IsLoopback() || u.Hostname() == "localhost"
			if u.Scheme != scheme && !loopback {
				return "serves " + s + " without TLS: certificates are neither shown nor checked there"
			}
			if u.Port() == fmt.Sprint(port) && (u.Hostname() == v.Node.IP || a.IsUnspecified()) {
				ok = true
			}
		}
		if !ok {
			return fmt.Sprintf("is %s: nothing listens on %s://%s:%d", v.Got, scheme, v.Node.IP, port)
		}
		return ""
	}
}

func keepIfBootstrap(v value) string {
	if hasBootstrap(v.Cluster) {
		return keep(v)
	}
	return ""
}

func setIfBootstrap(v value) string {
	if hasBootstrap(v.Cluster) {
		return set(v)
	}
	return ""
}

func hasBootstrap(c *config.Cluster) bool {
	for _, n := range c.Workers() {
		if n.TLSBootstrap {
			return true
		}
	}
	return false
}

// sameDriver: the kubelet's cgroupDriver is systemd exactly when
// containerd's runc runs with SystemdCgroup = true.
func sameDriver(v value) string {
	driver, _ := v.Other(kubeletYAML, "cgroupDriver")
	if driver == "" {
		driver = "cgroupfs" // the kubelet's default
	}
	sc, ok := v.Other(containerdTOML, systemdCgroupKey)
	if !ok {
		sc, _ = v.Other(containerdTOML, systemdCgroupKeyV2)
	}
	if (driver == "systemd") != sameValue(sc, "true") {
		return fmt.Sprintf("the kubelet's cgroupDriver is %s but containerd's SystemdCgroup is %s", driver, orFalse(sc))
	}
	return ""
}

func orFalse(s string) string {
	if s == "" {
		return "false (not set)"
	}
	return s
}

func notStub(v value) string {
	if v.GotSet && v.Got == "/etc/resolv.conf" && v.Ref == "/run/systemd/resolve/resolv.conf" {
		return "is /etc/resolv.conf, which on this node is systemd-resolved's stub (nameserver 127.0.0.53)"
	}
	return ""
}

const cgroupWhy = "the kubelet and containerd manage one node's cgroups and must use the same driver (https://kubernetes.io/docs/setup/production-environment/container-runtimes/#cgroup-drivers). A kubelet since 1.31 asks containerd 2.x for its driver over the CRI and follows it (KEP-4033, on by default since 1.31, GA in 1.34), but older kubelets and runtimes use their own setting: keep both equal"

// sameValue compares two values, booleans as booleans (Go's ParseBool,
// which the components' flags use, and YAML 1.1's yes/no/on/off, which the
// kubelet's config decoder accepts).
func sameValue(a, b string) bool {
	if a == b {
		return true
	}
	x, okA := parseBool(a)
	y, okB := parseBool(b)
	return okA && okB && x == y
}

func parseBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "t", "true", "yes", "y", "on":
		return true, true
	case "0", "f", "false", "no", "n", "off":
		return false, true
	}
	return false, false
}
