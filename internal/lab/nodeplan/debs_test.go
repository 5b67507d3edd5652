package nodeplan

import (
	"os/exec"
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
	// Without a plan the commands cannot name the files: the copy line
	// parses (the placeholders are quoted, not redirections) and the check
	// stops the commands.
	for _, c := range PackageCommands(w) {
		if out, err := exec.Command("bash", "-n", "-c", c.Shell).CombinedOutput(); err != nil {
			t.Errorf("bash -n %q: %v %s", c.Shell, err, out)
		}
	}
	cmds := PackageCommands(w)
	install := strings.Split(cmds[len(cmds)-1].Shell, "\n")
	if len(install) != 3 {
		t.Fatalf("no plan: install command %q, want mv, the check, apt-get", install)
	}
	if out, err := exec.Command("bash", "-c", install[1]).CombinedOutput(); err == nil || !strings.Contains(string(out), "SHA-256") {
		t.Errorf("no plan: the check %q did not stop the commands saying why: %v %s", install[1], err, out)
	}
	a, _ := components.FindDebArchive("debian", "bookworm", "amd64")
	w.Debs = &DebPlan{Archive: a, Arch: "amd64", Debs: []components.DebPackage{
		{Name: "haproxy", Filename: "pool/main/h/haproxy/haproxy_2.6.12-1+deb12u3_amd64.deb", SHA256: strings.Repeat("ab", 32)},
		{Name: "liblua5.3-0", Filename: "pool/main/l/lua5.3/liblua5.3-0_5.3.6-2_amd64.deb", SHA256: strings.Repeat("cd", 32)}}}
	got = joinCmds(PackageCommands(w))
	for _, want := range []string{
		`"$KHW_MIRROR"/deb.debian.org/debian/pool/main/h/haproxy/haproxy_2.6.12-1+deb12u3_amd64.deb`,
		`"$KHW_MIRROR"/deb.debian.org/debian/pool/main/l/lua5.3/liblua5.3-0_5.3.6-2_amd64.deb lb:`,
		"/var/cache/khw/debs/haproxy_2.6.12-1+deb12u3_amd64.deb /var/cache/khw/debs/liblua5.3-0_5.3.6-2_amd64.deb",
		"echo '" + strings.Repeat("ab", 32) + "  /var/cache/khw/debs/haproxy_2.6.12-1+deb12u3_amd64.deb' | sha256sum -c -",
		"echo '" + strings.Repeat("cd", 32) + "  /var/cache/khw/debs/liblua5.3-0_5.3.6-2_amd64.deb' | sha256sum -c -",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("offline commands with a plan:\n%s\nwant %q", got, want)
		}
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
