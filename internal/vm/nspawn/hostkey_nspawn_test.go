package nspawn

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/vm"
)

// TestNspawnHostKeyPinnedBeforeFirstBoot boots one real node whose SSH
// host key khw generated and pinned before the node ever ran: the first
// connection verifies against that pin (golang.org/x/crypto/ssh and OpenSSH
// with StrictHostKeyChecking yes), the node offers exactly that one key
// (ssh-keyscan), also after a reboot, and a client pinning another key, or
// none, is refused.
func TestNspawnHostKeyPinnedBeforeFirstBoot(t *testing.T) {
	p, pool := testCluster(t, "lb") // pins before Create
	lb, _ := p.c.Node("lb")
	state := p.opts.StateDir
	kh := filepath.Join(state, "ssh", "known_hosts")
	hk, err := p.opts.HostKey("lb")
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := os.ReadFile(kh)
	if err != nil {
		t.Fatalf("no pin before the first boot: %v", err)
	}
	if want := knownhosts.Line([]string{lb.IP}, hk.Public) + "\n"; string(pinned) != want {
		t.Fatalf("known_hosts before boot = %q, want %q", pinned, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := p.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx, "lb"); err != nil {
		t.Fatal(err)
	}
	rn := remote.Node{Name: "lb", Addr: lb.IP}
	if _, err := pool.Get(ctx, rn); err != nil {
		t.Fatalf("first connection: %v\njournal:\n%s", err, nodeJournal(p, "lb"))
	}
	if now, _ := os.ReadFile(kh); !bytes.Equal(now, pinned) {
		t.Errorf("known_hosts changed by the first connection: %q", now)
	}
	want := "ssh-ed25519 " + strings.Fields(hk.PublicLine())[1]
	checkOffers := func(round string) {
		t.Helper()
		if got := run(t, ctx, pool, p, "lb", "ls /etc/ssh/ | grep ssh_host_ | tr '\\n' ' '"); got != "ssh_host_ed25519_key ssh_host_ed25519_key.pub" {
			t.Errorf("%s: host key files on the node: %q, want only the ed25519 pair", round, got)
		}
		if _, err := exec.LookPath("ssh-keyscan"); err != nil {
			t.Logf("%s: no ssh-keyscan on this host (openssh-client): offered keys not scanned", round)
			return
		}
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", vm.NetnsName(p.c.Name), "ssh-keyscan", "-T", "10", lb.IP).Output()
		if err != nil {
			t.Fatalf("%s: ssh-keyscan: %v", round, err)
		}
		var offered []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(l); len(f) == 3 && !strings.HasPrefix(l, "#") {
				offered = append(offered, f[1]+" "+f[2])
			}
		}
		if len(offered) != 1 || offered[0] != want {
			t.Errorf("%s: node offers %q, want exactly the generated key %q", round, offered, want)
		}
	}
	checkOffers("boot 1")

	// OpenSSH, as `ssh -F $KHW_SSH_CONFIG` runs it: only the pinned key.
	key := filepath.Join(state, "ssh", "id_ed25519")
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", vm.NetnsName(p.c.Name), "ssh", "-i", key, "-o", "IdentitiesOnly=yes",
		"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile="+kh, "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "HostKeyAlgorithms=ssh-ed25519", "-o", "ConnectTimeout=15", remote.DefaultUser+"@"+lb.IP, "hostname").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "lb" {
		t.Errorf("OpenSSH with StrictHostKeyChecking yes against the pin: %v: %s", err, out)
	}

	// Another key pinned for the address: refused. No pin: refused, nothing written.
	other, err := remote.EnsureHostKey(filepath.Join(t.TempDir(), "lb"), "lb")
	if err != nil {
		t.Fatal(err)
	}
	refuse := func(file string, pin ssh.PublicKey) error {
		pl, err := remote.NewPool(remote.Config{Signer: poolSigner(t, state), KnownHostsFile: file, Dial: p.Dialer(), ConnectTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer pl.Close()
		if pin != nil {
			if _, err := pl.PinHostKey(rn, pin); err != nil {
				t.Fatal(err)
			}
		}
		_, err = pl.Get(ctx, rn)
		return err
	}
	var changed *remote.HostKeyChangedError
	wrong := filepath.Join(t.TempDir(), "known_hosts")
	if err := refuse(wrong, other.Public); !errors.As(err, &changed) || !strings.Contains(err.Error(), "node lb") || !strings.Contains(err.Error(), wrong) {
		t.Errorf("pool pinning another key: err = %v, want *HostKeyChangedError naming lb and %s", err, wrong)
	}
	var unpinned *remote.HostKeyNotPinnedError
	none := filepath.Join(t.TempDir(), "known_hosts")
	if err := refuse(none, nil); !errors.As(err, &unpinned) || !strings.Contains(err.Error(), none) {
		t.Errorf("pool with no pin: err = %v, want *HostKeyNotPinnedError naming %s", err, none)
	}
	if _, err := os.Stat(none); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused connection wrote %s (trust on first use): %v", none, err)
	}

	// A reboot keeps the key: nothing on the node makes new ones.
	stopCtx, stopCancel := context.WithTimeout(ctx, time.Minute)
	defer stopCancel()
	if err := p.Stop(stopCtx, "lb", false); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx, "lb"); err != nil {
		t.Fatal(err)
	}
	checkOffers("boot 2")
}

func poolSigner(t *testing.T, state string) ssh.Signer {
	t.Helper()
	s, _, err := remote.EnsureKey(filepath.Join(state, "ssh", "id_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
