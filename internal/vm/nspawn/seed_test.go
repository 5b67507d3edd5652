package nspawn

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/khw-dev/khw/internal/vm/vmtest"

	"golang.org/x/crypto/ssh"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
)

// fakeNodeRoot is the part of a Debian root seedNode reads.
func fakeNodeRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for rel, content := range map[string]string{
		"etc/passwd":  "root:x:0:0:root:/root:/bin/bash\n",
		"etc/shadow":  "root:*:19000:0:99999:7:::\n",
		"etc/group":   "root:x:0:\n",
		"etc/gshadow": "root:*::\n",
	} {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func statOf(t *testing.T, p string) (os.FileMode, uint32, uint32) {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	return st.Mode().Perm(), sys.Uid, sys.Gid
}

// TestSeedNodeInstallsGeneratedHostKey: the node root gets khw's generated
// ed25519 host key (0600 / 0644, root), an sshd drop-in naming only it, and
// neither other host keys nor the first-boot ssh-keygen -A unit.
func TestSeedNodeInstallsGeneratedHostKey(t *testing.T) {
	vmtest.RequireRoot(t)
	c := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	n, _ := c.Node("cp1")
	root := fakeNodeRoot(t)
	// What a root may hold besides: another key type, the old unit.
	for _, rel := range []string{"etc/ssh/ssh_host_rsa_key", "etc/ssh/ssh_host_rsa_key.pub", legacyHostKeyUnit,
		"etc/systemd/system/multi-user.target.wants/khw-ssh-hostkeys.service"} {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hk, err := remote.EnsureHostKey(filepath.Join(t.TempDir(), "cp1"), "cp1")
	if err != nil {
		t.Fatal(err)
	}
	kept, err := seedNode(root, c, n, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA khw", "", hk)
	if err != nil || kept {
		t.Fatalf("seedNode = kept %v, %v", kept, err)
	}
	priv := filepath.Join(root, "etc/ssh/ssh_host_ed25519_key")
	for p, want := range map[string]struct {
		content []byte
		mode    os.FileMode
	}{
		priv:          {hk.Private, 0o600},
		priv + ".pub": {[]byte(hk.PublicLine() + "\n"), 0o644},
	} {
		got, _ := os.ReadFile(p)
		if !bytes.Equal(got, want.content) {
			t.Errorf("%s = %q, want %q", p, got, want.content)
		}
		if mode, uid, gid := statOf(t, p); mode != want.mode || uid != 0 || gid != 0 {
			t.Errorf("%s: mode %04o owner %d:%d, want %04o root:root", p, mode, uid, gid, want.mode)
		}
	}
	// sshd reads that file as its key: ssh-keygen derives the pinned key from it.
	if s, err := ssh.ParsePrivateKey(mustRead(t, priv)); err != nil || !bytes.Equal(s.PublicKey().Marshal(), hk.Public.Marshal()) {
		t.Errorf("installed private key does not match the generated key: %v", err)
	}
	dropIn := string(mustRead(t, filepath.Join(root, "etc/ssh/sshd_config.d/khw-hostkey.conf")))
	var hostKeys []string
	for _, l := range strings.Split(dropIn, "\n") {
		if strings.HasPrefix(l, "HostKey ") {
			hostKeys = append(hostKeys, l)
		}
	}
	if len(hostKeys) != 1 || hostKeys[0] != "HostKey /etc/ssh/ssh_host_ed25519_key" {
		t.Errorf("sshd drop-in HostKey lines = %q, want only the ed25519 key:\n%s", hostKeys, dropIn)
	}
	left, _ := filepath.Glob(filepath.Join(root, "etc/ssh/ssh_host_*"))
	if len(left) != 2 {
		t.Errorf("host key files in the root: %v, want only the ed25519 pair", left)
	}
	for _, rel := range []string{legacyHostKeyUnit, "etc/systemd/system/multi-user.target.wants/khw-ssh-hostkeys.service"} {
		if _, err := os.Lstat(filepath.Join(root, rel)); err == nil {
			t.Errorf("%s is still there: it would make other host keys on boot", rel)
		}
	}
	wants, _ := filepath.Glob(filepath.Join(root, "etc/systemd/system/*/*"))
	for _, w := range wants {
		if target, _ := os.Readlink(w); strings.Contains(target, "keygen") || strings.Contains(target, "hostkeys") {
			t.Errorf("a unit that makes host keys is enabled: %s -> %s", w, target)
		}
	}

	// Again: nothing changes.
	st1, _ := os.Stat(priv)
	if kept, err := seedNode(root, c, n, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA khw", "", hk); err != nil || kept {
		t.Fatalf("second seedNode = %v, %v", kept, err)
	}
	if st2, _ := os.Stat(priv); !st2.ModTime().Equal(st1.ModTime()) {
		t.Errorf("second seedNode rewrote the host key")
	}

	if _, err := seedNode(fakeNodeRoot(t), c, n, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA khw", "", nil); err == nil || !strings.Contains(err.Error(), "node cp1") {
		t.Errorf("no host key: err = %v, want one naming the node", err)
	}
}

// TestSeedNodeKeepsAnOlderNodesOwnHostKey: a root made by an older khw
// (own keys from its first boot, pinned on first contact) keeps them.
func TestSeedNodeKeepsAnOlderNodesOwnHostKey(t *testing.T) {
	vmtest.RequireRoot(t)
	c := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	n, _ := c.Node("w1")
	root := fakeNodeRoot(t)
	_, own, _ := ed25519.GenerateKey(rand.Reader)
	block, _ := ssh.MarshalPrivateKey(own, "root@w1")
	ownPEM := pem.EncodeToMemory(block)
	files := map[string][]byte{
		"etc/ssh/ssh_host_ed25519_key":   ownPEM,
		"etc/ssh/ssh_host_ecdsa_key":     []byte("ecdsa\n"),
		"etc/ssh/ssh_host_ecdsa_key.pub": []byte("ecdsa pub\n"),
	}
	for rel, b := range files {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hk, err := remote.EnsureHostKey(filepath.Join(t.TempDir(), "w1"), "w1")
	if err != nil {
		t.Fatal(err)
	}
	kept, err := seedNode(root, c, n, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA khw", "", hk)
	if err != nil || !kept {
		t.Fatalf("seedNode = kept %v, %v; want the node's own key kept", kept, err)
	}
	for rel, b := range files {
		if got := mustRead(t, filepath.Join(root, rel)); !bytes.Equal(got, b) {
			t.Errorf("%s changed", rel)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/ssh/sshd_config.d/khw-hostkey.conf")); err == nil {
		t.Errorf("drop-in written: it would hide the ECDSA key an older khw may have pinned")
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
