package upgrade

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/components/mirrortest"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// upgraded is what ObserveLab reads on the default cluster after a
// complete upgrade to to: every component at to, every service started
// after its binary was written, no Node cordoned, cluster.yaml at to.
func upgraded(c *config.Cluster, to string) Observed {
	o := Observed{Running: Running{APIServers: map[string]string{}, Kubelets: map[string]string{}}, ConfigVersion: to}
	written := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for _, n := range c.Nodes {
		for _, b := range nodeBinaries[n.Role] {
			bin := Binary{Node: n.Name, Name: b, Version: to, MTime: written}
			if b != "kubectl" {
				bin.Unit, bin.Started = b+".service", written.Add(time.Second)
			}
			o.Binaries = append(o.Binaries, bin)
		}
		switch n.Role {
		case config.RoleControlPlane:
			o.Running.APIServers[n.Name] = to
		case config.RoleWorker:
			o.Running.Kubelets[n.Name] = to
			o.Nodes = append(o.Nodes, health.KubeNode{Name: n.Name, Ready: "True", KubeletVersion: to})
		}
	}
	return o
}

// TestJudgeUpgrade: a complete upgrade passes; each way a by-hand upgrade
// falls short is one finding on the right node, naming what to do.
func TestJudgeUpgrade(t *testing.T) {
	c := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	start := Start{From: "v1.36.3", To: "v1.37.2", Cordoned: []string{"w3"}}
	if fs := Judge(c, start, upgraded(c, "v1.37.2")); len(fs) != 0 {
		t.Fatalf("a complete upgrade has findings: %v", fs)
	}
	binary := func(o *Observed, node, name string) *Binary {
		for i := range o.Binaries {
			if o.Binaries[i].Node == node && o.Binaries[i].Name == name {
				return &o.Binaries[i]
			}
		}
		t.Fatalf("no %s on %s", name, node)
		return nil
	}
	cases := []struct {
		name       string
		mutate     func(o *Observed)
		node, want string
		fix        string
	}{
		{"an apiserver at the old release", func(o *Observed) { o.Running.APIServers["cp2"] = "v1.36.3" },
			"cp2", "the kube-apiserver on cp2 runs v1.36.3, not v1.37.2", "sudo systemctl restart kube-apiserver"},
		{"an apiserver that does not answer", func(o *Observed) { delete(o.Running.APIServers, "cp3") },
			"cp3", "the kube-apiserver on cp3 does not answer GET /version", "journalctl -u kube-apiserver"},
		{"an old scheduler binary", func(o *Observed) { binary(o, "cp1", "kube-scheduler").Version = "v1.36.3" },
			"cp1", "kube-scheduler on cp1 is v1.36.3, not v1.37.2", "sudo install -m 0755 kube-scheduler /usr/local/bin/"},
		{"a binary replaced, its service not restarted", func(o *Observed) {
			b := binary(o, "cp2", "kube-controller-manager")
			b.Started = b.MTime.Add(-time.Minute)
		}, "cp2", "kube-controller-manager.service on cp2 still runs the binary from before", "sudo systemctl restart kube-controller-manager.service on cp2"},
		{"an old kube-proxy", func(o *Observed) { binary(o, "w2", "kube-proxy").Version = "v1.36.3" },
			"w2", "kube-proxy on w2 is v1.36.3", "kube-proxy"},
		{"kubectl that cannot run", func(o *Observed) { binary(o, "cp3", "kubectl").Err = "exit status 126" },
			"cp3", "/usr/local/bin/kubectl on cp3 cannot tell its version", "kubectl"},
		{"an old kubelet", func(o *Observed) { o.Nodes[0].KubeletVersion = "v1.36.3" },
			"w1", "the kubelet on w1 runs v1.36.3, not v1.37.2", "kubectl drain w1 --ignore-daemonsets"},
		{"a worker left cordoned", func(o *Observed) { o.Nodes[1].Unschedulable = true },
			"w2", "Node w2 is still cordoned", "kubectl uncordon w2"},
		{"cluster.yaml at the old release", func(o *Observed) { o.ConfigVersion = "v1.36.3" },
			"jumpbox", "cluster.yaml still says versions.kubernetes: v1.36.3", "versions.kubernetes: v1.37.2"},
		{"an unhealthy cluster", func(o *Observed) { o.Problems = []string{"Lease kube-system/kube-scheduler is not held"} },
			"", "Lease kube-system/kube-scheduler is not held", "khw status"},
	}
	for _, tc := range cases {
		o := upgraded(c, "v1.37.2")
		tc.mutate(&o)
		fs := Judge(c, start, o)
		if len(fs) != 1 {
			t.Errorf("%s: %d findings, want 1: %v", tc.name, len(fs), fs)
			continue
		}
		f := fs[0]
		if f.Lab != labid.Upgrade || f.Node != tc.node || !strings.Contains(f.What, tc.want) || !strings.Contains(f.Fix, tc.fix) || !f.Mistake() {
			t.Errorf("%s: got %+v\nwant node %q, What with %q, Fix with %q", tc.name, f, tc.node, tc.want, tc.fix)
		}
	}
	// A worker whose kubelet was replaced while a pod from before the lab
	// still runs on it was not drained; pods made since (after the drain,
	// or on a worker not restarted) are fine.
	began := time.Date(2026, 12, 5, 11, 0, 0, 0, time.UTC)
	drained := start
	drained.At = began
	o := upgraded(c, "v1.37.2")
	o.KubeletWritten = map[string]time.Time{"w1": began.Add(10 * time.Minute), "w2": began.Add(12 * time.Minute), "w3": began.Add(-time.Hour)}
	o.Pods = []PodOn{
		{Node: "w1", Namespace: "kube-system", Name: "coredns-a", Created: began.Add(11 * time.Minute)},
		{Node: "w3", Namespace: "default", Name: "old-but-w3-not-restarted", Created: began.Add(-2 * time.Hour)},
	}
	if fs := Judge(c, drained, o); len(fs) != 0 {
		t.Errorf("drained workers: %v", fs)
	}
	// A pod made after the lab began but before w2's new kubelet: not
	// evicted either (a kubelet restarted without a new binary, as after a
	// reboot, counts for nothing: w3).
	o.Pods = append(o.Pods, PodOn{Node: "w2", Namespace: "default", Name: "web-1", Created: began.Add(5 * time.Minute)})
	if fs := Judge(c, drained, o); len(fs) != 1 || fs[0].Node != "w2" || !strings.Contains(fs[0].What, "replaced without a drain: default/web-1") || !strings.Contains(fs[0].Fix, "kubectl drain w2") {
		t.Errorf("w2 not drained: %v", fs)
	}
	if !evictionSkips([]metav1.OwnerReference{{Kind: "DaemonSet"}}, nil) || !evictionSkips(nil, map[string]string{"kubernetes.io/config.mirror": "x"}) || evictionSkips([]metav1.OwnerReference{{Kind: "ReplicaSet"}}, nil) {
		t.Error("evictionSkips: a drain leaves DaemonSet and static pods only")
	}
	// w3 was cordoned before the lab began: it may stay so.
	o = upgraded(c, "v1.37.2")
	o.Nodes[2].Unschedulable = true
	if fs := Judge(c, start, o); len(fs) != 0 {
		t.Errorf("a Node cordoned before the lab is a finding: %v", fs)
	}
	if fs := Judge(c, start, upgraded(c, "v1.36.3")); len(fs) < 10 {
		t.Errorf("nothing upgraded: %d findings, want one per component instance and cluster.yaml", len(fs))
	} else if fs[0].Kind != grade.Wrong {
		t.Errorf("first finding's kind %q", fs[0].Kind)
	}
}

// TestByHandOrderAndClusterYAML: the commands download and verify the new
// binaries first, replace every apiserver before any controller-manager,
// those before any worker, drain each worker before its kubelet changes
// and uncordon it after; the last one, run by bash on a copy of a real
// cluster.yaml, makes it say the new release and nothing else.
func TestByHandOrderAndClusterYAML(t *testing.T) {
	t.Setenv(components.EnvMirror, "") // the project's checksum files: no mirror to read
	c := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	c.Versions.Kubernetes = "v1.36.3"
	cmds, err := ByHand(context.Background(), &nodeplan.Machines{}, c, "v1.37.2", "/dl", "")
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, cmd := range cmds {
		all = append(all, cmd.Node+"\t"+cmd.Shell)
	}
	text := strings.Join(all, "\n")
	first := func(s string) int {
		i := strings.Index(text, s)
		if i < 0 {
			t.Fatalf("no %q in the commands:\n%s", s, text)
		}
		return i
	}
	if !strings.Contains(cmds[0].Shell, "sha256sum -c") || !strings.Contains(cmds[0].Shell, "v1.37.2/bin/linux/amd64/kubelet") {
		t.Errorf("the first command does not download and verify the new binaries:\n%s", cmds[0].Shell)
	}
	order := []string{"cp1\tsudo install -m 0755 -o root -g root kube-apiserver", "cp3\tsudo install -m 0755 -o root -g root kube-apiserver",
		"cp1\tsudo install -m 0755 -o root -g root kube-controller-manager", "kubectl drain w1", "w1\tsudo install -m 0755 -o root -g root kubelet",
		"kubectl uncordon w1", "kubectl drain w2", "kubectl uncordon w3"}
	for i := 1; i < len(order); i++ {
		if first(order[i-1]) > first(order[i]) {
			t.Errorf("%q comes after %q", order[i-1], order[i])
		}
	}
	last := cmds[len(cmds)-1].Shell
	sed, _, _ := strings.Cut(last, "\n")
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "lab"), 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "lab", "cluster.yaml")
	if _, err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	cmd := exec.Command("bash", "-c", sed)
	cmd.Env = append(os.Environ(), "KHW_STATE_DIR="+dir, "KHW_CLUSTER=lab")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", sed, err, out)
	}
	got, _, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Versions.Kubernetes != "v1.37.2" {
		t.Errorf("after %s: versions.kubernetes %s", sed, got.Versions.Kubernetes)
	}
	after, _ := os.ReadFile(path)
	if strings.Replace(string(before), "v1.36.3", "v1.37.2", 1) != string(after) {
		t.Errorf("the edit changed more than the version:\n%s", after)
	}
}

// TestByHandDownloadsCheckThePinnedDigest: the download command of lab 15
// by hand and of khw upgrade --dry-run (after its fetch) passes against
// the genuine mirror, and stops once kubectl and kubectl.sha256 in the
// mirror were swapped for a consistent pair that the pinned manifest does
// not list, as khw's own fetch does.
func TestByHandDownloadsCheckThePinnedDigest(t *testing.T) {
	c := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	c.Versions.Kubernetes = config.PreviousKubernetes
	target := *c
	target.Versions.Kubernetes = LabTarget
	mir := mirrortest.New(t, &target, Binaries...)
	mir.Use(t)
	base := t.TempDir()
	d := state.New(base, "lab")
	ctx := context.Background()
	run := func(sh string) (string, error) {
		cmd := exec.Command("bash", "-c", "set -euo pipefail\n"+sh)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "KHW_STATE_DIR="+base, "KHW_CLUSTER=lab")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	lab := ByHandCommands(ctx, c, d)[0].Shell
	env := steps.NewEnv(&target, d)
	defer env.Close()
	m := &nodeplan.Machines{}
	if err := m.FetchBinaries(ctx, env, Binaries...); err != nil {
		t.Fatal(err)
	}
	cmds, err := ByHand(ctx, m, c, LabTarget, filepath.Join(base, "dry-run"), "")
	if err != nil {
		t.Fatal(err)
	}
	dryRun := cmds[0].Shell
	for what, sh := range map[string]string{"lab 15 by hand": lab, "khw upgrade --dry-run": dryRun} {
		if out, err := run(sh); err != nil || !strings.Contains(out, "kubectl: OK") {
			t.Errorf("%s: against the genuine mirror: %v\n%s\ncommands:\n%s", what, err, out, sh)
		}
		if strings.Contains(sh, ".sha256") {
			t.Errorf("%s: the commands read a checksum file of the mirror:\n%s", what, sh)
		}
	}
	mir.Tamper(t, "kubectl")
	t.Setenv(components.EnvCacheDir, t.TempDir()) // what khw fetched before the swap does not count
	if err := (&nodeplan.Machines{}).FetchBinaries(ctx, env, "kubectl"); err == nil {
		t.Fatal("khw's fetch accepted the tampered kubectl")
	}
	for what, sh := range map[string]string{"lab 15 by hand": lab, "khw upgrade --dry-run": dryRun} {
		if out, err := run(sh); err == nil || !strings.Contains(out, "kubectl: FAILED") {
			t.Errorf("%s: the commands accept the tampered kubectl (%v):\n%s", what, err, out)
		}
	}
}

// TestByHandQuotesPaths: khw upgrade --dry-run's commands with a state
// directory whose path holds a space and a command substitution parse,
// and run in a sandbox (every program but touch and seq a no-op) they
// never run the substitution; the path reaches each program as one word.
func TestByHandQuotesPaths(t *testing.T) {
	t.Setenv(components.EnvMirror, "")
	root := t.TempDir()
	d := state.New(filepath.Join(root, "a b", "$(touch pwned)"), "lab")
	c := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	c.Versions.Kubernetes = config.PreviousKubernetes
	cmds, err := ByHand(context.Background(), &nodeplan.Machines{}, c, LabTarget, steps.Quote(filepath.Join(d.Root, "downloads", LabTarget)), filepath.Join(d.Root, "kubeconfigs", "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	for _, cmd := range cmds {
		if cmd.Node == "" {
			script.WriteString(cmd.Shell + "\n")
		}
	}
	if out, err := exec.Command("bash", "-n", "-c", script.String()).CombinedOutput(); err != nil {
		t.Fatalf("the commands do not parse: %v\n%s\n%s", err, out, script.String())
	}
	bin := t.TempDir()
	for _, prog := range []string{"touch", "seq"} {
		p, err := exec.LookPath(prog)
		if err != nil {
			t.Skipf("no %s", prog)
		}
		if err := os.Symlink(p, filepath.Join(bin, prog)); err != nil {
			t.Fatal(err)
		}
	}
	// kubectl and mkdir record their arguments, one per line.
	args := filepath.Join(root, "args")
	stub := `command_not_found_handle() { case "$1" in kubectl|mkdir) shift; printf '%s\n' "$@" >> "$ARGS";; esac; return 0; }` + "\n"
	cmd := exec.Command("bash", "-c", stub+script.String())
	cmd.Env = []string{"PATH=" + bin, "HOME=" + root, "ARGS=" + args}
	cmd.Dir = t.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("sandboxed commands: %v\n%s", err, out)
	}
	filepath.WalkDir(filepath.Dir(root), func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Name() == "pwned" {
			t.Errorf("a command substitution in the state directory's path ran: %s", p)
		}
		return nil
	})
	got, _ := os.ReadFile(args)
	for _, want := range []string{filepath.Join(d.Root, "downloads", LabTarget), filepath.Join(d.Root, "kubeconfigs", "admin.kubeconfig")} {
		if !strings.Contains(string(got), "\n"+want+"\n") && !strings.HasPrefix(string(got), want+"\n") {
			t.Errorf("no program got %q as one argument; they got:\n%s", want, got)
		}
	}
}
