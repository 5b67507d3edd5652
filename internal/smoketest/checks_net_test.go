package smoketest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/khw-dev/khw/internal/config"
)

func TestParseNslookup(t *testing.T) {
	for _, tc := range []struct {
		name, out, server string
		answers           []string
	}{
		{"busybox 1.36", busyboxAnswer, "10.32.0.10", []string{"10.32.0.1"}},
		{"busybox 1.2x", "Server:    10.32.0.10\nAddress 1: 10.32.0.10 kube-dns.kube-system.svc.cluster.local\n\nName:      kubernetes.default.svc.cluster.local\nAddress 1: 10.32.0.1 kubernetes.default.svc.cluster.local\n", "10.32.0.10", []string{"10.32.0.1"}},
		{"bind", "Server:\t\t10.32.0.10\nAddress:\t10.32.0.10#53\n\nName:\tkubernetes.default.svc.cluster.local\nAddress: 10.32.0.1\n\n", "10.32.0.10", []string{"10.32.0.1"}},
		{"nxdomain", "Server:\t\t10.32.0.10\nAddress:\t10.32.0.10#53\n\n** server can't find nope.svc.cluster.local: NXDOMAIN\n", "10.32.0.10", nil},
		{"timeout", ";; connection timed out; no servers could be reached\n", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, answers := ParseNslookup(tc.out)
			if server != tc.server || strings.Join(answers, ",") != strings.Join(tc.answers, ",") {
				t.Fatalf("server %q answers %v; want %q %v", server, answers, tc.server, tc.answers)
			}
		})
	}
}

func TestDNSWrongAnswerAndMissingTool(t *testing.T) {
	for _, tc := range []struct {
		name     string
		out      string
		err      error
		wantErr  string
		maxTries int
	}{
		{"wrong answer", strings.Replace(busyboxAnswer, "Address: 10.32.0.1\n", "Address: 10.32.0.99\n", 1), nil, "answered [10.32.0.99], want 10.32.0.1", 0},
		{"no nslookup", "", errors.New(`OCI runtime exec failed: exec failed: unable to start container process: exec: "nslookup": executable file not found in $PATH: unknown`), "no nslookup in the image", 1},
		{"server down", ";; connection timed out; no servers could be reached\n", errors.New("command terminated with exit code 1"), "command terminated with exit code 1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.streams.nslookup, f.streams.nslookupErr = tc.out, tc.err
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: webPod, Namespace: Namespace}, Spec: corev1.PodSpec{NodeName: "w2"}}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			c := f.r.dns(ctx, pod)
			if c.OK || !strings.Contains(c.Err, tc.wantErr) || !strings.Contains(c.Err, "is CoreDNS running") {
				t.Fatalf("%+v, want error with %q", c, tc.wantErr)
			}
			tries := 0
			for _, e := range f.streams.execs {
				if strings.Contains(e, "nslookup") {
					tries++
				}
			}
			if tc.maxTries > 0 && tries > tc.maxTries {
				t.Errorf("nslookup ran %d times: a missing binary is not retried", tries)
			}
			if tc.maxTries == 0 && tries < 2 {
				t.Errorf("nslookup ran %d times: a failing lookup is retried until the window ends", tries)
			}
		})
	}
}

func TestSummarizeNodePort(t *testing.T) {
	ok := func(n string, pod bool) nodePortResult {
		return nodePortResult{Node: n, HasPod: pod, Status: 200, Body: "web"}
	}
	bad := func(n string, pod bool) nodePortResult {
		return nodePortResult{Node: n, HasPod: pod, Err: "dial tcp: connection refused"}
	}
	for _, tc := range []struct {
		name    string
		res     []nodePortResult
		wantErr string // "" = pass
	}{
		{"all answer", []nodePortResult{ok("w1", false), ok("w2", true), ok("w3", false)}, ""},
		{"only the pod's worker", []nodePortResult{bad("w1", false), ok("w2", true), bad("w3", false)}, "did not answer \"web\" on w1, w3: only the worker running the pod answers"},
		{"none", []nodePortResult{bad("w1", false), bad("w2", true), bad("w3", false)}, "on w1, w2, w3: no worker forwards the NodePort"},
		{"one without the pod", []nodePortResult{ok("w1", false), ok("w2", true), bad("w3", false)}, "on w3: kube-proxy on those workers"},
		{"wrong body", []nodePortResult{ok("w1", false), {Node: "w2", HasPod: true, Status: 200, Body: "other"}, ok("w3", false)}, "on w2:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := summarizeNodePort(30080, "web", tc.res)
			if !strings.HasPrefix(ev, "GET http://<worker IP>:30080/hostname → w1") || !strings.Contains(ev, "w2 (runs the pod)") {
				t.Errorf("evidence %q", ev)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestProbeNodePortsRetries: a worker whose NodePort answers 503 at first
// (kube-proxy not synced, endpoints not ready) is asked again until it
// answers; one that refuses stays failed with its error.
func TestProbeNodePortsRetries(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n < 3 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "web")
	}))
	defer srv.Close()
	d := &mapDialer{to: map[string]string{"192.168.122.21:30080": srv.Listener.Addr().String()}}
	workers := []config.Node{{Name: "w1", IP: "192.168.122.21"}, {Name: "w2", IP: "192.168.122.22"}}
	res := probeNodePorts(context.Background(), d.dial, workers, "w1", 30080, "web", 300*time.Millisecond, 5*time.Millisecond)
	if !res[0].ok("web") || !res[0].HasPod || calls != 3 {
		t.Errorf("w1: %+v after %d calls, want 200 \"web\" on the third", res[0], calls)
	}
	if res[1].ok("web") || !strings.Contains(res[1].Err, "connection refused") || res[1].HasPod {
		t.Errorf("w2: %+v, want connection refused", res[1])
	}
	if d.askedFor("192.168.122.22:30080") < 2 {
		t.Errorf("w2 asked %d times, want retries within the window", d.askedFor("192.168.122.22:30080"))
	}
}
