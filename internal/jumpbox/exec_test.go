package jumpbox

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm"
)

// Exec replaces the process, so TestExec runs it in a child: this test
// binary started again with helperEnv set to a JSON {session, argv}.
const helperEnv = "KHW_JUMPBOX_EXEC_HELPER"

type helperJob struct {
	Session Session
	Argv    []string
}

func TestMain(m *testing.M) {
	if job := os.Getenv(helperEnv); job != "" {
		var j helperJob
		if err := json.Unmarshal([]byte(job), &j); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(90)
		}
		os.Unsetenv(helperEnv)
		err := j.Session.Exec(j.Argv)
		fmt.Fprintln(os.Stderr, "helper: Exec returned:", err)
		os.Exit(91)
	}
	os.Exit(m.Run())
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP (needs root): makes network and mount namespaces")
	}
}

// witnessNetns makes /run/netns/khw-<cluster> with `ip netns add` (an
// independent tool, not khw's code) holding a bridge d0 with addr, and
// removes it when the test ends.
func witnessNetns(t *testing.T, cluster, addr string) {
	t.Helper()
	ns := vm.NetnsName(cluster)
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		// A bridge, not a dummy: some test kernels lack the dummy driver.
		{"-n", ns, "link", "add", "d0", "type", "bridge"},
		{"-n", ns, "addr", "add", addr, "dev", "d0"},
		{"-n", ns, "link", "set", "d0", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			exec.Command("ip", "netns", "delete", ns).Run()
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		if args[0] == "netns" {
			t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns).Run() })
		}
	}
}

func runHelper(t *testing.T, s *Session, argv ...string) (string, string, error) {
	t.Helper()
	job, err := json.Marshal(helperJob{Session: *s, Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(job), "KUBECONFIG=/not/this/one")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func TestExecInNamespaceWithHostsFile(t *testing.T) {
	requireRoot(t)
	name := randomName(t)
	witnessNetns(t, name, "192.168.122.10/24")
	c := config.Default(name, config.ArchAMD64, config.ProviderNspawn)
	d := state.New(t.TempDir(), name)
	s, err := Prepare(c, d, os.Getenv("PATH"))
	if err != nil {
		t.Fatal(err)
	}
	hostEtcHosts, _ := os.ReadFile("/etc/hosts")
	rootAddrs, _ := exec.Command("ip", "-4", "-o", "addr").CombinedOutput()

	script := `cat /etc/hosts; echo ---; ip -4 -o addr; echo ---; getent hosts lb cp2.kubernetes.local; echo ---; ` +
		`echo "$KUBECONFIG"; echo "$PATH"; echo "$KHW_CLUSTER"; echo "$KHW_NETNS"; exit 7`
	out, errOut, err := runHelper(t, s, "sh", "-c", script)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Fatalf("child: %v (want exit 7 from the exec'd sh)\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	parts := strings.Split(out, "---\n")
	if len(parts) != 4 {
		t.Fatalf("output:\n%s", out)
	}
	hostname, _ := os.Hostname()
	if parts[0] != string(HostsFile(c, hostname)) {
		t.Errorf("/etc/hosts inside is not the generated file:\n%s", parts[0])
	}
	if !strings.Contains(parts[1], "d0    inet 192.168.122.10/24") {
		t.Errorf("the namespace's address is not visible inside:\n%s", parts[1])
	}
	for _, l := range strings.Split(strings.TrimSpace(string(rootAddrs)), "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[1] != "lo" && strings.Contains(parts[1], f[3]) {
			t.Errorf("root namespace address %s visible inside:\n%s", f[3], parts[1])
		}
	}
	if !strings.Contains(parts[2], "192.168.122.10  lb.kubernetes.local lb") || !strings.Contains(parts[2], "192.168.122.12  cp2.kubernetes.local cp2") {
		t.Errorf("node names do not resolve inside:\n%s", parts[2])
	}
	env := strings.Split(strings.TrimSpace(parts[3]), "\n")
	want := []string{AdminKubeconfigPath(d), filepath.Join(d.Root, "bin") + ":" + os.Getenv("PATH"), name, "khw-" + name}
	if strings.Join(env, "\n") != strings.Join(want, "\n") {
		t.Errorf("environment inside:\n got %q\nwant %q", env, want)
	}
	if now, _ := os.ReadFile("/etc/hosts"); string(now) != string(hostEtcHosts) {
		t.Error("the host's /etc/hosts changed")
	}
	if m, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(m), HostsPath(d)) {
		t.Error("the bind mount leaked into the host's mount namespace")
	}
}

func TestExecErrorsReturn(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	cases := []struct {
		name string
		s    Session
		argv []string
		want string
	}{
		{"missing namespace", Session{Cluster: "x", Netns: filepath.Join(dir, "no-netns"), Vars: []string{"PATH=/usr/bin:/bin"}}, []string{"true"}, "fix: run `khw up`"},
		{"missing hosts file", Session{Cluster: "x", Hosts: filepath.Join(dir, "no-hosts"), Vars: []string{"PATH=/usr/bin:/bin"}}, []string{"true"}, "bind-mount"},
		{"unknown command", Session{Cluster: "x", Vars: []string{"PATH=" + dir}}, []string{"no-such-tool"}, "not found in PATH"},
		{"no command", Session{Cluster: "x"}, nil, "no command"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// These fail before execve, so they run in this process; a
			// failed step leaves only a discarded thread behind.
			err := tc.s.Exec(tc.argv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if m, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(m), "no-hosts") {
		t.Error("a failed Exec changed this process' mounts")
	}
}
