package smoketest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	spdyrt "k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
)

// Streams runs a command in a container and forwards a pod's port, the two
// streaming calls of the API (`kubectl exec`, `kubectl port-forward`). The
// apiserver relays both to the kubelet of the pod's node on :10250, which
// hands them to containerd's CRI streaming server.
type Streams interface {
	// Exec runs command (no shell, no stdin, no TTY) in container of
	// namespace/pod and returns what it wrote to stdout and stderr. A
	// non-zero exit status is an error (remotecommand's
	// exec.CodeExitError: "command terminated with exit code N"); the
	// output is returned with it.
	Exec(ctx context.Context, namespace, pod, container string, command []string) (stdout, stderr string, err error)
	// PortForward listens on 127.0.0.1 (a free port) and forwards each
	// connection to port of namespace/pod. It returns the local
	// "127.0.0.1:<port>" once the listener is up, and stop, which closes
	// the listener and the tunnel (call it exactly once). Cancelling ctx
	// stops the forwarding too.
	PortForward(ctx context.Context, namespace, pod string, port int) (local string, stop func(), err error)
}

// NewStreams returns the Streams of cfg (an admin rest.Config).
//
// Both calls upgrade an HTTPS request to the apiserver to SPDY/3.1, as
// `kubectl` does when it falls back from WebSockets
// (k8s.io/client-go/tools/remotecommand, tools/portforward). client-go's
// own SPDY and WebSocket round trippers dial with a plain net.Dialer and
// ignore rest.Config.Dial, which cannot reach nodes that live in the
// cluster's network namespace (provider nspawn). So the upgrade here goes
// through an http.Transport whose DialContext is cfg.Dial (a net.Dialer
// when nil), with cfg's TLS settings: the apiserver's serving certificate
// is still verified against the kubeconfig's CA for the URL's host name
// ("lb"), and the admin client certificate is presented.
func NewStreams(cfg *rest.Config) (Streams, error) {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("TLS settings of the admin kubeconfig: %w", err)
	}
	dial := cfg.Dial
	if dial == nil {
		d := &net.Dialer{Timeout: 30 * time.Second}
		dial = d.DialContext
	}
	upgrade, err := spdyrt.NewRoundTripperWithConfig(spdyrt.RoundTripperConfig{
		// UpgradeTransport is only used to dial: its DialContext and
		// TLSClientConfig (the SPDY round tripper does the TLS handshake
		// itself, naming the URL's host as the server name).
		UpgradeTransport: &http.Transport{DialContext: dial, TLSClientConfig: tlsCfg},
		PingPeriod:       5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("SPDY round tripper: %w", err)
	}
	wrapped, err := rest.HTTPWrappersForConfig(cfg, upgrade)
	if err != nil {
		return nil, fmt.Errorf("authentication wrappers of the admin kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &apiStreams{rest: cs.CoreV1().RESTClient(), transport: wrapped, upgrader: upgrade}, nil
}

type apiStreams struct {
	rest      rest.Interface
	transport http.RoundTripper
	upgrader  spdy.Upgrader
}

func (s *apiStreams) Exec(ctx context.Context, namespace, pod, container string, command []string) (string, string, error) {
	u := s.rest.Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	ex, err := remotecommand.NewSPDYExecutorForTransports(s.transport, s.upgrader, http.MethodPost, u)
	if err != nil {
		return "", "", err
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), stderr.String(), err
}

func (s *apiStreams) PortForward(ctx context.Context, namespace, pod string, port int) (string, func(), error) {
	u := s.rest.Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(s.upgrader, &http.Client{Transport: s.transport}, http.MethodPost, u)
	fctx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	var errOut lockedBuffer
	pf, err := portforward.NewOnAddressesWithContext(fctx, dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, ready, io.Discard, &errOut)
	if err != nil {
		cancel()
		return "", nil, err
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	stop := func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	select {
	case <-ready:
	case err := <-done:
		cancel()
		if err == nil {
			err = errors.New("port forwarding ended before it was ready")
		}
		if e := strings.TrimSpace(errOut.String()); e != "" {
			err = fmt.Errorf("%w (%s)", err, e)
		}
		return "", nil, err
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) == 0 {
		stop()
		return "", nil, fmt.Errorf("port forwarding is ready but has no local port: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), stop, nil
}
