package upgrade

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"
)

// CordonedAnnotation marks a Node khw upgrade cordoned, so that an
// upgrade cut short uncordons it when it goes on, and never a Node
// someone else cordoned.
const CordonedAnnotation = "khw.dev/cordoned-for-upgrade"

// DrainTimeout bounds the eviction of one worker's pods.
const DrainTimeout = 3 * time.Minute

// drainClient cordons, drains and uncordons Nodes with kubectl's drain
// library (what kubectl drain runs).
type drainClient struct {
	cs kubernetes.Interface
}

// drain cordons node (annotated CordonedAnnotation), then evicts its pods
// through the Eviction API, honouring PodDisruptionBudgets: DaemonSet pods
// stay (their controller would put them back), emptyDir data goes with
// its pod, and a pod no controller would recreate stops the drain (as
// kubectl drain does without --force). Each line of progress goes to say.
func (d *drainClient) drain(ctx context.Context, node string, say func(string)) error {
	out := lineWriter(say)
	defer out.Close()
	h := &drain.Helper{Ctx: ctx, Client: d.cs, GracePeriodSeconds: -1, IgnoreAllDaemonSets: true, DeleteEmptyDirData: true,
		Timeout: DrainTimeout, Out: out, ErrOut: out}
	n, err := d.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := d.annotate(ctx, node, true); err != nil {
		return err
	}
	if err := drain.RunCordonOrUncordon(h, n, true); err != nil {
		return fmt.Errorf("cordon: %w", err)
	}
	if err := drain.RunNodeDrain(h, node); err != nil {
		return fmt.Errorf("drain: %w (the Node stays cordoned; khw upgrade uncordons it when it goes on)", err)
	}
	return nil
}

// uncordon makes node schedulable again and drops CordonedAnnotation.
func (d *drainClient) uncordon(ctx context.Context, node string) error {
	n, err := d.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	h := &drain.Helper{Ctx: ctx, Client: d.cs, Out: io.Discard, ErrOut: io.Discard}
	if err := drain.RunCordonOrUncordon(h, n, false); err != nil {
		return fmt.Errorf("uncordon: %w", err)
	}
	return d.annotate(ctx, node, false)
}

// annotate sets (or removes) CordonedAnnotation on node.
func (d *drainClient) annotate(ctx context.Context, node string, set bool) error {
	value := `"true"`
	if !set {
		value = "null"
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, CordonedAnnotation, value)
	_, err := d.cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// cordonedByKHW returns the names among nodes that carry
// CordonedAnnotation.
func (d *drainClient) cordonedByKHW(ctx context.Context, nodes []string) ([]string, error) {
	var out []string
	for _, name := range nodes {
		n, err := d.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get Node %s: %w", name, err)
		}
		if _, ok := n.Annotations[CordonedAnnotation]; ok {
			out = append(out, name)
		}
	}
	return out, nil
}

// lineWriter is an io.WriteCloser handing each line written to say.
func lineWriter(say func(string)) io.WriteCloser {
	r, w := io.Pipe()
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" {
				say(l)
			}
		}
	}()
	return w
}
