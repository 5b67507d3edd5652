package etcdsnap

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/pki"
	"github.com/khw-dev/khw/internal/state"
)

// etcdBinary extracts the named binary (etcd, etcdutl) from the offline
// mirror's etcd release tarball ($KHW_MIRROR, which make test builds and
// sets); it skips without one.
func etcdBinary(t *testing.T, name string) string {
	t.Helper()
	mirror := os.Getenv(components.EnvMirror)
	if mirror == "" {
		t.Skipf("SKIP: $%s is not set (make test builds the offline mirror and sets it)", components.EnvMirror)
	}
	tgz, _ := filepath.Glob(filepath.Join(mirror, "github.com/etcd-io/etcd/releases/download/*/etcd-*-linux-"+runtime.GOARCH+".tar.gz"))
	if len(tgz) == 0 {
		t.Skipf("SKIP: no etcd release tarball in %s (make testbins builds it)", mirror)
	}
	f, err := os.Open(tgz[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no %s binary in %s: %v", name, tgz[0], err)
		}
		if filepath.Base(h.Name) != name || h.Typeflag != tar.TypeReg {
			continue
		}
		bin := filepath.Join(t.TempDir(), name)
		out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		out.Close()
		return bin
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

// realMember starts a real one-member etcd as cp1 with the cluster's TLS
// (kubernetes.pem, client cert auth against ca.pem) on a loopback port, and
// returns the Target that reaches it as https://192.168.122.11:2379.
func realMember(t *testing.T) (health.Target, state.Dir) {
	t.Helper()
	bin := etcdBinary(t, "etcd")
	c := config.Default("snap", runtime.GOARCH, config.ProviderNspawn)
	d := state.New(t.TempDir(), c.Name)
	if _, err := pki.Reconcile(c, d.PKIDir(), time.Time{}); err != nil {
		t.Fatal(err)
	}
	client, peer := freePort(t), freePort(t)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	p := d.PKIDir()
	cmd := exec.Command(bin, "--name", "cp1", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls", fmt.Sprintf("https://127.0.0.1:%d", client), "--advertise-client-urls", "https://192.168.122.11:2379",
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "cp1="+peerURL,
		"--cert-file", filepath.Join(p, "kubernetes.pem"), "--key-file", filepath.Join(p, "kubernetes-key.pem"),
		"--trusted-ca-file", filepath.Join(p, "ca.pem"), "--client-cert-auth", "--log-level", "error")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("etcd's log:\n%s", logs.String())
		}
	})
	tg := health.Target{Cluster: c, PKIDir: p, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != "192.168.122.11:2379" {
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		var dl net.Dialer
		return dl.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", client))
	}}
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		rep, err := health.Etcd(ctx, tg)
		cancel()
		if err == nil && rep.Leader == "cp1" {
			return tg, d
		}
		if i == 60 {
			t.Fatalf("etcd did not elect itself in 30 s: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestSaveFromARealMember writes keys into a real etcd, saves a snapshot
// and checks the file: mode 0600, the digest and size reported, the
// revision of the last write (also as etcdutl snapshot status reads it),
// and a second save that must not replace it
// without overwrite.
func TestSaveFromARealMember(t *testing.T) {
	tg, d := realMember(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp1, _ := tg.Cluster.Node("cp1")
	cli, err := tg.EtcdMemberClient(cp1)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var last int64
	for i := range 5 {
		r, err := cli.Put(ctx, fmt.Sprintf("/registry/test/k%d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	path := filepath.Join(d.Root, "etcd-snapshots", "before.db")
	res, err := Save(ctx, tg, path, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Member != "cp1" || res.Endpoint != "https://192.168.122.11:2379" || res.Revision != last || res.Keys < 5 {
		t.Errorf("result %+v, want member cp1, revision %d, at least 5 keys", res, last)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != res.SHA256 || int64(len(data)) != res.Size {
		t.Errorf("file: %d bytes, sha256 %x; reported %d bytes, %s", len(data), sum, res.Size, res.SHA256)
	}
	// etcd's own tool, an independent witness, reads the same revision.
	out, err := exec.Command(etcdBinary(t, "etcdutl"), "snapshot", "status", path, "-w", "json").Output()
	if err != nil {
		t.Fatalf("etcdutl snapshot status: %v", err)
	}
	if !strings.Contains(string(out), fmt.Sprintf(`"revision":%d,`, last)) {
		t.Errorf("etcdutl snapshot status says %s, want revision %d", out, last)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if _, err := cli.Put(ctx, "/registry/test/after", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := Save(ctx, tg, path, false); !errors.Is(err, ErrExists) {
		t.Errorf("a second save over the file: %v, want ErrExists", err)
	}
	again, err := Save(ctx, tg, path, true)
	if err != nil || again.Revision != last+1 {
		t.Errorf("save with overwrite: revision %d, %v; want %d", again.Revision, err, last+1)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestRevisionRefusesOtherFiles: a file that is not an etcd database is
// named as such, not read as revision 0.
func TestRevisionRefusesOtherFiles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.db")
	if err := os.WriteFile(p, []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Revision(p); err == nil || !strings.Contains(err.Error(), "not an etcd database") {
		t.Errorf("Revision of a text file: %v", err)
	}
}
