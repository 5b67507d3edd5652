package smoketest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/remote"
)

// SecretEtcdKey is where the apiserver stores Secret namespace/name in etcd
// (--etcd-prefix /registry, then <resource>/<namespace>/<name>).
func SecretEtcdKey(namespace, name string) string {
	return "/registry/secrets/" + namespace + "/" + name
}

// Encryption creates Secret SecretName (mykey=mydata) in the namespace
// (made by Prepare), reads its raw value from etcd and checks that it
// starts with r.EncryptionPrefix and holds no plaintext. A Secret left by
// an earlier run is deleted first, so the value read was written now, with
// the current first key. Evidence: the prefix and a hexdump of the bytes
// after it (the start of the AES-CBC IV).
func (r *Runner) Encryption(ctx context.Context) Check {
	return timed(CheckEncryption, func() (string, string, error) {
		secrets := r.Client.CoreV1().Secrets(r.ns())
		dctx, cancel := context.WithTimeout(ctx, requestTimeout)
		err := secrets.Delete(dctx, SecretName, metav1.DeleteOptions{})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			return "", "", fmt.Errorf("delete the old Secret %s/%s: %w", r.ns(), SecretName, err)
		}
		cctx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, err = secrets.Create(cctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: SecretName},
			Data:       map[string][]byte{"mykey": []byte("mydata")},
		}, metav1.CreateOptions{})
		cancel()
		if err != nil {
			return "", "", fmt.Errorf("create Secret %s/%s: %w", r.ns(), SecretName, err)
		}
		key := SecretEtcdKey(r.ns(), SecretName)
		ectx, cancel := context.WithTimeout(ctx, requestTimeout)
		raw, err := r.EtcdGet(ectx, key)
		cancel()
		if err != nil {
			return "", "", fmt.Errorf("read %s from etcd: %w", key, err)
		}
		ev, err := encryptionEvidence(raw, r.EncryptionPrefix, key)
		return ev, "", err
	})
}

// encryptionEvidence judges the raw etcd value of the smoke Secret against
// the prefix want ("k8s:enc:aescbc:v1:key1:").
func encryptionEvidence(raw []byte, want, key string) (string, error) {
	if raw == nil {
		return "", fmt.Errorf("etcd has no key %s although the apiserver stored the Secret: the apiservers use other etcd servers (--etcd-servers) or another --etcd-prefix", key)
	}
	if bytes.Contains(raw, []byte("mydata")) {
		return "", fmt.Errorf("%s holds the plaintext \"mydata\" (value starts %q): kube-apiserver writes Secrets unencrypted; start it with --encryption-provider-config=/var/lib/kubernetes/encryption-config.yaml whose first provider for secrets is aescbc (step 05)", key, head(raw, 24))
	}
	if !bytes.HasPrefix(raw, []byte(want)) {
		if bytes.HasPrefix(raw, []byte("k8s:enc:")) {
			return "", fmt.Errorf("%s starts %q, want %q: the apiservers write with another key or provider than <state>/encryption-config.yaml; copy it to /var/lib/kubernetes/ on every control plane and restart kube-apiserver", key, encPrefixOf(raw), want)
		}
		return "", fmt.Errorf("%s starts %q, not %q: it is not encrypted (a protobuf value starts \"k8s\\x00\"); kube-apiserver runs without --encryption-provider-config or with identity first", key, head(raw, 24), want)
	}
	rest := raw[len(want):]
	n := min(16, len(rest))
	ev := fmt.Sprintf("etcd %s = %q + %s", key, want, hexBytes(rest[:n]))
	if len(rest) > n {
		ev += " …"
	}
	ev += fmt.Sprintf(" (%d bytes, no plaintext \"mydata\")", len(raw))
	return ev, nil
}

// encPrefixOf returns "k8s:enc:<provider>:v1:<key>:" of an encrypted value
// (the first five colon-separated fields), or its first 24 bytes.
func encPrefixOf(raw []byte) string {
	fields := 0
	for i, b := range raw {
		if b == ':' {
			fields++
			if fields == 5 {
				return string(raw[:i+1])
			}
		}
		if i > 80 {
			break
		}
	}
	return head(raw, 24)
}

func head(b []byte, n int) string { return string(b[:min(n, len(b))]) }

// hexBytes renders b as lowercase hex pairs separated by spaces ("5e 0b 9c").
func hexBytes(b []byte) string {
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = fmt.Sprintf("%02x", x)
	}
	return strings.Join(parts, " ")
}

// WebPodSpec is agnhost netexec on HTTPPort: GET /hostname answers the pod
// name, and it logs startedLine once it listens. The image is never pulled
// (the nodes are offline; the worker step imports it).
func WebPodSpec(image string) corev1.PodSpec {
	grace := int64(5)
	automount := false
	return corev1.PodSpec{
		TerminationGracePeriodSeconds: &grace,
		AutomountServiceAccountToken:  &automount,
		Containers: []corev1.Container{{
			Name:            Container,
			Image:           image,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Args:            []string{"netexec", "--http-port=" + strconv.Itoa(HTTPPort)},
			Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: HTTPPort, Protocol: corev1.ProtocolTCP}},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(HTTPPort)}},
				PeriodSeconds: 2,
			},
		}},
	}
}

// Deployment creates Deployment AppName (1 replica of agnhost netexec) and
// waits at most wait for a Ready pod, which it returns (nil on failure).
// Evidence: the pod, its node and IP. On timeout the error describes each
// pod (scheduling, image not imported, crash loop) with the fix.
func (r *Runner) Deployment(ctx context.Context, wait time.Duration) (Check, *corev1.Pod) {
	var pod *corev1.Pod
	c := timed(CheckDeployment, func() (string, string, error) {
		one := int32(1)
		labels := map[string]string{"app": AppName}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: AppName, Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Replicas: &one,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: WebPodSpec(r.Image)},
			},
		}
		cctx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, err := r.Client.AppsV1().Deployments(r.ns()).Create(cctx, d, metav1.CreateOptions{})
		cancel()
		if err != nil {
			return "", "", fmt.Errorf("create Deployment %s/%s: %w", r.ns(), AppName, err)
		}
		p, err := waitPodReady(ctx, r.Client, r.ns(), "app="+AppName, wait, r.poll())
		if err != nil {
			return "", "", err
		}
		pod = p
		return fmt.Sprintf("pod %s Running and Ready on %s (pod IP %s), image %s", p.Name, p.Spec.NodeName, p.Status.PodIP, r.Image), p.Spec.NodeName, nil
	})
	return c, pod
}

// createPinnedPod creates the pod of the tls-bootstrap-node check, bound to
// node n with spec.nodeName (no scheduler involved).
func (r *Runner) createPinnedPod(ctx context.Context, n config.Node) error {
	spec := WebPodSpec(r.Image)
	spec.NodeName = n.Name
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: PinnedApp + "-" + n.Name, Labels: map[string]string{"app": PinnedApp}},
		Spec:       spec,
	}
	cctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if _, err := r.Client.CoreV1().Pods(r.ns()).Create(cctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod %s/%s on %s: %w", r.ns(), p.Name, n.Name, err)
	}
	return nil
}

// kubeletHint explains an error of a call the apiserver relays to the
// kubelet of node (logs, exec, port-forward).
func kubeletHint(err error, node string) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "x509") || strings.Contains(s, "certificate") || strings.Contains(s, "tls:"):
		return fmt.Sprintf(" (the apiserver does not accept the kubelet serving certificate of %s: it must chain to ca.pem and name the node's IP; a TLS-bootstrapped node gets it once its kubelet-serving CSR is approved, step 10)", node)
	case apierrors.IsForbidden(err) || strings.Contains(s, "Forbidden"):
		return " (the apiserver, user kubernetes, may not use the kubelet API: apply manifests/apiserver-to-kubelet-rbac.yaml, step 05)"
	case strings.Contains(s, "connection refused") || strings.Contains(s, "i/o timeout") || strings.Contains(s, "no route to host"):
		return fmt.Sprintf(" (the apiserver cannot reach the kubelet on %s:%d: is kubelet.service running there?)", node, KubeletPort)
	}
	return ""
}

// logLine fetches the pod's logs until one line contains startedLine, at
// most RetryWindow, and returns that line.
func (r *Runner) logLine(ctx context.Context, pod *corev1.Pod) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, r.retryWindow())
	defer cancel()
	var lastErr error
	var last string
	for {
		gctx, gcancel := context.WithTimeout(wctx, requestTimeout)
		raw, err := r.Client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: Container}).DoRaw(gctx)
		gcancel()
		if err == nil {
			lastErr = nil
			sc := bufio.NewScanner(bytes.NewReader(raw))
			for sc.Scan() {
				line := strings.TrimSpace(sc.Text())
				if line != "" {
					last = line
				}
				if strings.Contains(line, startedLine) {
					return line, nil
				}
			}
		} else {
			lastErr = err
		}
		select {
		case <-wctx.Done():
			if lastErr != nil {
				return "", fmt.Errorf("GET pods/%s/log: %v%s", pod.Name, lastErr, kubeletHint(lastErr, pod.Spec.NodeName))
			}
			return "", fmt.Errorf("the logs of pod %s have no line %q within %v (last line: %q)", pod.Name, startedLine, r.retryWindow(), last)
		case <-time.After(r.poll()):
		}
	}
}

func (r *Runner) logs(ctx context.Context, pod *corev1.Pod) Check {
	return timed(CheckLogs, func() (string, string, error) {
		line, err := r.logLine(ctx, pod)
		if err != nil {
			return "", pod.Spec.NodeName, err
		}
		return fmt.Sprintf("kubectl logs %s (from the kubelet on %s via the apiserver): %q", pod.Name, pod.Spec.NodeName, line), pod.Spec.NodeName, nil
	})
}

// execHostname runs `cat /etc/hostname` in the pod: the kubelet writes the
// pod name there, so the answer proves the command ran in that pod.
func (r *Runner) execHostname(ctx context.Context, pod *corev1.Pod) (string, error) {
	ectx, cancel := context.WithTimeout(ctx, streamTimeout)
	defer cancel()
	stdout, stderr, err := r.Streams.Exec(ectx, pod.Namespace, pod.Name, Container, []string{"cat", "/etc/hostname"})
	if err != nil {
		return "", fmt.Errorf("exec cat /etc/hostname in %s: %v%s%s", pod.Name, err, stderrNote(stderr), kubeletHint(err, pod.Spec.NodeName))
	}
	got := strings.TrimSpace(stdout)
	if got != pod.Name {
		return "", fmt.Errorf("exec cat /etc/hostname in %s printed %q, want the pod name", pod.Name, got)
	}
	return fmt.Sprintf("exec cat /etc/hostname in %s → %q", pod.Name, got), nil
}

func stderrNote(stderr string) string {
	if s := oneLine(stderr); s != "" {
		return " (stderr: " + s + ")"
	}
	return ""
}

func (r *Runner) exec(ctx context.Context, pod *corev1.Pod) Check {
	return timed(CheckExec, func() (string, string, error) {
		ev, err := r.execHostname(ctx, pod)
		return ev, pod.Spec.NodeName, err
	})
}

// errNoTool is returned when the image has no nslookup: retrying is useless.
var errNoTool = errors.New("no nslookup in the image")

// sleep waits d, or until ctx is done; it reports whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// kubeletServingCert opens a TLS connection to ip:port through dial and
// verifies the server's certificate against ca for the name ip (an IP SAN),
// as kube-apiserver does with --kubelet-certificate-authority and
// --kubelet-preferred-address-types=InternalIP. It returns the leaf.
func kubeletServingCert(ctx context.Context, dial remote.DialFunc, ip string, port int, ca *x509.CertPool) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	raw, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect to the kubelet at %s: %w", addr, err)
	}
	conn := tls.Client(raw, &tls.Config{RootCAs: ca, ServerName: ip, MinVersion: tls.VersionTLS12})
	defer conn.Close()
	if err := conn.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS to the kubelet at %s, verified against ca.pem for %s: %w", addr, ip, err)
	}
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, fmt.Errorf("the kubelet at %s sent no certificate", addr)
	}
	return certs[0], nil
}

// certSummary is "CN=system:node:w3, SANs w3 192.168.122.23, issued by CN=…, valid until 2027-…".
func certSummary(c *x509.Certificate) string {
	var sans []string
	sans = append(sans, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		sans = append(sans, ip.String())
	}
	return fmt.Sprintf("%s (SANs %s) issued by %s, valid until %s", c.Subject.String(), strings.Join(sans, " "), c.Issuer.String(), c.NotAfter.UTC().Format(time.RFC3339))
}

// bootstrapNode checks the pod pinned to the TLS bootstrap worker n: Ready,
// logs and exec through the apiserver, and the kubelet's serving
// certificate on :10250 verified against ca.pem.
func (r *Runner) bootstrapNode(ctx context.Context, n config.Node, created error, wait time.Duration) Check {
	return timed(CheckBootstrapNode, func() (string, string, error) {
		if created != nil {
			return "", n.Name, created
		}
		gctx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, err := r.Client.CoreV1().Nodes().Get(gctx, n.Name, metav1.GetOptions{})
		cancel()
		if apierrors.IsNotFound(err) {
			return "", n.Name, fmt.Errorf("Node %s is not registered: its kubelet has not joined with its bootstrap token (step "+labid.TLSBootstrap+")", n.Name)
		}
		pod, err := waitPodReady(ctx, r.Client, r.ns(), "app="+PinnedApp, wait, r.poll())
		if err != nil {
			return "", n.Name, err
		}
		line, err := r.logLine(ctx, pod)
		if err != nil {
			return "", n.Name, err
		}
		execEv, err := r.execHostname(ctx, pod)
		if err != nil {
			return "", n.Name, err
		}
		ev := fmt.Sprintf("pod %s on %s: logs %q; %s", pod.Name, n.Name, line, execEv)
		cert, err := kubeletServingCert(ctx, r.Dial, n.IP, KubeletPort, r.CA)
		if err != nil {
			return ev, n.Name, fmt.Errorf("%w (a TLS-bootstrapped kubelet serves with the certificate of its approved kubelet-serving CSR, /var/lib/kubelet/pki/kubelet-server-current.pem; step 10)", err)
		}
		ev += "; " + n.Name + ":" + strconv.Itoa(KubeletPort) + " serves " + certSummary(cert) + ", verified against ca.pem"
		if r.APIServerVerifiesKubelets {
			ev += "; the apiservers run with --kubelet-certificate-authority, so logs and exec through them verified that same chain"
		} else {
			ev += "; NOTE: the apiservers do not pass --kubelet-certificate-authority, so logs and exec alone do not prove the chain (the direct TLS check above does)"
		}
		return ev, n.Name, nil
	})
}
