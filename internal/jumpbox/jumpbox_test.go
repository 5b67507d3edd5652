package jumpbox

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm"
)

func randomName(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "t" + hex.EncodeToString(b)
}

func TestHostsFile(t *testing.T) {
	c := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	cases := []struct {
		name, hostname string
		want, not      []string
	}{
		{"default cluster", "myhost", []string{
			"127.0.0.1\tlocalhost\n", "127.0.1.1\tmyhost\n", "::1\tlocalhost ip6-localhost ip6-loopback\n",
			"\n192.168.122.10\tlb.kubernetes.local lb\n192.168.122.11\tcp1.kubernetes.local cp1\n192.168.122.12\tcp2.kubernetes.local cp2\n" +
				"192.168.122.13\tcp3.kubernetes.local cp3\n192.168.122.21\tw1.kubernetes.local w1\n192.168.122.22\tw2.kubernetes.local w2\n" +
				"192.168.122.23\tw3.kubernetes.local w3\n"}, nil},
		{"no hostname", "", []string{"192.168.122.23\tw3.kubernetes.local w3\n"}, []string{"127.0.1.1"}},
		{"host named like a node: the node wins", "cp1", []string{"192.168.122.11\tcp1.kubernetes.local cp1\n"}, []string{"127.0.1.1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := string(HostsFile(c, tc.hostname))
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("hosts lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("hosts has %q:\n%s", n, got)
				}
			}
			if !strings.HasSuffix(got, "\n") {
				t.Error("hosts does not end with a newline")
			}
		})
	}
	// Domain and addresses follow cluster.yaml.
	c2 := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	c2.Network.Domain = ""
	c2.Nodes[1].IP = "192.168.122.99"
	got := string(HostsFile(c2, ""))
	if !strings.Contains(got, "192.168.122.99\tcp1\n") || strings.Contains(got, "kubernetes.local") {
		t.Errorf("hosts ignores cluster.yaml changes:\n%s", got)
	}
}

// TestSSHConfigAsSSHReadsIt asks OpenSSH itself (ssh -G prints the options
// it would use, without connecting) what the generated config means.
func TestSSHConfigAsSSHReadsIt(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("SKIP: no ssh client (apt-get install openssh-client)")
	}
	c := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	d := state.New(filepath.Join(t.TempDir(), "state dir"), "lab") // a space must survive quoting
	p := filepath.Join(t.TempDir(), "config")
	// cp2 was made by an older khw, which pinned the ECDSA key it met first.
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	epub, _ := ssh.NewPublicKey(&ek.PublicKey)
	if err := os.MkdirAll(filepath.Dir(cluster.KnownHostsPath(d)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cluster.KnownHostsPath(d), []byte(knownhosts.Line([]string{"192.168.122.12"}, epub)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, SSHConfig(c, d), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ host, ip, algos string }{{"cp1", "192.168.122.11", "ssh-ed25519"}, {"w3.kubernetes.local", "192.168.122.23", "ssh-ed25519"},
		{"lb", "192.168.122.10", "ssh-ed25519"}, {"cp2", "192.168.122.12", "ecdsa-sha2-nistp256"}} {
		out, err := exec.Command("ssh", "-G", "-F", p, tc.host).CombinedOutput()
		if err != nil {
			t.Fatalf("ssh -G %s: %v\n%s", tc.host, err, out)
		}
		opts := map[string]string{}
		for _, l := range strings.Split(string(out), "\n") {
			k, v, _ := strings.Cut(l, " ")
			if _, seen := opts[k]; !seen {
				opts[k] = v
			}
		}
		want := map[string]string{
			"hostname": tc.ip, "user": "ubuntu", "identityfile": cluster.KeyPath(d), "identitiesonly": "yes",
			"userknownhostsfile": cluster.KnownHostsPath(d), "stricthostkeychecking": "true", "connecttimeout": "15",
			"hostkeyalgorithms": tc.algos, "globalknownhostsfile": "/dev/null", "updatehostkeys": "false",
		}
		for k, v := range want {
			if opts[k] != v {
				t.Errorf("ssh -G %s: %s = %q, want %q", tc.host, k, opts[k], v)
			}
		}
	}
	// A name that is not a node gets none of it.
	out, _ := exec.Command("ssh", "-G", "-F", p, "example.org").CombinedOutput()
	if strings.Contains(string(out), "user ubuntu") || strings.Contains(string(out), "192.168.122") {
		t.Errorf("config applies to hosts outside the cluster:\n%s", out)
	}
}

func TestPrepare(t *testing.T) {
	base := t.TempDir()
	t.Run("libvirt: no namespace, files and variables", func(t *testing.T) {
		c := config.Default("lv", config.ArchAMD64, config.ProviderLibvirt)
		d := state.New(base, "lv")
		s, err := Prepare(c, d, "/usr/bin:/bin")
		if err != nil {
			t.Fatal(err)
		}
		if s.Netns != "" {
			t.Errorf("libvirt session enters %s", s.Netns)
		}
		want := map[string]string{
			"KUBECONFIG": filepath.Join(d.Root, "kubeconfigs", "admin.kubeconfig"), "PATH": filepath.Join(d.Root, "bin") + ":/usr/bin:/bin",
			"KHW_CLUSTER": "lv", "KHW_STATE_DIR": base, "KHW_SSH_CONFIG": filepath.Join(d.Root, "ssh", "config"), "KHW_NETNS": "",
		}
		for k, v := range want {
			if got := s.Getenv(k); got != v {
				t.Errorf("%s = %q, want %q", k, got, v)
			}
		}
		for p, mode := range map[string]os.FileMode{HostsPath(d): 0o644, SSHConfigPath(d): 0o600} {
			st, err := os.Stat(p)
			if err != nil || st.Mode().Perm() != mode {
				t.Errorf("%s: %v, mode %v (want %v)", p, err, st, mode)
			}
		}
		hosts, _ := os.ReadFile(HostsPath(d))
		if !strings.Contains(string(hosts), "192.168.122.10\tlb.kubernetes.local lb\n") {
			t.Errorf("hosts:\n%s", hosts)
		}
		// Unchanged content is not rewritten.
		before, _ := os.Stat(SSHConfigPath(d))
		time.Sleep(10 * time.Millisecond)
		if _, err := Prepare(c, d, ""); err != nil {
			t.Fatal(err)
		}
		after, _ := os.Stat(SSHConfigPath(d))
		if !after.ModTime().Equal(before.ModTime()) {
			t.Error("Prepare rewrote an unchanged ssh config")
		}
		s2, _ := Prepare(c, d, "")
		if !strings.HasSuffix(s2.Getenv("PATH"), ":"+defaultPath) {
			t.Errorf("empty PATH: got %q", s2.Getenv("PATH"))
		}
	})
	t.Run("nspawn without namespace: not up", func(t *testing.T) {
		name := randomName(t)
		c := config.Default(name, config.ArchAMD64, config.ProviderNspawn)
		_, err := Prepare(c, state.New(base, name), "")
		if !errors.Is(err, ErrNotUp) || !strings.Contains(err.Error(), "khw up") || !strings.Contains(err.Error(), vm.NetnsPath(name)) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("unknown provider", func(t *testing.T) {
		c := config.Default("x", config.ArchAMD64, "vbox")
		if _, err := Prepare(c, state.New(base, "x"), ""); err == nil || !strings.Contains(err.Error(), "libvirt, nspawn") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestEnviron(t *testing.T) {
	s := &Session{Vars: []string{"KUBECONFIG=/k", "PATH=/s/bin:/usr/bin", "KHW_CLUSTER=lab"}}
	got := s.Environ([]string{"HOME=/root", "PATH=/usr/bin", "KUBECONFIG=/elsewhere", "KHW_NETNS=khw-old", "EMPTY=", "TERM=xterm"})
	want := []string{"HOME=/root", "EMPTY=", "TERM=xterm", "KUBECONFIG=/k", "PATH=/s/bin:/usr/bin", "KHW_CLUSTER=lab"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Environ:\n got %q\nwant %q", got, want)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "data"), []byte("x"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	path := "/nonexistent:" + dir
	cases := []struct {
		file, want, errWord string
	}{
		{"tool", exe, ""},
		{exe, exe, ""},
		{"data", "", "not found in PATH"},
		{"sub", "", "not found"},
		{filepath.Join(dir, "data"), "", "not executable"},
		{"", "", "no command"},
	}
	for _, tc := range cases {
		got, err := LookPath(tc.file, path)
		if tc.errWord == "" && (err != nil || got != tc.want) {
			t.Errorf("LookPath(%q) = %q, %v; want %q", tc.file, got, err, tc.want)
		}
		if tc.errWord != "" && (err == nil || !strings.Contains(err.Error(), tc.errWord)) {
			t.Errorf("LookPath(%q) = %q, %v; want error with %q", tc.file, got, err, tc.errWord)
		}
	}
}

// fakeKubectlMirror puts a made-up kubectl for version ver and arch into a
// mirror directory under its official path, with its .sha256 file.
func fakeKubectlMirror(t *testing.T, mirror, ver, arch string, content []byte) {
	t.Helper()
	c := config.Default("m", arch, config.ProviderNspawn)
	c.Versions.Kubernetes = ver
	r, err := ResolveKubectl(c, arch)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	for u, data := range map[string][]byte{r.URL: content, r.ChecksumURL: []byte(hex.EncodeToString(sum[:]) + "\n")} {
		p, _, err := components.MirrorLocation(mirror, u)
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// pinMirror writes the manifest of the kubectls in mirror and returns its pin.
func pinMirror(t *testing.T, mirror string, vers ...string) string {
	t.Helper()
	var rs []components.Resolved
	for _, v := range vers {
		c := config.Default("m", config.ArchARM64, config.ProviderNspawn)
		c.Versions.Kubernetes = v
		r, err := ResolveKubectl(c, config.ArchARM64)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	pin, err := components.ManifestFromDir(mirror, rs)
	if err != nil {
		t.Fatal(err)
	}
	return pin
}

func TestEnsureKubectl(t *testing.T) {
	mirror := t.TempDir()
	v1 := []byte("#!/bin/sh\necho fake kubectl v1.37.2\n")
	v2 := []byte("#!/bin/sh\necho fake kubectl v1.37.3\n")
	fakeKubectlMirror(t, mirror, "v1.37.2", config.ArchARM64, v1)
	fakeKubectlMirror(t, mirror, "v1.37.3", config.ArchARM64, v2)
	f := &components.Fetcher{Mirror: mirror, MirrorDigest: pinMirror(t, mirror, "v1.37.2", "v1.37.3"), CacheDir: t.TempDir()}
	c := config.Default("k", config.ArchAMD64, config.ProviderNspawn) // node arch differs from the jumpbox's on purpose
	d := state.New(t.TempDir(), "k")
	ctx := context.Background()
	check := func(step string, k Kubectl, err error, fetched, written bool, content []byte) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if k.Fetched != fetched || k.Written != written {
			t.Errorf("%s: fetched %v written %v, want %v %v", step, k.Fetched, k.Written, fetched, written)
		}
		got, err := os.ReadFile(KubectlPath(d))
		if err != nil || !bytes.Equal(got, content) {
			t.Errorf("%s: %s holds %q (%v), want %q", step, KubectlPath(d), got, err, content)
		}
		if st, _ := os.Stat(KubectlPath(d)); st == nil || st.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v", step, st)
		}
		sum := sha256.Sum256(content)
		if k.SHA256 != hex.EncodeToString(sum[:]) || k.Arch != config.ArchARM64 || k.Path != KubectlPath(d) {
			t.Errorf("%s: result %+v", step, k)
		}
	}

	k, err := EnsureKubectl(ctx, c, d, config.ArchARM64, f)
	check("first install", k, err, true, true, v1)
	if k.Version != "v1.37.2" {
		t.Errorf("version %q", k.Version)
	}

	// Second run: the stamp says it is in place; nothing is fetched, so an
	// unreachable mirror does not matter.
	broken := &components.Fetcher{Mirror: filepath.Join(t.TempDir(), "gone"), MirrorDigest: f.MirrorDigest, CacheDir: t.TempDir()}
	k, err = EnsureKubectl(ctx, c, d, config.ArchARM64, broken)
	check("second run", k, err, false, false, v1)

	// Same content, new mtime: verified by hash, not rewritten.
	later := time.Now().Add(time.Hour)
	os.Chtimes(KubectlPath(d), later, later)
	k, err = EnsureKubectl(ctx, c, d, config.ArchARM64, f)
	check("touched", k, err, true, false, v1)
	if st, _ := os.Stat(KubectlPath(d)); !st.ModTime().Equal(later) {
		t.Error("an identical kubectl was rewritten")
	}

	// Damaged file: put back.
	os.WriteFile(KubectlPath(d), []byte("#!/bin/sh\nexit 99\n"), 0o755)
	k, err = EnsureKubectl(ctx, c, d, config.ArchARM64, f)
	check("damaged", k, err, true, true, v1)

	// Wrong mode only: fixed without a rewrite.
	os.Chmod(KubectlPath(d), 0o644)
	k, err = EnsureKubectl(ctx, c, d, config.ArchARM64, f)
	check("mode", k, err, true, false, v1)

	// cluster.yaml moves to another Kubernetes version.
	c.Versions.Kubernetes = "v1.37.3"
	k, err = EnsureKubectl(ctx, c, d, config.ArchARM64, f)
	check("upgrade", k, err, true, true, v2)

	// A version the mirror lacks: the error says how to fix it, the
	// installed kubectl stays.
	c.Versions.Kubernetes = "v1.37.9"
	if _, err := EnsureKubectl(ctx, c, d, config.ArchARM64, f); err == nil || !strings.Contains(err.Error(), "KHW_MIRROR") {
		t.Errorf("missing version: %v", err)
	}
	if _, err := EnsureKubectl(ctx, c, d, "riscv64", f); err == nil || !strings.Contains(err.Error(), "amd64 and arm64") {
		t.Errorf("riscv64: %v", err)
	}
	if got, _ := os.ReadFile(KubectlPath(d)); !bytes.Equal(got, v2) {
		t.Error("a failed update damaged the installed kubectl")
	}
}
