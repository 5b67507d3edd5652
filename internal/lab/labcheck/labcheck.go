// Package labcheck grades a lab that a student did by hand: it reads what is
// really on the nodes (files, systemd units, kernel settings, routes) and in
// the API, and names each mistake with its evidence, the fix and the lab it
// belongs to. It is what `khw lab check NN` prints.
//
// The steps' own Check (internal/bringup) compares the nodes with the files
// khw renders; a hand-made variant differs from them byte for byte and still
// works. The detectors here judge the meaning instead: a certificate whose
// SANs lack the `kubernetes` Service IP, an etcd --name that is not in
// --initial-cluster, a CNI config naming a plugin binary that is not in
// /opt/cni/bin. A valid variant passes; a wrong one is explained.
//
// Detectors are pure functions of their inputs: a Source (files and shell
// output per node), a kubernetes.Interface for API objects, and the
// cluster.yaml (*config.Cluster) for the desired facts. Tests give them small
// broken inputs without any node.
//
// Every detector names its upstream source (a Kubernetes or etcd doc, or a
// file of the upstream code) in a comment next to its rule.
package labcheck

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/labid"
)

// Jumpbox is the node name under which a Source serves the jumpbox's state
// directory D: ReadFile(ctx, Jumpbox, "pki/ca.pem") reads D/pki/ca.pem
// (paths relative to D, slash-separated). Mistakes about those files carry
// Node == Jumpbox.
const Jumpbox = "jumpbox"

// Mistake is one thing a hand-done lab got wrong: a grade.Finding whose
// Kind is grade.Wrong unless the detector says more.
type Mistake = grade.Finding

// Source reads the live nodes. The lead implements it over internal/remote's
// SSH Pool; tests use a map.
//
// Contract:
//   - ReadFile returns the whole content of the file at the absolute path on
//     node (as root: keys and kubeconfigs are 0600), or for node == Jumpbox
//     the file at the slash path relative to the state directory. It must
//     work on /proc and /sys files (their size reads as 0: use `sudo cat`,
//     not SFTP's size). A missing file is an error wrapping fs.ErrNotExist;
//     any other error means the node could not be read and ends the check.
//   - Run runs shell on node as root and returns its standard output. The
//     detectors' commands never fail on purpose (they end in `|| true`), so
//     an error means the node could not be reached or the command could not
//     run at all, and ends the check. Run is never called with Jumpbox.
//     The commands are `systemctl cat -- <unit>`, `ip -4 route show`, and
//     directory listings (ls, a loop over executables); see units.go,
//     podnet.go and workers.go.
//
// An unreachable node ends the detectors that need it with an error (the
// others still run): grade a lab on running nodes.
type Source interface {
	ReadFile(ctx context.Context, node, path string) ([]byte, error)
	Run(ctx context.Context, node, shell string) (string, error)
}

// Detector is one mistake detector.
type Detector struct {
	// Name is short and stable, e.g. "etcd-initial-cluster".
	Name string
	// Lab is the lab it grades.
	Lab string
	// Doc says in one line what it looks for (for `khw lab check --help`).
	Doc string
	run func(*env) ([]Mistake, error)
}

// env is what a detector sees.
type env struct {
	ctx context.Context
	c   *config.Cluster
	src Source
	cs  kubernetes.Interface
	now time.Time

	files   map[string]fileResult
	outputs map[string]string

	// the cluster CA, read once (clusterCA)
	ca     *x509.Certificate
	caWhat string
	caDone bool
}

type fileResult struct {
	data []byte
	err  error
}

// Detectors returns the detectors of lab in the order Check runs them, or
// every detector when lab is "". A lab without detectors (01-machines,
// 11-smoke, 12-failover) gives none.
func Detectors(lab string) []Detector {
	var out []Detector
	for _, d := range registry {
		if lab == "" || d.Lab == lab {
			out = append(out, d)
		}
	}
	return out
}

// Check runs the detectors of lab against the live cluster and returns the
// mistakes found, in detector order, then node order. An empty result means
// no detector found a mistake (see Detectors for what is looked at).
//
// c must be a validated cluster.yaml. cs may be nil when the API is not
// reachable: detectors that need it then report nothing and Check returns an
// error naming them, after running the others. Errors are for an unknown
// a node that cannot be read, or an API call that fails (lab is a catalogue
// ID; one without detectors finds nothing); a missing or
// malformed file is a Mistake, not an error.
func Check(ctx context.Context, lab string, c *config.Cluster, src Source, cs kubernetes.Interface) ([]Mistake, error) {
	return check(ctx, lab, c, src, cs, time.Now())
}

func check(ctx context.Context, lab string, c *config.Cluster, src Source, cs kubernetes.Interface, now time.Time) ([]Mistake, error) {
	e := &env{ctx: ctx, c: c, src: src, cs: cs, now: now, files: map[string]fileResult{}, outputs: map[string]string{}}
	var all []Mistake
	var errs []error
	for _, d := range Detectors(lab) {
		ms, err := d.run(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("detector %s: %w", d.Name, err))
		}
		all = append(all, ms...)
	}
	return dedupe(all), errors.Join(errs...)
}

// dedupe drops repeated mistakes (two detectors reading the same cert).
func dedupe(ms []Mistake) []Mistake {
	seen := map[Mistake]bool{}
	var out []Mistake
	for _, m := range ms {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// errNoAPI is returned by detectors that need the API when cs is nil.
var errNoAPI = errors.New("needs the Kubernetes API, which is not reachable: fix the apiservers and the load balancer (labs 05, 06) first")

// read reads a file once per check. Missing files are (nil, false, nil).
func (e *env) read(node, path string) ([]byte, bool, error) {
	k := node + "\x00" + path
	r, ok := e.files[k]
	if !ok {
		r.data, r.err = e.src.ReadFile(e.ctx, node, path)
		e.files[k] = r
	}
	if errors.Is(r.err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if r.err != nil {
		return nil, false, fmt.Errorf("read %s on %s: %w", path, node, r.err)
	}
	return r.data, true, nil
}

// run runs shell once per check.
func (e *env) run(node, shell string) (string, error) {
	k := node + "\x00" + shell
	if out, ok := e.outputs[k]; ok {
		return out, nil
	}
	out, err := e.src.Run(e.ctx, node, shell)
	if err != nil {
		return "", fmt.Errorf("on %s: %w", node, err)
	}
	e.outputs[k] = out
	return out, nil
}

// missing is the Mistake for a file that is not there.
func missing(lab, node, path, what, fix string) Mistake {
	return Mistake{Lab: lab, Node: node, What: path + " is missing (" + what + ")", Evidence: "no file " + path + " on " + node, Fix: fix}
}

// sortedKeys returns the keys of m sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortStrings(s []string) { sort.Strings(s) }

// registry is every detector, in lab order.
var registry = []Detector{
	{Name: "pki-certs", Lab: labid.PKI, Doc: "the state directory's pki/: each cert's CN/O, SANs (service IP, 127.0.0.1, lb), key usages, validity, CA signature, key pair", run: pkiCerts},
	{Name: "kubeconfigs", Lab: labid.Kubeconfig, Doc: "the state directory's kubeconfigs/: current context, server URL (lb for workers, 127.0.0.1 on cps), CA, client cert identity and key", run: stateKubeconfigs},
	{Name: "etcd-initial-cluster", Lab: labid.Etcd, Doc: "--name in --initial-cluster, same list on every member, only the control planes at their IPs, cert auth on", run: etcdCluster},
	{Name: "etcd-certs", Lab: labid.Etcd, Doc: "etcd's server and peer certs: SANs of its URLs, keys, the cluster CA", run: etcdCerts},
	{Name: "apiserver-certs", Lab: labid.ControlPlane, Doc: "each apiserver's serving cert SANs, client CA, etcd/kubelet client certs, ServiceAccount key pair", run: apiserverCerts},
	{Name: "apiserver-kubelet-rbac", Lab: labid.ControlPlane, Doc: "the CN of --kubelet-client-certificate is bound to a ClusterRole with nodes/proxy (API)", run: apiserverKubeletRBAC},
	{Name: "controlplane-kubeconfigs", Lab: labid.ControlPlane, Doc: "controller-manager and scheduler kubeconfigs: an apiserver they can reach, the cluster CA, their own user", run: controlPlaneKubeconfigs},
	{Name: "encryption-config", Lab: labid.ControlPlane, Doc: "--encryption-provider-config on every apiserver, same file, kind/apiVersion, identity not first, key sizes", run: encryptionConfig},
	{Name: "lb-health-check", Lab: labid.LB, Doc: "haproxy.cfg: mode tcp on the apiserver port, every cp a server, an HTTP check that can pass (check-ssl, verify, path, port)", run: lbHealthCheck},
	{Name: "worker-host", Lab: labid.Workers, Doc: "every worker (w3 too): swap off, br_netfilter loaded, bridge-nf-call-iptables and ip_forward = 1", run: workerHost()},
	{Name: "worker-runtime", Lab: labid.Workers, Doc: "every worker (w3 too): containerd's config present; CNI config present, its plugin binaries exist, its subnet = the podCIDR", run: workerRuntime()},
	{Name: "worker-dns", Lab: labid.Workers, Doc: "kubelet clusterDNS = the kube-dns Service IP", run: workerDNS(false)},
	{Name: "worker-identity", Lab: labid.Workers, Doc: "node name = cluster.yaml = kubelet client cert CN system:node:<name>; kubeconfigs via the lb with the cluster CA; serving cert SANs; kube-proxy identity", run: workerIdentity(false)},
	{Name: "pod-routes", Lab: labid.PodNetwork, Doc: "every worker routes each other worker's podCIDR via that worker's IP", run: podRoutes},
	{Name: "coredns", Lab: labid.CoreDNS, Doc: "Service kube-dns at the clusterDNS IP, the Corefile serving the cluster domain (API)", run: coreDNS},
	{Name: "bootstrap-dns", Lab: labid.TLSBootstrap, Doc: "the TLS-bootstrap workers' clusterDNS (as worker-dns)", run: workerDNS(true)},
	{Name: "bootstrap-identity", Lab: labid.TLSBootstrap, Doc: "the TLS-bootstrap workers' node name and kubeconfigs once bootstrapped (as worker-identity)", run: workerIdentity(true)},
	{Name: "bootstrap-token", Lab: labid.TLSBootstrap, Doc: "bootstrap token Secrets: name, type, id/secret format, expiration, usage, extra groups; the worker's token has a Secret (API)", run: bootstrapTokens},
	{Name: "bootstrap-rbac", Lab: labid.TLSBootstrap, Doc: "node-bootstrapper, nodeclient and selfnodeclient bindings; bootstrap token auth and CSR signing flags (API)", run: bootstrapRBAC},
	{Name: "bootstrap-csrs", Lab: labid.TLSBootstrap, Doc: "a Pending kubelet-serving CSR (never auto-approved), a stuck client CSR, an approved CSR never signed (API)", run: bootstrapCSRs},
}
