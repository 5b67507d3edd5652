package nodeplan

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/steps"

	"testing"
)

func TestParseNodeOS(t *testing.T) {
	out := "ubuntu\nnoble\narm64\nii \tlibc6\t\nii \tdebconf\tdebconf-2.0\nrc \thaproxy\t\n"
	id, code, arch, inst, err := parseNodeOS([]byte(out))
	if err != nil || id != "ubuntu" || code != "noble" || arch != "arm64" {
		t.Fatalf("parseNodeOS = %q %q %q %v", id, code, arch, err)
	}
	if !inst["libc6"] || !inst["debconf-2.0"] || inst["haproxy"] {
		t.Errorf("installed = %v: want libc6 and debconf-2.0, not haproxy (removed, config left)", inst)
	}
	if _, _, _, _, err := parseNodeOS([]byte("\n\n")); err == nil {
		t.Error("empty os-release: no error")
	}
}

func TestPackageCommands(t *testing.T) {
	lb := config.Node{Name: "lb"}
	w := &NodeWant{Node: lb, Packages: []WantPackage{{Name: "haproxy", Path: "/usr/sbin/haproxy"}}}
	got := joinCmds(PackageCommands(w))
	for _, want := range []string{
		"cloud-init status --wait",
		"sudo apt-get update || { sleep 10; sudo apt-get update; }",
		"sudo apt-get install -y -o DPkg::Lock::Timeout=900 haproxy",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("online commands:\n%s\nwant %q (wait for cloud-init, apt-get update tried again, the install waiting for the dpkg lock)", got, want)
		}
	}
	if strings.Index(got, "cloud-init status --wait") > strings.Index(got, "apt-get update") {
		t.Errorf("online commands:\n%s\nwant the wait for cloud-init first", got)
	}
	w.OfflineDebs = true
	got = joinCmds(PackageCommands(w))
	if strings.Contains(got, "apt-get update") || !strings.Contains(got, "haproxy_<version>_<arch>.deb") || !strings.Contains(got, "Dir::Etc::SourceList=/dev/null") ||
		!strings.Contains(got, "cloud-init status --wait") || !strings.Contains(got, "-o DPkg::Lock::Timeout=900") {
		t.Errorf("offline commands without a plan:\n%s", got)
	}
	// Without a plan the commands cannot name the files: they parse (the
	// placeholders are quoted, not redirections) and the first one stops,
	// saying why.
	cmds := PackageCommands(w)
	for _, c := range cmds {
		if out, err := exec.Command("bash", "-n", "-c", c.Shell).CombinedOutput(); err != nil {
			t.Errorf("bash -n %q: %v %s", c.Shell, err, out)
		}
	}
	if out, err := exec.Command("bash", "-e", "-c", cmds[0].Shell).CombinedOutput(); err == nil || !strings.Contains(string(out), "SHA-256") {
		t.Errorf("no plan: %q did not stop saying why: %v %s", cmds[0].Shell, err, out)
	}
}

// The by-hand .deb commands with a plan, against a directory mirror: each
// .deb is copied from the mirror by its absolute path and checked against
// the digest of the Packages index khw read; run in bash, a genuine mirror
// passes and leaves the files for scp, a .deb the mirror changed fails and
// is removed (so a learner typing the lines one by one has nothing
// unchecked to copy); with an http mirror whose URL has a password, curl
// reads it from $KHW_MIRROR and the password is written nowhere.
func TestPackageCommandsCheckEachDeb(t *testing.T) {
	mirror := t.TempDir()
	a, _ := components.FindDebArchive("debian", "bookworm", "amd64")
	debs := map[string][]byte{
		"pool/main/h/haproxy/haproxy_2.6.12-1+deb12u3_amd64.deb": []byte("haproxy deb"),
		"pool/main/l/lua5.3/liblua5.3-0_5.3.6-2_amd64.deb":       []byte("lua deb"),
	}
	var plan []components.DebPackage
	for fn, data := range debs {
		p, _, _ := components.MirrorLocation(mirror, a.URL+"/"+fn)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		plan = append(plan, components.DebPackage{Name: path.Base(fn), Filename: fn, SHA256: hex.EncodeToString(sum[:])})
	}
	run := func(w *NodeWant) (string, error) {
		get := strings.Split(PackageCommands(w)[0].Shell, "\n")
		if !strings.HasPrefix(get[len(get)-1], "scp ") {
			t.Fatalf("last line %q, want the scp to the node", get[len(get)-1])
		}
		out, err := exec.Command("bash", "-e", "-c", strings.Join(get[:len(get)-1], "\n")).CombinedOutput()
		return string(out), err
	}
	w := &NodeWant{Node: config.Node{Name: "lb"}, Packages: []WantPackage{{Name: "haproxy"}}, OfflineDebs: true, DebMirror: mirror,
		Downloads: filepath.Join(t.TempDir(), "dl dir"), Debs: &DebPlan{Archive: a, Arch: "amd64", Debs: plan}}
	if out, err := run(w); err != nil {
		t.Fatalf("genuine mirror: %v\n%s", err, out)
	}
	for fn := range debs {
		if _, err := os.Stat(filepath.Join(w.Downloads, path.Base(fn))); err != nil {
			t.Errorf("genuine mirror: %v", err)
		}
	}
	p, _, _ := components.MirrorLocation(mirror, a.URL+"/pool/main/l/lua5.3/liblua5.3-0_5.3.6-2_amd64.deb")
	if err := os.WriteFile(p, []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.Downloads = filepath.Join(t.TempDir(), "dl")
	out, err := run(w)
	if err == nil || !strings.Contains(out, "FAILED") {
		t.Errorf("changed .deb: %v\n%s\nwant sha256sum to fail", err, out)
	}
	if _, err := os.Stat(filepath.Join(w.Downloads, "liblua5.3-0_5.3.6-2_amd64.deb")); err == nil {
		t.Error("the .deb that failed its check is still there to be copied")
	}

	w.DebMirror = "https://teacher:s3cret@mirror.example:8443/"
	got := joinCmds(PackageCommands(w))
	if strings.Contains(got, "s3cret") || !strings.Contains(got, `curl -fLO "${KHW_MIRROR%/}"/deb.debian.org/debian/pool/main/h/haproxy/haproxy_2.6.12-1+deb12u3_amd64.deb`) {
		t.Errorf("mirror with a password:\n%s\nwant curl from $KHW_MIRROR and no password", got)
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

func TestParseAptBusy(t *testing.T) {
	out := "cloud-init running\nlock /var/lib/dpkg/lock-frontend 812 unattended-upgr\nlock /var/lib/dpkg/lock 812 unattended-upgr\nsh: 1: warning\nlock /x notapid y\n"
	b := parseAptBusy([]byte(out))
	if b.CloudInit != "running" || !cloudInitBusy(b.CloudInit) {
		t.Errorf("cloud-init = %q, want running (busy)", b.CloudInit)
	}
	if len(b.Holders) != 2 || b.Holders[0].String() != "/var/lib/dpkg/lock-frontend is held by unattended-upgr (pid 812)" {
		t.Errorf("holders = %+v, want the two locks of pid 812, the frontend lock first", b.Holders)
	}
	for status, busy := range map[string]bool{"not started": true, "done": false, "disabled": false, "error": false, "": false} {
		b := parseAptBusy([]byte("cloud-init " + status + "\n"))
		if b.CloudInit != status || cloudInitBusy(b.CloudInit) != busy {
			t.Errorf("cloud-init %q: parsed %q busy %v, want busy %v", status, b.CloudInit, cloudInitBusy(b.CloudInit), busy)
		}
	}
	if b := parseAptBusy(nil); b.CloudInit != "" || len(b.Holders) != 0 {
		t.Errorf("no output: %+v, want nothing busy", b)
	}
}
