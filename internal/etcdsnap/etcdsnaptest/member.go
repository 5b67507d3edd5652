package etcdsnaptest

import (
	"archive/tar"
	"compress/gzip"
	"context"
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

// EtcdBinary extracts the named binary (etcd, etcdutl) from the offline
// mirror's etcd release tarball ($KHW_MIRROR, which make test builds and
// sets); it skips without one.
func EtcdBinary(t *testing.T, name string) string {
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

// FreePort is a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// RealMember starts a real one-member etcd as cp1 with the cluster's TLS
// (kubernetes.pem, client cert auth against ca.pem) on a loopback port, and
// returns the Target that reaches it as https://192.168.122.11:2379 and
// the state directory holding its PKI. It stops when the test ends.
func RealMember(t *testing.T) (health.Target, state.Dir) {
	t.Helper()
	bin := EtcdBinary(t, "etcd")
	c := config.Default("snap", runtime.GOARCH, config.ProviderNspawn)
	d := state.New(t.TempDir(), c.Name)
	if _, err := pki.Reconcile(c, d.PKIDir(), time.Time{}); err != nil {
		t.Fatal(err)
	}
	client, peer := FreePort(t), FreePort(t)
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
