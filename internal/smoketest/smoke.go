// Package smoke runs the smoke tests of "Kubernetes the Hard Way" against a
// running khw cluster, each with a pass/fail and the evidence that proves it
// (shared/design/cluster-facts.md, "Smoke tests"):
//
//  1. encryption    a Secret's raw value in etcd starts with the prefix of
//     the first key of encryption-config.yaml ("k8s:enc:aescbc:v1:key1:");
//  2. deployment    a Deployment of agnhost (netexec on :80) gets a Ready pod;
//  3. logs          the pod's logs through the apiserver (→ kubelet :10250);
//  4. exec          a command runs in the container (SPDY exec);
//  5. port-forward  a local port on the jumpbox reaches the pod's port 80;
//  6. nodeport      a NodePort Service answers on every worker's IP,
//     including workers without the pod (kube-proxy + pod routes);
//  7. dns           from the pod, kubernetes.default.svc.<domain> resolves to
//     the `kubernetes` Service IP through the cluster DNS (10.32.0.10);
//  8. tls-bootstrap-node (when a worker has tlsBootstrap: true) a pod pinned
//     to that worker serves logs and exec, and its kubelet's serving
//     certificate on :10250 verifies against ca.pem.
//
// Everything is made in the namespace khw-smoke (labelled as khw's) and the
// namespace is deleted at the end unless Options.Keep. Every wait is bounded
// and every failure says what was seen and where to look.
package smoketest

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/encryption"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/state"
)

// Names of the objects the smoke tests make, and the check names in order.
const (
	// Namespace holds everything the smoke tests create.
	Namespace = "khw-smoke"
	// SecretName is the Secret of the encryption check (key mykey, value
	// mydata), as in the guide.
	SecretName = "kubernetes-the-hard-way"
	// AppName names the Deployment, its pods' label app=<AppName> and the
	// NodePort Service.
	AppName = "khw-smoke-web"
	// PinnedApp is the label app=<PinnedApp> of the pod pinned to the TLS
	// bootstrap worker; the pod is named PinnedApp + "-" + node.
	PinnedApp = "khw-smoke-pinned"
	// Container is the container name in every smoke pod.
	Container = "agnhost"
	// HTTPPort is where agnhost netexec listens in the pods.
	HTTPPort = 80
	// KubeletPort is the kubelet's HTTPS API (logs, exec, port-forward).
	KubeletPort = 10250

	CheckEncryption    = "encryption"
	CheckDeployment    = "deployment"
	CheckLogs          = "logs"
	CheckExec          = "exec"
	CheckPortForward   = "port-forward"
	CheckNodePort      = "nodeport"
	CheckDNS           = "dns"
	CheckBootstrapNode = "tls-bootstrap-node"

	// managedByLabel marks the namespace as khw's: the smoke tests delete
	// and recreate only a namespace carrying it.
	managedByLabel = "app.kubernetes.io/managed-by"
	managedByValue = "khw"
	// AgnhostArtifact is the catalog artifact of the smoke image.
	AgnhostArtifact = "agnhost-image"
	// startedLine is what agnhost netexec logs once it listens
	// (k8s.io/kubernetes test/images/agnhost/netexec/netexec.go startServer).
	startedLine = "Started HTTP server on port 80"
)

// Timeouts. DefaultWait bounds each wait for pods; the others bound one
// request or one retry loop.
const (
	// DefaultWait bounds the wait for each smoke pod to become Ready, and
	// for the namespace to go away.
	DefaultWait = 2 * time.Minute
	// requestTimeout bounds one API request, one HTTP GET, one etcd read.
	requestTimeout = 10 * time.Second
	// retryWindow bounds the retries of logs, NodePort and DNS, which may
	// lag a pod's readiness by a few seconds (kube-proxy sync, CoreDNS cache).
	retryWindow = time.Minute
	// streamTimeout bounds one exec or port-forward.
	streamTimeout = 30 * time.Second
)

// Check is the outcome of one smoke check. The JSON names are those of
// `khw smoke -o json`.
type Check struct {
	// Name is one of the Check* constants.
	Name string `json:"name"`
	// OK is true when the check passed.
	OK bool `json:"ok"`
	// Skipped is true for a check that does not apply to this cluster
	// (tls-bootstrap-node without a TLS bootstrap worker); OK is then true.
	Skipped bool `json:"skipped,omitempty"`
	// Node is the node the check ran against (the pod's node), if any.
	Node string `json:"node,omitempty"`
	// Evidence is what was observed, also for a failed check when there is
	// something to show (e.g. the workers whose NodePort answered).
	Evidence string `json:"evidence,omitempty"`
	// Err says why the check failed, with where to look; "" when OK.
	Err string `json:"error,omitempty"`
	// Duration is the check's wall time (JSON: nanoseconds).
	Duration time.Duration `json:"durationNs"`
}

// Report is the outcome of Run.
type Report struct {
	Cluster   string  `json:"cluster"`
	Namespace string  `json:"namespace"`
	Checks    []Check `json:"checks"`
	// Kept is true when the namespace was left in place (Options.Keep).
	Kept bool `json:"kept"`
	// CleanupErr is why deleting the namespace failed, "" otherwise. It
	// does not fail the report.
	CleanupErr string `json:"cleanupError,omitempty"`
}

// OK reports whether every check passed.
func (r *Report) OK() bool { return len(r.Failed()) == 0 }

// Failed returns the checks that failed, in order.
func (r *Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Options tune Run.
type Options struct {
	// Keep leaves the namespace and everything in it for inspection.
	Keep bool
	// Wait bounds each wait for a pod to become Ready (and for the
	// namespace to be deleted); 0 means DefaultWait.
	Wait time.Duration
	// Progress, if set, is called with each check as it finishes.
	Progress func(Check)
	// NoCleanupWait deletes the namespace at the end without waiting for
	// the namespace controller to finish (use a namespace of its own per
	// run, Runner.Namespace, so the next run does not wait for it either).
	NoCleanupWait bool
}

// Runner holds what the checks need. Build it with New; tests set the
// fields directly.
type Runner struct {
	// Cluster is cluster.yaml: workers, the service IPs, the cluster domain.
	Cluster *config.Cluster
	// Client is an admin clientset.
	Client kubernetes.Interface
	// Streams runs exec and port-forward.
	Streams Streams
	// EtcdGet returns the raw value etcd holds at key, nil when there is
	// no such key.
	EtcdGet func(ctx context.Context, key string) ([]byte, error)
	// Dial opens TCP connections inside the cluster network (NodePort
	// requests, the kubelet's TLS on :10250).
	Dial remote.DialFunc
	// CA is the cluster CA (pki/ca.pem).
	CA *x509.CertPool
	// EncryptionPrefix is the prefix every Secret written now must start
	// with in etcd (encryption.EtcdPrefix).
	EncryptionPrefix string
	// Image is the agnhost image reference of the smoke pods.
	Image string
	// APIServerVerifiesKubelets is true when the rendered kube-apiserver
	// unit passes --kubelet-certificate-authority: the apiserver then
	// verifies each kubelet's serving certificate when it relays logs,
	// exec and port-forward.
	APIServerVerifiesKubelets bool
	// Namespace is where the objects go; "" means Namespace.
	Namespace string
	// Poll is the interval of every wait loop; 0 means one second.
	Poll time.Duration
	// RetryWindow bounds the retries of the logs, NodePort and DNS checks
	// once the pod is Ready (kube-proxy and CoreDNS may lag it by a few
	// seconds); 0 means one minute.
	RetryWindow time.Duration
}

// New builds a Runner for cluster c with state directory d. cfg is the
// admin rest.Config (server https://lb:6443) with Dial set to reach the
// cluster network; dial is the provider's dialer (vm.Provider.Dialer), used
// for etcd, the NodePorts and the kubelets (node names are resolved from
// cluster.yaml, see health.Target.Dialer).
//
// It reads pki/ca.pem and encryption-config.yaml, and resolves the agnhost
// image from the component catalog; each missing input is an error naming
// the file and the command that makes it.
func New(c *config.Cluster, d state.Dir, cfg *rest.Config, dial remote.DialFunc) (*Runner, error) {
	target := health.Target{Cluster: c, PKIDir: d.PKIDir(), Dial: dial}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	streams, err := NewStreams(cfg)
	if err != nil {
		return nil, err
	}
	caPath := filepath.Join(d.PKIDir(), health.CAFile)
	caPEM, err := os.ReadFile(caPath)
	if err != nil {
		return nil, fmt.Errorf("read the cluster CA: %w (fix: khw pki)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no PEM certificate (fix: khw pki)", caPath)
	}
	prefix, err := encryption.EtcdPrefix(d.EncryptionConfigPath())
	if err != nil {
		return nil, fmt.Errorf("encryption config: %w (fix: khw encryption)", err)
	}
	img, err := AgnhostImage(c)
	if err != nil {
		return nil, err
	}
	verifies, err := apiServerVerifiesKubelets(c)
	if err != nil {
		return nil, err
	}
	return &Runner{
		Cluster: c, Client: cs, Streams: streams, Dial: target.Dialer(), CA: pool,
		EncryptionPrefix: prefix, Image: img, APIServerVerifiesKubelets: verifies,
		EtcdGet: func(ctx context.Context, key string) ([]byte, error) {
			cli, err := target.EtcdClient()
			if err != nil {
				return nil, err
			}
			defer cli.Close()
			resp, err := cli.Get(ctx, key)
			if err != nil {
				return nil, err
			}
			if len(resp.Kvs) == 0 {
				return nil, nil
			}
			return resp.Kvs[0].Value, nil
		},
	}, nil
}

// AgnhostImage returns the reference of the catalog's agnhost image
// (artifact AgnhostArtifact), e.g.
// registry.k8s.io/e2e-test-images/agnhost:2.66.1: the image the worker step
// imports on every worker, so the smoke pods need no registry.
func AgnhostImage(c *config.Cluster) (string, error) {
	cat, err := components.Load()
	if err != nil {
		return "", err
	}
	rs, err := cat.Resolve(c, c.Arch)
	if err != nil {
		return "", err
	}
	for _, r := range rs {
		if r.Artifact.Name == AgnhostArtifact {
			return r.Image, nil
		}
	}
	return "", fmt.Errorf("the component catalog has no artifact %s (a khw bug: internal/components/catalog.yaml)", AgnhostArtifact)
}

// apiServerVerifiesKubelets renders the first control plane's
// kube-apiserver.service and looks for --kubelet-certificate-authority.
func apiServerVerifiesKubelets(c *config.Cluster) (bool, error) {
	cps := c.ControlPlanes()
	if len(cps) == 0 {
		return false, nil
	}
	f, err := render.DefaultFacts(c.Provider)
	if err != nil {
		return false, err
	}
	files, err := render.Node(c, cps[0].Name, f)
	if err != nil {
		return false, err
	}
	for _, file := range files {
		if file.Path == "/etc/systemd/system/kube-apiserver.service" {
			return bytes.Contains(file.Data, []byte("--kubelet-certificate-authority=")), nil
		}
	}
	return false, nil
}

func (r *Runner) ns() string {
	if r.Namespace != "" {
		return r.Namespace
	}
	return Namespace
}

func (r *Runner) poll() time.Duration {
	if r.Poll > 0 {
		return r.Poll
	}
	return time.Second
}

func (r *Runner) retryWindow() time.Duration {
	if r.RetryWindow > 0 {
		return r.RetryWindow
	}
	return retryWindow
}

func waitOf(o Options) time.Duration {
	if o.Wait > 0 {
		return o.Wait
	}
	return DefaultWait
}

// BootstrapWorker returns the worker the tls-bootstrap-node check pins a pod
// to: the first worker of cluster.yaml with tlsBootstrap: true. ok is false
// when there is none.
func BootstrapWorker(c *config.Cluster) (n config.Node, ok bool) {
	for _, w := range c.Workers() {
		if w.TLSBootstrap {
			return w, true
		}
	}
	return config.Node{}, false
}

// checkNames lists the checks Run reports, in order.
func (r *Runner) checkNames() []string {
	return []string{CheckEncryption, CheckDeployment, CheckLogs, CheckExec, CheckPortForward, CheckNodePort, CheckDNS, CheckBootstrapNode}
}

// Run prepares the namespace (Prepare), runs every check in order and,
// unless opts.Keep, deletes the namespace (Cleanup). A check that needs the
// Deployment's pod is reported as not run when there is none. It never
// returns nil; read Report.OK.
func (r *Runner) Run(ctx context.Context, opts Options) *Report {
	wait := waitOf(opts)
	rep := &Report{Cluster: r.Cluster.Name, Namespace: r.ns(), Kept: opts.Keep}
	add := func(c Check) {
		rep.Checks = append(rep.Checks, c)
		if opts.Progress != nil {
			opts.Progress(c)
		}
	}
	if err := r.Prepare(ctx, wait); err != nil {
		for _, name := range r.checkNames() {
			add(Check{Name: name, Err: "not run: " + err.Error()})
		}
		return rep
	}
	if !opts.Keep {
		defer func() {
			// The cleanup must run even when ctx was cancelled.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait+requestTimeout)
			defer cancel()
			if opts.NoCleanupWait {
				err := r.Client.CoreV1().Namespaces().Delete(cctx, r.ns(), metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					rep.CleanupErr = fmt.Sprintf("delete namespace %s: %v", r.ns(), err)
				}
				return
			}
			if err := r.Cleanup(cctx, wait); err != nil {
				rep.CleanupErr = err.Error()
			}
		}()
	}

	add(r.Encryption(ctx))

	// The pinned pod starts now so that its wait overlaps the others.
	bw, hasBootstrap := BootstrapWorker(r.Cluster)
	var pinnedErr error
	if hasBootstrap {
		pinnedErr = r.createPinnedPod(ctx, bw)
	}

	dep, pod := r.Deployment(ctx, wait)
	add(dep)
	if pod == nil {
		for _, name := range []string{CheckLogs, CheckExec, CheckPortForward, CheckNodePort, CheckDNS} {
			add(Check{Name: name, Err: "not run: no Ready pod of Deployment " + AppName + " (see the deployment check)"})
		}
	} else {
		add(r.logs(ctx, pod))
		add(r.exec(ctx, pod))
		add(r.portForward(ctx, pod))
		add(r.nodePort(ctx, pod))
		add(r.dns(ctx, pod))
	}

	if !hasBootstrap {
		add(Check{Name: CheckBootstrapNode, OK: true, Skipped: true, Evidence: "skipped: no worker in cluster.yaml has tlsBootstrap: true"})
	} else {
		add(r.bootstrapNode(ctx, bw, pinnedErr, wait))
	}
	return rep
}

// Prepare makes an empty namespace for the checks: a leftover khw-smoke
// namespace (from --keep or an interrupted run) is deleted first and waited
// for (at most wait); a namespace of that name without khw's label
// app.kubernetes.io/managed-by=khw is refused, not deleted. Then it waits
// (at most wait) for the namespace's ServiceAccount "default", which the
// serviceaccount controller of kube-controller-manager creates and without
// which the apiserver admits no pod.
func (r *Runner) Prepare(ctx context.Context, wait time.Duration) error {
	nsc := r.Client.CoreV1().Namespaces()
	gctx, cancel := context.WithTimeout(ctx, requestTimeout)
	cur, err := nsc.Get(gctx, r.ns(), metav1.GetOptions{})
	cancel()
	switch {
	case err == nil:
		if cur.Labels[managedByLabel] != managedByValue {
			return fmt.Errorf("namespace %s exists and is not khw's (no label %s=%s): khw will not delete it; delete it yourself (kubectl delete namespace %s) or remove what it holds", r.ns(), managedByLabel, managedByValue, r.ns())
		}
		if err := r.Cleanup(ctx, wait); err != nil {
			return fmt.Errorf("remove the namespace left by an earlier run: %w", err)
		}
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("get namespace %s: %w", r.ns(), err)
	}
	cctx, cancel := context.WithTimeout(ctx, requestTimeout)
	_, err = nsc.Create(cctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns(), Labels: map[string]string{managedByLabel: managedByValue}}}, metav1.CreateOptions{})
	cancel()
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", r.ns(), err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		gctx, gcancel := context.WithTimeout(wctx, requestTimeout)
		_, err := r.Client.CoreV1().ServiceAccounts(r.ns()).Get(gctx, "default", metav1.GetOptions{})
		gcancel()
		if err == nil {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("ServiceAccount %s/default did not appear within %v (last: %v): the serviceaccount controller of kube-controller-manager creates it; is kube-controller-manager running with --service-account-private-key-file (khw status)?", r.ns(), wait, err)
		case <-time.After(r.poll()):
		}
	}
}

// Cleanup deletes the namespace (and so everything the checks made) and
// waits at most wait until it is gone. The pods stop within their 5 s grace
// period; the namespace controller of kube-controller-manager then removes
// the namespace. An absent namespace is not an error.
func (r *Runner) Cleanup(ctx context.Context, wait time.Duration) error {
	nsc := r.Client.CoreV1().Namespaces()
	dctx, cancel := context.WithTimeout(ctx, requestTimeout)
	err := nsc.Delete(dctx, r.ns(), metav1.DeleteOptions{})
	cancel()
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", r.ns(), err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var phase string
	for {
		gctx, gcancel := context.WithTimeout(wctx, requestTimeout)
		cur, err := nsc.Get(gctx, r.ns(), metav1.GetOptions{})
		gcancel()
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			phase = string(cur.Status.Phase)
			for _, c := range cur.Status.Conditions {
				if c.Status == corev1.ConditionTrue && c.Message != "" {
					phase += "; " + string(c.Type) + ": " + oneLine(c.Message)
				}
			}
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("namespace %s is still there after %v (%s): the namespace controller of kube-controller-manager removes it once its pods are gone; check kubectl get pods -n %s", r.ns(), wait, phase, r.ns())
		case <-time.After(r.poll()):
		}
	}
}

// timed runs f as check name and measures it.
func timed(name string, f func() (evidence, node string, err error)) Check {
	start := time.Now()
	ev, node, err := f()
	c := Check{Name: name, Evidence: ev, Node: node, Duration: time.Since(start)}
	if err != nil {
		c.Err = err.Error()
	} else {
		c.OK = true
	}
	return c
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// errNotFoundIn is the error of a missing expected value in output.
func errNotFoundIn(what, want, output string) error {
	out := strings.TrimSpace(output)
	if len(out) > 300 {
		out = out[:300] + "…"
	}
	return errors.New(what + ": no " + want + " in the output " + fmt.Sprintf("%q", out))
}
