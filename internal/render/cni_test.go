package render

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/templates"
)

// installScripts writes the embedded CNI scripts and w1's rendered mybridge
// config (dataDir moved into the temp dir) to a temp dir.
func installScripts(t *testing.T) (dir, conf string) {
	t.Helper()
	dir = t.TempDir()
	for _, name := range []string{"mybridge", "myloopback"} {
		b, err := templates.FS.ReadFile("files/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := defaultCluster(t, config.ProviderLibvirt, func(c *config.Cluster) { c.Kubernetes.CNI = config.CNIMyBridge })
	var m map[string]any
	if err := json.Unmarshal([]byte(mustFile(t, nodeFiles(t, c, "w1", libvirtFacts()), "/etc/cni/net.d/10-mybridge.conf")), &m); err != nil {
		t.Fatal(err)
	}
	m["dataDir"] = filepath.Join(dir, "data")
	b, _ := json.Marshal(m)
	conf = filepath.Join(dir, "10-mybridge.conf")
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, conf
}

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
}

func TestCNIScriptsSyntax(t *testing.T) {
	needTools(t, "bash")
	dir, _ := installScripts(t)
	for _, name := range []string{"mybridge", "myloopback"} {
		p := filepath.Join(dir, name)
		if out, err := exec.Command("bash", "-n", p).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", name, err, out)
		}
		if sc, err := exec.LookPath("shellcheck"); err == nil {
			if out, err := exec.Command(sc, p).CombinedOutput(); err != nil {
				t.Errorf("shellcheck %s:\n%s", name, out)
			}
		}
	}
}

type cniAnswer struct {
	CNIVersion        string   `json:"cniVersion"`
	SupportedVersions []string `json:"supportedVersions"`
	Code              int      `json:"code"`
	Msg               string   `json:"msg"`
}

// runCNI runs a plugin the way a runtime does: env vars and config on stdin.
func runCNI(t *testing.T, plugin string, env []string, stdin string) (cniAnswer, string, int) {
	t.Helper()
	cmd := exec.Command(plugin)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s: %v", plugin, err)
	}
	var a cniAnswer
	if len(out) > 0 {
		if err := json.Unmarshal(out, &a); err != nil {
			t.Fatalf("%s answered with non-JSON %q (stderr %q)", plugin, out, stderr.String())
		}
	}
	return a, string(out), code
}

// TestCNIScriptsProtocol exercises the answers that need no network change:
// VERSION, and the errors for a bad command, version, config or environment.
func TestCNIScriptsProtocol(t *testing.T) {
	needTools(t, "bash", "jq")
	dir, confPath := installScripts(t)
	confB, _ := os.ReadFile(confPath)
	conf := string(confB)
	base := []string{"CNI_CONTAINERID=abc", "CNI_IFNAME=eth0", "CNI_NETNS=/nonexistent"}
	for _, plugin := range []string{"mybridge", "myloopback"} {
		p := filepath.Join(dir, plugin)
		t.Run(plugin, func(t *testing.T) {
			a, _, code := runCNI(t, p, []string{"CNI_COMMAND=VERSION"}, `{"cniVersion":"1.0.0"}`)
			if code != 0 || a.CNIVersion != "1.0.0" || strings.Join(a.SupportedVersions, ",") != "1.0.0" {
				t.Errorf("VERSION: exit %d, %+v", code, a)
			}
			for _, tc := range []struct {
				name  string
				env   []string
				stdin string
				code  int
			}{
				{"unknown command", append([]string{"CNI_COMMAND=FROB"}, base...), conf, 4},
				{"old cniVersion", append([]string{"CNI_COMMAND=ADD"}, base...), strings.Replace(conf, `"1.0.0"`, `"0.4.0"`, 1), 1},
				{"ADD without a namespace", append([]string{"CNI_COMMAND=ADD"}, base...), conf, 4},
			} {
				a, raw, code := runCNI(t, p, tc.env, tc.stdin)
				if code == 0 || a.Code != tc.code || a.CNIVersion != "1.0.0" || a.Msg == "" {
					t.Errorf("%s: exit %d, answer %s; want a CNI error with code %d", tc.name, code, raw, tc.code)
				}
			}
		})
	}
	p := filepath.Join(dir, "mybridge")
	for _, tc := range []struct {
		name  string
		env   []string
		stdin string
		code  int
	}{
		{"not JSON", append([]string{"CNI_COMMAND=ADD"}, base...), "{nope", 6},
		{"bad subnet", append([]string{"CNI_COMMAND=ADD"}, base...), strings.Replace(conf, "10.200.0.0/24", "10.200.0.0", 1), 7},
		{"no container ID", []string{"CNI_COMMAND=DEL", "CNI_IFNAME=eth0"}, conf, 4},
	} {
		a, raw, code := runCNI(t, p, tc.env, tc.stdin)
		if code == 0 || a.Code != tc.code {
			t.Errorf("mybridge %s: exit %d, answer %s; want code %d", tc.name, code, raw, tc.code)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Errorf("a rejected call created the data dir: %v", err)
	}
}

// netnsDriver runs inside fresh network, mount and PID namespaces (so PIDs
// and /proc are private and nothing touches this machine's own network). It
// makes two "pods" (network namespaces of sleeping processes), runs the
// plugins against them and records what it sees in $T for the Go side.
const netnsDriver = `set -u
T=$1
[ "$(readlink /proc/self/ns/net)" != "$HOST_NETNS" ] || { echo "refusing: still in the host network namespace"; exit 90; }
unshare --net sleep 60 & p1=$!
unshare --net sleep 60 & p2=$!
for i in $(seq 50); do
  [ "$(readlink /proc/$p1/ns/net)" != "$(readlink /proc/self/ns/net)" ] && [ "$(readlink /proc/$p2/ns/net)" != "$(readlink /proc/self/ns/net)" ] && break
  sleep 0.1
done
for p in $p1 $p2; do
  [ "$(readlink /proc/$p/ns/net)" != "$(readlink /proc/self/ns/net)" ] || { echo "pod namespace not created"; exit 91; }
  [ "$(nsenter --net=/proc/$p/ns/net ip -o link | wc -l)" = 1 ] || { echo "pod namespace not fresh"; exit 92; }
done
echo "/proc/$p1/ns/net" > $T/netns1
run() { # run OUT PLUGIN COMMAND NETNS CONTAINERID IFNAME CONF
  env CNI_COMMAND=$3 CNI_NETNS=$4 CNI_CONTAINERID=$5 CNI_IFNAME=$6 $T/$2 < $7 > $T/$1.out 2> $T/$1.err
  echo $? > $T/$1.rc
}
N1=/proc/$p1/ns/net N2=/proc/$p2/ns/net
run add1   mybridge ADD   $N1 pod-one eth0 $T/10-mybridge.conf
run add1b  mybridge ADD   $N1 pod-one eth0 $T/10-mybridge.conf
run check1 mybridge CHECK $N1 pod-one eth0 $T/10-mybridge.conf
run add2   mybridge ADD   $N2 pod-two eth0 $T/10-mybridge.conf
echo '{"cniVersion":"1.0.0","name":"myloopback","type":"myloopback"}' > $T/lo.conf
run lo1    myloopback ADD   $N1 pod-one eth1 $T/lo.conf
run lochk  myloopback CHECK $N1 pod-one eth1 $T/lo.conf
nsenter --net=$N1 ip -j addr show > $T/pod1-addr.json
nsenter --net=$N1 ip -j route show > $T/pod1-route.json
ip -j -d link show > $T/links.json
iptables -t nat -S POSTROUTING > $T/nat.txt
ls $T/data > $T/data-before.txt
run del1   mybridge DEL   $N1 pod-one eth0 $T/10-mybridge.conf
run del1b  mybridge DEL   $N1 pod-one eth0 $T/10-mybridge.conf
run check2 mybridge CHECK $N1 pod-one eth0 $T/10-mybridge.conf
ip -j link show > $T/links-after.json
ls $T/data > $T/data-after.txt
kill $p1 $p2
exit 0
`

// TestMyBridgeInNetns runs ADD, CHECK and DEL of the real scripts against
// network namespaces made for the test. It needs root and the plugins' tools;
// everything happens in new namespaces that vanish with the test.
func TestMyBridgeInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	needTools(t, "bash", "unshare", "nsenter", "ip", "iptables", "jq", "flock", "sha1sum")
	if out, err := exec.Command("unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot create namespaces here: %v %s", err, out)
	}
	hostNS, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Skip(err)
	}
	dir, _ := installScripts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc", "bash", "-c", netnsDriver, "driver", dir)
	cmd.Env = append(os.Environ(), "HOST_NETNS="+hostNS)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("driver: %v\n%s", err, out)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	netns1 := read("netns1")
	for _, step := range []string{"add1", "add1b", "check1", "add2", "lo1", "lochk", "del1", "del1b"} {
		if rc := read(step + ".rc"); rc != "0" {
			t.Errorf("%s: exit %s, stdout %s, stderr %s", step, rc, read(step+".out"), read(step+".err"))
		}
	}

	type result struct {
		CNIVersion string `json:"cniVersion"`
		Interfaces []struct {
			Name, Mac, Sandbox string
		} `json:"interfaces"`
		IPs []struct {
			Address, Gateway string
			Interface        *int
		} `json:"ips"`
		Routes []struct{ Dst, Gw string } `json:"routes"`
	}
	parse := func(step string) result {
		var r result
		if err := json.Unmarshal([]byte(read(step+".out")), &r); err != nil {
			t.Fatalf("%s result is not JSON: %v", step, err)
		}
		return r
	}
	r1 := parse("add1")
	if r1.CNIVersion != "1.0.0" || len(r1.IPs) != 1 || r1.IPs[0].Address != "10.200.0.2/24" || r1.IPs[0].Gateway != "10.200.0.1" ||
		r1.IPs[0].Interface == nil || *r1.IPs[0].Interface != 2 || len(r1.Interfaces) != 3 {
		t.Fatalf("ADD result %+v: want 10.200.0.2/24 via 10.200.0.1 on interface 2 of 3", r1)
	}
	if pod := r1.Interfaces[2]; pod.Name != "eth0" || pod.Sandbox != netns1 || pod.Mac == "" {
		t.Errorf("pod interface %+v, want eth0 in %s", pod, netns1)
	}
	if len(r1.Routes) != 1 || r1.Routes[0].Dst != "0.0.0.0/0" || r1.Routes[0].Gw != "10.200.0.1" {
		t.Errorf("routes %+v", r1.Routes)
	}
	if r := parse("add1b"); r.IPs[0].Address != "10.200.0.2/24" {
		t.Errorf("repeated ADD gave %s, want the same 10.200.0.2/24", r.IPs[0].Address)
	}
	if r := parse("add2"); r.IPs[0].Address != "10.200.0.3/24" {
		t.Errorf("second pod got %s, want 10.200.0.3/24", r.IPs[0].Address)
	}
	if r := parse("lo1"); len(r.Interfaces) != 1 || r.Interfaces[0].Name != "lo" {
		t.Errorf("myloopback result %+v", r)
	}

	// What the pod and the node really look like.
	var addrs []struct {
		Ifname   string   `json:"ifname"`
		Flags    []string `json:"flags"`
		AddrInfo []struct {
			Family, Local string
			Prefixlen     int
		} `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(read("pod1-addr.json")), &addrs); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, a := range addrs {
		for _, ai := range a.AddrInfo {
			if ai.Family == "inet" {
				seen[a.Ifname] = ai.Local
			}
		}
		if a.Ifname == "lo" && !contains(a.Flags, "UP") {
			t.Errorf("lo in the pod is not up: %v", a.Flags)
		}
	}
	if seen["eth0"] != "10.200.0.2" || seen["lo"] != "127.0.0.1" {
		t.Errorf("pod addresses %v", seen)
	}
	if routes := read("pod1-route.json"); !strings.Contains(routes, `"dst":"default","gateway":"10.200.0.1","dev":"eth0"`) {
		t.Errorf("pod routes %s, want default via 10.200.0.1 dev eth0", routes)
	}
	var links []struct {
		Ifname string `json:"ifname"`
		Master string `json:"master"`
	}
	if err := json.Unmarshal([]byte(read("links.json")), &links); err != nil {
		t.Fatal(err)
	}
	ports := 0
	for _, l := range links {
		if l.Master == "cni0" {
			ports++
		}
	}
	if ports != 2 {
		t.Errorf("cni0 has %d ports, want 2 (one veth per pod): %+v", ports, links)
	}
	nat := read("nat.txt")
	rule := "-A POSTROUTING -s 10.200.0.0/24 ! -d 10.200.0.0/16"
	if strings.Count(nat, rule) != 1 || !strings.Contains(nat, "-j MASQUERADE") {
		t.Errorf("nat POSTROUTING:\n%s\nwant exactly one %q ... MASQUERADE", nat, rule)
	}
	if got := read("data-before.txt"); got != "10.200.0.2\n10.200.0.3\nlock" {
		t.Errorf("IPAM files before DEL: %q", got)
	}

	// After DEL: the IP is free, the veth is gone, CHECK reports the pod missing.
	if got := read("data-after.txt"); got != "10.200.0.3\nlock" {
		t.Errorf("IPAM files after DEL: %q", got)
	}
	if err := json.Unmarshal([]byte(read("links-after.json")), &links); err != nil {
		t.Fatal(err)
	}
	ports = 0
	for _, l := range links {
		if l.Master == "cni0" {
			ports++
		}
	}
	if ports != 1 {
		t.Errorf("after DEL cni0 has %d ports, want 1", ports)
	}
	var a cniAnswer
	if rc := read("check2.rc"); rc == "0" || json.Unmarshal([]byte(read("check2.out")), &a) != nil || a.Code != 102 {
		t.Errorf("CHECK after DEL: exit %s, answer %s; want error code 102", rc, read("check2.out"))
	}
}
