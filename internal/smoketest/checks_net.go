package smoketest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/remote"
)

// HTTPGet GETs url with a fresh connection opened by dial, bounded by
// requestTimeout; it returns the status code and up to 4 KiB of body.
func HTTPGet(ctx context.Context, dial remote.DialFunc, url string) (int, string, error) {
	tr := &http.Transport{DialContext: dial, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: requestTimeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(body)), nil
}

func (r *Runner) portForward(ctx context.Context, pod *corev1.Pod) Check {
	return timed(CheckPortForward, func() (string, string, error) {
		fctx, cancel := context.WithTimeout(ctx, streamTimeout)
		defer cancel()
		local, stop, err := r.Streams.PortForward(fctx, pod.Namespace, pod.Name, HTTPPort)
		if err != nil {
			return "", pod.Spec.NodeName, fmt.Errorf("port-forward to %s:%d: %v%s", pod.Name, HTTPPort, err, kubeletHint(err, pod.Spec.NodeName))
		}
		defer stop()
		var d net.Dialer
		code, body, err := HTTPGet(fctx, d.DialContext, "http://"+local+"/hostname")
		if err != nil {
			return "", pod.Spec.NodeName, fmt.Errorf("GET http://%s/hostname through the forward to %s:%d: %w", local, pod.Name, HTTPPort, err)
		}
		ev := fmt.Sprintf("%s → pod %s:%d: GET /hostname %d %q", local, pod.Name, HTTPPort, code, body)
		if code != http.StatusOK || body != pod.Name {
			return ev, pod.Spec.NodeName, fmt.Errorf("GET /hostname through the forward answered %d %q, want 200 %q", code, body, pod.Name)
		}
		return ev, pod.Spec.NodeName, nil
	})
}

// nodePortResult is one worker's answer on the NodePort.
type nodePortResult struct {
	Node, IP string
	// HasPod is true for the worker running the pod.
	HasPod bool
	Status int
	Body   string
	Err    string
}

// ok: the answer came from the pod (GET /hostname = the pod name).
func (n nodePortResult) ok(want string) bool {
	return n.Err == "" && n.Status == http.StatusOK && n.Body == want
}

// probeNodePorts GETs http://<worker IP>:<nodePort>/hostname on every
// worker in parallel, each retried every poll until it answers want or
// window has passed, and returns the last result of each, in workers' order.
func probeNodePorts(ctx context.Context, dial remote.DialFunc, workers []config.Node, podNode string, nodePort int, want string, window, poll time.Duration) []nodePortResult {
	out := make([]nodePortResult, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, cancel := context.WithTimeout(ctx, window)
			defer cancel()
			url := "http://" + net.JoinHostPort(w.IP, strconv.Itoa(nodePort)) + "/hostname"
			for attempt := 0; ; attempt++ {
				res := nodePortResult{Node: w.Name, IP: w.IP, HasPod: w.Name == podNode}
				code, body, err := HTTPGet(wctx, dial, url)
				if err != nil && attempt > 0 && wctx.Err() != nil {
					// The window closed during this attempt: the previous
					// attempt's answer says more than "deadline exceeded".
					return
				}
				if err != nil {
					res.Err = oneLine(err.Error())
				}
				res.Status, res.Body = code, body
				out[i] = res
				if res.ok(want) {
					return
				}
				select {
				case <-wctx.Done():
					return
				case <-time.After(poll):
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// summarizeNodePort turns the per-worker results into the evidence (one
// entry per worker) and an error naming the workers that did not answer
// with the pod's name, with the likely cause.
func summarizeNodePort(nodePort int, want string, res []nodePortResult) (string, error) {
	var parts, bad []string
	badWithPod, badWithout, withoutPod := 0, 0, 0
	for _, n := range res {
		where := n.Node
		if n.HasPod {
			where += " (runs the pod)"
		} else {
			withoutPod++
		}
		var s string
		switch {
		case n.Err != "":
			s = where + ": " + n.Err
		default:
			s = fmt.Sprintf("%s: %d %q", where, n.Status, n.Body)
		}
		parts = append(parts, s)
		if !n.ok(want) {
			bad = append(bad, n.Node)
			if n.HasPod {
				badWithPod++
			} else {
				badWithout++
			}
		}
	}
	ev := fmt.Sprintf("GET http://<worker IP>:%d/hostname → %s", nodePort, strings.Join(parts, "; "))
	if len(bad) == 0 {
		return ev, nil
	}
	var why string
	switch {
	case len(bad) == len(res):
		why = "no worker forwards the NodePort: is kube-proxy running on the workers (iptables -t nat -L KUBE-NODEPORTS)?"
	case badWithPod == 0 && badWithout == withoutPod:
		why = "only the worker running the pod answers: the others forward to the pod's IP over the pod routes (step " + labid.PodNetwork + ": ip route on each worker must send every other worker's podCIDR via that worker)"
	default:
		why = "kube-proxy on those workers has not programmed the NodePort (journalctl -u kube-proxy), or they cannot route to the pod's podCIDR (step " + labid.PodNetwork + ")"
	}
	return ev, fmt.Errorf("NodePort %d did not answer %q on %s: %s", nodePort, want, strings.Join(bad, ", "), why)
}

func (r *Runner) nodePort(ctx context.Context, pod *corev1.Pod) Check {
	return timed(CheckNodePort, func() (string, string, error) {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: AppName},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeNodePort,
				Selector: map[string]string{"app": AppName},
				Ports:    []corev1.ServicePort{{Name: "http", Port: HTTPPort, TargetPort: intstr.FromInt32(HTTPPort), Protocol: corev1.ProtocolTCP}},
			},
		}
		cctx, cancel := context.WithTimeout(ctx, requestTimeout)
		got, err := r.Client.CoreV1().Services(r.ns()).Create(cctx, svc, metav1.CreateOptions{})
		cancel()
		if err != nil {
			return "", "", fmt.Errorf("create NodePort Service %s/%s: %w", r.ns(), AppName, err)
		}
		if len(got.Spec.Ports) == 0 || got.Spec.Ports[0].NodePort == 0 {
			return "", "", fmt.Errorf("Service %s/%s got no nodePort (the apiserver allocates one from --service-node-port-range)", r.ns(), AppName)
		}
		port := int(got.Spec.Ports[0].NodePort)
		workers := r.Cluster.Workers()
		if len(workers) == 0 {
			return "", "", fmt.Errorf("cluster.yaml has no worker to send the NodePort request to")
		}
		res := probeNodePorts(ctx, r.Dial, workers, pod.Spec.NodeName, port, pod.Name, r.retryWindow(), r.poll())
		ev, err := summarizeNodePort(port, pod.Name, res)
		return ev, "", err
	})
}

// ParseNslookup reads the output of nslookup NAME SERVER, as printed by
// busybox (khw's mirror image) and by BIND's nslookup (upstream agnhost,
// alpine bind-tools): the "Server:" line names the server asked; the
// "Address" lines after the first "Name:" line are the answers ("Address:
// 10.32.0.1", or busybox's older "Address 1: 10.32.0.1 name").
func ParseNslookup(out string) (server string, answers []string) {
	seenName := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch {
		case key == "Server":
			server = val
		case key == "Name":
			seenName = true
		case strings.HasPrefix(key, "Address") && seenName:
			if f := strings.Fields(val); len(f) > 0 {
				answers = append(answers, f[0])
			}
		}
	}
	return server, answers
}

// ParseResolvConf returns the nameserver and search lines of a resolv.conf.
func ParseResolvConf(s string) (nameservers, search []string) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			nameservers = append(nameservers, f[1])
		case "search":
			search = append(search, f[1:]...)
		}
	}
	return nameservers, search
}

func (r *Runner) dns(ctx context.Context, pod *corev1.Pod) Check {
	return timed(CheckDNS, func() (string, string, error) {
		node := pod.Spec.NodeName
		c := r.Cluster
		name := "kubernetes.default.svc." + c.Kubernetes.ClusterDomain
		server := c.Kubernetes.ClusterDNS
		want := c.APIServerServiceIP().String()

		ectx, cancel := context.WithTimeout(ctx, streamTimeout)
		conf, stderr, err := r.Streams.Exec(ectx, pod.Namespace, pod.Name, Container, []string{"cat", "/etc/resolv.conf"})
		cancel()
		if err != nil {
			return "", node, fmt.Errorf("exec cat /etc/resolv.conf in %s: %v%s", pod.Name, err, stderrNote(stderr))
		}
		nameservers, search := ParseResolvConf(conf)
		confEv := fmt.Sprintf("/etc/resolv.conf: nameserver %s, search %s", strings.Join(nameservers, " "), strings.Join(search, " "))
		if !contains(nameservers, server) {
			return confEv, node, fmt.Errorf("the pod's /etc/resolv.conf names nameserver %v, not the cluster DNS %s: set clusterDNS: [%s] in the kubelet config of %s (/var/lib/kubelet/kubelet-config.yaml) and restart kubelet", nameservers, server, server, node)
		}

		cmd := []string{"nslookup", name, server}
		wctx, wcancel := context.WithTimeout(ctx, r.retryWindow())
		defer wcancel()
		var lastErr error
		for {
			ev, err := r.lookup(wctx, pod, cmd, want)
			if err == nil {
				return ev + "; " + confEv, node, nil
			}
			lastErr = err
			if errors.Is(err, errNoTool) || !sleep(wctx, r.poll()) {
				break
			}
		}
		return confEv, node, fmt.Errorf("%w: is CoreDNS running (step "+labid.CoreDNS+": kubectl -n kube-system get pods -l k8s-app=kube-dns) and is the kube-dns Service at %s reachable from %s (kube-proxy)?", lastErr, server, node)
	})
}

// lookup runs cmd (nslookup NAME SERVER) in the pod and wants the answer
// want among the addresses.
func (r *Runner) lookup(ctx context.Context, pod *corev1.Pod, cmd []string, want string) (string, error) {
	ectx, cancel := context.WithTimeout(ctx, streamTimeout)
	defer cancel()
	stdout, stderr, err := r.Streams.Exec(ectx, pod.Namespace, pod.Name, Container, cmd)
	srv, answers := ParseNslookup(stdout)
	what := strings.Join(cmd, " ")
	if contains(answers, want) {
		// busybox exits 1 when one of its queries (AAAA) has no answer,
		// so the exit status does not matter once the A answer is there.
		return fmt.Sprintf("in pod %s: %s → %s (server %s)", pod.Name, what, strings.Join(answers, ", "), srv), nil
	}
	if err != nil {
		s := err.Error() + " " + stderr
		if strings.Contains(s, "executable file not found") || strings.Contains(s, "no such file") {
			return "", fmt.Errorf("%s: %w (the upstream agnhost image ships it; so does khw's mirror build, with busybox): %v", what, errNoTool, err)
		}
		if len(answers) == 0 {
			return "", fmt.Errorf("%s: %v%s; output %q", what, err, stderrNote(stderr), oneLine(stdout))
		}
	}
	if len(answers) > 0 {
		return "", fmt.Errorf("%s answered %v, want %s (the `kubernetes` Service IP)", what, answers, want)
	}
	return "", errNotFoundIn(what, "answer "+want, stdout+stderr)
}
