// Package render turns cluster.yaml into the files each node needs (systemd
// units, component configs, /etc/hosts, CNI configs and plugins) and the
// cluster-wide manifests applied through the API (RBAC, CoreDNS), from the
// text/templates embedded in package templates.
//
// Node and Manifests return files in memory, so a bring-up can push them
// without touching disk; All writes them into the state directory D:
//
//	D/nodes/<node>/<absolute target path>   e.g. D/nodes/w1/etc/containerd/config.toml
//	D/manifests/<name>.yaml                 e.g. D/manifests/coredns.yaml
//
// Rendering is deterministic: the same cluster.yaml and NodeFacts give the same
// bytes, so a second All reports nothing written. The facts that depend on the
// machine rather than on cluster.yaml (cgroup version, system container or VM,
// resolv.conf) are a NodeFacts per node: DefaultFacts before the machines
// exist, ParseFacts(output of FactsProbe) once they do.
//
// The values follow shared/design/cluster-facts.md; where upstream Kubernetes
// and the seed blog posts disagree, upstream wins.
package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/templates"
)

// KubeletClientUser is the user name the apiserver has when it calls kubelets
// (logs, exec, port-forward): the CN of its --kubelet-client-certificate, the
// `kubernetes` cert of cluster-facts.md. The apiserver-to-kubelet
// ClusterRoleBinding grants this user the nodes/* subresources; a cert with
// another CN would get 403 from every kubelet. internal/pki must issue the
// kubernetes cert with this CN.
const KubeletClientUser = "kubernetes"

// Sub-directories of the state directory that All writes.
const (
	// NodesDir holds one directory per node with the rendered files at their
	// target paths. render owns it: files it no longer renders are removed.
	NodesDir = "nodes"
	// ManifestsDir holds the cluster manifests.
	ManifestsDir = "manifests"
)

// File modes of rendered files.
const (
	// ConfigMode is the mode of every rendered file except scripts: none
	// holds a secret (certs, keys, kubeconfigs and the encryption config are
	// not rendered here).
	ConfigMode fs.FileMode = 0o644
	// ScriptMode is the mode of the CNI plugin scripts in /opt/cni/bin.
	ScriptMode fs.FileMode = 0o755
)

// File is one rendered file.
type File struct {
	// Path is where the file belongs. For node files it is the absolute
	// target path on the node (/etc/systemd/system/etcd.service); for
	// manifests it is the file name under D/manifests (coredns.yaml).
	Path string
	// Mode is the permission bits the file must have on the node (and has in
	// the state directory): ConfigMode or ScriptMode.
	Mode fs.FileMode
	// Data is the content.
	Data []byte
	// Source is the template it came from, relative to the repository root
	// (templates/node/worker/kubelet.service.tmpl), for messages and labs.
	Source string
}

// Input is a file that rendered units and configs read but render does not
// produce (certificates, keys, kubeconfigs, the encryption config): the
// bring-up must install it at Path with Mode.
type Input struct {
	// Path is the absolute target path on the node.
	Path string
	// Mode is 0644 for certificates, 0600 for keys, kubeconfigs and the
	// encryption config.
	Mode fs.FileMode
	// What describes the content and where it comes from in the state
	// directory, e.g. "cluster CA certificate (D/pki/ca.pem)".
	What string
	// Source is the file to install: a slash path relative to the state
	// directory (pki/ca.pem), or an absolute path on the jumpbox for a
	// pre-issued kubelet cert (nodes[].kubeletCert).
	Source string
}

// Report lists what All did, as slash-separated paths relative to the state
// directory (nodes/w1/etc/hosts, manifests/coredns.yaml), each list sorted.
type Report struct {
	// Written holds files that were new or differed and were (re)written.
	Written []string
	// Unchanged holds files that already had the rendered content and mode.
	Unchanged []string
	// Removed holds files under D/nodes that are no longer rendered, e.g. the
	// bridge CNI config after switching kubernetes.cni to mybridge, or every
	// file of a node removed from cluster.yaml.
	Removed []string
}

// Changed reports whether All wrote or removed anything.
func (r *Report) Changed() bool { return len(r.Written) > 0 || len(r.Removed) > 0 }

// PauseImage is the pod sandbox image reference containerd is configured with
// (registry.k8s.io/pause:<versions.pause>); import it on workers under exactly
// this name.
func PauseImage(c *config.Cluster) string { return "registry.k8s.io/pause:" + c.Versions.Pause }

// CoreDNSImage is the image reference of the CoreDNS Deployment
// (registry.k8s.io/coredns/coredns:<versions.coredns>); import it on workers
// under exactly this name.
func CoreDNSImage(c *config.Cluster) string {
	return "registry.k8s.io/coredns/coredns:" + c.Versions.CoreDNS
}

// fileSpec says which template becomes which file on which nodes.
type fileSpec struct {
	src  string // path inside templates.FS
	path string // absolute target path on the node
	mode fs.FileMode
	raw  bool // copy verbatim instead of executing as a template
	want func(d *nodeData) bool
}

func role(r string) func(d *nodeData) bool {
	return func(d *nodeData) bool { return d.Node.Role == r }
}

func workerWithCNI(cni string) func(d *nodeData) bool {
	return func(d *nodeData) bool {
		return d.Node.Role == config.RoleWorker && d.Cluster.Kubernetes.CNI == cni
	}
}

var (
	isCP     = role(config.RoleControlPlane)
	isLB     = role(config.RoleLoadBalancer)
	isWorker = role(config.RoleWorker)
)

// nodeSpecs is the whole catalogue of node files, in the order a student
// meets them.
var nodeSpecs = []fileSpec{
	{src: "node/all/hosts.tmpl", path: "/etc/hosts", want: func(*nodeData) bool { return true }},

	{src: "node/controlplane/etcd.service.tmpl", path: "/etc/systemd/system/etcd.service", want: isCP},
	{src: "node/controlplane/kube-apiserver.service.tmpl", path: "/etc/systemd/system/kube-apiserver.service", want: isCP},
	{src: "node/controlplane/audit-policy.yaml.tmpl", path: "/etc/kubernetes/config/audit-policy.yaml", want: isCP},
	{src: "node/controlplane/kube-controller-manager.service.tmpl", path: "/etc/systemd/system/kube-controller-manager.service", want: isCP},
	{src: "node/controlplane/kube-scheduler.service.tmpl", path: "/etc/systemd/system/kube-scheduler.service", want: isCP},
	{src: "node/controlplane/kube-scheduler.yaml.tmpl", path: "/etc/kubernetes/config/kube-scheduler.yaml", want: isCP},

	{src: "node/loadbalancer/haproxy.cfg.tmpl", path: "/etc/haproxy/haproxy.cfg", want: isLB},

	{src: "node/worker/modules-load-k8s.conf.tmpl", path: "/etc/modules-load.d/k8s.conf", want: isWorker},
	{src: "node/worker/sysctl-k8s.conf.tmpl", path: "/etc/sysctl.d/k8s.conf", want: isWorker},
	{src: "node/worker/containerd-config.toml.tmpl", path: "/etc/containerd/config.toml", want: isWorker},
	{src: "node/worker/containerd.service.tmpl", path: "/etc/systemd/system/containerd.service", want: isWorker},
	{src: "node/worker/kubelet.service.tmpl", path: "/etc/systemd/system/kubelet.service", want: isWorker},
	{src: "node/worker/kubelet-config.yaml.tmpl", path: "/var/lib/kubelet/kubelet-config.yaml", want: isWorker},
	{src: "node/worker/kube-proxy-config.yaml.tmpl", path: "/var/lib/kube-proxy/kube-proxy-config.yaml", want: isWorker},
	{src: "node/worker/kube-proxy.service.tmpl", path: "/etc/systemd/system/kube-proxy.service", want: isWorker},
	{src: "node/worker/khw-pod-routes.service.tmpl", path: "/etc/systemd/system/khw-pod-routes.service", want: isWorker},
	{src: "node/worker/10-bridge.conf.tmpl", path: "/etc/cni/net.d/10-bridge.conf", want: workerWithCNI(config.CNIBridge)},
	{src: "node/worker/99-loopback.conf.tmpl", path: "/etc/cni/net.d/99-loopback.conf", want: workerWithCNI(config.CNIBridge)},
	{src: "node/worker/10-mybridge.conf.tmpl", path: "/etc/cni/net.d/10-mybridge.conf", want: workerWithCNI(config.CNIMyBridge)},
	{src: "node/worker/99-myloopback.conf.tmpl", path: "/etc/cni/net.d/99-myloopback.conf", want: workerWithCNI(config.CNIMyBridge)},
	{src: "files/mybridge", path: "/opt/cni/bin/mybridge", mode: ScriptMode, raw: true, want: workerWithCNI(config.CNIMyBridge)},
	{src: "files/myloopback", path: "/opt/cni/bin/myloopback", mode: ScriptMode, raw: true, want: workerWithCNI(config.CNIMyBridge)},
}

// manifestSpecs maps manifest templates to file names under D/manifests.
var manifestSpecs = []struct{ src, name string }{
	{"manifests/apiserver-to-kubelet-rbac.yaml.tmpl", "apiserver-to-kubelet-rbac.yaml"},
	{"manifests/tls-bootstrap-rbac.yaml.tmpl", "tls-bootstrap-rbac.yaml"},
	{"manifests/coredns.yaml.tmpl", "coredns.yaml"},
}

// tmpl holds every *.tmpl file of templates.FS, each named by its path, plus
// the shared "header" definitions. Parsing happens at package init, so a
// broken template fails every test (and `khw` at start) instead of a later run.
var tmpl = template.Must(parseTemplates(templates.FS))

func parseTemplates(fsys fs.FS) (*template.Template, error) {
	root := template.New("").Option("missingkey=error").Funcs(template.FuncMap{
		// json writes v as a JSON value; a JSON string is a valid YAML string.
		"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
	})
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".tmpl") {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		if _, err := root.New(p).Parse(string(b)); err != nil {
			return fmt.Errorf("templates/%s: %w", p, err)
		}
		return nil
	})
	return root, err
}

// EmulatedLeaderElection is the timing used on QEMU-emulated (TCG) control
// planes: four times upstream's. Under TCG one request to the local
// apiserver can take several seconds; with the 10 s renew deadline the
// leader misses it, exits ("leaderelection lost") and restarts, and every
// controller (the CSR approver of TLS bootstrap among them) starts over.
var EmulatedLeaderElection = LeaderElection{LeaseDuration: "60s", RenewDeadline: "40s", RetryPeriod: "8s"}

// EmulatedEtcdCheckTimeout is the deadline of kube-apiserver's etcd checks
// (/livez/etcd, /readyz/etcd and etcd-readiness) on QEMU-emulated control
// planes: four times upstream's 2s. Under TCG one etcd read can take
// longer than 2s while etcd is healthy; the apiserver then reports itself
// not ready, and the load balancer takes it out of rotation for nothing.
const EmulatedEtcdCheckTimeout = "8s"

func validCluster(c *config.Cluster) error {
	if c == nil {
		return errors.New("render: no cluster given")
	}
	if _, err := c.Validate(); err != nil {
		return fmt.Errorf("render: cluster.yaml is not valid, nothing rendered: %w", err)
	}
	return nil
}

func execute(src string, data any) ([]byte, error) {
	var buf bytes.Buffer
	if err := tmpl.ExecuteTemplate(&buf, src, data); err != nil {
		return nil, fmt.Errorf("render templates/%s: %w", src, err)
	}
	return buf.Bytes(), nil
}

// Node renders every file of the node called name with the given facts,
// sorted by Path. It fails when the cluster does not validate, the node is not
// in cluster.yaml, or the facts are invalid (see NodeFacts.Validate).
func Node(c *config.Cluster, name string, f NodeFacts) ([]File, error) {
	if err := validCluster(c); err != nil {
		return nil, err
	}
	return renderNode(c, name, f)
}

func renderNode(c *config.Cluster, name string, f NodeFacts) ([]File, error) {
	n, ok := c.Node(name)
	if !ok {
		return nil, fmt.Errorf("render: node %q is not in cluster.yaml (fix: use one of: %s)", name, strings.Join(nodeNames(c), ", "))
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	d := newNodeData(c, n, f)
	var out []File
	for _, s := range nodeSpecs {
		if !s.want(d) {
			continue
		}
		var data []byte
		var err error
		if s.raw {
			data, err = fs.ReadFile(templates.FS, s.src)
		} else {
			d.Source = "templates/" + s.src
			data, err = execute(s.src, d)
		}
		if err != nil {
			return nil, fmt.Errorf("render %s %s: %w", name, s.path, err)
		}
		mode := s.mode
		if mode == 0 {
			mode = ConfigMode
		}
		out = append(out, File{Path: s.path, Mode: mode, Data: data, Source: "templates/" + s.src})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func nodeNames(c *config.Cluster) []string {
	var names []string
	for _, n := range c.Nodes {
		names = append(names, n.Name)
	}
	return names
}

// Manifests renders the cluster manifests, sorted by Path (a file name):
//   - apiserver-to-kubelet-rbac.yaml: ClusterRole system:kube-apiserver-to-kubelet
//     (nodes/proxy, stats, log, spec, metrics) bound to User KubeletClientUser;
//   - tls-bootstrap-rbac.yaml: system:node-bootstrapper and the nodeclient
//     auto-approval for Group system:bootstrappers, selfnodeclient for Group
//     system:nodes (https://kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/);
//   - coredns.yaml: ServiceAccount, ClusterRole, ClusterRoleBinding, ConfigMap
//     (Corefile), Deployment (2 replicas, 1 with a single worker) and the
//     kube-dns Service at kubernetes.clusterDNS.
//
// Each is a multi-document YAML file ready for `kubectl apply -f`.
func Manifests(c *config.Cluster) ([]File, error) {
	if err := validCluster(c); err != nil {
		return nil, err
	}
	d := &manifestData{
		Cluster:           c,
		KubeletClientUser: KubeletClientUser,
		CoreDNSReplicas:   min(2, len(c.Workers())),
		CoreDNSImage:      CoreDNSImage(c),
	}
	var out []File
	for _, s := range manifestSpecs {
		d.Source = "templates/" + s.src
		data, err := execute(s.src, d)
		if err != nil {
			return nil, err
		}
		out = append(out, File{Path: s.name, Mode: ConfigMode, Data: data, Source: "templates/" + s.src})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// Inputs lists the files the node called name needs besides the rendered ones
// and the binaries: certificates, keys, kubeconfigs and the encryption config,
// at the paths the rendered units and configs name. The load balancer needs
// none. It fails when the cluster does not validate or the node is unknown.
func Inputs(c *config.Cluster, name string) ([]Input, error) {
	if err := validCluster(c); err != nil {
		return nil, err
	}
	n, ok := c.Node(name)
	if !ok {
		return nil, fmt.Errorf("render: node %q is not in cluster.yaml (fix: use one of: %s)", name, strings.Join(nodeNames(c), ", "))
	}
	pub, sec := fsutil.PublicMode, fsutil.SecretMode
	switch n.Role {
	case config.RoleControlPlane:
		return []Input{
			{Path: "/etc/etcd/ca.pem", Mode: pub, What: "cluster CA certificate, etcd's trust anchor (D/pki/ca.pem)", Source: "pki/ca.pem"},
			{Path: "/etc/etcd/kubernetes.pem", Mode: pub, What: "etcd server and peer certificate (D/pki/kubernetes.pem)", Source: "pki/kubernetes.pem"},
			{Path: "/etc/etcd/kubernetes-key.pem", Mode: sec, What: "its private key (D/pki/kubernetes-key.pem)", Source: "pki/kubernetes-key.pem"},
			{Path: "/var/lib/kubernetes/ca.pem", Mode: pub, What: "cluster CA certificate (D/pki/ca.pem)", Source: "pki/ca.pem"},
			{Path: "/var/lib/kubernetes/ca-key.pem", Mode: sec, What: "cluster CA private key; the controller-manager signs approved CSRs with it (D/pki/ca-key.pem)", Source: "pki/ca-key.pem"},
			{Path: "/var/lib/kubernetes/kubernetes.pem", Mode: pub, What: "apiserver serving cert, also its etcd and kubelet client cert (D/pki/kubernetes.pem)", Source: "pki/kubernetes.pem"},
			{Path: "/var/lib/kubernetes/kubernetes-key.pem", Mode: sec, What: "its private key (D/pki/kubernetes-key.pem)", Source: "pki/kubernetes-key.pem"},
			{Path: "/var/lib/kubernetes/service-account.pem", Mode: pub, What: "ServiceAccount token verification key (D/pki/service-account.pem)", Source: "pki/service-account.pem"},
			{Path: "/var/lib/kubernetes/service-account-key.pem", Mode: sec, What: "ServiceAccount token signing key (D/pki/service-account-key.pem)", Source: "pki/service-account-key.pem"},
			{Path: "/var/lib/kubernetes/encryption-config.yaml", Mode: sec, What: "EncryptionConfiguration for Secrets (D/encryption-config.yaml)", Source: "encryption-config.yaml"},
			{Path: "/var/lib/kubernetes/kube-controller-manager.kubeconfig", Mode: sec, What: "controller-manager kubeconfig, server https://127.0.0.1 (D/kubeconfigs/kube-controller-manager.kubeconfig)", Source: "kubeconfigs/kube-controller-manager.kubeconfig"},
			{Path: "/var/lib/kubernetes/kube-scheduler.kubeconfig", Mode: sec, What: "scheduler kubeconfig, server https://127.0.0.1 (D/kubeconfigs/kube-scheduler.kubeconfig)", Source: "kubeconfigs/kube-scheduler.kubeconfig"},
		}, nil
	case config.RoleWorker:
		in := []Input{
			{Path: "/var/lib/kubernetes/ca.pem", Mode: pub, What: "cluster CA certificate: verifies clients of the kubelet (D/pki/ca.pem)", Source: "pki/ca.pem"},
			{Path: "/var/lib/kube-proxy/kubeconfig", Mode: sec, What: "kube-proxy kubeconfig, server through the load balancer (D/kubeconfigs/kube-proxy.kubeconfig)", Source: "kubeconfigs/kube-proxy.kubeconfig"},
		}
		if n.TLSBootstrap {
			return append(in, Input{Path: "/var/lib/kubelet/bootstrap-kubeconfig", Mode: sec, What: "bootstrap kubeconfig holding a bootstrap token (D/kubeconfigs/" + n.Name + "-bootstrap.kubeconfig); the kubelet writes /var/lib/kubelet/kubeconfig itself", Source: "kubeconfigs/" + n.Name + "-bootstrap.kubeconfig"}), nil
		}
		return append(in,
			Input{Path: "/var/lib/kubelet/kubelet.pem", Mode: pub, What: "kubelet serving cert, CN=system:node:" + n.Name + " (D/pki/" + n.Name + ".pem, or nodes[].kubeletCert)", Source: "pki/" + n.Name + ".pem"},
			Input{Path: "/var/lib/kubelet/kubelet-key.pem", Mode: sec, What: "its private key (D/pki/" + n.Name + "-key.pem)", Source: "pki/" + n.Name + "-key.pem"},
			Input{Path: "/var/lib/kubelet/kubeconfig", Mode: sec, What: "kubelet kubeconfig with the node's client cert (D/kubeconfigs/" + n.Name + ".kubeconfig)", Source: "kubeconfigs/" + n.Name + ".kubeconfig"},
		), nil
	}
	return nil, nil
}

// All renders every node (with facts[node], or DefaultFacts(c.Provider) for a
// node missing from facts) and the manifests, then writes them under stateDir
// with fsutil.WriteIfChanged: D/nodes/<node>/<target path> and
// D/manifests/<name>. Everything is rendered before anything is written, so a
// template or facts error leaves the state directory untouched. Files under
// D/nodes that are no longer rendered (another CNI, a removed node, leftovers
// of an interrupted write) are removed and reported; empty directories there
// are removed too. D/manifests is only written, never pruned.
//
// It fails when the cluster does not validate, facts names a node that is not
// in cluster.yaml, a node's facts are invalid, or a write fails (the Report
// then lists what was done before).
func All(c *config.Cluster, facts map[string]NodeFacts, stateDir string) (*Report, error) {
	if err := validCluster(c); err != nil {
		return nil, err
	}
	for name := range facts {
		if _, ok := c.Node(name); !ok {
			return nil, fmt.Errorf("render: facts given for node %q, which is not in cluster.yaml (fix: drop it, or add the node)", name)
		}
	}
	type target struct {
		rel  string // relative to stateDir, slash-separated
		file File
	}
	var targets []target
	for _, n := range c.Nodes {
		f, ok := facts[n.Name]
		if !ok {
			var err error
			if f, err = DefaultFacts(c.Provider); err != nil {
				return nil, err
			}
		}
		files, err := renderNode(c, n.Name, f)
		if err != nil {
			return nil, err
		}
		for _, file := range files {
			targets = append(targets, target{path.Join(NodesDir, n.Name, file.Path), file})
		}
	}
	manifests, err := Manifests(c)
	if err != nil {
		return nil, err
	}
	for _, file := range manifests {
		targets = append(targets, target{path.Join(ManifestsDir, file.Path), file})
	}

	rep := &Report{}
	for _, dir := range []string{NodesDir, ManifestsDir} {
		if err := fsutil.EnsureDir(filepath.Join(stateDir, dir)); err != nil {
			return rep, err
		}
	}
	keep := map[string]bool{}
	for _, t := range targets {
		keep[t.rel] = true
		changed, err := fsutil.WriteIfChanged(filepath.Join(stateDir, filepath.FromSlash(t.rel)), t.file.Data, t.file.Mode)
		if err != nil {
			return rep, err
		}
		if changed {
			rep.Written = append(rep.Written, t.rel)
		} else {
			rep.Unchanged = append(rep.Unchanged, t.rel)
		}
	}
	removed, err := prune(stateDir, NodesDir, keep)
	rep.Removed = removed
	sort.Strings(rep.Written)
	sort.Strings(rep.Unchanged)
	sort.Strings(rep.Removed)
	return rep, err
}

// prune removes every non-directory under stateDir/dir whose relative path is
// not in keep, then the directories left empty below stateDir/dir. It returns
// the removed files' relative paths.
func prune(stateDir, dir string, keep map[string]bool) ([]string, error) {
	root := filepath.Join(stateDir, dir)
	var removed []string
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(stateDir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if p != root {
				dirs = append(dirs, p)
			}
			return nil
		}
		if keep[rel] {
			return nil
		}
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("remove stale %s: %w", p, err)
		}
		removed = append(removed, rel)
		return nil
	})
	if err != nil {
		return removed, err
	}
	// Deepest first, so a parent is empty by the time it is tried.
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		if entries, err := os.ReadDir(d); err == nil && len(entries) == 0 {
			if err := os.Remove(d); err != nil {
				return removed, fmt.Errorf("remove empty directory %s: %w", d, err)
			}
		}
	}
	return removed, nil
}
