package libvirt

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
)

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKhwTestKeyOnlyForUnitTestsXXXXXXXXXXXXXXXXXXX khw@test"

func TestSeedFiles(t *testing.T) {
	c := config.Default("lab", config.ArchARM64, config.ProviderLibvirt)
	n, _ := c.Node("cp2")
	mac := NodeMAC("lab", "cp2")
	files, err := SeedFiles(c, n, mac, testKey+"\n", testHostKey(t, "cp2"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(files[SeedUserData]), "#cloud-config\n") {
		t.Fatalf("user-data does not start with #cloud-config:\n%s", files[SeedUserData])
	}
	var ud struct {
		Hostname       string `yaml:"hostname"`
		FQDN           string `yaml:"fqdn"`
		ManageEtcHosts bool   `yaml:"manage_etc_hosts"`
		SSHPwauth      bool   `yaml:"ssh_pwauth"`
		Users          []struct {
			Name       string   `yaml:"name"`
			UID        int      `yaml:"uid"`
			Sudo       string   `yaml:"sudo"`
			LockPasswd bool     `yaml:"lock_passwd"`
			Keys       []string `yaml:"ssh_authorized_keys"`
		} `yaml:"users"`
		WriteFiles []struct {
			Path, Content string
		} `yaml:"write_files"`
	}
	if err := yaml.Unmarshal(files[SeedUserData], &ud); err != nil {
		t.Fatal(err)
	}
	if ud.Hostname != "cp2" || ud.FQDN != "cp2.kubernetes.local" || ud.ManageEtcHosts || ud.SSHPwauth {
		t.Errorf("user-data identity: %+v", ud)
	}
	if len(ud.Users) != 1 || ud.Users[0].Name != "ubuntu" || ud.Users[0].UID != 1000 || ud.Users[0].Sudo != "ALL=(ALL) NOPASSWD:ALL" ||
		!ud.Users[0].LockPasswd || len(ud.Users[0].Keys) != 1 || ud.Users[0].Keys[0] != testKey {
		t.Errorf("users = %+v", ud.Users)
	}
	var hosts string
	for _, f := range ud.WriteFiles {
		if f.Path == "/etc/hosts" {
			hosts = f.Content
		}
	}
	for _, m := range c.Nodes {
		want := m.IP + "\t" + m.Name + ".kubernetes.local " + m.Name + "\n"
		if !strings.Contains(hosts, want) {
			t.Errorf("/etc/hosts lacks %q:\n%s", want, hosts)
		}
	}

	var md map[string]string
	if err := yaml.Unmarshal(files[SeedMetaData], &md); err != nil {
		t.Fatal(err)
	}
	if md["instance-id"] != "khw-lab-cp2" || md["local-hostname"] != "cp2" {
		t.Errorf("meta-data = %v", md)
	}

	var nc struct {
		Version   int `yaml:"version"`
		Ethernets map[string]struct {
			Match     map[string]string `yaml:"match"`
			SetName   string            `yaml:"set-name"`
			DHCP4     bool              `yaml:"dhcp4"`
			Addresses []string          `yaml:"addresses"`
			Routes    []struct{ To, Via string }
			NS        struct {
				Addresses []string `yaml:"addresses"`
			} `yaml:"nameservers"`
		} `yaml:"ethernets"`
	}
	if err := yaml.Unmarshal(files[SeedNetworkConfig], &nc); err != nil {
		t.Fatal(err)
	}
	e, ok := nc.Ethernets[SeedIface]
	if nc.Version != 2 || !ok || e.Match["macaddress"] != mac || e.SetName != SeedIface || e.DHCP4 {
		t.Fatalf("network-config = %+v", nc)
	}
	if len(e.Addresses) != 1 || e.Addresses[0] != "192.168.122.12/24" {
		t.Errorf("addresses = %v", e.Addresses)
	}
	if len(e.Routes) != 1 || e.Routes[0].To != "0.0.0.0/0" || e.Routes[0].Via != "192.168.122.1" || len(e.NS.Addresses) != 1 || e.NS.Addresses[0] != "192.168.122.1" {
		t.Errorf("routes %+v nameservers %+v", e.Routes, e.NS)
	}

	// Errors name the problem.
	if _, err := SeedFiles(c, n, mac, "", testHostKey(t, "cp2")); err == nil || !strings.Contains(err.Error(), "cp2") {
		t.Errorf("empty key: %v", err)
	}
	if _, err := SeedFiles(c, n, "nope", testKey, testHostKey(t, "cp2")); err == nil {
		t.Error("bad MAC accepted")
	}
	bad := n
	bad.IP = "not-an-ip"
	if _, err := SeedFiles(c, bad, mac, testKey, testHostKey(t, "cp2")); err == nil || !strings.Contains(err.Error(), "nodes[].ip") {
		t.Errorf("bad ip: %v", err)
	}
}

func testHostKey(t *testing.T, node string) *remote.HostKey {
	t.Helper()
	k, err := remote.EnsureHostKey(filepath.Join(t.TempDir(), node), node)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSeedFilesHostKey: user-data gives cloud-init the generated host key
// as the node's only one (cc_ssh: ssh_keys, ssh_deletekeys,
// ssh_genkeytypes) and an sshd drop-in that offers only it.
func TestSeedFilesHostKey(t *testing.T) {
	c := config.Default("lab", config.ArchAMD64, config.ProviderLibvirt)
	n, _ := c.Node("w1")
	hk := testHostKey(t, "w1")
	files, err := SeedFiles(c, n, NodeMAC("lab", "w1"), testKey, hk)
	if err != nil {
		t.Fatal(err)
	}
	var ud map[string]any
	if err := yaml.Unmarshal(files[SeedUserData], &ud); err != nil {
		t.Fatal(err)
	}
	keys, _ := ud["ssh_keys"].(map[string]any)
	if len(keys) != 2 || keys["ed25519_private"] != string(hk.Private) || keys["ed25519_public"] != hk.PublicLine() {
		t.Errorf("ssh_keys = %v, want exactly ed25519_private (the PEM) and ed25519_public (%q)", keys, hk.PublicLine())
	}
	if ud["ssh_deletekeys"] != true {
		t.Errorf("ssh_deletekeys = %v, want true (the image's host keys must go)", ud["ssh_deletekeys"])
	}
	if gen, ok := ud["ssh_genkeytypes"].([]any); !ok || len(gen) != 0 {
		t.Errorf("ssh_genkeytypes = %#v, want an empty list (cloud-init's default generates rsa, ecdsa, ed25519)", ud["ssh_genkeytypes"])
	}
	var dropIn string
	for _, f := range ud["write_files"].([]any) {
		if m := f.(map[string]any); m["path"] == "/etc/ssh/sshd_config.d/khw-hostkey.conf" {
			dropIn, _ = m["content"].(string)
		}
	}
	var hostKeys []string
	for _, l := range strings.Split(dropIn, "\n") {
		if strings.HasPrefix(l, "HostKey ") {
			hostKeys = append(hostKeys, l)
		}
	}
	if len(hostKeys) != 1 || hostKeys[0] != "HostKey /etc/ssh/ssh_host_ed25519_key" {
		t.Errorf("sshd drop-in HostKey lines %q, want only the ed25519 key", hostKeys)
	}
	if _, err := SeedFiles(c, n, NodeMAC("lab", "w1"), testKey, nil); err == nil || !strings.Contains(err.Error(), "w1") || !strings.Contains(err.Error(), "host key") {
		t.Errorf("no host key: err = %v, want one naming w1 and the host key", err)
	}
}

func TestSeedISO(t *testing.T) {
	c := config.Default("lab", config.ArchAMD64, config.ProviderLibvirt)
	n, _ := c.Node("w1")
	files, err := SeedFiles(c, n, NodeMAC("lab", "w1"), testKey, testHostKey(t, "w1"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := SeedISO(files, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(img) < 32*1024 || len(img)%2048 != 0 {
		t.Errorf("ISO size %d: want a whole number of 2 KiB sectors past the 32 KiB system area", len(img))
	}
	got, label, err := ReadISO(img, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if label != SeedLabel {
		t.Errorf("label = %q, want %q", label, SeedLabel)
	}
	if len(got) != len(files) {
		t.Errorf("ISO holds %d files (%v), want %d", len(got), keys(got), len(files))
	}
	for name, want := range files {
		if string(got[name]) != string(want) {
			t.Errorf("%s in ISO:\n%s\nwant:\n%s", name, got[name], want)
		}
	}

	// A second witness: util-linux blkid, the way cloud-init's ds-identify
	// finds the seed (blkid LABEL/TYPE).
	if blkid, err := exec.LookPath("blkid"); err == nil {
		p := filepath.Join(t.TempDir(), "seed.iso")
		if err := os.WriteFile(p, img, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(blkid, "-p", "-o", "export", p).CombinedOutput()
		if err != nil {
			t.Fatalf("blkid: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "TYPE=iso9660") || !strings.Contains(strings.ToLower(string(out)), "label=cidata") {
			t.Errorf("blkid sees:\n%s", out)
		}
	}

	// A refused name fails after go-diskfs made its workspace: nothing of
	// it may stay in tmpDir or in $TMPDIR.
	tmp, sysTmp := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", sysTmp)
	if _, err := SeedISO(map[string][]byte{"a/b": nil}, tmp); err == nil {
		t.Error("path with a slash accepted")
	}
	for _, d := range []string{tmp, sysTmp} {
		if left, _ := os.ReadDir(d); len(left) != 0 {
			t.Errorf("SeedISO left %v in %s after an error", left, d)
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestSeedResolvConfFallback runs the seed's bootcmd with sh against a
// temporary resolv.conf: an empty plain file gets the gateway, a file that
// names a nameserver and a symlink are left as they are.
func TestSeedResolvConfFallback(t *testing.T) {
	c := config.Default("lab", config.ArchAMD64, config.ProviderLibvirt)
	n, _ := c.Node("w1")
	files, err := SeedFiles(c, n, NodeMAC("lab", "w1"), testKey, testHostKey(t, "w1"))
	if err != nil {
		t.Fatal(err)
	}
	var ud struct {
		BootCmd [][]string `yaml:"bootcmd"`
	}
	if err := yaml.Unmarshal(files[SeedUserData], &ud); err != nil {
		t.Fatal(err)
	}
	if len(ud.BootCmd) != 1 || len(ud.BootCmd[0]) != 3 || ud.BootCmd[0][0] != "sh" || ud.BootCmd[0][1] != "-c" {
		t.Fatalf("bootcmd = %q, want one [sh -c SCRIPT]", ud.BootCmd)
	}
	run := func(f string) {
		t.Helper()
		script := strings.ReplaceAll(ud.BootCmd[0][2], "/etc/resolv.conf", f)
		if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
			t.Fatalf("bootcmd: %v: %s", err, out)
		}
	}
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	run(empty)
	if b, _ := os.ReadFile(empty); !strings.Contains(string(b), "\nnameserver "+c.Network.Gateway+"\n") {
		t.Errorf("empty resolv.conf became %q, want nameserver %s", b, c.Network.Gateway)
	}
	named := filepath.Join(dir, "named")
	os.WriteFile(named, []byte("nameserver 10.9.9.9\n"), 0o644)
	run(named)
	if b, _ := os.ReadFile(named); string(b) != "nameserver 10.9.9.9\n" {
		t.Errorf("resolv.conf naming a server became %q", b)
	}
	stub := filepath.Join(dir, "stub")
	os.WriteFile(stub, nil, 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(stub, link)
	run(link)
	if b, _ := os.ReadFile(stub); len(b) != 0 {
		t.Errorf("symlinked resolv.conf was written through: %q", b)
	}
}
