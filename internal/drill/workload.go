package drill

import (
	"context"
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/khw-dev/khw/internal/lab/labid"
)

// EnsureWorkload makes (or keeps) what the probes need in namespace
// khw-drill: ConfigMap probe (patched by the API write probe), a DaemonSet
// "web" running agnhost netexec (image: the catalog's agnhost, imported on
// every worker by 07-workers, never pulled) and a NodePort Service "web" with
// externalTrafficPolicy Local, so that worker X's node port answers from the
// pod on X only. It waits up to wait for a ready pod on every schedulable
// node and returns the node port.
//
// The namespace is kept after the drill (the next drill starts faster);
// `kubectl delete namespace khw-drill` removes it.
func EnsureWorkload(ctx context.Context, cs kubernetes.Interface, image string, wait time.Duration) (int, error) {
	rc := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 10*time.Second) }
	create := func(what string, f func(context.Context) error) error {
		c, cancel := rc()
		defer cancel()
		if err := f(c); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s: %w", what, err)
		}
		return nil
	}
	if err := create("namespace "+Namespace, func(c context.Context) error {
		_, err := cs.CoreV1().Namespaces().Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return 0, err
	}
	if err := create("ConfigMap "+Namespace+"/"+ProbeCMName, func(c context.Context) error {
		_, err := cs.CoreV1().ConfigMaps(Namespace).Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ProbeCMName}, Data: map[string]string{"seq": "0"}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return 0, err
	}
	labels := map[string]string{"app": WebName}
	grace := int64(2)
	automount := false
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: WebName, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					AutomountServiceAccountToken:  &automount,
					Containers: []corev1.Container{{
						Name:            WebName,
						Image:           image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Args:            []string{"netexec", "--http-port=" + strconv.Itoa(WebPort)},
						Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: WebPort}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(WebPort)}},
							PeriodSeconds: 2,
						},
					}},
				},
			},
		},
	}
	if err := create("DaemonSet "+Namespace+"/"+WebName, func(c context.Context) error {
		_, err := cs.AppsV1().DaemonSets(Namespace).Create(c, ds, metav1.CreateOptions{})
		return err
	}); err != nil {
		return 0, err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: WebName},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeNodePort,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector:              labels,
			Ports:                 []corev1.ServicePort{{Name: "http", Port: WebPort, TargetPort: intstr.FromInt32(WebPort)}},
		},
	}
	if err := create("Service "+Namespace+"/"+WebName, func(c context.Context) error {
		_, err := cs.CoreV1().Services(Namespace).Create(c, svc, metav1.CreateOptions{})
		return err
	}); err != nil {
		return 0, err
	}
	c, cancel := rc()
	got, err := cs.CoreV1().Services(Namespace).Get(c, WebName, metav1.GetOptions{})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("read Service %s/%s: %w", Namespace, WebName, err)
	}
	if len(got.Spec.Ports) == 0 || got.Spec.Ports[0].NodePort == 0 {
		return 0, fmt.Errorf("Service %s/%s has no node port", Namespace, WebName)
	}
	port := int(got.Spec.Ports[0].NodePort)

	deadline := time.Now().Add(wait)
	for {
		c, cancel := rc()
		d, err := cs.AppsV1().DaemonSets(Namespace).Get(c, WebName, metav1.GetOptions{})
		cancel()
		if err == nil && d.Status.DesiredNumberScheduled > 0 && d.Status.NumberReady == d.Status.DesiredNumberScheduled && d.Status.ObservedGeneration >= d.Generation {
			return port, nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return 0, fmt.Errorf("DaemonSet %s/%s: %w", Namespace, WebName, err)
			}
			return 0, fmt.Errorf("DaemonSet %s/%s: %d of %d web pods ready after %s (kubectl -n %s get pods -o wide; the agnhost image must be imported on the workers by "+labid.Workers+")",
				Namespace, WebName, d.Status.NumberReady, d.Status.DesiredNumberScheduled, wait, Namespace)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
