package health

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A stats CSV as HAProxy 2.6 writes it, shortened to the columns khw reads
// and a few around them (the parser goes by the header's names).
const statsCSV = "# pxname,svname,stot,status,bck,check_status,check_code,last_chk,addr\n" +
	"kube-apiserver,FRONTEND,12,OPEN,,,,,\n" +
	"kube-apiservers,cp1,5,UP,0,L7OK,200,OK,192.168.122.11:6443\n" +
	"kube-apiservers,cp2,3,DOWN,0,L4CON,,Connection refused,192.168.122.12:6444\n" +
	"kube-apiservers,cp3,4,DOWN 1/2,0,L7OK,200,OK,192.168.122.13:6443\n" +
	"kube-apiservers,cp4,0,DOWN,0,* L7STS,0,HTTP status check returned code <3C>401<3E>,192.168.122.14:6443\n" +
	"kube-apiservers,cp1-last-resort,0,no check,1,,,,192.168.122.11:6443\n" +
	"kube-apiservers,BACKEND,12,UP,,,,,\n"

func TestParseHAProxyStats(t *testing.T) {
	servers, err := ParseHAProxyStats([]byte(statsCSV))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range servers {
		got = append(got, strings.Join([]string{s.Backend, s.Name, s.Addr, s.Status, s.Check, s.LastCheck}, "|"))
	}
	want := []string{
		"kube-apiservers|cp1|192.168.122.11:6443|UP|L7OK 200|OK",
		"kube-apiservers|cp2|192.168.122.12:6444|DOWN|L4CON|Connection refused",
		"kube-apiservers|cp3|192.168.122.13:6443|DOWN 1/2|L7OK 200|OK",
		"kube-apiservers|cp4|192.168.122.14:6443|DOWN|L7STS|HTTP status check returned code <3C>401<3E>",
		"kube-apiservers|cp1-last-resort|192.168.122.11:6443|no check||",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("servers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if servers[0].Sessions != 5 || !servers[0].Up() || servers[1].Up() || servers[2].Up() || servers[3].Up() || servers[4].Up() || !servers[4].Backup {
		t.Errorf("Sessions/Up/Backup wrong: %+v", servers)
	}
	if servers[2].CheckRunning || !servers[3].CheckRunning {
		t.Errorf("CheckRunning: cp3 %v, cp4 %v; want false, true", servers[2].CheckRunning, servers[3].CheckRunning)
	}
	if _, err := ParseHAProxyStats([]byte("# a,b\n1,2\n")); err == nil || !strings.Contains(err.Error(), "lacks") {
		t.Errorf("bad header: err = %v", err)
	}
}

// TestReadHAProxyStatsFromARealHAProxy runs HAProxy (a test dependency,
// Makefile DEB_TEST_DEPS) with a backend of one server that listens and
// one that does not, and reads its stats page as the lab 06 tryout does:
// the column names, addresses and check results are HAProxy's own.
func TestReadHAProxyStatsFromARealHAProxy(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (make deps installs it)")
	}
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	stats, down := free(), free()
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	os.WriteFile(cfg, []byte(`global
    log stderr format raw local0 emerg
defaults
    mode tcp
    timeout connect 1s
    timeout client 5s
    timeout server 5s
backend kube-apiservers
    default-server inter 100ms fastinter 100ms fall 1 rise 1
    server cp1 `+up.Addr().String()+` check
    server cp2 `+down+` check
    server cp2-last-resort `+up.Addr().String()+` backup
listen stats
    bind `+stats+`
    mode http
    stats enable
    stats uri /stats
    stats show-legends
`), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-db", "-f", cfg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != HAProxyStatsAddr {
			return nil, fmt.Errorf("dialled %s, want the stats page %s", addr, HAProxyStatsAddr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, stats)
	}
	var servers []HAProxyServer
	for {
		servers, err = ReadHAProxyStats(ctx, dial)
		if err == nil && len(servers) == 3 && servers[0].Status == "UP" && servers[1].Status == "DOWN" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("HAProxy's stats never showed cp1 UP and cp2 DOWN: %+v, %v\n%s", servers, err, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cp1, cp2, backup := servers[0], servers[1], servers[2]
	if cp1.Name != "cp1" || cp1.Addr != up.Addr().String() || !strings.HasPrefix(cp1.Check, "L4OK") || !cp1.Up() {
		t.Errorf("cp1: %+v", cp1)
	}
	if cp2.Name != "cp2" || cp2.Addr != down || !strings.HasPrefix(cp2.Check, "L4CON") || cp2.LastCheck == "" || cp2.Up() {
		t.Errorf("cp2: %+v", cp2)
	}
	if !backup.Backup || backup.Up() {
		t.Errorf("backup server: %+v", backup)
	}
}
