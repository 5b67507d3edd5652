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

// DrainTimeout bounds the eviction of one worker's pods at nspawn speed
// (drainClient.timeout scales it for slower machines).
const DrainTimeout = 3 * time.Minute

// evictRetry is how long a refused eviction waits before it is tried
// again (a PodDisruptionBudget that allows none now): kubectl drain's 5 s.
const evictRetry = 5 * time.Second

// drainClient cordons, drains and uncordons Nodes with kubectl's drain
// library (what kubectl drain runs).
type drainClient struct {
	cs      kubernetes.Interface
	timeout time.Duration // 0: DrainTimeout
}

// drain cordons node, then evicts its pods through the Eviction API,
// honouring PodDisruptionBudgets: DaemonSet pods stay (their controller
// would put them back), emptyDir data goes with its pod, and a pod no
// controller would recreate stops the drain (as kubectl drain does
// without --force). A Node that was schedulable gets CordonedAnnotation
// first, so that khw uncordons only what it cordoned. Each line of
// progress goes to say. Errors name what blocks the drain and the fix.
func (d *drainClient) drain(ctx context.Context, node string, say func(string)) error {
	out := lineWriter(say)
	defer out.Close()
	timeout := d.timeout
	if timeout == 0 {
		timeout = DrainTimeout
	}
	h := &drain.Helper{Ctx: ctx, Client: d.cs, GracePeriodSeconds: -1, IgnoreAllDaemonSets: true, DeleteEmptyDirData: true,
		Timeout: timeout, EvictErrorRetryDelay: evictRetry, Out: out, ErrOut: out}
	n, err := d.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n.Spec.Unschedulable {
		say("already cordoned (not by khw upgrade): it stays cordoned afterwards")
	} else if err := d.annotate(ctx, node, true); err != nil {
		return err
	}
	if err := drain.RunCordonOrUncordon(h, n, true); err != nil {
		return fmt.Errorf("cordon: %w", err)
	}
	if err := drain.RunNodeDrain(h, node); err != nil {
		return fmt.Errorf("drain %s: %w\n(the Node stays cordoned until khw upgrade goes on. A pod that no controller owns — a bare pod, such as one khw smoke --keep left — must be deleted first: kubectl delete pod -n NAMESPACE NAME; a PodDisruptionBudget that allows no eviction must allow one: kubectl get pdb -A. Then khw upgrade --to the same version)", node, err)
	}
	return nil
}

// uncordon makes node schedulable again and drops CordonedAnnotation,
// when khw cordoned it (the annotation is there); a Node cordoned by
// someone else stays as it is (uncordoned false).
func (d *drainClient) uncordon(ctx context.Context, node string) (uncordoned bool, err error) {
	n, err := d.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	if _, ok := n.Annotations[CordonedAnnotation]; !ok {
		return false, nil
	}
	h := &drain.Helper{Ctx: ctx, Client: d.cs, Out: io.Discard, ErrOut: io.Discard}
	if err := drain.RunCordonOrUncordon(h, n, false); err != nil {
		return false, fmt.Errorf("uncordon: %w", err)
	}
	return true, d.annotate(ctx, node, false)
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
