package smoketest

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	spdyrt "k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/exec"
)

// fakeStreamingAPIServer answers the two SPDY upgrades of the pods API the
// way kube-apiserver relays them from a kubelet: exec (protocol
// v4.channel.k8s.io: streams error, stdout, stderr) and portforward
// (portforward.k8s.io: an error and a data stream per connection). Only a
// client certificate signed by the CA is accepted.
type fakeStreamingAPIServer struct {
	t        *testing.T
	podName  string
	exitCode int // exec: 0, or the exit status to report

	mu       sync.Mutex
	clientCN []string
	execCmds [][]string
}

func (f *fakeStreamingAPIServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	f.mu.Lock()
	if req.TLS != nil && len(req.TLS.PeerCertificates) > 0 {
		f.clientCN = append(f.clientCN, req.TLS.PeerCertificates[0].Subject.CommonName)
	}
	f.mu.Unlock()
	switch {
	case strings.HasSuffix(req.URL.Path, "/pods/"+f.podName+"/exec"):
		f.exec(w, req)
	case strings.HasSuffix(req.URL.Path, "/pods/"+f.podName+"/portforward"):
		f.portForward(w, req)
	default:
		http.Error(w, "not found: "+req.URL.Path, http.StatusNotFound)
	}
}

// upgrade negotiates protocol and collects the streams the client opens.
func upgrade(w http.ResponseWriter, req *http.Request, protocol string) (httpstream.Connection, chan httpstream.Stream, bool) {
	if _, err := httpstream.Handshake(req, w, []string{protocol}); err != nil {
		return nil, nil, false
	}
	streams := make(chan httpstream.Stream, 16)
	conn := spdyrt.NewResponseUpgrader().UpgradeResponse(w, req, func(s httpstream.Stream, replySent <-chan struct{}) error {
		streams <- s
		return nil
	})
	return conn, streams, conn != nil
}

func (f *fakeStreamingAPIServer) exec(w http.ResponseWriter, req *http.Request) {
	f.mu.Lock()
	f.execCmds = append(f.execCmds, req.URL.Query()["command"])
	f.mu.Unlock()
	conn, streams, ok := upgrade(w, req, "v4.channel.k8s.io")
	if !ok {
		return
	}
	defer conn.Close()
	byType := map[string]httpstream.Stream{}
	timeout := time.After(5 * time.Second)
	for len(byType) < 3 { // error, stdout, stderr
		select {
		case s := <-streams:
			byType[s.Headers().Get(corev1.StreamType)] = s
		case <-timeout:
			f.t.Errorf("exec: the client opened only %v", byType)
			return
		}
	}
	fmt.Fprintf(byType["stdout"], "%s\n", f.podName)
	fmt.Fprint(byType["stderr"], "")
	byType["stdout"].Close()
	byType["stderr"].Close()
	if f.exitCode != 0 {
		fmt.Fprintf(byType["error"], `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"command terminated with non-zero exit code","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"%d"}]}}`, f.exitCode)
	}
	byType["error"].Close()
	<-conn.CloseChan()
}

func (f *fakeStreamingAPIServer) portForward(w http.ResponseWriter, req *http.Request) {
	conn, streams, ok := upgrade(w, req, "portforward.k8s.io")
	if !ok {
		return
	}
	defer conn.Close()
	for {
		select {
		case s := <-streams:
			switch s.Headers().Get(corev1.StreamType) {
			case corev1.StreamTypeError:
				s.Close() // no error to report
			case corev1.StreamTypeData:
				go func() {
					defer s.Close()
					r, err := http.ReadRequest(bufio.NewReader(s))
					if err != nil {
						return
					}
					body := "unknown path"
					if r.URL.Path == "/hostname" && s.Headers().Get(corev1.PortHeader) == "80" {
						body = f.podName
					}
					fmt.Fprintf(s, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
				}()
			}
		case <-conn.CloseChan():
			return
		}
	}
}

// streamsFixture starts the fake apiserver with a serving certificate for
// "lb" and returns a rest.Config for https://lb:6443 whose Dial maps lb:6443
// to it: the only way there, as in the cluster's network namespace.
func streamsFixture(t *testing.T, f *fakeStreamingAPIServer) (*rest.Config, *mapDialer) {
	t.Helper()
	ca := newTestCA(t, "test-ca")
	serving, _, _ := ca.issue(t, "kubernetes", []string{"lb"}, nil, x509.ExtKeyUsageServerAuth)
	_, clientCert, clientKey := ca.issue(t, "admin", nil, nil, x509.ExtKeyUsageClientAuth)
	srv := httptest.NewUnstartedServer(f)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientCAs: ca.pool(), ClientAuth: tls.RequireAndVerifyClientCert}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected in one test
	srv.StartTLS()
	t.Cleanup(srv.Close)
	d := &mapDialer{to: map[string]string{"lb:6443": srv.Listener.Addr().String()}}
	cfg := &rest.Config{
		Host:            "https://lb:6443",
		TLSClientConfig: rest.TLSClientConfig{CAData: ca.certPEM, CertData: clientCert, KeyData: clientKey},
		Dial:            d.dial,
	}
	return cfg, d
}

// TestStreamsGoThroughRESTConfigDial: exec and port-forward reach the
// apiserver only through rest.Config.Dial (client-go's own SPDY transport
// would dial "lb" with a net.Dialer and fail to resolve it), verify the
// server certificate for "lb" and present the admin client certificate.
func TestStreamsGoThroughRESTConfigDial(t *testing.T) {
	f := &fakeStreamingAPIServer{t: t, podName: "web-1"}
	cfg, d := streamsFixture(t, f)
	s, err := NewStreams(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	stdout, stderr, err := s.Exec(ctx, "khw-smoke", "web-1", Container, []string{"cat", "/etc/hostname"})
	if err != nil || stdout != "web-1\n" || stderr != "" {
		t.Fatalf("Exec = %q, %q, %v; want \"web-1\\n\"", stdout, stderr, err)
	}
	if got := f.execCmds; len(got) != 1 || strings.Join(got[0], " ") != "cat /etc/hostname" {
		t.Errorf("the apiserver got exec commands %v", got)
	}

	local, stop, err := s.PortForward(ctx, "khw-smoke", "web-1", 80)
	if err != nil {
		t.Fatal(err)
	}
	var nd net.Dialer
	code, body, err := HTTPGet(ctx, nd.DialContext, "http://"+local+"/hostname")
	stop()
	if err != nil || code != 200 || body != "web-1" {
		t.Fatalf("GET through the forward = %d %q %v", code, body, err)
	}
	if !strings.HasPrefix(local, "127.0.0.1:") {
		t.Errorf("local address %s, want 127.0.0.1:<port>", local)
	}
	if n := d.askedFor("lb:6443"); n != 2 {
		t.Errorf("the dialer was asked for lb:6443 %d times, want 2 (one exec, one port-forward); asked %v", n, d.asked)
	}
	for _, cn := range f.clientCN {
		if cn != "admin" {
			t.Errorf("client certificate CN %q, want admin", cn)
		}
	}
	if len(f.clientCN) != 2 {
		t.Errorf("%d requests reached the server, want 2", len(f.clientCN))
	}
}

// TestStreamsExecExitCode: a command that exits non-zero returns its
// output with an exec.CodeExitError (the DNS check reads busybox's output
// although it exits 1 for a missing AAAA answer).
func TestStreamsExecExitCode(t *testing.T) {
	f := &fakeStreamingAPIServer{t: t, podName: "web-1", exitCode: 3}
	cfg, _ := streamsFixture(t, f)
	s, err := NewStreams(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stdout, _, err := s.Exec(ctx, "khw-smoke", "web-1", Container, []string{"false"})
	ee, ok := err.(exec.CodeExitError)
	if !ok || ee.Code != 3 {
		t.Fatalf("err = %#v, want exec.CodeExitError with code 3", err)
	}
	if stdout != "web-1\n" {
		t.Errorf("stdout %q lost with the exit status", stdout)
	}
}

// TestStreamsRefuseAWrongServer: the apiserver's certificate is verified
// for "lb": a server with a certificate for another name is refused.
func TestStreamsRefuseAWrongServer(t *testing.T) {
	f := &fakeStreamingAPIServer{t: t, podName: "web-1"}
	cfg, _ := streamsFixture(t, f)
	other := newTestCA(t, "other-ca")
	cfg.TLSClientConfig.CAData = other.certPEM
	s, err := NewStreams(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, _, err = s.Exec(ctx, "khw-smoke", "web-1", Container, []string{"true"})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Exec against an untrusted server: %v, want a certificate error", err)
	}
	if _, _, err := s.PortForward(ctx, "khw-smoke", "web-1", 80); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("PortForward against an untrusted server: %v, want a certificate error", err)
	}
}
