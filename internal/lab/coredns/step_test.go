package coredns

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/kube"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
)

func kubeDNS(ip string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: coreDNSService, Namespace: coreDNSNamespace}, Spec: corev1.ServiceSpec{ClusterIP: ip}}
}

// corednsDeployment is the coredns Deployment with ready of want replicas.
func corednsDeployment(want, ready int32) *appsv1.Deployment {
	avail := corev1.ConditionTrue
	if ready < want {
		avail = corev1.ConditionFalse
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: coreDNSDeployment, Namespace: coreDNSNamespace, Generation: 2},
		Spec:       appsv1.DeploymentSpec{Replicas: &want},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: want, UpdatedReplicas: want, ReadyReplicas: ready, AvailableReplicas: ready,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: avail, Reason: "MinimumReplicasUnavailable", Message: "Deployment does not have minimum availability."}}},
	}
}

func pullBackOffPod(node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns-5d78c9869d-abcde", Namespace: coreDNSNamespace, Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "coredns", Image: "registry.k8s.io/coredns/coredns:v1.14.6",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "registry.k8s.io/coredns/coredns:v1.14.6"`}},
		}}},
	}
}

func unchangedDryRun(calls *int, res ...kube.Applied) dryRunFunc {
	return func(ctx context.Context, manifest []byte) ([]kube.Applied, error) {
		*calls++
		if !strings.Contains(string(manifest), "name: kube-dns") {
			return nil, errors.New("dry run got another manifest")
		}
		return res, nil
	}
}

func TestCoreDNSDiffs(t *testing.T) {
	c := corednsTestCluster(t)
	manifest, err := coreDNSWant(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(manifest), "clusterIP: "+c.Kubernetes.ClusterDNS) {
		t.Fatalf("the rendered manifest does not put kube-dns at %s", c.Kubernetes.ClusterDNS)
	}
	unchanged := []kube.Applied{{Kind: "Service", Namespace: "kube-system", Name: "kube-dns", Action: "unchanged"}, {Kind: "ClusterRole", Name: "system:coredns", Action: "unchanged"}}
	for _, tc := range []struct {
		name       string
		objs       []runtime.Object
		applied    []kube.Applied
		dryRunErr  error
		want       []string // substrings, one per diff, in order
		wantDryRun int
		wantErr    string
	}{
		{name: "applied and rolled out", objs: []runtime.Object{kubeDNS(c.Kubernetes.ClusterDNS), corednsDeployment(2, 2)}, applied: unchanged, wantDryRun: 1},
		{name: "nothing applied yet", applied: []kube.Applied{{Kind: "Deployment", Namespace: "kube-system", Name: "coredns", Action: "created"}, {Kind: "ClusterRole", Name: "system:coredns", Action: "created"}},
			want: []string{"ClusterRole system:coredns would be created by manifests/coredns.yaml", "Deployment kube-system/coredns would be created"}, wantDryRun: 1},
		{name: "Service at another IP", objs: []runtime.Object{kubeDNS("10.32.0.53"), corednsDeployment(2, 2)},
			want: []string{"Service kube-system/kube-dns has clusterIP 10.32.0.53, want " + c.Kubernetes.ClusterDNS}, wantDryRun: 0},
		{name: "image not imported", objs: []runtime.Object{kubeDNS(c.Kubernetes.ClusterDNS), corednsDeployment(2, 1), pullBackOffPod("w2")}, applied: unchanged,
			want: []string{"Deployment kube-system/coredns has 1 of 2 replicas ready: pod coredns-5d78c9869d-abcde on w2: Pending, container coredns waiting: ImagePullBackOff"}, wantDryRun: 1},
		{name: "refused by the apiserver", objs: []runtime.Object{corednsDeployment(2, 2)},
			dryRunErr: apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, "kube-dns", nil), want: []string{"the apiserver refuses manifests/coredns.yaml"}, wantDryRun: 1},
		{name: "apiserver unreachable", dryRunErr: errors.New("dial tcp 192.168.122.10:6443: connect: connection refused"), wantErr: "connection refused", wantDryRun: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(tc.objs...)
			calls := 0
			dry := unchangedDryRun(&calls, tc.applied...)
			if tc.dryRunErr != nil {
				dry = func(context.Context, []byte) ([]kube.Applied, error) { calls++; return nil, tc.dryRunErr }
			}
			diffs, err := coreDNSDiffs(context.Background(), cs, dry, c, manifest)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if calls != tc.wantDryRun {
				t.Errorf("dry run called %d times, want %d", calls, tc.wantDryRun)
			}
			if len(diffs) != len(tc.want) {
				t.Fatalf("diffs %v, want %d", diffs, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(diffs[i].What, w) {
					t.Errorf("diff %d %q lacks %q", i, diffs[i].What, w)
				}
			}
		})
	}
}

func TestDeploymentProblem(t *testing.T) {
	stale := corednsDeployment(2, 2)
	stale.Generation = 3
	rolling := corednsDeployment(2, 2)
	rolling.Status.UpdatedReplicas = 1
	notAvail := corednsDeployment(2, 2)
	notAvail.Status.Conditions[0].Status = corev1.ConditionFalse
	for _, tc := range []struct {
		name string
		d    *appsv1.Deployment
		want string
	}{
		{"done", corednsDeployment(2, 2), ""},
		{"not ready", corednsDeployment(2, 0), "has 0 of 2 replicas ready"},
		{"not observed", stale, "generation 3 not yet observed"},
		{"rolling", rolling, "1 of 2 replicas updated"},
		{"not available", notAvail, "is not Available (MinimumReplicasUnavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := deploymentProblem(tc.d)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("deploymentProblem = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWaitCoreDNS(t *testing.T) {
	cs := fake.NewClientset(corednsDeployment(2, 1), pullBackOffPod("w1"))
	err := waitCoreDNS(context.Background(), cs, 50*time.Millisecond, 5*time.Millisecond, nil)
	if err == nil || !strings.Contains(err.Error(), "not rolled out within 50ms: it has 1 of 2 replicas ready") ||
		!strings.Contains(err.Error(), "the image registry.k8s.io/coredns/coredns:v1.14.6 is not imported on w1") {
		t.Fatalf("err %v", err)
	}
	cs = fake.NewClientset(corednsDeployment(2, 2))
	if err := waitCoreDNS(context.Background(), cs, time.Second, 5*time.Millisecond, nil); err != nil {
		t.Fatalf("rolled out: %v", err)
	}
}

func TestCoreDNSCommands(t *testing.T) {
	c := corednsTestCluster(t)
	env := steps.NewEnv(c, state.New(t.TempDir(), c.Name))
	s := NewStep(nil)
	all := s.Commands(env, nil)
	if len(all) != 3 || !strings.Contains(all[0].Shell, "apply --server-side -f "+env.State.ManifestsDir()+"/coredns.yaml") ||
		!strings.Contains(all[1].Shell, "rollout status deploy/coredns") {
		t.Fatalf("commands %v", all)
	}
	fix := s.Commands(env, []steps.Diff{{Subject: dnsClusterIPSubject, What: "Service kube-system/kube-dns has clusterIP 10.32.0.53, want 10.32.0.10"}})
	if len(fix) != 4 || !strings.Contains(fix[0].Shell, "delete service kube-dns") {
		t.Fatalf("commands for a wrong clusterIP %v", fix)
	}
}

// corednsTestCluster is a validated default cluster.yaml.
func corednsTestCluster(t *testing.T) *config.Cluster {
	t.Helper()
	c := config.Default("t", config.ArchAMD64, config.ProviderNspawn)
	if _, err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}
