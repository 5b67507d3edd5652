package remote

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/khw-dev/khw/internal/fsutil"
)

const sshdPath = "/usr/sbin/sshd"

// testSSHD is a real OpenSSH server on 127.0.0.1 started for one test.
type testSSHD struct {
	t        *testing.T
	dir      string // 0755 so a non-root login user can read authorized_keys
	port     int
	hostKey  ssh.PublicKey
	cmd      *exec.Cmd
	mu       sync.Mutex
	log      bytes.Buffer
	stopped  bool
	exitDone chan struct{}
}

func requireSSHD(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(sshdPath); err != nil {
		t.Skipf("SKIPPING real-sshd test: %s not found (%v); install it with `apt-get install -y openssh-server sudo` (add both to DEB_TEST_DEPS)", sshdPath, err)
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING real-sshd test: it must run as root (sshd privilege separation and a root login)")
	}
	// Debian's sshd refuses to start without its privilege separation
	// directory, which the systemd unit normally creates.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatalf("create /run/sshd: %v", err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// newTestSSHD prepares (but does not start) an sshd that accepts the given
// authorized_keys lines, with a fresh ed25519 host key.
func newTestSSHD(t *testing.T, port int, authorized ...string) *testSSHD {
	t.Helper()
	requireSSHD(t)
	dir, err := os.MkdirTemp("", "khw-sshd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &testSSHD{t: t, dir: dir, port: port}
	var keys bytes.Buffer
	for _, a := range authorized {
		keys.WriteString(a + "\n")
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, "authorized_keys"), keys.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	s.newHostKey()
	cfg := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s/host_key
AuthorizedKeysFile %s/authorized_keys
PidFile %s/sshd.pid
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
MaxSessions 10
Subsystem sftp /usr/lib/openssh/sftp-server
LogLevel ERROR
`, port, dir, dir, dir)
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, "sshd_config"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

// newHostKey replaces the host key file; it takes effect at the next start.
func (s *testSSHD) newHostKey() {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		s.t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "test-host")
	if err != nil {
		s.t.Fatal(err)
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(s.dir, "host_key"), pem.EncodeToMemory(block), 0o600); err != nil {
		s.t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		s.t.Fatal(err)
	}
	s.hostKey = signer.PublicKey()
}

func (s *testSSHD) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// start runs sshd -D and waits until the port accepts connections.
func (s *testSSHD) start() {
	s.mu.Lock()
	cmd := exec.Command(sshdPath, "-D", "-e", "-f", filepath.Join(s.dir, "sshd_config"))
	cmd.Stdout = &lockedWriter{mu: &s.mu, w: &s.log}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Errorf("start sshd: %v", err)
		return
	}
	s.cmd = cmd
	s.stopped = false
	done := make(chan struct{})
	s.exitDone = done
	s.mu.Unlock()
	go func() { cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.addr(), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			s.t.Errorf("sshd exited early: %s", s.logs())
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	s.t.Errorf("sshd did not listen on %s within 10s: %s", s.addr(), s.logs())
}

func (s *testSSHD) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// stop kills the listening sshd and waits for it. Per-connection children
// exit when the clients close their connections (pools are closed first:
// their t.Cleanup runs before this one).
func (s *testSSHD) stop() {
	s.mu.Lock()
	cmd, done, stopped := s.cmd, s.exitDone, s.stopped
	s.stopped = true
	s.mu.Unlock()
	if cmd == nil || stopped {
		return
	}
	// Give per-connection children (their clients are closed by now) a
	// moment to exit while the listener can still reap them.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		out, _ := exec.Command("pgrep", "-P", strconv.Itoa(cmd.Process.Pid)).Output()
		if len(bytes.TrimSpace(out)) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
	<-done
	if s.t.Failed() {
		s.t.Logf("sshd log: %s", s.logs())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// testEnv is one client key, one known_hosts file and one running sshd.
type testEnv struct {
	keyPath, knownHosts string
	signer              ssh.Signer
	authLine            string
	sshd                *testSSHD
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	requireSSHD(t)
	state := t.TempDir()
	e := &testEnv{keyPath: filepath.Join(state, "ssh", "id_ed25519"), knownHosts: filepath.Join(state, "ssh", "known_hosts")}
	var err error
	e.signer, e.authLine, err = EnsureKey(e.keyPath)
	if err != nil {
		t.Fatal(err)
	}
	e.sshd = newTestSSHD(t, freePort(t), e.authLine)
	return e
}

// pool returns a Pool logging in as user, with sshd's current host key
// pinned; it is closed before sshd stops.
func (e *testEnv) pool(t *testing.T, user string, mod func(*Config)) *Pool {
	t.Helper()
	cfg := Config{
		User: user, Signer: e.signer, KnownHostsFile: e.knownHosts,
		ConnectTimeout: 20 * time.Second, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	// As khw does before a node's first boot: pin the key it will present.
	if others, err := p.PinHostKey(e.node("any"), e.sshd.hostKey); err != nil || others != nil {
		t.Fatalf("PinHostKey: others %v, err %v", others, err)
	}
	return p
}

func (e *testEnv) node(name string) Node { return Node{Name: name, Addr: e.sshd.addr()} }

func (e *testEnv) client(t *testing.T, p *Pool, name string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := p.Get(ctx, e.node(name))
	if err != nil {
		t.Fatalf("Get(%s): %v\nsshd log: %s", name, err, e.sshd.logs())
	}
	return c
}
