package lab

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/khw-dev/khw/internal/components/debtest"
	"github.com/khw-dev/khw/internal/lab/machines"
	"github.com/khw-dev/khw/internal/remote"

	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm/nspawn"
)

// requireRealCluster skips unless this host can run a real nspawn cluster
// offline: root, systemd-nspawn, the cached node image, and an offline
// mirror in $KHW_MIRROR (make test builds it: hack/build-mirror.sh).
func requireRealCluster(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP (needs root): nspawn nodes need network namespaces and cgroups")
	}
	if err := nspawn.CheckHost(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	cache, err := nspawn.CacheDir()
	if err != nil {
		t.Skipf("SKIP: %v", err)
	}
	if _, err := os.Stat(nspawn.RootfsPath(cache, runtime.GOARCH)); err != nil {
		t.Skipf("SKIP: no node image at %s (go test ./internal/vm/nspawn -run Nspawn builds it)", nspawn.RootfsPath(cache, runtime.GOARCH))
	}
	if os.Getenv(components.EnvMirror) == "" {
		t.Skipf("SKIP: $%s is not set (make test builds the offline mirror and sets it)", components.EnvMirror)
	}
}

// fiveNodes is the default cluster cut to lb, cp1-3 and w1: an HA control
// plane (three etcd members, three apiservers behind HAProxy) without the
// workers that steps 01-06 do not use.
// nspawnEnv returns the step environment of cluster c in d; at the end of
// the test it is closed and the cluster's nodes are removed (khw down).
func nspawnEnv(t *testing.T, c *config.Cluster, d state.Dir) *steps.Env {
	t.Helper()
	env := steps.NewEnv(c, d)
	t.Cleanup(func() { env.Close() })
	t.Cleanup(func() {
		p, err := cluster.NewProvider(c, d, "", nil)
		if err != nil {
			t.Error(err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := nodeplan.Down(ctx, p, d, c.Name); err != nil {
			t.Errorf("cleanup: down: %v", err)
		}
	})
	return env
}

func fiveNodes(t *testing.T) (*config.Cluster, state.Dir) {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	name := "u" + hex.EncodeToString(b)
	c := config.Default(name, runtime.GOARCH, config.ProviderNspawn)
	keep := c.Nodes[:0]
	for _, n := range c.Nodes {
		if n.Role != config.RoleWorker || n.Name == "w1" {
			keep = append(keep, n)
		}
	}
	c.Nodes = keep
	base := t.TempDir()
	d := state.New(base, name)
	if err := fsutil.EnsureDir(d.Root); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Save(d.ConfigPath()); err != nil {
		t.Fatal(err)
	}
	return c, d
}

func openMachines(t *testing.T, c *config.Cluster, d state.Dir, env *steps.Env) *nodeplan.Machines {
	t.Helper()
	s, err := cluster.Open(c, d, cluster.ReadWrite, env.NodeLog(""))
	if err != nil {
		t.Fatal(err)
	}
	return nodeplan.New(s)
}

// unitStarts reads ExecMainStartTimestamp of every unit of steps 04-06.
func unitStarts(t *testing.T, m *nodeplan.Machines, c *config.Cluster) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	for _, n := range c.Nodes {
		var units []string
		switch n.Role {
		case config.RoleControlPlane:
			units = []string{"etcd.service", "kube-apiserver.service", "kube-controller-manager.service", "kube-scheduler.service"}
		case config.RoleLoadBalancer:
			units = []string{"haproxy.service"}
		default:
			continue
		}
		cl, err := m.Pool.Get(context.Background(), nodeplan.RemoteNode(n))
		if err != nil {
			t.Fatal(err)
		}
		st, err := nodeplan.Probe(context.Background(), cl, nil, units)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range units {
			if st.Units[u].Started.IsZero() || st.Units[u].Active != "active" {
				t.Errorf("%s: %s is %+v", n.Name, u, st.Units[u])
			}
			out[n.Name+"/"+u] = st.Units[u].Started
		}
	}
	return out
}

func runSteps(t *testing.T, env *steps.Env, m *nodeplan.Machines) (*steps.Report, string) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := steps.NewRunner(env, &out).Run(ctx, Steps(m, env.Cluster), steps.Options{Until: "06-lb"})
	if err != nil {
		t.Fatalf("khw up: %v\n%s", err, out.String())
	}
	return rep, out.String()
}

// TestUpControlPlaneNspawn builds steps 01-06 on real nspawn nodes from the
// offline mirror, then proves the reconcile contract: a second run changes
// nothing (zero uploads, no unit restarted), and a khw up killed with
// SIGKILL in the middle of a step converges on the next run.
func TestUpControlPlaneNspawn(t *testing.T) {
	requireRealCluster(t)
	c, d := fiveNodes(t)
	env := nspawnEnv(t, c, d)

	// 1. From nothing to a control plane behind the load balancer.
	m := openMachines(t, c, d, env)
	t0 := time.Now()
	rep, out := runSteps(t, env, m)
	cold := time.Since(t0)
	for _, s := range rep.Steps {
		if !s.Applied {
			t.Errorf("cold run: step %s was not applied:\n%s", s.ID, out)
		}
	}
	m.Close()

	// The cluster answers as cluster.yaml says, asked independently of the
	// steps' own checks.
	m = openMachines(t, c, d, env)
	defer m.Close()
	tgt := m.Target(env)
	er, err := health.Etcd(context.Background(), tgt)
	if err != nil || len(er.Members) != 3 || er.Leader == "" || er.Healthy != 3 {
		t.Errorf("etcd: %+v, %v", er, err)
	}
	for _, r := range health.APIServers(context.Background(), tgt, nodeplan.AdminKubeconfig(env)) {
		if !r.OK {
			t.Errorf("/readyz %s: %+v", r.Target, r)
		}
	}

	// 2. A second run: every step clean, nothing uploaded, nothing restarted.
	before := unitStarts(t, m, c)
	t0 = time.Now()
	rep, out = runSteps(t, env, m)
	again := time.Since(t0)
	for _, s := range rep.Steps {
		if !s.Clean || s.Applied {
			t.Errorf("second run: step %s not clean:\n%s", s.ID, out)
		}
	}
	if n := m.Pool.Uploads(); n != 0 {
		t.Errorf("second run uploaded %d files, want 0", n)
	}
	after := unitStarts(t, m, c)
	for k, v := range before {
		if !after[k].Equal(v) {
			t.Errorf("second run restarted %s (started %v, now %v)", k, v, after[k])
		}
	}

	// 3. Kill khw up (SIGKILL: no defer, no cleanup) in the middle of
	// 05-control-plane, after it replaced a binary but before it could
	// restart the unit; the next run must notice and converge.
	for _, n := range c.ControlPlanes() {
		cl, err := m.Pool.Get(context.Background(), nodeplan.RemoteNode(n))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := cl.Run(context.Background(), "rm -f /usr/local/bin/kube-scheduler && printf '#!/bin/sh\\nexit 1\\n' > /usr/local/bin/kube-scheduler", remote.RunOptions{Sudo: true}); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), "khw")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/khw").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--state-dir", filepath.Dir(d.Root), "--cluster", c.Name, "up")
	var cout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &cout, &cout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(d.LogsDir(), "cp1.log")
	deadline := time.Now().Add(3 * time.Minute)
	killed := false
	for time.Now().Before(deadline) {
		data, _ := os.ReadFile(log)
		if bytes.Contains(data, []byte("05-control-plane: installed /usr/local/bin/kube-scheduler")) {
			cmd.Process.Kill()
			killed = true
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("khw up never reached the scheduler install (exit %v):\n%s", err, cout.String())
	}
	t.Logf("killed khw up mid-step; its output:\n%s", cout.String())

	// Whatever state the kill left, the next run converges and the one
	// after it is clean.
	m.Close()
	m = openMachines(t, c, d, env)
	defer m.Close()
	_, out = runSteps(t, env, m)
	t.Logf("run after the kill:\n%s", out)
	rep, out = runSteps(t, env, m)
	for _, s := range rep.Steps {
		if !s.Clean {
			t.Errorf("run after recovery: step %s not clean:\n%s", s.ID, out)
		}
	}
	final := unitStarts(t, m, c)
	for _, n := range c.ControlPlanes() {
		k := n.Name + "/kube-scheduler.service"
		if !final[k].After(after[k]) {
			t.Errorf("%s was not restarted onto the repaired binary (started %v)", k, final[k])
		}
	}
	if !strings.Contains(out, "✓ 06-lb") {
		t.Errorf("output lacks 06-lb:\n%s", out)
	}
	t.Logf("wall times: cold up %v, no-op up %v", cold.Round(time.Millisecond), again.Round(time.Millisecond))
}

// TestOfflinePackagesNspawn installs haproxy on a real node that has no
// package lists and no network, from the mirror's verified .debs: haproxy
// and liblua5.3-0 (removed from the node before, so the closure must bring
// it back) and nothing the node already has. A mirror without liblua5.3-0
// is refused first, naming it.
func TestOfflinePackagesNspawn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP (needs root): nspawn nodes need network namespaces and cgroups")
	}
	if err := nspawn.CheckHost(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	cache, err := nspawn.CacheDir()
	if err != nil {
		t.Skipf("SKIP: %v", err)
	}
	arch := runtime.GOARCH
	rootfs := nspawn.RootfsPath(cache, arch)
	if _, err := os.Stat(rootfs); err != nil {
		t.Skipf("SKIP: no node image at %s (go test ./internal/vm/nspawn -run Nspawn builds it)", rootfs)
	}
	good, bad := t.TempDir(), t.TempDir()
	goodPin := debtest.RootfsArchive(t, rootfs, good, arch)
	badPin := debtest.RootfsArchive(t, rootfs, bad, arch, "liblua5.3-0")

	b := make([]byte, 3)
	rand.Read(b)
	name := "d" + hex.EncodeToString(b)
	c := config.Default(name, arch, config.ProviderNspawn)
	var lb config.Node
	for _, n := range c.Nodes {
		if n.Role == config.RoleLoadBalancer {
			lb = n
		}
	}
	// Only the load balancer: not a cluster config.Validate accepts (so it
	// is not saved), but all that 01-machines and an install need.
	c.Nodes = []config.Node{lb}
	d := state.New(t.TempDir(), name)
	if err := fsutil.EnsureDir(d.Root); err != nil {
		t.Fatal(err)
	}
	env := nspawnEnv(t, c, d)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	m := openMachines(t, c, d, env)
	defer m.Close()
	var out bytes.Buffer
	if _, err := steps.NewRunner(env, &out).Run(ctx, []steps.Step{machines.NewStep(m)}, steps.Options{}); err != nil {
		t.Fatalf("01-machines: %v\n%s", err, out.String())
	}
	cl, err := m.Pool.Get(ctx, nodeplan.RemoteNode(lb))
	if err != nil {
		t.Fatal(err)
	}
	run := func(cmd string) string {
		t.Helper()
		o, _, err := cl.Run(ctx, cmd, remote.RunOptions{Sudo: true})
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, o)
		}
		return string(o)
	}
	// The node as a fresh cloud image without haproxy: no lists, no haproxy,
	// no liblua5.3-0 (only haproxy needs it).
	run("DEBIAN_FRONTEND=noninteractive dpkg --purge haproxy liblua5.3-0 >/dev/null && rm -rf /var/lib/apt/lists/* && mkdir -p /var/lib/apt/lists/partial")
	if o := run("ls /var/lib/apt/lists; dpkg-query -W -f='${db:Status-Abbrev}\\n' haproxy 2>/dev/null || true"); strings.Contains(o, "Packages") || strings.HasPrefix(o, "ii") {
		t.Fatalf("the node still has lists or haproxy:\n%s", o)
	}
	w := &nodeplan.NodeWant{Node: lb, Packages: []nodeplan.WantPackage{{Name: "haproxy", Path: "/usr/sbin/haproxy"}}, OfflineDebs: true}

	// A mirror without liblua5.3-0: refused, naming it, before any change.
	m.Art.Fetcher = &components.Fetcher{Mirror: bad, MirrorDigest: badPin}
	_, err = nodeplan.ApplyNode(ctx, env, m, "06-lb", w)
	if err == nil || !strings.Contains(err.Error(), "liblua5.3-0") || !strings.Contains(err.Error(), "debian bookworm "+arch) {
		t.Fatalf("mirror without liblua5.3-0: err = %v, want one naming it and the node OS/arch", err)
	}

	m = openMachines(t, c, d, env) // a new run: no cached index or plan
	defer m.Close()
	m.Art.Fetcher = &components.Fetcher{Mirror: good, MirrorDigest: goodPin}
	diffs, _, err := nodeplan.CheckNode(ctx, m, w)
	if err != nil || len(diffs) != 1 || !strings.Contains(diffs[0].What, "haproxy") {
		t.Fatalf("check: %v, %v; want the one diff of haproxy", diffs, err)
	}
	w.Debs = m.DebPlans[nodeplan.PlanKey(w)]
	cmds := joinCmds(nodeplan.PackageCommands(w))
	for _, want := range []string{"pool/main/h/haproxy/haproxy_", "pool/main/l/lua5.3/liblua5.3-0_", "apt-get install -y --no-install-recommends"} {
		if !strings.Contains(cmds, want) {
			t.Errorf("dry-run commands:\n%s\nwant %q", cmds, want)
		}
	}
	if strings.Contains(cmds, "libc6") {
		t.Errorf("dry-run commands install libc6, which the node has:\n%s", cmds)
	}
	t0 := time.Now()
	if _, err := nodeplan.ApplyNode(ctx, env, m, "06-lb", w); err != nil {
		t.Fatalf("offline install: %v", err)
	}
	t.Logf("offline install of %d .deb(s) took %v", len(w.Debs.Debs), time.Since(t0))
	got := run("dpkg-query -W -f='${db:Status-Abbrev}${Package}\\n' haproxy liblua5.3-0; /usr/sbin/haproxy -v | head -1; ls /var/lib/apt/lists; ls " + nodeplan.NodeDebDir)
	for _, want := range []string{"ii haproxy", "ii liblua5.3-0", "HAProxy version"} {
		if !strings.Contains(got, want) {
			t.Errorf("after the offline install the node says:\n%s\nwant %q", got, want)
		}
	}
	if strings.Contains(got, "Packages") || strings.Contains(got, ".deb") {
		t.Errorf("the install left package lists or .debs behind:\n%s", got)
	}
	if diffs, _, err := nodeplan.CheckNode(ctx, m, w); err != nil || len(diffs) != 0 {
		t.Errorf("check after the install: %v, %v; want clean", diffs, err)
	}
}

// joinCmds is the commands as the lab shows them, one after another.
func joinCmds(cmds []steps.Command) string {
	var b strings.Builder
	for _, c := range cmds {
		b.WriteString(c.String() + "\n")
	}
	return b.String()
}
