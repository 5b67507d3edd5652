// Package labcheck is the kit of the labs' detectors, which grade a lab
// that a student did by hand: they read what is really on the nodes
// (files, systemd units, kernel settings, routes) and in the API, and name
// each mistake with its evidence, the fix and the lab it belongs to. Each
// lab's detectors live in its folder (internal/lab/<name>/grade.go, the
// list Detectors); this package holds what they share: the Source, the
// per-check Env with its cached reads, and the shared probes of
// certificates, kubeconfigs, units and the kubelet's config.
//
// The steps' own Check compares the nodes with the files khw renders; a
// hand-made variant differs from them byte for byte and still works. The
// detectors judge the meaning instead: a certificate whose
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
	"net"
	"sort"
	"strconv"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/remote"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
	Run func(*Env) ([]Mistake, error)
}

// Env is what a detector sees.
type Env struct {
	Ctx     context.Context
	Cluster *config.Cluster
	src     Source
	API     kubernetes.Interface
	Now     time.Time
	// Live reaches the running cluster's etcd members and apiservers one
	// by one, for the detectors that try what a lab makes work; nil when
	// there is no live cluster (tests of the file detectors), and then
	// those detectors report nothing.
	Live *Live

	files   map[string]fileResult
	outputs map[string]string

	// the cluster CA, read once (clusterCA)
	ca     *x509.Certificate
	caWhat string
	caDone bool
}

// Live is how a detector reaches the cluster itself rather than its files:
// the health target (etcd members and apiservers at their IPs, with the
// jumpbox's client certs, dialled inside the cluster's network) and the
// admin's client config (through the load balancer; nil before the
// kubeconfigs exist, lab 03).
type Live struct {
	Target health.Target
	Admin  *rest.Config
	// AdminKubeconfig is the admin kubeconfig's path (for health's probes).
	AdminKubeconfig string
	// DialFrom opens connections from a node itself (an SSH tunnel), to
	// what it serves on its loopback only; nil when there is none.
	DialFrom func(node config.Node) remote.DialFunc
}

// APIServer is a client of node's apiserver alone
// (https://<its IP>:<apiserver port>), as the admin.
func (l *Live) APIServer(node config.Node) (kubernetes.Interface, error) {
	if l.Admin == nil {
		return nil, errors.New("no admin kubeconfig yet (lab 03 writes it)")
	}
	cfg := rest.CopyConfig(l.Admin)
	cfg.Host = "https://" + net.JoinHostPort(node.IP, strconv.Itoa(l.Target.Cluster.Kubernetes.APIServerPort))
	return kubernetes.NewForConfig(cfg)
}

type fileResult struct {
	data []byte
	err  error
}

// Check runs the detectors ds (one lab's, in their order) against the live
// cluster and returns the mistakes found, in detector order, then node
// order. An empty result means no detector found a mistake.
//
// c must be a validated cluster.yaml. cs may be nil when the API is not
// reachable: detectors that need it then report nothing and Check returns
// an error naming them, after running the others. Errors are for a node
// that cannot be read or an API call that fails; a missing or malformed
// file is a Mistake, not an error.
func Check(ctx context.Context, ds []Detector, c *config.Cluster, src Source, cs kubernetes.Interface) ([]Mistake, error) {
	return CheckAt(ctx, ds, c, src, cs, time.Now())
}

// CheckAt is Check with the clock at now (certificate validity is judged
// against it; tests pin it).
func CheckAt(ctx context.Context, ds []Detector, c *config.Cluster, src Source, cs kubernetes.Interface, now time.Time) ([]Mistake, error) {
	return CheckLive(ctx, ds, c, src, cs, nil, now)
}

// NewEnv is what the detectors of one check see: c, the nodes through src
// (each file and command read once), the API through cs (nil when not
// reachable), the live cluster through live (nil: none), the clock at now.
func NewEnv(ctx context.Context, c *config.Cluster, src Source, cs kubernetes.Interface, live *Live, now time.Time) *Env {
	return &Env{Ctx: ctx, Cluster: c, src: src, API: cs, Live: live, Now: now, files: map[string]fileResult{}, outputs: map[string]string{}}
}

// CheckLive is CheckAt with the live cluster reachable through live (nil:
// the detectors that try the cluster report nothing).
func CheckLive(ctx context.Context, ds []Detector, c *config.Cluster, src Source, cs kubernetes.Interface, live *Live, now time.Time) ([]Mistake, error) {
	e := NewEnv(ctx, c, src, cs, live, now)
	var all []Mistake
	var errs []error
	for _, d := range ds {
		ms, err := d.Run(e)
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

// ErrNoAPI is returned by detectors that need the API when cs is nil.
var ErrNoAPI = errors.New("needs the Kubernetes API, which is not reachable: fix the apiservers and the load balancer (labs 05, 06) first")

// Read reads a file once per check. Missing files are (nil, false, nil).
func (e *Env) Read(node, path string) ([]byte, bool, error) {
	k := node + "\x00" + path
	r, ok := e.files[k]
	if !ok {
		r.data, r.err = e.src.ReadFile(e.Ctx, node, path)
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

// Run runs shell once per check.
func (e *Env) Run(node, shell string) (string, error) {
	k := node + "\x00" + shell
	if out, ok := e.outputs[k]; ok {
		return out, nil
	}
	out, err := e.src.Run(e.Ctx, node, shell)
	if err != nil {
		return "", fmt.Errorf("on %s: %w", node, err)
	}
	e.outputs[k] = out
	return out, nil
}

// Missing is the Mistake for a file that is not there.
func Missing(lab, node, path, what, fix string) Mistake {
	return Mistake{Lab: lab, Node: node, What: path + " is missing (" + what + ")", Evidence: "no file " + path + " on " + node, Fix: fix}
}

// SortedKeys returns the keys of m sorted.
func SortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func SortStrings(s []string) { sort.Strings(s) }
