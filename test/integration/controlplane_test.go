// Package integration runs khw's generated PKI, kubeconfigs, encryption
// config and unit flag sets against the real Kubernetes control plane: a
// 3-member etcd, kube-apiserver, kube-controller-manager and kube-scheduler
// as local processes on loopback addresses 127.0.1.x.
//
// Binaries come from a mirror ($KHW_MIRROR, fetched with khw's fetcher) or
// $KHW_TEST_BINDIR; `make test` builds the mirror from Go modules first
// (hack/build-mirror.sh). Without either the test skips loudly.
package integration

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	authnv1 "k8s.io/api/authentication/v1"
	certsv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/encryption"
	"github.com/khw-dev/khw/internal/kube"
	"github.com/khw-dev/khw/internal/kubeconfig"
	"github.com/khw-dev/khw/internal/pki"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/tlsbootstrap"
)

var binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// binDir returns a directory holding the binaries: $KHW_TEST_BINDIR as is,
// or, with $KHW_MIRROR set, the binaries fetched from that mirror by khw's
// own fetcher (sha256-verified, through the artifact cache) — the path a
// classroom takes. Without either the test skips loudly.
func binDir(t *testing.T) string {
	if dir := os.Getenv("KHW_TEST_BINDIR"); dir != "" {
		var missing []string
		for _, b := range binaries {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.Mode()&0o111 == 0 {
				missing = append(missing, b)
			}
		}
		if len(missing) > 0 {
			t.Fatalf("KHW_TEST_BINDIR=%s lacks %v", dir, missing)
		}
		return dir
	}
	mirror := os.Getenv(components.EnvMirror)
	if mirror == "" {
		t.Skipf("\n*** SKIPPED: the real control-plane test needs %v: set $%s to a mirror (`make test` builds one\n*** from Go modules with hack/build-mirror.sh and sets it) or $KHW_TEST_BINDIR to a directory of binaries. ***", binaries, components.EnvMirror)
	}
	cat, err := components.Load()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := cat.Resolve(config.Default("it", config.ArchAMD64, config.ProviderNspawn), runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	var want []components.Resolved
	for _, r := range rs {
		if r.Artifact.Name == "etcd" || slices.Contains(binaries, r.Artifact.Name) {
			want = append(want, r)
		}
	}
	f := &components.Fetcher{CacheDir: components.DefaultCacheDir(), Mirror: mirror, MirrorDigest: components.DefaultMirrorDigest()}
	got, err := f.Fetch(context.Background(), want)
	if err != nil {
		t.Fatalf("fetch from mirror %s: %v", mirror, err)
	}
	dir := t.TempDir()
	for _, g := range got {
		for _, file := range g.Resolved.Files {
			name := filepath.Base(file.Target)
			if !slices.Contains(binaries, name) {
				continue
			}
			out, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.WriteFile(file, out); err != nil {
				t.Fatalf("install %s: %v", name, err)
			}
			out.Close()
		}
	}
	return dir
}

// loopbackCluster is the default cluster moved onto 127.0.1.0/24, so every
// member has its own loopback address and the usual ports.
func loopbackCluster(t *testing.T) *config.Cluster {
	c := config.Default("it", config.ArchAMD64, config.ProviderNspawn)
	c.Network.CIDR = "127.0.1.0/24"
	c.Network.Gateway = "127.0.1.1"
	for i := range c.Nodes {
		c.Nodes[i].IP = strings.Replace(c.Nodes[i].IP, "192.168.122.", "127.0.1.", 1)
	}
	if _, err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// proc is a started control-plane process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func start(t *testing.T, name, bin string, args []string, logDir string) *proc {
	t.Helper()
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		f.Close()
		if t.Failed() {
			t.Logf("--- last lines of %s ---\n%s", name, tail(logPath, 25))
		}
	})
	return p
}

// execArgs reads the ExecStart command line of a rendered systemd unit.
func execArgs(t *testing.T, unit []byte) []string {
	t.Helper()
	var line strings.Builder
	in := false
	sc := bufio.NewScanner(strings.NewReader(string(unit)))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "ExecStart=") {
			in = true
			l = strings.TrimPrefix(l, "ExecStart=")
		}
		if !in {
			continue
		}
		cont := strings.HasSuffix(strings.TrimSpace(l), `\`)
		line.WriteString(strings.TrimSuffix(strings.TrimSpace(l), `\`) + " ")
		if !cont {
			break
		}
	}
	f := strings.Fields(line.String())
	if len(f) < 2 {
		t.Fatalf("no ExecStart in unit:\n%s", unit)
	}
	return f[1:]
}

// rooted moves the node's absolute paths under root.
func rooted(s, root string) string {
	for _, p := range []string{"/etc/etcd/", "/var/lib/etcd", "/var/lib/kubernetes/", "/etc/kubernetes/", "/var/log/kubernetes/"} {
		s = strings.ReplaceAll(s, p, root+p)
	}
	return s
}

// installNode lays out what khw would push to node n under root: the
// rendered files and the Inputs from the state directory.
func installNode(t *testing.T, c *config.Cluster, d state.Dir, n config.Node, root string) map[string][]byte {
	t.Helper()
	files, err := render.Node(c, n.Name, render.NodeFacts{ResolvConf: render.ResolvConfPlain})
	if err != nil {
		t.Fatal(err)
	}
	units := map[string][]byte{}
	for _, f := range files {
		data := []byte(rooted(string(f.Data), root))
		if strings.HasSuffix(f.Path, ".service") {
			units[filepath.Base(f.Path)] = data
			continue
		}
		if err := os.MkdirAll(filepath.Dir(root+f.Path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(root+f.Path, data, f.Mode); err != nil {
			t.Fatal(err)
		}
	}
	ins, err := render.Inputs(c, n.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range ins {
		data, err := os.ReadFile(filepath.Join(d.Root, in.Source))
		if err != nil {
			t.Fatalf("input %s for %s: %v", in.Source, in.Path, err)
		}
		// The control-plane components reach the apiserver on this node's
		// own address instead of 127.0.0.1, which three local apiservers
		// could not share.
		data = []byte(strings.ReplaceAll(string(data), c.LocalAPIServerURL(), "https://"+n.IP+":6443"))
		os.MkdirAll(filepath.Dir(root+in.Path), 0o700)
		if err := os.WriteFile(root+in.Path, data, in.Mode); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(root+"/var/lib/etcd", 0o700)
	os.MkdirAll(root+"/var/log/kubernetes", 0o700)
	return units
}

// localize rewrites the flags that bind or dial 127.0.0.1 (one host holds
// every member here) to the member's own loopback address.
func localize(args []string, ip string, keepLocalClient bool) []string {
	var out []string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--bind-address="):
			a = "--bind-address=" + ip
		case strings.HasPrefix(a, "--listen-client-urls=") && !keepLocalClient:
			a = strings.Replace(a, ",https://127.0.0.1:2379", "", 1)
		}
		out = append(out, a)
	}
	return out
}

func waitFor(t *testing.T, what string, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %v", what, timeout, err)
}

// controlPlane is a running test control plane made by startControlPlane.
type controlPlane struct {
	c    *config.Cluster
	d    state.Dir
	cps  []config.Node
	etcd *clientv3.Client // all three members, client cert kubernetes.pem
	// etcdProcs holds each member's process by node name (cp1 …).
	etcdProcs map[string]*proc
	ca        []byte         // ca.pem
	pool      *x509.CertPool // ca.pem as a pool
	server    string         // https://<cp1 IP>:6443, the one apiserver
	adminCfg  *rest.Config   // admin.kubeconfig pointed at server
	admin     *kubernetes.Clientset
}

// startControlPlane makes khw's PKI, kubeconfigs and encryption config for
// loopbackCluster, starts etcd on cp1-3 (waiting for the 3 members), then one
// kube-apiserver (waiting for /readyz), kube-controller-manager and
// kube-scheduler on cp1. Everything stops when the test ends. It skips like
// binDir without binaries, and with -short.
func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	bins := binDir(t)
	if testing.Short() {
		t.Skip("-short")
	}
	base := t.TempDir()
	c := loopbackCluster(t)
	d := state.New(base, c.Name)
	if _, err := pki.Reconcile(c, d.PKIDir(), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kubeconfig.Reconcile(c, d.PKIDir(), d.KubeconfigDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := encryption.Reconcile(d.EncryptionConfigPath(), nil); err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(base, "logs")
	os.MkdirAll(logs, 0o700)

	cps := c.ControlPlanes()
	units := map[string]map[string][]byte{}
	for _, n := range cps {
		units[n.Name] = installNode(t, c, d, n, filepath.Join(base, "nodes", n.Name))
	}
	// etcd x3, started together (each waits for the others to form quorum).
	etcdProcs := map[string]*proc{}
	for i, n := range cps {
		args := localize(execArgs(t, units[n.Name]["etcd.service"]), n.IP, i == 0)
		etcdProcs[n.Name] = start(t, "etcd-"+n.Name, filepath.Join(bins, "etcd"), args, logs)
	}
	ca, _ := os.ReadFile(filepath.Join(d.PKIDir(), "ca.pem"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	pair, err := tls.LoadX509KeyPair(filepath.Join(d.PKIDir(), "kubernetes.pem"), filepath.Join(d.PKIDir(), "kubernetes-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	var endpoints []string
	for _, n := range cps {
		endpoints = append(endpoints, "https://"+n.IP+":2379")
	}
	etcd, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second,
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Close() })
	waitFor(t, "etcd member list shows 3 started members", 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		ml, err := etcd.MemberList(ctx)
		if err != nil {
			return err
		}
		started := 0
		for _, m := range ml.Members {
			if m.Name != "" {
				started++
			}
		}
		if started != 3 {
			return fmt.Errorf("%d of 3 members started", started)
		}
		return nil
	})

	// One apiserver, controller-manager and scheduler on cp1: the test is
	// about identities, encryption and bootstrap, not about HA.
	cp1 := cps[0]
	// The one flag added to khw's own: the apiserver refuses to publish a
	// loopback advertise address in the `kubernetes` Endpoints, which a
	// real node never has; so the endpoint reconciler is off here.
	apiArgs := append(localize(execArgs(t, units[cp1.Name]["kube-apiserver.service"]), cp1.IP, true), "--endpoint-reconciler-type=none")
	start(t, "kube-apiserver", filepath.Join(bins, "kube-apiserver"), apiArgs, logs)
	server := "https://" + cp1.IP + ":6443"
	adminCfg, err := kube.RESTConfig(filepath.Join(d.KubeconfigDir(), kubeconfig.AdminFile), server)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(adminCfg)
	waitFor(t, "apiserver /readyz", 90*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		body, err := admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%v %s", err, body)
		}
		return nil
	})
	start(t, "kube-controller-manager", filepath.Join(bins, "kube-controller-manager"), localize(execArgs(t, units[cp1.Name]["kube-controller-manager.service"]), cp1.IP, true), logs)
	start(t, "kube-scheduler", filepath.Join(bins, "kube-scheduler"), localize(execArgs(t, units[cp1.Name]["kube-scheduler.service"]), cp1.IP, true), logs)
	return &controlPlane{c: c, d: d, cps: cps, etcd: etcd, etcdProcs: etcdProcs, ca: ca, pool: pool, server: server, adminCfg: adminCfg, admin: admin}
}

func TestControlPlane(t *testing.T) {
	cp := startControlPlane(t)
	c, d, etcd, ca, pool, server, adminCfg, admin := cp.c, cp.d, cp.etcd, cp.ca, cp.pool, cp.server, cp.adminCfg, cp.admin
	ctx := context.Background()

	t.Run("admin is cluster-admin", func(t *testing.T) {
		ns, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, n := range ns.Items {
			names[n.Name] = true
		}
		if !names["default"] || !names["kube-system"] {
			t.Fatalf("namespaces: %v", names)
		}
	})

	t.Run("w1 cert is system:node:w1 and limited to its node", func(t *testing.T) {
		cfg, err := kube.RESTConfig(filepath.Join(d.KubeconfigDir(), "w1.kubeconfig"), server)
		if err != nil {
			t.Fatal(err)
		}
		w1 := kubernetes.NewForConfigOrDie(cfg)
		r, err := w1.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ui := r.Status.UserInfo
		if ui.Username != "system:node:w1" || !contains(ui.Groups, "system:nodes") {
			t.Fatalf("w1 is %q %v", ui.Username, ui.Groups)
		}
		if _, err := admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "not-for-w1"},
			StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = w1.CoreV1().Secrets("default").Get(ctx, "not-for-w1", metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("w1 reading a secret no pod of its node uses: want Forbidden, got %v", err)
		}
	})

	t.Run("secrets are encrypted in etcd", func(t *testing.T) {
		if _, err := admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes-the-hard-way"},
			StringData: map[string]string{"mykey": "mydata"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want, err := encryption.EtcdPrefix(d.EncryptionConfigPath())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := etcd.Get(ctx, "/registry/secrets/default/kubernetes-the-hard-way")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("etcd get: %v %v", resp, err)
		}
		raw := resp.Kvs[0].Value
		if !strings.HasPrefix(string(raw), want) || want != "k8s:enc:aescbc:v1:key1:" {
			t.Fatalf("raw value starts %q, want %q", raw[:min(len(raw), 30)], want)
		}
		if strings.Contains(string(raw), "mydata") {
			t.Fatal("plain text in etcd")
		}
	})

	t.Run("etcd answers only the apiserver's cert", func(t *testing.T) {
		// etcd runs with the flags of khw's rendered etcd.service
		// (startControlPlane): --client-cert-allowed-hostname=kubernetes
		// and --peer-cert-allowed-cn=kubernetes, which the members already
		// pass by forming the cluster.
		for _, n := range cp.cps {
			body, err := etcdVersion(pool, d.PKIDir(), "kubernetes", n.IP, nil)
			if err != nil || !strings.Contains(body, `"etcdserver":"3.`) {
				t.Errorf("%s with the kubernetes cert: %q %v", n.Name, body, err)
			}
			before := strings.Count(readFile(cp.etcdProcs[n.Name].log), refused)
			who := []string{"w1", "w2", "kube-proxy", "admin", "kube-controller-manager"}
			for _, c := range who {
				if body, err := etcdVersion(pool, d.PKIDir(), c, n.IP, nil); err == nil {
					t.Errorf("%s answered %s.pem: %q", n.Name, c, body)
				}
			}
			// The reason, from etcd itself (whether the client reads the TLS
			// alert before the connection closes is a race).
			waitFor(t, n.Name+" logs each refusal", 5*time.Second, func() error {
				if got := strings.Count(readFile(cp.etcdProcs[n.Name].log), refused) - before; got < len(who) {
					return fmt.Errorf("%q logged %d times for %d refused certs", refused, got, len(who))
				}
				return nil
			})
		}
		// And through etcd's own client, with a read the apiserver makes.
		pair, err := tls.LoadX509KeyPair(filepath.Join(d.PKIDir(), "w1.pem"), filepath.Join(d.PKIDir(), "w1-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		w1, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + cp.cps[0].IP + ":2379"}, DialTimeout: 3 * time.Second,
			TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}})
		if err != nil {
			t.Fatal(err)
		}
		defer w1.Close()
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if resp, err := w1.Get(gctx, "/registry/secrets/", clientv3.WithPrefix(), clientv3.WithKeysOnly()); err == nil {
			t.Errorf("w1's kubelet cert listed %d Secrets in etcd", len(resp.Kvs))
		}
		if resp, err := etcd.Get(ctx, "/registry/namespaces/default"); err != nil || len(resp.Kvs) != 1 {
			t.Errorf("the kubernetes cert cannot read etcd: %v %v", resp, err)
		}
	})

	t.Run("controller-manager and scheduler hold their Leases", func(t *testing.T) {
		for _, l := range []string{"kube-controller-manager", "kube-scheduler"} {
			waitFor(t, "Lease kube-system/"+l, 90*time.Second, func() error {
				lease, err := admin.CoordinationV1().Leases("kube-system").Get(ctx, l, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
					return fmt.Errorf("no holder")
				}
				return nil
			})
		}
	})

	t.Run("TLS bootstrap: token, client CSR auto-approved, serving CSR checked by khw", func(t *testing.T) {
		manifests, err := render.Manifests(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range manifests {
			if strings.Contains(m.Path, "rbac") {
				if _, err := kube.Apply(ctx, adminCfg, m.Data); err != nil {
					t.Fatalf("apply %s: %v", m.Path, err)
				}
			}
		}
		tok, err := tlsbootstrap.NewToken(nil)
		if err != nil {
			t.Fatal(err)
		}
		sec, err := tok.SecretObject(time.Now().Add(time.Hour), "integration test", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().Secrets("kube-system").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		bootCfg := &rest.Config{Host: server, BearerToken: tok.Value(), TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
		boot := kubernetes.NewForConfigOrDie(bootCfg)
		// The token authenticator reads the Secret from an informer's
		// cache, which sees a new Secret a moment after it is created:
		// until then the token is Unauthorized.
		var r *authnv1.SelfSubjectReview
		waitFor(t, "the bootstrap token to authenticate", 30*time.Second, func() error {
			r, err = boot.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
			return err
		})
		if r.Status.UserInfo.Username != tok.User() || !contains(r.Status.UserInfo.Groups, "system:bootstrappers") {
			t.Fatalf("bootstrap token is %q %v", r.Status.UserInfo.Username, r.Status.UserInfo.Groups)
		}

		// The client CSR a bootstrapping kubelet sends: approved by the
		// controller-manager (csrapproving, nodeclient binding) and signed
		// with the cluster CA (csrsigning).
		clientCSR, clientKey := newCSRKey(t, "w3-client", "system:node:w3", nil, nil, tlsbootstrap.ClientSigner,
			certsv1.UsageDigitalSignature, certsv1.UsageClientAuth)
		if _, err := boot.CertificatesV1().CertificateSigningRequests().Create(ctx, clientCSR, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		issued := waitIssued(t, admin, "w3-client")
		if issued.Subject.CommonName != "system:node:w3" || !contains(issued.Subject.Organization, "system:nodes") {
			t.Fatalf("issued client cert subject %v", issued.Subject)
		}
		if _, err := issued.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("issued cert does not chain to the cluster CA: %v", err)
		}
		// Signed by the CA etcd trusts, yet no etcd client.
		w3Pair := &tls.Certificate{Certificate: [][]byte{issued.Raw}, PrivateKey: clientKey}
		before := strings.Count(readFile(cp.etcdProcs[cp.cps[0].Name].log), refused)
		if body, err := etcdVersion(pool, d.PKIDir(), "", cp.cps[0].IP, w3Pair); err == nil {
			t.Errorf("etcd answered w3's bootstrap-issued client cert: %q", body)
		}
		waitFor(t, "etcd logs the refusal of w3's cert", 5*time.Second, func() error {
			if strings.Count(readFile(cp.etcdProcs[cp.cps[0].Name].log), refused) == before {
				return fmt.Errorf("no %q", refused)
			}
			return nil
		})

		// The hole one CA leaves (lab 04): the kube-apiserver-client signer
		// copies a CSR's SANs, so a CSR with the DNS SAN kubernetes that an
		// admin approves is an etcd client. Only a CA for etcd alone closes
		// it; this pins what lab 04 says.
		sanCSR, sanKey := newCSRKey(t, "etcd-by-san", "someone", []string{"kubernetes"}, nil, certsv1.KubeAPIServerClientSignerName,
			certsv1.UsageDigitalSignature, certsv1.UsageClientAuth)
		sanCSR, err = admin.CertificatesV1().CertificateSigningRequests().Create(ctx, sanCSR, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sanCSR.Status.Conditions = append(sanCSR.Status.Conditions, certsv1.CertificateSigningRequestCondition{
			Type: certsv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test", Message: "approved by an admin"})
		if _, err := admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, sanCSR.Name, sanCSR, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		sanCert := waitIssued(t, admin, "etcd-by-san")
		if body, err := etcdVersion(pool, d.PKIDir(), "", cp.cps[0].IP, &tls.Certificate{Certificate: [][]byte{sanCert.Raw}, PrivateKey: sanKey}); err != nil {
			t.Errorf("an approved kube-apiserver-client cert with the SAN kubernetes: lab 04 says etcd accepts it, got %q %v", body, err)
		}

		// Serving CSRs: never auto-approved upstream; khw approves only the
		// node's own request for exactly its name and IP.
		w1Cfg, _ := kube.RESTConfig(filepath.Join(d.KubeconfigDir(), "w1.kubeconfig"), server)
		w1 := kubernetes.NewForConfigOrDie(w1Cfg)
		w1Node, _ := c.Node("w1")
		expect := tlsbootstrap.ServingExpect{Node: "w1", DNSNames: []string{"w1"}, IPs: []string{w1Node.IP}}
		good := newCSR(t, "w1-serving", "system:node:w1", []string{"w1"}, []string{w1Node.IP}, tlsbootstrap.ServingSigner,
			certsv1.UsageDigitalSignature, certsv1.UsageServerAuth)
		extra := newCSR(t, "w1-serving-extra", "system:node:w1", []string{"w1", "evil.example.com"}, []string{w1Node.IP}, tlsbootstrap.ServingSigner,
			certsv1.UsageDigitalSignature, certsv1.UsageServerAuth)
		byAdmin := newCSR(t, "w1-serving-by-admin", "system:node:w1", []string{"w1"}, []string{w1Node.IP}, tlsbootstrap.ServingSigner,
			certsv1.UsageDigitalSignature, certsv1.UsageServerAuth)
		for _, x := range []struct {
			cs  *kubernetes.Clientset
			csr *certsv1.CertificateSigningRequest
		}{{w1, good}, {w1, extra}, {admin, byAdmin}} {
			if _, err := x.cs.CertificatesV1().CertificateSigningRequests().Create(ctx, x.csr, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create %s: %v", x.csr.Name, err)
			}
		}
		// By now the controller-manager has approved the client CSR above, so
		// it is running; give it several more sync rounds to (wrongly) act.
		time.Sleep(5 * time.Second)
		got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "w1-serving", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := tlsbootstrap.State(got); st != "Pending" {
			t.Fatalf("a kubelet-serving CSR was %s without khw", st)
		}
		if err := tlsbootstrap.Approve(ctx, admin, got, expect); err != nil {
			t.Fatalf("khw refused a correct serving CSR: %v", err)
		}
		cert := waitIssued(t, admin, "w1-serving")
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "w1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Fatalf("serving cert: %v", err)
		}
		for name, words := range map[string]string{"w1-serving-extra": "not allowed: evil.example.com", "w1-serving-by-admin": `requested by "admin"`} {
			csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			err = tlsbootstrap.Approve(ctx, admin, csr, expect)
			if err == nil || !strings.Contains(err.Error(), words) {
				t.Fatalf("%s: want refusal mentioning %q, got %v", name, words, err)
			}
			csr, _ = admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if st, _ := tlsbootstrap.State(csr); st != "Pending" {
				t.Fatalf("%s is %s after a refusal", name, st)
			}
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// newCSR makes a CertificateSigningRequest with a fresh P-256 key.
func newCSR(t *testing.T, name, cn string, dns, ips []string, signer string, usages ...certsv1.KeyUsage) *certsv1.CertificateSigningRequest {
	t.Helper()
	csr, _ := newCSRKey(t, name, cn, dns, ips, signer, usages...)
	return csr
}

// refused is what etcd logs for a client cert outside its allowlist
// (client/pkg/v3 transport/listener.go, VerifyPeerCertificate).
const refused = "client certificate authentication failed"

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// etcdVersion GETs https://<ip>:2379/version presenting <pkiDir>/<who>.pem,
// or pair when given, and returns the body. A cert etcd refuses fails the
// TLS handshake (etcd logs refused).
func etcdVersion(pool *x509.CertPool, pkiDir, who, ip string, pair *tls.Certificate) (string, error) {
	if pair == nil {
		p, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, who+".pem"), filepath.Join(pkiDir, who+"-key.pem"))
		if err != nil {
			return "", err
		}
		pair = &p
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{*pair}}}}
	resp, err := hc.Get("https://" + ip + ":2379/version")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// newCSRKey is newCSR that also returns the key.
func newCSRKey(t *testing.T, name, cn string, dns, ips []string, signer string, usages ...certsv1.KeyUsage) (*certsv1.CertificateSigningRequest, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certsv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certsv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: signer,
			Usages:     usages,
		},
	}, key
}

func waitIssued(t *testing.T, cs *kubernetes.Clientset, name string) *x509.Certificate {
	t.Helper()
	var cert *x509.Certificate
	waitFor(t, "CSR "+name+" issued", 60*time.Second, func() error {
		csr, err := cs.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st, ok := tlsbootstrap.State(csr)
		if !ok {
			return fmt.Errorf("state %s, no certificate yet", st)
		}
		b, _ := pem.Decode(csr.Status.Certificate)
		if b == nil {
			return fmt.Errorf("certificate is not PEM")
		}
		cert, err = x509.ParseCertificate(b.Bytes)
		return err
	})
	return cert
}
