package upgrade

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestDrainUncordonsOnlyWhatItCordoned: a schedulable Node is annotated,
// cordoned, drained and made schedulable again with the annotation gone; a
// Node someone else cordoned is drained but stays cordoned; both are
// found by cordonedByKHW only while khw's annotation is on them.
func TestDrainUncordonsOnlyWhatItCordoned(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewSimpleClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w2"}, Spec: corev1.NodeSpec{Unschedulable: true}},
	)
	d := &drainClient{cs: cs}
	var said []string
	say := func(l string) { said = append(said, l) }
	for _, n := range []string{"w1", "w2"} {
		if err := d.drain(ctx, n, say); err != nil {
			t.Fatalf("drain %s: %v", n, err)
		}
	}
	node := func(name string) *corev1.Node {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := node("w1"); !n.Spec.Unschedulable || n.Annotations[CordonedAnnotation] == "" {
		t.Errorf("w1 after drain: unschedulable %v, annotations %v", n.Spec.Unschedulable, n.Annotations)
	}
	if n := node("w2"); !n.Spec.Unschedulable || n.Annotations[CordonedAnnotation] != "" {
		t.Errorf("w2 (cordoned before) after drain: unschedulable %v, annotations %v", n.Spec.Unschedulable, n.Annotations)
	}
	if got, err := d.cordonedByKHW(ctx, []string{"w1", "w2"}); err != nil || strings.Join(got, ",") != "w1" {
		t.Errorf("cordonedByKHW = %v, %v; want w1", got, err)
	}
	if done, err := d.uncordon(ctx, "w1"); err != nil || !done {
		t.Errorf("uncordon w1 = %v, %v", done, err)
	}
	if done, err := d.uncordon(ctx, "w2"); err != nil || done {
		t.Errorf("uncordon w2 = %v, %v: it was cordoned before khw", done, err)
	}
	if n := node("w1"); n.Spec.Unschedulable || n.Annotations[CordonedAnnotation] != "" {
		t.Errorf("w1 after uncordon: unschedulable %v, annotations %v", n.Spec.Unschedulable, n.Annotations)
	}
	if !node("w2").Spec.Unschedulable {
		t.Error("w2 was uncordoned: someone else had cordoned it")
	}
	if got, _ := d.cordonedByKHW(ctx, []string{"w1", "w2"}); len(got) != 0 {
		t.Errorf("cordonedByKHW after uncordon = %v", got)
	}
	if !strings.Contains(strings.Join(said, "\n"), "already cordoned (not by khw upgrade)") {
		t.Errorf("progress lines: %q", said)
	}
}
