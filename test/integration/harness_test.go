package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
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
