package labcheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/smoketest"
)

// TryoutNamespace and TryoutLabel mark what the tryouts create in the
// cluster; each tryout deletes what it made when it ends.
const (
	TryoutNamespace = "default"
	TryoutLabel     = "khw.dev/lab-check"
)

// WebPods are the pods a tryout starts to try traffic: agnhost netexec
// (smoketest.WebPodSpec, the image every worker imported in lab 07), one
// bound to each node with spec.nodeName so that no scheduler is involved.
type WebPods struct {
	e *Env
	// Pods maps a node name to its pod, Running and Ready with an IP.
	Pods map[string]*corev1.Pod
	// NotStarted maps a node name to why its pod did not get Ready in time
	// (smoketest.DescribePod).
	NotStarted map[string]string
	names      []string
}

// ReadyWorkers are the workers of cluster.yaml that are Nodes of the API
// with condition Ready: the ones a pod can run on now (w3 joins only in
// lab 10). Errors: the API cannot list Nodes.
func (e *Env) ReadyWorkers() ([]config.Node, error) {
	ctx, cancel := context.WithTimeout(e.Ctx, e.Live.Target.Scaled(10*time.Second, 30*time.Second))
	defer cancel()
	list, err := e.API.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	ready := map[string]bool{}
	for _, n := range list.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready[n.Name] = true
			}
		}
	}
	var out []config.Node
	for _, w := range e.Cluster.Workers() {
		if ready[w.Name] {
			out = append(out, w)
		}
	}
	return out, nil
}

// StartWebPods creates a web pod on each of nodes and waits, at most wait
// in all, until each is Ready; a pod that is not is in NotStarted with the
// reason. Call Delete when done (also after an error). Errors: the image
// cannot be named, or a pod cannot be created.
func (e *Env) StartWebPods(nodes []config.Node, wait time.Duration) (*WebPods, error) {
	w := &WebPods{e: e, Pods: map[string]*corev1.Pod{}, NotStarted: map[string]string{}}
	image, err := smoketest.AgnhostImage(e.Cluster)
	if err != nil {
		return w, err
	}
	b := make([]byte, 4)
	rand.Read(b)
	run := hex.EncodeToString(b)
	pods := e.API.CoreV1().Pods(TryoutNamespace)
	for _, n := range nodes {
		spec := smoketest.WebPodSpec(image)
		spec.NodeName = n.Name
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "khw-lab-check-" + run + "-" + n.Name, Labels: map[string]string{TryoutLabel: "true"}}, Spec: spec}
		ctx, cancel := context.WithTimeout(e.Ctx, e.Live.Target.Scaled(10*time.Second, 30*time.Second))
		_, err := pods.Create(ctx, p, metav1.CreateOptions{})
		cancel()
		if err != nil {
			return w, fmt.Errorf("create pod %s/%s on %s: %w", TryoutNamespace, p.Name, n.Name, err)
		}
		w.names = append(w.names, p.Name)
	}
	deadline := time.Now().Add(wait)
	for {
		pending := false
		for i, n := range nodes {
			if w.Pods[n.Name] != nil {
				continue
			}
			ctx, cancel := context.WithTimeout(e.Ctx, e.Live.Target.Scaled(10*time.Second, 30*time.Second))
			p, err := pods.Get(ctx, w.names[i], metav1.GetOptions{})
			cancel()
			switch {
			case err != nil:
				w.NotStarted[n.Name] = err.Error()
				pending = true
			case smoketest.PodReady(p) && p.Status.PodIP != "":
				w.Pods[n.Name] = p
				delete(w.NotStarted, n.Name)
			default:
				w.NotStarted[n.Name] = smoketest.DescribePod(p)
				pending = true
			}
		}
		if !pending || time.Now().After(deadline) {
			return w, nil
		}
		select {
		case <-e.Ctx.Done():
			return w, e.Ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Get GETs path (with its query) from node's web pod through a connection
// that node itself opens (Live.DialFrom: traffic from the node to a pod
// on its own bridge, the start of every cross-node path). It returns the
// status code and up to 512 bytes of body.
func (w *WebPods) Get(ctx context.Context, node config.Node, path string) (int, string, error) {
	p := w.Pods[node.Name]
	if p == nil {
		return 0, "", fmt.Errorf("no pod on %s", node.Name)
	}
	if w.e.Live.DialFrom == nil {
		return 0, "", fmt.Errorf("no connection to %s", node.Name)
	}
	url := "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(smoketest.HTTPPort)) + path
	return smoketest.HTTPGet(ctx, w.e.Live.DialFrom(node), url)
}

// Delete deletes the pods, at once (grace period 0), ignoring errors: a
// pod left behind carries TryoutLabel.
func (w *WebPods) Delete() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	zero := int64(0)
	for _, name := range w.names {
		w.e.API.CoreV1().Pods(TryoutNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
}
