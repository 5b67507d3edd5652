package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestEnsureKey(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ssh", "id_ed25519")
	s1, line1, err := EnsureKey(p)
	if err != nil {
		t.Fatal(err)
	}
	if s1.PublicKey().Type() != ssh.KeyAlgoED25519 {
		t.Errorf("key type = %s, want %s", s1.PublicKey().Type(), ssh.KeyAlgoED25519)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v, want 0600", st.Mode(), err)
	}
	pub, comment, _, _, err := ssh.ParseAuthorizedKey([]byte(line1))
	if err != nil || comment != KeyComment || !bytes.Equal(pub.Marshal(), s1.PublicKey().Marshal()) {
		t.Fatalf("authorized key line %q: parse err %v, comment %q", line1, err, comment)
	}
	if got, err := os.ReadFile(p + ".pub"); err != nil || string(got) != line1+"\n" {
		t.Errorf(".pub = %q (%v), want %q", got, err, line1+"\n")
	}
	// Loosened permissions are tightened, and the same key is loaded.
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	s2, line2, err := EnsureKey(p)
	if err != nil {
		t.Fatal(err)
	}
	if line2 != line1 || !bytes.Equal(s2.PublicKey().Marshal(), s1.PublicKey().Marshal()) {
		t.Errorf("second EnsureKey returned another key: %q vs %q", line2, line1)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("mode after reload = %v, want 0600", st.Mode().Perm())
	}
	bad := filepath.Join(dir, "garbage")
	os.WriteFile(bad, []byte("not a key"), 0o600)
	if _, _, err := EnsureKey(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("garbage key: err = %v, want an error naming %s", err, bad)
	}
}

func TestNewPoolRequiresKeyAndKnownHosts(t *testing.T) {
	s, _, err := EnsureKey(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []Config{{KnownHostsFile: "/x"}, {Signer: s}} {
		if _, err := NewPool(cfg); err == nil {
			t.Errorf("NewPool(%+v) succeeded, want an error", cfg)
		}
	}
}

func TestRun(t *testing.T) {
	e := newTestEnv(t)
	e.sshd.start()
	c := e.client(t, e.pool(t, "root", nil), "cp1")

	var errScript strings.Builder
	errScript.WriteString("echo out; ")
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&errScript, "echo err%d >&2; ", i)
	}
	errScript.WriteString("exit 7")

	tests := []struct {
		name       string
		cmd        string
		opts       RunOptions
		wantOut    string
		wantCode   int // 0 = success
		wantTail   []string
		notWantErr []string
	}{
		{name: "ok", cmd: "echo hello; echo warn >&2", wantOut: "hello\n"},
		{name: "stdin", cmd: "cat", opts: RunOptions{Stdin: []byte("secret-ish\n")}, wantOut: "secret-ish\n"},
		{name: "sudo as root is a no-op", cmd: "id -u", opts: RunOptions{Sudo: true}, wantOut: "0\n"},
		{name: "exit code and stderr tail", cmd: errScript.String(), wantOut: "out\n", wantCode: 7,
			wantTail: []string{"err11", "err30"}, notWantErr: []string{"err10\n"}},
		{name: "command not found", cmd: "no-such-command-khw", wantCode: 127, wantTail: []string{"no-such-command-khw"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := c.Run(context.Background(), tc.cmd, tc.opts)
			if string(out) != tc.wantOut {
				t.Errorf("stdout = %q, want %q", out, tc.wantOut)
			}
			if tc.wantCode == 0 {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				return
			}
			var ce *CommandError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want *CommandError", err)
			}
			if ce.ExitCode != tc.wantCode {
				t.Errorf("ExitCode = %d, want %d", ce.ExitCode, tc.wantCode)
			}
			msg := err.Error()
			for _, w := range append([]string{"node cp1", e.sshd.addr(), fmt.Sprintf("status %d", tc.wantCode), shorten(tc.cmd, 40)}, tc.wantTail...) {
				if !strings.Contains(msg, strings.TrimSuffix(w, "…")) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			for _, nw := range tc.notWantErr {
				if strings.Contains(msg, nw) {
					t.Errorf("error %q contains %q, beyond the %d-line tail", msg, nw, StderrTailLines)
				}
			}
			if n := strings.Count(ce.StderrTail, "\n") + 1; n > StderrTailLines {
				t.Errorf("StderrTail has %d lines, want <= %d", n, StderrTailLines)
			}
		})
	}
}

func TestRunContextCancel(t *testing.T) {
	e := newTestEnv(t)
	e.sshd.start()
	c := e.client(t, e.pool(t, "root", nil), "w1")
	// The root login here ignores the signal (see Run); whatever survives
	// is killed by pid so the test leaves nothing running.
	t.Cleanup(func() { killLocal("slee[p] 31.25") })
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := c.Run(ctx, "sleep 31.25", RunOptions{})
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Run returned after %v, want soon after the 500ms deadline", el)
	}
	var ce *CommandError
	if !errors.As(err, &ce) || !errors.Is(err, context.DeadlineExceeded) || ce.ExitCode != -1 {
		t.Fatalf("err = %v, want *CommandError wrapping context.DeadlineExceeded with ExitCode -1", err)
	}
	if !strings.Contains(err.Error(), "sleep 31.25") || !strings.Contains(err.Error(), "node w1") {
		t.Errorf("error %q does not name the node and command", err)
	}
	// The connection stays usable.
	if out, _, err := c.Run(context.Background(), "echo still-here", RunOptions{}); err != nil || string(out) != "still-here\n" {
		t.Errorf("Run after cancel: %q %v", out, err)
	}
	// A context that is already done never starts the command.
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, _, err := c.Run(done, "touch /nonexistent-khw-should-not-run", RunOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with canceled ctx: err = %v, want context.Canceled", err)
	}
}

// killLocal kills the local processes whose command line matches the pgrep
// pattern (the sshd under test runs on this machine).
func killLocal(pattern string) {
	out, _ := exec.Command("pgrep", "-f", pattern).Output()
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 1 {
			continue
		}
		if proc, err := os.FindProcess(pid); err == nil {
			proc.Kill()
		}
	}
}

func TestConcurrentRunsOnOneClient(t *testing.T) {
	e := newTestEnv(t)
	e.sshd.start()
	p := e.pool(t, "root", nil)
	c := e.client(t, p, "cp1")
	const n = 24 // more than sshd's MaxSessions 10: the client must queue
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, _, err := c.Run(context.Background(), fmt.Sprintf("sleep 0.2; echo %d", i), RunOptions{})
			if err == nil && string(out) != fmt.Sprintf("%d\n", i) {
				err = fmt.Errorf("run %d: stdout %q", i, out)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// The pool hands out the same connection again.
	if c2 := e.client(t, p, "cp1"); c2 != c {
		t.Errorf("Get returned a new client for the same node")
	}
}

func TestForEachBoundAndErrors(t *testing.T) {
	e := newTestEnv(t)
	e.sshd.start()
	p := e.pool(t, "root", nil)
	var nodes []Node
	for _, n := range []string{"cp1", "cp2", "cp3", "w1", "w2", "w3"} {
		nodes = append(nodes, e.node(n))
	}
	var inFlight, peak atomic.Int32
	var seen sync.Map
	boom := errors.New("boom")
	err := p.ForEach(context.Background(), nodes, 2, func(ctx context.Context, c *Client) error {
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			old := peak.Load()
			if now <= old || peak.CompareAndSwap(old, now) {
				break
			}
		}
		seen.Store(c.Node.Name, true)
		if _, _, err := c.Run(ctx, "sleep 0.3", RunOptions{}); err != nil {
			return err
		}
		if strings.HasPrefix(c.Node.Name, "w") && c.Node.Name != "w1" {
			return boom
		}
		return nil
	})
	if got := peak.Load(); got != 2 {
		t.Errorf("peak concurrency = %d, want exactly the limit 2", got)
	}
	for _, n := range nodes {
		if _, ok := seen.Load(n.Name); !ok {
			t.Errorf("fn never ran for %s", n.Name)
		}
	}
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want it to wrap boom", err)
	}
	msg := err.Error()
	for _, want := range []string{"node w2: boom", "node w3: boom"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "node w1") || strings.Contains(msg, "node cp1") {
		t.Errorf("error %q names a node that succeeded", msg)
	}
}

// TestHostKeyPinning: a real sshd is reached only with its key pinned
// beforehand; a connection never writes a pin (no trust on first use), and a
// changed key is refused at once.
func TestHostKeyPinning(t *testing.T) {
	e := newTestEnv(t)
	e.sshd.start()
	host := knownhosts.Normalize(e.sshd.addr())

	// No pin: refused, nothing written, not retried.
	if err := os.MkdirAll(filepath.Dir(e.knownHosts), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := Config{User: "root", Signer: e.signer, KnownHostsFile: e.knownHosts,
		ConnectTimeout: 20 * time.Second, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}
	p0, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = p0.Get(context.Background(), e.node("cp1"))
	p0.Close()
	var np *HostKeyNotPinnedError
	if !errors.As(err, &np) {
		t.Fatalf("unpinned node: err = %v, want *HostKeyNotPinnedError", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("unpinned host key took %v; it must not be retried", el)
	}
	for _, want := range []string{"node cp1", e.knownHosts, ssh.FingerprintSHA256(e.sshd.hostKey), "never trusts a key on first use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := os.Stat(e.knownHosts); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused connection wrote %s (trust on first use): %v", e.knownHosts, err)
	}

	// Pinned first (e.pool does): verified, the file is left alone.
	p1 := e.pool(t, "root", nil)
	data, err := os.ReadFile(e.knownHosts)
	if err != nil {
		t.Fatalf("known_hosts not written by PinHostKey: %v", err)
	}
	if want := knownhosts.Line([]string{host}, e.sshd.hostKey) + "\n"; string(data) != want {
		t.Fatalf("known_hosts = %q, want %q", data, want)
	}
	if st, _ := os.Stat(e.knownHosts); st.Mode().Perm() != 0o600 {
		t.Errorf("known_hosts mode = %v, want 0600", st.Mode().Perm())
	}
	e.client(t, p1, "cp1")
	if again, _ := os.ReadFile(e.knownHosts); !bytes.Equal(again, data) {
		t.Errorf("known_hosts changed on contact: %q", again)
	}
	p1.Close()

	// The node comes back with another host key: refused, at once.
	pinned := e.sshd.hostKey
	e.sshd.stop()
	e.sshd.newHostKey()
	e.sshd.start()
	p3, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Close()
	start = time.Now()
	_, err = p3.Get(context.Background(), e.node("cp1"))
	var hk *HostKeyChangedError
	if !errors.As(err, &hk) {
		t.Fatalf("err = %v, want *HostKeyChangedError", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("host key mismatch took %v; it must not be retried", el)
	}
	msg := err.Error()
	for _, want := range []string{"node cp1", e.knownHosts, "ssh-keygen -R '" + host + "' -f " + e.knownHosts, ssh.FingerprintSHA256(e.sshd.hostKey), ssh.FingerprintSHA256(pinned)} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if again, _ := os.ReadFile(e.knownHosts); !bytes.Equal(again, data) {
		t.Errorf("known_hosts changed after a mismatch: %q", again)
	}
	// Pinning the new key does not replace the old pin.
	others, err := p3.PinHostKey(e.node("cp1"), e.sshd.hostKey)
	if err != nil || len(others) != 1 || !bytes.Equal(others[0].Marshal(), pinned.Marshal()) {
		t.Errorf("PinHostKey over another pin = %v, %v; want the old key back and no change", others, err)
	}
	if again, _ := os.ReadFile(e.knownHosts); !bytes.Equal(again, data) {
		t.Errorf("known_hosts changed by PinHostKey over another pin: %q", again)
	}
}

func TestConnectRetriesUntilSSHDStarts(t *testing.T) {
	e := newTestEnv(t)
	p := e.pool(t, "root", nil)
	const delay = 1500 * time.Millisecond
	started := make(chan struct{})
	time.AfterFunc(delay, func() { e.sshd.start(); close(started) })
	t.Cleanup(func() { <-started })
	start := time.Now()
	c := e.client(t, p, "cp1")
	if el := time.Since(start); el < delay {
		t.Errorf("connected after %v, before sshd started (%v)", el, delay)
	}
	if out, _, err := c.Run(context.Background(), "echo up", RunOptions{}); err != nil || string(out) != "up\n" {
		t.Errorf("Run after late start: %q %v", out, err)
	}
}

func TestConnectGivesUp(t *testing.T) {
	e := newTestEnv(t) // sshd never started
	p := e.pool(t, "root", func(c *Config) { c.ConnectTimeout = 1200 * time.Millisecond })
	start := time.Now()
	_, err := p.Get(context.Background(), e.node("w3"))
	el := time.Since(start)
	var ce *ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want *ConnectError", err)
	}
	if ce.Attempts < 3 {
		t.Errorf("Attempts = %d, want several with 50ms..500ms backoff in 1.2s", ce.Attempts)
	}
	if el > 3*time.Second {
		t.Errorf("gave up after %v, want about the 1.2s ConnectTimeout", el)
	}
	for _, want := range []string{"node w3", e.sshd.addr(), "gave up", "connection refused", "authorized_keys"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestInstall(t *testing.T) {
	e := newTestEnv(t)
	e.sshd.start()
	for _, viaTmp := range []bool{false, true} {
		t.Run(fmt.Sprintf("stageViaTmp=%v", viaTmp), func(t *testing.T) {
			p := e.pool(t, "root", nil)
			c := e.client(t, p, "cp1")
			c.stageViaTmp = viaTmp
			dir := filepath.Join(t.TempDir(), "etc", "kubernetes")
			target := filepath.Join(dir, "config.yaml")
			ctx := context.Background()
			verify := func(wantMode, wantOwner, wantContent string) {
				t.Helper()
				out, _, err := c.Run(ctx, "stat -c '%a %U %G' "+shellQuote(target)+" && cat "+shellQuote(target), RunOptions{Sudo: true})
				if err != nil {
					t.Fatal(err)
				}
				if want := wantMode + " " + wantOwner + "\n" + wantContent; string(out) != want {
					t.Errorf("remote file = %q, want %q", out, want)
				}
				left, _ := filepath.Glob(filepath.Join(dir, ".*khw-*"))
				if len(left) > 0 {
					t.Errorf("staging files left behind: %v", left)
				}
			}
			steps := []struct {
				name                string
				f                   File
				wantChanged, wantUp bool
				wantMode, wantOwner string
			}{
				{"create (missing parent dir)", File{Path: target, Data: []byte("a: 1\n"), Mode: 0o640, Owner: "nobody", Group: "nogroup"}, true, true, "640", "nobody nogroup"},
				{"same again: no upload", File{Path: target, Data: []byte("a: 1\n"), Mode: 0o640, Owner: "nobody", Group: "nogroup"}, false, false, "640", "nobody nogroup"},
				{"mode and owner only", File{Path: target, Data: []byte("a: 1\n"), Mode: 0o600}, true, false, "600", "root root"},
				{"new content", File{Path: target, Data: []byte("a: 2\n"), Mode: 0o600}, true, true, "600", "root root"},
				{"same again after change", File{Path: target, Data: []byte("a: 2\n"), Mode: 0o600}, false, false, "600", "root root"},
			}
			for _, s := range steps {
				before := c.Uploads()
				res, err := c.Install(ctx, s.f)
				if err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				if res.Changed != s.wantChanged || res.Uploaded != s.wantUp {
					t.Errorf("%s: result %+v, want Changed=%v Uploaded=%v", s.name, res, s.wantChanged, s.wantUp)
				}
				wantUploads := before
				if s.wantUp {
					wantUploads++
				}
				if got := c.Uploads(); got != wantUploads {
					t.Errorf("%s: Uploads() = %d, want %d", s.name, got, wantUploads)
				}
				verify(s.wantMode, s.wantOwner, string(s.f.Data))
			}
			if got := p.Uploads(); got != 2 {
				t.Errorf("pool Uploads() = %d, want 2", got)
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		c := e.client(t, e.pool(t, "root", nil), "cp2")
		for _, f := range []File{{Path: "relative/x"}, {Path: "/a/../b"}, {Path: t.TempDir()}} {
			if _, err := c.Install(context.Background(), f); err == nil || !strings.Contains(err.Error(), "cp2") {
				t.Errorf("Install(%q): err = %v, want an error naming node cp2", f.Path, err)
			}
		}
	})
}

// TestNonRootUser needs a user with passwordless sudo; the test does not
// create one. Set KHW_TEST_SSH_USER to run it.
func TestNonRootUser(t *testing.T) {
	user := os.Getenv("KHW_TEST_SSH_USER")
	if user == "" {
		t.Skip("set KHW_TEST_SSH_USER to a local user with NOPASSWD sudo to test the non-root path")
	}
	e := newTestEnv(t)
	e.sshd.start()
	c := e.client(t, e.pool(t, user, nil), "w1")
	ctx := context.Background()
	if out, _, err := c.Run(ctx, "id -un", RunOptions{}); err != nil || strings.TrimSpace(string(out)) != user {
		t.Fatalf("id -un = %q, %v; want %s", out, err, user)
	}
	if out, _, err := c.Run(ctx, "id -u", RunOptions{Sudo: true}); err != nil || string(out) != "0\n" {
		t.Fatalf("sudo id -u = %q, %v; want 0", out, err)
	}
	target := filepath.Join(t.TempDir(), "sub", "f")
	for i, want := range []bool{true, false} {
		res, err := c.Install(ctx, File{Path: target, Data: []byte("x\n"), Mode: 0o600})
		if err != nil || res.Uploaded != want {
			t.Fatalf("install #%d: %+v %v, want Uploaded=%v", i, res, err, want)
		}
	}
	st, err := os.Stat(target)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("installed file: %v %v", st, err)
	}
}

// A connection that died without the pool seeing it yet (a node reverted
// to a snapshot): Client.Run says the session could not be opened, and
// Pool.Run redials once and runs the command on the new connection.
func TestPoolRunRedialsAConnectionThatDied(t *testing.T) {
	e := newTestEnv(t)
	e.sshd.start()
	p := e.pool(t, "root", nil)
	old := e.client(t, p, "cp1")
	old.conn.Close()
	<-old.dead
	old.dead = make(chan struct{}) // looks alive to the pool, as before the reader notices
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := old.Run(ctx, "true", RunOptions{}); !errors.Is(err, ErrSessionNotOpened) {
		t.Fatalf("Run on the dead connection: %v, want ErrSessionNotOpened", err)
	}
	out, _, err := p.Run(ctx, e.node("cp1"), "echo again", RunOptions{})
	if err != nil || string(out) != "again\n" {
		t.Fatalf("Pool.Run: %q, %v; want the command run on a new connection", out, err)
	}
	if c := e.client(t, p, "cp1"); c == old {
		t.Error("the pool still holds the dead connection")
	}
}
