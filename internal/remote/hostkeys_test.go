package remote

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestEnsureHostKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ssh", "hostkeys", "cp1")
	k, err := EnsureHostKey(dir, "cp1")
	if err != nil {
		t.Fatal(err)
	}
	if k.Public.Type() != ssh.KeyAlgoED25519 {
		t.Fatalf("key type %s, want %s", k.Public.Type(), ssh.KeyAlgoED25519)
	}
	for path, mode := range map[string]fs.FileMode{dir: 0o700, k.PrivatePath(): 0o600, k.PublicPath(): 0o644} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s mode %04o, want %04o", path, st.Mode().Perm(), mode)
		}
	}
	if k.PrivatePath() != filepath.Join(dir, "ssh_host_ed25519_key") {
		t.Errorf("private path %s", k.PrivatePath())
	}
	priv, _ := os.ReadFile(k.PrivatePath())
	if !bytes.HasPrefix(priv, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\n")) || !bytes.Equal(priv, k.Private) {
		t.Errorf("private key file is not the OpenSSH PEM returned:\n%s", priv)
	}
	pub, _ := os.ReadFile(k.PublicPath())
	if want := k.PublicLine() + "\n"; string(pub) != want || !strings.HasSuffix(k.PublicLine(), " root@cp1") {
		t.Errorf(".pub = %q, want %q ending in root@cp1", pub, want)
	}

	// Later calls: the same key; a damaged .pub is rewritten; loose modes tightened.
	if err := os.WriteFile(k.PublicPath(), []byte("junk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(k.PrivatePath(), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := EnsureHostKey(dir, "cp1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Public.Marshal(), k.Public.Marshal()) {
		t.Fatalf("second call made another key: %s vs %s", ssh.FingerprintSHA256(again.Public), ssh.FingerprintSHA256(k.Public))
	}
	if pub, _ := os.ReadFile(k.PublicPath()); string(pub) != k.PublicLine()+"\n" {
		t.Errorf(".pub not restored: %q", pub)
	}
	if st, _ := os.Stat(k.PrivatePath()); st.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %04o not tightened to 0600", st.Mode().Perm())
	}
}

// TestEnsureHostKeyConcurrentFirstUse: racing first calls agree on one key
// and leave no temporary file.
func TestEnsureHostKeyConcurrentFirstUse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "w1")
	var wg sync.WaitGroup
	keys := make([]*HostKey, 8)
	errs := make([]error, 8)
	for i := range keys {
		wg.Add(1)
		go func() { defer wg.Done(); keys[i], errs[i] = EnsureHostKey(dir, "w1") }()
	}
	wg.Wait()
	for i := range keys {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !bytes.Equal(keys[i].Public.Marshal(), keys[0].Public.Marshal()) {
			t.Fatalf("call %d got another key", i)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("files in %s: %v, want only the key and its .pub", dir, names)
	}
}

func TestEnsureHostKeyRefusesOtherTypes(t *testing.T) {
	dir := t.TempDir()
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	block, err := ssh.MarshalPrivateKey(ek, "")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, HostKeyFile)
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = EnsureHostKey(dir, "cp1")
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "ecdsa-sha2-nistp256") {
		t.Fatalf("err = %v, want one naming %s and its type", err, path)
	}
}

// fakeNode is an in-process SSH server (golang.org/x/crypto/ssh) on
// 127.0.0.1 presenting hostKeys and accepting client; no root, no sshd.
type fakeNode struct {
	addr string
}

func newFakeNode(t *testing.T, client ssh.PublicKey, hostKeys ...ssh.Signer) *fakeNode {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if bytes.Equal(k.Marshal(), client.Marshal()) {
			return nil, nil
		}
		return nil, errors.New("unknown client key")
	}}
	for _, h := range hostKeys {
		cfg.AddHostKey(h)
	}
	f := &fakeNode{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
				if err != nil {
					c.Close()
					return
				}
				go ssh.DiscardRequests(reqs)
				for ch := range chans {
					ch.Reject(ssh.Prohibited, "test server")
				}
				sc.Close()
			}()
		}
	}()
	return f
}

func hostSigner(t *testing.T, dir, node string) (*HostKey, ssh.Signer) {
	t.Helper()
	k, err := EnsureHostKey(dir, node)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.ParsePrivateKey(k.Private)
	if err != nil {
		t.Fatal(err)
	}
	return k, s
}

// TestPoolRefusesUnpinnedHostKey: no trust on first use. A node whose
// address has no pin is refused at once, naming the node and the file, and
// nothing is written; after PinHostKey the same node is reached; a node
// presenting another key is refused; PinHostKey never replaces a pin.
func TestPoolRefusesUnpinnedHostKey(t *testing.T) {
	state := t.TempDir()
	signer, _, err := EnsureKey(filepath.Join(state, "ssh", "id_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	kh := filepath.Join(state, "ssh", "known_hosts")
	hk, hs := hostSigner(t, filepath.Join(state, "ssh", "hostkeys", "cp1"), "cp1")
	node := newFakeNode(t, signer.PublicKey(), hs)
	n := Node{Name: "cp1", Addr: node.addr}
	pool, err := NewPool(Config{Signer: signer, KnownHostsFile: kh, ConnectTimeout: 20 * time.Second,
		InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()

	start := time.Now()
	_, err = pool.Get(ctx, n)
	var np *HostKeyNotPinnedError
	if !errors.As(err, &np) {
		t.Fatalf("unpinned: err = %v, want *HostKeyNotPinnedError", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("refusal took %v: it must not be retried", el)
	}
	for _, want := range []string{"node cp1", node.addr, kh, ssh.FingerprintSHA256(hk.Public), "first use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := os.Stat(kh); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused connection wrote %s: %v", kh, err)
	}

	// An unrelated pin for another address changes nothing.
	other, _ := hostSigner(t, filepath.Join(state, "x"), "x")
	if _, err := pool.PinHostKey(Node{Name: "w1", Addr: "127.0.0.2:22"}, other.Public); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Get(ctx, n); !errors.As(err, &np) {
		t.Fatalf("pin of another address: err = %v, want *HostKeyNotPinnedError", err)
	}

	// Pinned before the connection: reached.
	if others, err := pool.PinHostKey(n, hk.Public); err != nil || others != nil {
		t.Fatalf("PinHostKey = %v, %v", others, err)
	}
	data, _ := os.ReadFile(kh)
	if want := knownhosts.Line([]string{knownhosts.Normalize(node.addr)}, hk.Public) + "\n"; !strings.HasSuffix(string(data), want) {
		t.Fatalf("known_hosts = %q, want it to end with %q", data, want)
	}
	if _, err := pool.Get(ctx, n); err != nil {
		t.Fatalf("pinned node: %v", err)
	}
	if others, err := pool.PinHostKey(n, hk.Public); err != nil || others != nil {
		t.Errorf("PinHostKey again = %v, %v; want a no-op", others, err)
	}
	if again, _ := os.ReadFile(kh); !bytes.Equal(again, data) {
		t.Errorf("second PinHostKey changed the file: %q", again)
	}

	// Another machine at a pinned address: refused.
	imposter := newFakeNode(t, signer.PublicKey(), other.signer(t))
	pool2, _ := NewPool(Config{Signer: signer, KnownHostsFile: kh, ConnectTimeout: 20 * time.Second})
	defer pool2.Close()
	in := Node{Name: "cp2", Addr: imposter.addr}
	if others, err := pool2.PinHostKey(in, hk.Public); err != nil || others != nil {
		t.Fatal(others, err)
	}
	_, err = pool2.Get(ctx, in)
	var ch *HostKeyChangedError
	if !errors.As(err, &ch) || !strings.Contains(err.Error(), "node cp2") || !strings.Contains(err.Error(), kh) {
		t.Fatalf("imposter: err = %v, want *HostKeyChangedError naming cp2 and %s", err, kh)
	}
	if others, err := pool2.PinHostKey(in, other.Public); err != nil || len(others) != 1 || !bytes.Equal(others[0].Marshal(), hk.Public.Marshal()) {
		t.Errorf("PinHostKey over a pin = %v, %v; want the pinned key back", others, err)
	}
}

func (k *HostKey) signer(t *testing.T) ssh.Signer {
	t.Helper()
	s, err := ssh.ParsePrivateKey(k.Private)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPoolAsksForThePinnedKeyType: a node that also has an ECDSA host key
// (which golang.org/x/crypto/ssh prefers by default) is asked for the
// pinned ed25519 key, so it verifies.
func TestPoolAsksForThePinnedKeyType(t *testing.T) {
	state := t.TempDir()
	signer, _, err := EnsureKey(filepath.Join(state, "id"))
	if err != nil {
		t.Fatal(err)
	}
	hk, hs := hostSigner(t, filepath.Join(state, "hk"), "lb")
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	es, err := ssh.NewSignerFromKey(ek)
	if err != nil {
		t.Fatal(err)
	}
	node := newFakeNode(t, signer.PublicKey(), es, hs)
	kh := filepath.Join(state, "known_hosts")
	pool, _ := NewPool(Config{Signer: signer, KnownHostsFile: kh, ConnectTimeout: 10 * time.Second})
	defer pool.Close()
	n := Node{Name: "lb", Addr: node.addr}
	if _, err := pool.PinHostKey(n, hk.Public); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Get(context.Background(), n); err != nil {
		t.Fatalf("node with an extra ECDSA key: %v", err)
	}
	if got := PinnedHostKeyAlgorithms(kh, node.addr); len(got) != 1 || got[0] != ssh.KeyAlgoED25519 {
		t.Errorf("PinnedHostKeyAlgorithms = %v, want [ssh-ed25519]", got)
	}
	if got := PinnedHostKeyAlgorithms(kh, "127.0.0.9"); got != nil {
		t.Errorf("PinnedHostKeyAlgorithms of an unpinned host = %v, want nil", got)
	}
}
