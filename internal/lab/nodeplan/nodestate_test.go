package nodeplan

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/steps"
)

// runProbe runs the probe script with sh on this machine (files only:
// systemd is not PID 1 here).
func runProbe(t *testing.T, cache string, paths []string) nodeState {
	t.Helper()
	out, err := exec.Command("sh", "-c", probeScriptWith(cache, paths, nil)).CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	st, err := parseProbe(out)
	if err != nil {
		t.Fatalf("parse %q: %v", out, err)
	}
	return st
}

func TestProbeFilesAndSumCache(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "khw", "sha256sums")
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("binary v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "adir")
	os.Mkdir(sub, 0o755)
	absent := filepath.Join(dir, "absent")

	want := &wantFile{}
	want.Path, want.Data, want.Mode = bin, []byte("binary v1"), 0o755
	st := runProbe(t, cache, []string{bin, sub, absent})
	if f := st.Files[bin]; !f.Present || f.SHA256 != want.sumOf() || f.Mode != 0o755 || f.Owner == "" {
		t.Errorf("bin: %+v, want sha %s mode 755", f, want.sumOf())
	}
	if f := st.Files[sub]; !f.Other || f.Present {
		t.Errorf("dir: %+v", f)
	}
	if f := st.Files[absent]; f.Present || f.Other {
		t.Errorf("absent: %+v", f)
	}
	if time.Since(st.Files[bin].MTime) > time.Minute {
		t.Errorf("mtime %v is not now", st.Files[bin].MTime)
	}

	// Record a deliberately false digest: the probe must use it while size
	// and mtime match, and hash again once the file changes.
	fake := &wantFile{sum: strings.Repeat("a", 64)}
	fake.Path = bin
	for i := 0; i < 2; i++ { // twice: the cache keeps one line per path
		if out, err := exec.Command("sh", "-c", recordSumsScriptWith(cache, []*wantFile{fake})).CombinedOutput(); err != nil {
			t.Fatalf("record: %v\n%s", err, out)
		}
	}
	data, _ := os.ReadFile(cache)
	if n := strings.Count(string(data), "\n"); n != 1 {
		t.Errorf("cache has %d lines, want 1:\n%s", n, data)
	}
	if got := runProbe(t, cache, []string{bin}).Files[bin].SHA256; got != fake.sum {
		t.Errorf("cached digest not used: %s", got)
	}
	if err := os.WriteFile(bin, []byte("binary v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	v2 := &wantFile{}
	v2.Data = []byte("binary v2")
	if got := runProbe(t, cache, []string{bin}).Files[bin].SHA256; got != v2.sumOf() {
		t.Errorf("after a change the probe returned %s, want the real digest %s", got, v2.sumOf())
	}
}

func TestParseUnits(t *testing.T) {
	out := "A /x\n--units--\nId=etcd.service\nLoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\nNeedDaemonReload=no\nExecMainStartTimestamp=Sun 2026-11-29 19:40:01.123456 UTC\n\n" +
		"Id=kube-apiserver.service\nLoadState=not-found\nActiveState=inactive\nSubState=dead\nUnitFileState=\nNeedDaemonReload=no\nExecMainStartTimestamp=\n"
	st, err := parseProbe([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	e := st.Units["etcd.service"]
	if e.Active != "active" || e.Enabled != "enabled" || e.Started != time.Date(2026, 11, 29, 19, 40, 1, 123456000, time.UTC) {
		t.Errorf("etcd: %+v", e)
	}
	if a := st.Units["kube-apiserver.service"]; a.Load != "not-found" || !a.Started.IsZero() {
		t.Errorf("apiserver: %+v", a)
	}
	reloaded := "--units--\nId=haproxy.service\nActiveState=active\nExecMainStartTimestamp=Sun 2026-11-29 19:40:01.123456 UTC\n" +
		"ExecReload={ path=/usr/sbin/haproxy ; argv[]=/usr/sbin/haproxy -Ws -f $CONFIG -c -q ; ignore_errors=no ; start_time=[Sun 2026-11-29 19:50:00.000001 UTC] ; stop_time=[Sun 2026-11-29 19:50:00.1 UTC] ; pid=77 ; code=exited ; status=0 }\n" +
		"ExecReload={ path=/bin/kill ; argv[]=/bin/kill -USR2 $MAINPID ; ignore_errors=no ; start_time=[Sun 2026-11-29 19:50:00.200000 UTC] ; stop_time=[Sun 2026-11-29 19:50:00.200100 UTC] ; pid=78 ; code=exited ; status=0 }\n"
	st, err = parseProbe([]byte(reloaded))
	if err != nil {
		t.Fatal(err)
	}
	h := st.Units["haproxy.service"]
	if want := time.Date(2026, 11, 29, 19, 50, 0, 200000000, time.UTC); !h.Reloaded.Equal(want) || !h.readSince().Equal(want) {
		t.Errorf("haproxy reloaded at %v (reads since %v), want %v", h.Reloaded, h.readSince(), want)
	}
	for v, want := range map[string]bool{
		"{ path=/bin/kill ; argv[]=/bin/kill -USR2 $MAINPID ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }":                                               false,
		"{ path=/bin/kill ; argv[]=/bin/kill -USR2 $MAINPID ; ignore_errors=no ; start_time=[Sun 2026-11-29 19:50:00 UTC] ; stop_time=[Sun 2026-11-29 19:50:01 UTC] ; pid=9 ; code=exited ; status=1 }": false,
		"{ path=/bin/kill ; argv[]=/bin/kill -USR2 $MAINPID ; ignore_errors=no ; start_time=[Sun 2026-11-29 19:50:00 UTC] ; stop_time=[Sun 2026-11-29 19:50:01 UTC] ; pid=9 ; code=exited ; status=0 }": true,
	} {
		if got := !reloadedAt(v).IsZero(); got != want {
			t.Errorf("reloadedAt(%q) set = %v, want %v", v, got, want)
		}
	}
	for _, bad := range []string{"Q /x\n", "--units--\nnonsense\n", "--units--\nId=x\nExecMainStartTimestamp=yesterday\n"} {
		if _, err := parseProbe([]byte(bad)); err == nil {
			t.Errorf("parseProbe(%q) succeeded", bad)
		}
	}
}

func TestUnitDiffs(t *testing.T) {
	start := time.Date(2026, 11, 29, 19, 40, 0, 0, time.UTC)
	w := &NodeWant{Node: config.Node{Name: "cp1"}, Units: []WantUnit{{Name: "etcd.service", Deps: []string{"/etc/etcd/kubernetes.pem", "/usr/local/bin/etcd"}}}}
	tests := []struct {
		name     string
		unit     unitState
		certTime time.Time
		changing map[string]bool
		want     string // substring of the only diff; "" = none
	}{
		{"clean", unitState{Load: "loaded", Active: "active", Enabled: "enabled", Started: start}, start.Add(-time.Second), nil, ""},
		{"cert newer than process", unitState{Load: "loaded", Active: "active", Enabled: "enabled", Started: start}, start.Add(time.Millisecond), nil, "runs with an old /etc/etcd/kubernetes.pem"},
		{"binary about to change", unitState{Load: "loaded", Active: "active", Enabled: "enabled", Started: start}, start.Add(-time.Second), map[string]bool{"/usr/local/bin/etcd": true}, "etcd.service must restart to read khw's /usr/local/bin/etcd"},
		{"failed", unitState{Load: "loaded", Active: "failed", Sub: "failed", Enabled: "enabled"}, start, nil, "is not running (failed/failed)"},
		{"not found", unitState{Load: "not-found"}, start, nil, "is not known to systemd"},
		{"crash-looping, between two crashes", unitState{Load: "loaded", Active: "active", Enabled: "enabled", Started: start.Add(-5 * time.Second), Restarts: 4}, start.Add(-time.Hour), nil, "systemd restarted it 4 times, the last 5s ago"},
		{"restarted twice long ago, running since", unitState{Load: "loaded", Active: "active", Enabled: "enabled", Started: start.Add(-time.Hour), Restarts: 2}, start.Add(-2 * time.Hour), nil, ""},
		{"restarted once, just now", unitState{Load: "loaded", Active: "active", Enabled: "enabled", Started: start.Add(-time.Second), Restarts: 1}, start.Add(-time.Hour), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.unit.Name = "etcd.service"
			st := nodeState{Units: map[string]unitState{"etcd.service": tt.unit}, Now: start,
				Files: map[string]fileState{"/etc/etcd/kubernetes.pem": {Present: true, MTime: tt.certTime}}}
			diffs := unitDiffs(w, st, tt.changing)
			if tt.want == "" {
				if len(diffs) != 0 {
					t.Errorf("diffs %v, want none", diffs)
				}
				return
			}
			if len(diffs) != 1 || !strings.Contains(diffs[0].What, tt.want) || diffs[0].Node != "cp1" {
				t.Errorf("diffs %v, want one containing %q", diffs, tt.want)
			}
		})
	}
	// A cert newer than the process may have been reloaded by it
	// (information); a config or unit file it reads only at start is a
	// mistake (DiffStale).
	lb := &NodeWant{Node: config.Node{Name: "lb"}, Units: []WantUnit{{Name: "haproxy.service", Deps: []string{"/etc/haproxy/haproxy.cfg"}}}}
	running := unitState{Name: "haproxy.service", Load: "loaded", Active: "active", Enabled: "enabled", Started: start}
	d := unitDiffs(lb, nodeState{Units: map[string]unitState{"haproxy.service": running},
		Files: map[string]fileState{"/etc/haproxy/haproxy.cfg": {Present: true, MTime: start.Add(time.Second)}}}, nil)
	if len(d) != 1 || d[0].Kind != steps.DiffStale || !strings.Contains(d[0].What, "no effect until it restarts") {
		t.Errorf("haproxy.cfg changed after HAProxy started: %+v, want one DiffStale", d)
	}
	d = unitDiffs(w, nodeState{Units: map[string]unitState{"etcd.service": {Name: "etcd.service", Load: "loaded", Active: "active", Enabled: "enabled", Started: start}},
		Files: map[string]fileState{"/etc/etcd/kubernetes.pem": {Present: true, MTime: start.Add(time.Second)}}}, nil)
	if len(d) != 1 || d[0].Kind != steps.DiffContent {
		t.Errorf("a cert changed after etcd started: %+v, want information (DiffContent)", d)
	}
	// Disabled and not reloaded are separate diffs on a running unit.
	st := nodeState{Units: map[string]unitState{"etcd.service": {Name: "etcd.service", Load: "loaded", Active: "active", Enabled: "disabled", NeedReload: true, Started: start}}}
	if d := unitDiffs(w, st, nil); len(d) != 2 {
		t.Errorf("disabled + need reload: %v", d)
	}
}

func TestFileDiff(t *testing.T) {
	f := &wantFile{What: "the CA"}
	f.Path, f.Data, f.Mode = "/etc/etcd/ca.pem", []byte("ca"), 0o644
	tests := []struct {
		got  fileState
		want string
	}{
		{fileState{Present: true, SHA256: f.sumOf(), Mode: 0o644, Owner: "root", Group: "root"}, ""},
		{fileState{}, "is missing (the CA)"},
		{fileState{Other: true}, "is not a regular file"},
		{fileState{Present: true, SHA256: "x", Mode: 0o644, Owner: "root", Group: "root"}, "differs from the CA"},
		{fileState{Present: true, SHA256: f.sumOf(), Mode: 0o600, Owner: "root", Group: "root"}, "has mode 0600 owner root:root, want 0644 root:root"},
	}
	for _, tt := range tests {
		d, ok := fileDiff("cp1", f, tt.got)
		if (tt.want == "") != ok || (tt.want != "" && (!strings.Contains(d.What, tt.want) || d.Subject != f.Path)) {
			t.Errorf("%+v: ok=%v diff %q, want %q", tt.got, ok, d.What, tt.want)
		}
	}
	// A copy of the jumpbox's certificate that is missing or another one is
	// a mistake (DiffCopy); a kubeconfig that differs may be a variant, and
	// a cert's mode is not its content.
	f.origin, f.Src = fromState, "/s/pki/ca.pem"
	for _, tt := range []struct {
		path string
		got  fileState
		want steps.DiffKind
	}{
		{"/etc/etcd/ca.pem", fileState{}, steps.DiffCopy},
		{"/etc/etcd/ca.pem", fileState{Present: true, SHA256: "x", Mode: 0o644, Owner: "root", Group: "root"}, steps.DiffCopy},
		{"/etc/etcd/ca.pem", fileState{Present: true, SHA256: f.sumOf(), Mode: 0o600, Owner: "root", Group: "root"}, steps.DiffContent},
		{"/var/lib/kubelet/kubeconfig", fileState{Present: true, SHA256: "x", Mode: 0o644, Owner: "root", Group: "root"}, steps.DiffContent},
	} {
		f.Path = tt.path
		if d, _ := fileDiff("cp1", f, tt.got); d.Kind != tt.want || (tt.want == steps.DiffCopy && !strings.Contains(d.Fix, "copy /s/pki/ca.pem to "+tt.path+" again")) {
			t.Errorf("%s %+v: kind %v fix %q, want kind %v", tt.path, tt.got, d.Kind, d.Fix, tt.want)
		}
	}
}

func TestDiffCommandsOnlyNamedFiles(t *testing.T) {
	a, b := &wantFile{Src: "/s/a"}, &wantFile{Src: "/s/b"}
	a.Path, b.Path = "/etc/a", "/etc/b"
	w := &NodeWant{Node: config.Node{Name: "cp1"}, Files: []*wantFile{a, b}, Units: []WantUnit{{Name: "x.service"}}}
	cmds := DiffCommands([]*NodeWant{w}, []steps.Diff{{Node: "cp1", Subject: "/etc/b", What: "/etc/b is missing (b)"}})
	text := ""
	for _, c := range cmds {
		text += c.String() + "\n"
	}
	if strings.Contains(text, "/s/a") || !strings.Contains(text, `scp -F "$KHW_SSH_CONFIG" /s/b cp1:b`) || !strings.Contains(text, "sudo systemctl restart x.service") {
		t.Errorf("commands:\n%s", text)
	}
	if got := DiffCommands([]*NodeWant{w}, []steps.Diff{{Node: "cp2", What: "x"}}); len(got) != 0 {
		t.Errorf("commands for another node: %v", got)
	}
}

// Two files with one base name get distinct names in the node's home
// directory, and a download shared by two nodes is shown once, into the
// downloads directory, with its checksum check.
func TestDiffCommandsNamesAndDownloads(t *testing.T) {
	k1, k2 := &wantFile{Src: "/s/w1.kubeconfig"}, &wantFile{Src: "/s/kube-proxy.kubeconfig"}
	k1.Path, k2.Path = "/var/lib/kubelet/kubeconfig", "/var/lib/kube-proxy/kubeconfig"
	bin := &wantFile{Src: "etcd", Fetch: "cp /m/etcd.tgz .\nsha256sum -c --ignore-missing SHA256SUMS\ntar -xzf etcd.tgz etcd"}
	bin.Path = "/usr/local/bin/etcd"
	w1 := &NodeWant{Node: config.Node{Name: "w1"}, Files: []*wantFile{k1, k2, bin}, Downloads: "/d/downloads"}
	w2 := &NodeWant{Node: config.Node{Name: "w2"}, Files: []*wantFile{bin}, Downloads: "/d/downloads"}
	text := ""
	for _, c := range DiffCommands([]*NodeWant{w1, w2}, nil) {
		text += c.String() + "\n"
	}
	for _, want := range []string{
		`scp -F "$KHW_SSH_CONFIG" /s/w1.kubeconfig w1:var_lib_kubelet_kubeconfig`,
		`scp -F "$KHW_SSH_CONFIG" /s/kube-proxy.kubeconfig w1:var_lib_kube-proxy_kubeconfig`,
		"sudo install -D -m 0644 -o root -g root var_lib_kube-proxy_kubeconfig /var/lib/kube-proxy/kubeconfig",
		"$ cd /d/downloads",
		`scp -F "$KHW_SSH_CONFIG" /d/downloads/etcd w2:etcd`,
		// no copy (a key among them) is left in the SSH user's home
		"w1$ rm -f var_lib_kubelet_kubeconfig var_lib_kube-proxy_kubeconfig etcd",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("commands lack %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "sha256sum -c"); n != 1 {
		t.Errorf("the shared download is checked %d times, want once:\n%s", n, text)
	}
}

// TestParseProbeClockAndRestarts: the node's clock line and NRestarts.
func TestParseProbeClockAndRestarts(t *testing.T) {
	out := "N 1796000000.250000000\n--units--\nId=etcd.service\nLoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\nNRestarts=3\n\n"
	st, err := parseProbe([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(1796000000, 250000000); !st.Now.Equal(want) {
		t.Errorf("Now %v, want %v", st.Now, want)
	}
	if u := st.Units["etcd.service"]; u.Restarts != 3 {
		t.Errorf("Restarts %d, want 3", u.Restarts)
	}
	if _, err := parseProbe([]byte("N soon\n")); err == nil {
		t.Error("a clock line that is not a time: no error")
	}
}
