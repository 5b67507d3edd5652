package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/jumpbox"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm"
)

func TestSplitKubectlArgs(t *testing.T) {
	fs := newRootCmd(nil, nil).PersistentFlags()
	cases := []struct {
		name           string
		args, raw      []string
		khw, kubectlGo []string
	}{
		// raw is the real command line: the position of "kubectl" decides,
		// even where kubectl has flags of the same name.
		{"khw --cluster before", []string{"--cluster", "a", "get"}, []string{"--cluster", "a", "kubectl", "get"}, []string{"--cluster", "a"}, []string{"get"}},
		{"kubectl --cluster after", []string{"--cluster", "a", "get"}, []string{"kubectl", "--cluster", "a", "get"}, nil, []string{"--cluster", "a", "get"}},
		{"kubectl -v=6 after", []string{"-v=6", "get", "pods"}, []string{"kubectl", "-v=6", "get", "pods"}, nil, []string{"-v=6", "get", "pods"}},
		{"both", []string{"--state-dir", "/s", "-c", "x", "-n", "kube-system", "get", "kubectl"}, []string{"--state-dir", "/s", "-c", "x", "kubectl", "-n", "kube-system", "get", "kubectl"}, []string{"--state-dir", "/s", "-c", "x"}, []string{"-n", "kube-system", "get", "kubectl"}},
		{"kubectl --help", []string{"--help"}, []string{"kubectl", "--help"}, nil, []string{"--help"}},
		// raw is something else (SetArgs in tests): leading khw flags are khw's.
		{"fallback: khw flags then kubectl's", []string{"--state-dir=/s", "-c", "x", "-vv", "-n", "ns", "get"}, []string{"-test.run=x"}, []string{"--state-dir=/s", "-c", "x", "-vv"}, []string{"-n", "ns", "get"}},
		{"fallback: kubectl flag first", []string{"-n", "ns", "--cluster", "a", "get"}, nil, nil, []string{"-n", "ns", "--cluster", "a", "get"}},
		{"fallback: dangling value", []string{"--cluster"}, nil, []string{"--cluster"}, nil},
		{"fallback: verb only", []string{"version"}, nil, nil, []string{"version"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k, kc := jumpbox.SplitKubectlArgs("kubectl", tc.args, tc.raw, fs)
			if strings.Join(k, " ") != strings.Join(tc.khw, " ") || strings.Join(kc, " ") != strings.Join(tc.kubectlGo, " ") {
				t.Errorf("got khw %q kubectl %q, want %q %q", k, kc, tc.khw, tc.kubectlGo)
			}
		})
	}
}

func TestPowerValidation(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, e, code := run(t, base, "init", "--name", "lab", "--provider", "libvirt"); code != 0 {
		t.Fatalf("init: %s", e)
	}
	noLibvirt(t, base, "lab")
	valid := "its nodes are: lb, cp1, cp2, cp3, w1, w2, w3"
	cases := []struct {
		args  []string
		code  int
		words []string
	}{
		{[]string{"power", "off"}, exitUsage, []string{"name at least one node", "khw power off cp2"}},
		{[]string{"power", "on"}, exitUsage, []string{"name at least one node"}},
		{[]string{"power", "off", "cp9"}, exitUsage, []string{`cluster lab has no node "cp9"`, valid}},
		{[]string{"power", "on", "cp1", "bogus", "w7"}, exitUsage, []string{`no nodes "bogus", "w7"`, valid}},
		{[]string{"power", "off", "--timeout", "0s", "cp1"}, exitUsage, []string{"--timeout 0s"}},
		{[]string{"power", "off", "--no-such", "cp1"}, exitUsage, []string{"unknown flag"}},
		{[]string{"power"}, exitUsage, []string{"say on or off"}},
		{[]string{"power", "reboot", "cp1"}, exitUsage, []string{`unknown power action "reboot"`}},
		// Valid names reach the provider: here a libvirtd that does not answer.
		{[]string{"power", "off", "--force", "cp2", "cp2"}, exitFailed, []string{"libvirtd is not running or not installed"}},
	}
	for _, tc := range cases {
		_, errOut, code := run(t, base, tc.args...)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d: %s", tc.args, code, tc.code, errOut)
		}
		for _, w := range tc.words {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, errOut, w)
			}
		}
	}
	out, _, _ := run(t, base, "power", "--help")
	for _, w := range []string{"pulling the plug", "--force", "khw status"} {
		if !strings.Contains(out, w) {
			t.Errorf("power --help lacks %q", w)
		}
	}
}

// fakePower is a vm.Provider that records Start and Stop; the other
// methods are not used by khw power (calling one panics on the nil
// embedded interface).
type fakePower struct {
	vm.Provider
	mu     sync.Mutex
	states map[string]vm.State
	calls  []string
	fail   map[string]error
}

func (f *fakePower) Status(ctx context.Context) ([]vm.NodeStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []vm.NodeStatus
	for _, n := range []string{"lb", "cp1", "cp2", "cp3", "w1", "w2", "w3"} {
		out = append(out, vm.NodeStatus{Name: n, State: f.states[n]})
	}
	return out, nil
}

func (f *fakePower) Stop(ctx context.Context, node string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("stop %s force=%v", node, force))
	if err := f.fail[node]; err != nil {
		return err
	}
	f.states[node] = vm.StateStopped
	return nil
}

func (f *fakePower) Start(ctx context.Context, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "start "+node)
	if err := f.fail[node]; err != nil {
		return err
	}
	f.states[node] = vm.StateRunning
	return nil
}

func TestPowerThroughProvider(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, e, code := run(t, base, "init", "--name", "lab", "--provider", "nspawn"); code != 0 {
		t.Fatalf("init: %s", e)
	}
	fake := &fakePower{
		states: map[string]vm.State{"lb": vm.StateRunning, "cp1": vm.StateRunning, "cp2": vm.StateRunning, "cp3": vm.StateStopped,
			"w1": vm.StateRunning, "w2": vm.StateRunning, "w3": vm.StateAbsent},
		fail: map[string]error{"w2": errors.New("node w2: still shutting down: context deadline exceeded; stop it with force")},
	}
	saved := powerProvider
	powerProvider = func(c *config.Cluster, d state.Dir, key string, log io.Writer) (vm.Provider, error) {
		if c.Name != "lab" || d.Name != "lab" {
			t.Errorf("provider for %s / %s", c.Name, d.Name)
		}
		return fake, nil
	}
	defer func() { powerProvider = saved }()

	cases := []struct {
		args      []string
		code      int
		calls     []string // in any order
		outLines  []string // in any order
		errWords  string
		finalNote bool
	}{
		{[]string{"power", "off", "cp1", "cp3", "cp1"}, exitOK, []string{"stop cp1 force=false"},
			[]string{"cp3: already off", "cp1: powered off (graceful) in"}, "", false},
		{[]string{"power", "off", "--force", "cp2"}, exitOK, []string{"stop cp2 force=true"}, []string{"cp2: powered off (forced) in"}, "", false},
		{[]string{"power", "on", "cp1", "cp2", "lb"}, exitOK, []string{"start cp1", "start cp2"},
			[]string{"lb: already running", "cp1: started in", "cp2: started in"}, "", true},
		{[]string{"power", "off", "w1", "w2", "w3"}, exitFailed, []string{"stop w1 force=false", "stop w2 force=false"},
			[]string{"w1: powered off (graceful) in", "w2: FAILED after", "w3: absent, not powered off"}, "stop it with force", false},
	}
	for _, tc := range cases {
		fake.calls = nil
		out, errOut, code := run(t, base, tc.args...)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d: %s", tc.args, code, tc.code, errOut)
		}
		if !sameSet(fake.calls, tc.calls) {
			t.Errorf("%v: provider calls %q, want %q", tc.args, fake.calls, tc.calls)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if tc.finalNote {
			if last := lines[len(lines)-1]; !strings.Contains(last, "`khw status` shows when the nodes run") {
				t.Errorf("%v: last line %q", tc.args, last)
			}
			lines = lines[:len(lines)-1]
		}
		if len(lines) != len(tc.outLines) {
			t.Errorf("%v: output %q, want one line per node %q", tc.args, lines, tc.outLines)
		}
		for _, w := range tc.outLines {
			found := false
			for _, l := range lines {
				found = found || strings.HasPrefix(l, w)
			}
			if !found {
				t.Errorf("%v: no line starting %q in %q", tc.args, w, out)
			}
		}
		if tc.errWords != "" && (!strings.Contains(errOut, tc.errWords) || !strings.Contains(errOut, "node w3 does not exist (fix: khw up creates it)")) {
			t.Errorf("%v: stderr %q", tc.args, errOut)
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestShellAndKubectlNotUp: with provider nspawn and no namespace both
// commands stop before starting anything, naming the fix.
func TestShellAndKubectlNotUp(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	// Two clusters: kubectl must honour --cluster given before it.
	for _, n := range []string{"tnotup1", "tnotup2"} {
		if _, e, code := run(t, base, "init", "--name", n, "--provider", "nspawn"); code != 0 {
			t.Fatalf("init: %s", e)
		}
	}
	// Should a flag be lost, the cluster is still found here, never elsewhere.
	t.Setenv(state.EnvStateDir, base)
	t.Setenv(state.EnvCluster, "tnotup1")
	for _, args := range [][]string{
		{"-c", "tnotup2", "shell"},
		{"-c", "tnotup2", "shell", "--", "true"},
		{"-c", "tnotup2", "kubectl", "get", "nodes"},
		{"--cluster=tnotup2", "kubectl", "-n", "kube-system", "get", "pods"},
	} {
		for _, how := range []struct {
			name string
			run  func(*testing.T, string, ...string) (string, string, int)
		}{{"SetArgs", run}, {"os.Args", runAsMain}} {
			_, errOut, code := how.run(t, base, args...)
			if code != exitFailed || !strings.Contains(errOut, "cluster is not up") || !strings.Contains(errOut, "cluster tnotup2 has no network namespace /run/netns/khw-tnotup2") ||
				!strings.Contains(errOut, "run `khw up`") {
				t.Errorf("%s %v: exit %d: %s", how.name, args, code, errOut)
			}
		}
	}
	// (--bogus=1, not --bogus: cobra would take the next word as its value.)
	if _, errOut, code := runAsMain(t, base, "--bogus=1", "kubectl", "version"); code != exitUsage || !strings.Contains(errOut, "unknown flag: --bogus before `kubectl`") {
		t.Errorf("unknown khw flag before kubectl: exit %d: %s", code, errOut)
	}
	if out, _, code := run(t, base, "help", "kubectl"); code != exitOK || !strings.Contains(out, "Everything after the word kubectl belongs to kubectl") {
		t.Errorf("khw help kubectl: exit %d: %s", code, out)
	}
}

// buildKhw builds the khw binary into dir: shell and kubectl replace the
// process (execve), so they are tested as a separate process.
func buildKhw(t *testing.T, dir string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = "/usr/local/go/bin/go"
	}
	bin := filepath.Join(dir, "khw")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// witnessNetns makes /run/netns/khw-<cluster> with `ip netns add` (not khw's
// code) with a bridge d0 holding addrs, and deletes it at the end.
func witnessNetns(t *testing.T, cluster string, addrs ...string) {
	t.Helper()
	ns := vm.NetnsName(cluster)
	cmds := [][]string{{"netns", "add", ns}, {"-n", ns, "link", "set", "lo", "up"}, {"-n", ns, "link", "add", "d0", "type", "bridge"}}
	for _, a := range addrs {
		cmds = append(cmds, []string{"-n", ns, "addr", "add", a, "dev", "d0"})
	}
	cmds = append(cmds, []string{"-n", ns, "link", "set", "d0", "up"})
	for _, args := range cmds {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			exec.Command("ip", "netns", "delete", ns).Run()
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		if args[0] == "netns" {
			t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns).Run() })
		}
	}
}

// runBin runs the built khw and returns stdout, stderr and the exit code.
func runBin(t *testing.T, bin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errOut.String(), 0
	case errors.As(err, &ee):
		return out.String(), errOut.String(), ee.ExitCode()
	}
	t.Fatalf("run khw %v: %v", args, err)
	return "", "", -1
}

func TestShellAndKubectlInNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP (needs root): khw shell enters network and mount namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("SKIP: no ip (iproute2) to make the witness namespace")
	}
	tmp := t.TempDir()
	bin := buildKhw(t, tmp)
	base := filepath.Join(tmp, "state")
	name := shellTestCluster(t)
	if _, e, code := run(t, base, "init", "--name", name, "--provider", "nspawn", "--arch", "amd64"); code != 0 {
		t.Fatalf("init: %s", e)
	}
	d := state.New(base, name)
	c, _, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := c.LB()
	witnessNetns(t, name, c.Network.Gateway+"/24", lb.IP+"/24")
	hostHosts, _ := os.ReadFile("/etc/hosts")
	// No mirror, empty cache: khw shell cannot get kubectl and says so, but
	// the shell still runs.
	noKubectl := []string{components.EnvMirror + "=" + t.TempDir(), components.EnvCacheDir + "=" + t.TempDir(), "KUBECONFIG=/not/this"}

	t.Run("shell runs CMD in the namespace with hosts and env", func(t *testing.T) {
		out, errOut, code := runBin(t, bin, noKubectl, "--state-dir", base, "-c", name, "shell", "--",
			"sh", "-c", `cat /etc/hosts; echo ---; ip -4 -o addr; echo ---; echo "$KUBECONFIG"; echo "$PATH"; echo "$KHW_CLUSTER"; exit 5`)
		if code != 5 {
			t.Fatalf("exit %d, want 5 (the command's)\n%s\n%s", code, out, errOut)
		}
		if !strings.Contains(errOut, "warning: no kubectl in "+jumpbox.BinDir(d)) || !strings.Contains(errOut, "no admin kubeconfig") {
			t.Errorf("stderr should warn about kubectl and the kubeconfig: %s", errOut)
		}
		parts := strings.Split(out, "---\n")
		if len(parts) != 3 {
			t.Fatalf("output:\n%s", out)
		}
		for _, n := range c.Nodes {
			if !strings.Contains(parts[0], n.IP+"\t"+c.FQDN(n)+" "+n.Name+"\n") {
				t.Errorf("/etc/hosts inside lacks %s:\n%s", n.Name, parts[0])
			}
		}
		if !strings.Contains(parts[1], "d0    inet "+lb.IP+"/24") || strings.Count(strings.TrimSpace(parts[1]), "\n") != 2 {
			t.Errorf("addresses inside should be lo and the witness bridge only:\n%s", parts[1])
		}
		env := strings.Fields(parts[2])
		want := []string{filepath.Join(d.Root, "kubeconfigs", "admin.kubeconfig"), filepath.Join(d.Root, "bin") + ":", name}
		if len(env) != 3 || env[0] != want[0] || !strings.HasPrefix(env[1], want[1]) || env[2] != want[2] {
			t.Errorf("env inside: %q, want %q (PATH as prefix)", env, want)
		}
		if now, _ := os.ReadFile("/etc/hosts"); string(now) != string(hostHosts) {
			t.Error("the host's /etc/hosts changed")
		}
		if _, err := os.Stat(filepath.Join(d.Root, "ssh", "config")); err != nil {
			t.Errorf("no ssh config: %v", err)
		}
	})

	t.Run("interactive shell prints one banner line", func(t *testing.T) {
		env := append([]string{"SHELL=/bin/sh"}, noKubectl...)
		cmd := exec.Command(bin, "--state-dir", base, "-c", name, "shell")
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdin = strings.NewReader("echo in-$KHW_NETNS\nexit 3\n")
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 || out.String() != "in-khw-"+name+"\n" {
			t.Fatalf("shell: %v, stdout %q, stderr %s", err, out.String(), errOut.String())
		}
		if !strings.Contains(errOut.String(), "khw shell: cluster "+name+", in network namespace khw-"+name) || !strings.Contains(errOut.String(), "exit or Ctrl-D leaves") {
			t.Errorf("banner: %s", errOut.String())
		}
	})

	t.Run("libvirt: no namespace, same env and hosts", func(t *testing.T) {
		lv := name + "lv"
		if _, e, code := run(t, base, "init", "--name", lv, "--provider", "libvirt"); code != 0 {
			t.Fatalf("init: %s", e)
		}
		rootAddrs, _ := exec.Command("ip", "-4", "-o", "addr").CombinedOutput()
		out, errOut, code := runBin(t, bin, noKubectl, "--state-dir", base, "-c", lv, "shell", "--", "sh", "-c", `ip -4 -o addr; getent hosts cp3; echo "netns=$KHW_NETNS"`)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if !strings.HasPrefix(out, string(rootAddrs)) || !strings.Contains(out, "192.168.122.13  cp3.kubernetes.local cp3\nnetns=\n") {
			t.Errorf("libvirt shell output:\n%s\nwant root addresses:\n%s", out, rootAddrs)
		}
	})

	mirror := os.Getenv(components.EnvMirror)
	if mirror == "" {
		home, _ := os.UserHomeDir()
		mirror = filepath.Join(home, ".cache", "khw", "mirror")
	}
	r, err := jumpbox.ResolveKubectl(c, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	if p, _, _ := components.MirrorLocation(mirror, r.URL); p == "" || !fileExists(p) {
		t.Skipf("SKIP kubectl part: the mirror %s has no kubectl %s for %s (make it with hack/mkmirror, or set %s)", mirror, r.Version, runtime.GOARCH, components.EnvMirror)
	}
	pin := os.Getenv(components.EnvMirrorDigest)
	if pin == "" {
		// The mirror this machine built (make test pins it the same way).
		if pin, err = components.ManifestDigest(mirror); err != nil {
			t.Skipf("SKIP kubectl part: the mirror %s has no manifest to pin (%v)", mirror, err)
		}
	}
	withKubectl := []string{components.EnvMirror + "=" + mirror, components.EnvMirrorDigest + "=" + pin, components.EnvCacheDir + "=" + t.TempDir(), "KUBECONFIG=/not/this"}

	t.Run("kubectl version is the cluster's", func(t *testing.T) {
		out, errOut, code := runBin(t, bin, withKubectl, "--state-dir", base, "-c", name, "kubectl", "version", "--client")
		if code != 0 || !strings.Contains(out, "Client Version: "+c.Versions.Kubernetes+"\n") {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
		if !strings.Contains(errOut, "installed kubectl "+c.Versions.Kubernetes) {
			t.Errorf("first run should say it installed kubectl: %s", errOut)
		}
		st1, err := os.Stat(jumpbox.KubectlPath(d))
		if err != nil || st1.Mode().Perm() != 0o755 {
			t.Fatalf("kubectl: %v %v", st1, err)
		}
		// Second run: nothing installed, nothing rewritten.
		out, errOut, code = runBin(t, bin, withKubectl, "--state-dir", base, "-c", name, "kubectl", "version", "--client")
		if code != 0 || strings.Contains(errOut, "installed") || !strings.Contains(out, c.Versions.Kubernetes) {
			t.Errorf("second run: exit %d\n%s\n%s", code, out, errOut)
		}
		if st2, _ := os.Stat(jumpbox.KubectlPath(d)); !st2.ModTime().Equal(st1.ModTime()) {
			t.Error("kubectl was rewritten although unchanged")
		}
		// kubectl's exit code is khw's.
		if _, _, code := runBin(t, bin, withKubectl, "--state-dir", base, "-c", name, "kubectl", "no-such-verb"); code != 1 {
			t.Errorf("kubectl no-such-verb: exit %d, want kubectl's 1", code)
		}
	})

	if _, e, code := run(t, base, "-c", name, "pki"); code != 0 {
		t.Fatalf("pki: %s", e)
	}
	if _, e, code := run(t, base, "-c", name, "kubeconfig"); code != 0 {
		t.Fatalf("kubeconfig: %s", e)
	}

	t.Run("kubectl sees the admin kubeconfig; --cluster after kubectl is kubectl's", func(t *testing.T) {
		out, errOut, code := runBin(t, bin, withKubectl, "--state-dir", base, "--cluster", name, "kubectl",
			"--cluster="+c.Kubernetes.ClusterName, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].name} {.clusters[0].cluster.server} {.users[0].name}")
		want := c.Kubernetes.ClusterName + " https://lb:6443 admin"
		if code != 0 || out != want {
			t.Errorf("exit %d: got %q, want %q\n%s", code, out, want, errOut)
		}
	})

	t.Run("kubectl reaches https://lb:6443 inside the namespace", func(t *testing.T) {
		pkiDir := d.PKIDir()
		cert, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "kubernetes.pem"), filepath.Join(pkiDir, "kubernetes-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		caPEM, err := os.ReadFile(filepath.Join(pkiDir, "ca.pem"))
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		// A stand-in apiserver listening on lb's address, only inside the
		// namespace: reachable only if kubectl runs there and "lb" resolves.
		l, err := vm.NetnsListen(vm.NetnsPath(name), "tcp", lb.IP+":6443")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var users []string
		srv := &http.Server{
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert},
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				users = append(users, r.TLS.PeerCertificates[0].Subject.CommonName+"/"+strings.Join(r.TLS.PeerCertificates[0].Subject.Organization, ","))
				mu.Unlock()
				if r.URL.Path == "/readyz" {
					w.Write([]byte("ok"))
					return
				}
				http.NotFound(w, r)
			}),
		}
		go srv.ServeTLS(l, "", "")
		defer srv.Close()
		out, errOut, code := runBin(t, bin, withKubectl, "--state-dir", base, "-c", name, "kubectl", "get", "--raw", "/readyz")
		if code != 0 || out != "ok" {
			t.Fatalf("kubectl get --raw /readyz: exit %d, %q\n%s", code, out, errOut)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(users) != 1 || users[0] != "admin/system:masters" {
			t.Errorf("the apiserver saw clients %q, want admin/system:masters", users)
		}
	})
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// shellTestCluster returns a fresh cluster name, so the test's namespace
// never meets a real cluster's.
func shellTestCluster(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "t" + hex.EncodeToString(b)
}

// runAsMain is run with os.Args set to the same command line, as main has
// it, so commands that read os.Args (kubectl) see the real thing.
func runAsMain(t *testing.T, stateDir string, args ...string) (string, string, int) {
	t.Helper()
	saved := os.Args
	os.Args = append([]string{"khw", "--state-dir", stateDir}, args...)
	defer func() { os.Args = saved }()
	return run(t, stateDir, args...)
}
