// Package coredns is lab 09-coredns: the step that deploys CoreDNS behind
// the kube-dns Service at the cluster DNS IP (step.go), and its grading
// (grade.go: the Service's ClusterIP matches the kubelets' clusterDNS, a
// ready pod behind it, the Corefile serving the cluster domain).
//
// Text: labs/09-coredns.md. Template: templates/manifests/coredns.yaml.tmpl.
package coredns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/kube"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/smoketest"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// CoreDNSWait bounds 09-coredns's wait for the coredns Deployment to be
// Available with every replica ready.
const CoreDNSWait = 3 * time.Minute

// The objects of templates/manifests/coredns.yaml.tmpl that the step
// checks beyond the dry run.
const (
	coreDNSManifest   = "coredns.yaml"
	coreDNSNamespace  = "kube-system"
	coreDNSDeployment = "coredns"
	coreDNSService    = "kube-dns"
	coreDNSSelector   = "k8s-app=kube-dns"
)

// NewStep returns lab 09-coredns: manifests/coredns.yaml (the
// ServiceAccount, ClusterRole and binding, the Corefile ConfigMap, the
// coredns Deployment and the kube-dns Service at kubernetes.clusterDNS)
// server-side-applied through the load balancer, and the Deployment
// Available with every replica ready.
//
// Check: the manifest file in the state directory is the one cluster.yaml
// renders; a server-side apply dry run of it changes nothing; Service
// kube-system/kube-dns has clusterIP = kubernetes.clusterDNS (the kubelets'
// clusterDNS); the Deployment is Available with all replicas ready (a diff
// names each pod that is not and why, e.g. the image not imported).
// Apply: render the state directory, delete a kube-dns Service with another
// clusterIP (the field is immutable), apply, wait at most CoreDNSWait.
func NewStep(m *nodeplan.Machines) steps.Step { return &coreDNSStep{m: m} }

type coreDNSStep struct{ m *nodeplan.Machines }

func (s *coreDNSStep) ID() string { return labid.CoreDNS }

func (s *coreDNSStep) Title() string { return "Deploy CoreDNS, the cluster DNS" }

// coreDNSWant renders manifests/coredns.yaml for c in memory.
func coreDNSWant(c *config.Cluster) ([]byte, error) {
	files, err := render.Manifests(c)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if f.Path == coreDNSManifest {
			return f.Data, nil
		}
	}
	return nil, fmt.Errorf("render.Manifests produced no %s (a khw bug)", coreDNSManifest)
}

func (s *coreDNSStep) clients(env *steps.Env) (kubernetes.Interface, dryRunFunc, error) {
	cfg, err := s.m.RestConfig(env, "")
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return cs, func(ctx context.Context, data []byte) ([]kube.Applied, error) {
		return kube.ApplyDryRun(ctx, cfg, data)
	}, nil
}

func (s *coreDNSStep) Check(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
	want, err := coreDNSWant(env.Cluster)
	if err != nil {
		return nil, err
	}
	var diffs []steps.Diff
	onDisk, err := os.ReadFile(filepath.Join(env.State.ManifestsDir(), coreDNSManifest))
	switch {
	case errors.Is(err, os.ErrNotExist):
		diffs = append(diffs, steps.Diff{What: "manifests/" + coreDNSManifest + " is not rendered yet", Fix: "render it and apply it"})
	case err != nil:
		return nil, err
	case !bytes.Equal(onDisk, want):
		diffs = append(diffs, steps.Diff{What: "manifests/" + coreDNSManifest + " differs from what cluster.yaml renders", Fix: "render it again and apply it"})
	}
	cs, dryRun, err := s.clients(env)
	if err != nil {
		return nil, err
	}
	api, err := coreDNSDiffs(ctx, cs, dryRun, env.Cluster, want)
	if err != nil {
		return nil, err
	}
	return append(diffs, api...), nil
}

type dryRunFunc func(ctx context.Context, manifest []byte) ([]kube.Applied, error)

// coreDNSDiffs compares the cluster with manifest (the rendered
// coredns.yaml): the kube-dns Service's clusterIP, the server-side apply
// dry run (skipped when that clusterIP is wrong: the dry run would only
// repeat that the field is immutable), and the Deployment's rollout. An
// error means the API could not be read; a rejected dry run is a diff.
func coreDNSDiffs(ctx context.Context, cs kubernetes.Interface, dryRun dryRunFunc, c *config.Cluster, manifest []byte) ([]steps.Diff, error) {
	var diffs []steps.Diff
	ip := c.Kubernetes.ClusterDNS
	svc, err := getService(ctx, cs)
	if err != nil {
		return nil, err
	}
	if svc != nil && svc.Spec.ClusterIP != ip {
		diffs = append(diffs, steps.Diff{
			Subject: dnsClusterIPSubject,
			What:    fmt.Sprintf("Service %s/%s has clusterIP %s, want %s (kubernetes.clusterDNS, the nameserver the kubelets put in every pod's resolv.conf)", coreDNSNamespace, coreDNSService, svc.Spec.ClusterIP, ip),
			Fix:     "delete the Service (clusterIP is immutable) and apply manifests/" + coreDNSManifest + " again",
		})
	} else {
		res, err := dryRun(ctx, manifest)
		var status apierrors.APIStatus
		switch {
		case err != nil && errors.As(err, &status):
			diffs = append(diffs, steps.Diff{What: "the apiserver refuses manifests/" + coreDNSManifest + " (server-side apply dry run): " + err.Error(), Fix: "apply it; if the error names an immutable field, delete that object first"})
		case err != nil:
			return nil, fmt.Errorf("server-side apply dry run of manifests/%s: %w", coreDNSManifest, err)
		}
		var changed []steps.Diff
		for _, a := range res {
			if a.Action != "unchanged" {
				id := a.Name
				if a.Namespace != "" {
					id = a.Namespace + "/" + a.Name
				}
				changed = append(changed, steps.Diff{What: fmt.Sprintf("%s %s would be %s by manifests/%s", a.Kind, id, a.Action, coreDNSManifest), Fix: "apply it (server-side)"})
			}
		}
		sort.Slice(changed, func(i, j int) bool { return changed[i].What < changed[j].What })
		diffs = append(diffs, changed...)
	}
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	d, err := cs.AppsV1().Deployments(coreDNSNamespace).Get(gctx, coreDNSDeployment, metav1.GetOptions{})
	cancel()
	switch {
	case apierrors.IsNotFound(err):
		// The dry run already says it would be created.
	case err != nil:
		return nil, fmt.Errorf("get Deployment %s/%s: %w", coreDNSNamespace, coreDNSDeployment, err)
	default:
		if problem := deploymentProblem(d); problem != "" {
			diffs = append(diffs, steps.Diff{
				What: fmt.Sprintf("Deployment %s/%s %s: %s", coreDNSNamespace, coreDNSDeployment, problem, smoketest.WhyNotReady(ctx, cs, coreDNSNamespace, coreDNSSelector)),
				Fix:  "apply the manifest and wait for the rollout (kubectl -n kube-system rollout status deploy/coredns)",
			})
		}
	}
	return diffs, nil
}

// getService returns kube-system/kube-dns, nil when it does not exist.
func getService(ctx context.Context, cs kubernetes.Interface) (*corev1.Service, error) {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	svc, err := cs.CoreV1().Services(coreDNSNamespace).Get(gctx, coreDNSService, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get Service %s/%s: %w", coreDNSNamespace, coreDNSService, err)
	}
	return svc, nil
}

// deploymentProblem says why Deployment d is not done rolling out ("" when
// it is): the controller has not seen the latest spec, replicas are not
// updated or not ready, or the Available condition is not True
// (k8s.io/kubectl rollout status uses the same fields).
func deploymentProblem(d *appsv1.Deployment) string {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	if st.ObservedGeneration < d.Generation {
		return fmt.Sprintf("has generation %d not yet observed by the deployment controller (observed %d): is kube-controller-manager running?", d.Generation, st.ObservedGeneration)
	}
	if st.UpdatedReplicas < want {
		return fmt.Sprintf("is rolling out: %d of %d replicas updated", st.UpdatedReplicas, want)
	}
	if st.ReadyReplicas < want || st.AvailableReplicas < want {
		return fmt.Sprintf("has %d of %d replicas ready", st.ReadyReplicas, want)
	}
	for _, c := range st.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("is not Available (%s: %s)", c.Reason, c.Message)
		}
	}
	return ""
}

// Render writes the manifest the step's commands apply (steps.Renderer).
func (s *coreDNSStep) Render(ctx context.Context, env *steps.Env) error {
	return s.m.RenderState(ctx, env)
}

func (s *coreDNSStep) Apply(ctx context.Context, env *steps.Env, diffs []steps.Diff) error {
	if err := s.m.RenderState(ctx, env); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(env.State.ManifestsDir(), coreDNSManifest))
	if err != nil {
		return err
	}
	cfg, err := s.m.RestConfig(env, "")
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	log := env.NodeLog("")
	svc, err := getService(ctx, cs)
	if err != nil {
		return err
	}
	if svc != nil && svc.Spec.ClusterIP != env.Cluster.Kubernetes.ClusterDNS {
		env.Notef("Service %s/%s has clusterIP %s: deleting it to recreate it at %s", coreDNSNamespace, coreDNSService, svc.Spec.ClusterIP, env.Cluster.Kubernetes.ClusterDNS)
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := cs.CoreV1().Services(coreDNSNamespace).Delete(dctx, coreDNSService, metav1.DeleteOptions{})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete Service %s/%s (clusterIP %s) to recreate it at %s: %w", coreDNSNamespace, coreDNSService, svc.Spec.ClusterIP, env.Cluster.Kubernetes.ClusterDNS, err)
		}
	}
	res, err := kube.Apply(ctx, cfg, data)
	if err != nil {
		return fmt.Errorf("apply manifests/%s: %w", coreDNSManifest, err)
	}
	for _, a := range res {
		fmt.Fprintf(log, "%s %s: %s\n", time.Now().Format(time.RFC3339), s.ID(), a)
	}
	return waitCoreDNS(ctx, cs, CoreDNSWait*vm.Slowdown(s.m.Provider), time.Second, env.Notef)
}

// waitCoreDNS polls the coredns Deployment every poll until its rollout is
// done (deploymentProblem), at most wait. The timeout error names the
// Deployment's state and each pod that is not ready, with the reason
// (e.g. ImagePullBackOff: the coredns image is not imported on that worker).
// While it waits, notef (nil: none) gets the Deployment's state when it
// changes and every waitProgressEvery.
func waitCoreDNS(ctx context.Context, cs kubernetes.Interface, wait, poll time.Duration, notef func(string, ...any)) error {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	last := "does not exist"
	start := time.Now()
	var said string
	var saidAt time.Time
	for {
		if notef != nil && last != "" && (last != said || time.Since(saidAt) >= nodeplan.WaitProgressEvery) && time.Since(start) >= poll {
			notef("waiting %s of at most %v for Deployment %s/%s: it %s", time.Since(start).Round(time.Second), wait, coreDNSNamespace, coreDNSDeployment, last)
			said, saidAt = last, time.Now()
		}
		gctx, gcancel := context.WithTimeout(wctx, 10*time.Second)
		d, err := cs.AppsV1().Deployments(coreDNSNamespace).Get(gctx, coreDNSDeployment, metav1.GetOptions{})
		gcancel()
		switch {
		case err == nil:
			last = deploymentProblem(d)
			if last == "" {
				return nil
			}
		case apierrors.IsNotFound(err):
			last = "does not exist"
		default:
			last = "cannot be read: " + err.Error()
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("Deployment %s/%s not rolled out within %v: it %s; %s", coreDNSNamespace, coreDNSDeployment, wait, last, smoketest.WhyNotReady(ctx, cs, coreDNSNamespace, coreDNSSelector))
		case <-time.After(poll):
		}
	}
}

// dnsClusterIPSubject is the Subject of the diff that says the kube-dns
// Service has the wrong clusterIP (immutable: it must be deleted first).
const dnsClusterIPSubject = "Service " + coreDNSNamespace + "/" + coreDNSService + " clusterIP"

func (s *coreDNSStep) Commands(env *steps.Env, diffs []steps.Diff) []steps.Command {
	kc := steps.Quote(nodeplan.AdminKubeconfig(env))
	manifest := steps.Quote(filepath.Join(env.State.ManifestsDir(), coreDNSManifest))
	var cmds []steps.Command
	for _, d := range diffs {
		if d.Subject == dnsClusterIPSubject {
			cmds = append(cmds, steps.Command{Why: "clusterIP is immutable: remove the Service so that the apply recreates it at " + env.Cluster.Kubernetes.ClusterDNS,
				Shell: "kubectl --kubeconfig " + kc + " -n " + coreDNSNamespace + " delete service " + coreDNSService})
			break
		}
	}
	return append(cmds,
		steps.Command{Why: "CoreDNS: ServiceAccount, RBAC, the Corefile, the Deployment and the kube-dns Service at " + env.Cluster.Kubernetes.ClusterDNS,
			Shell: "kubectl --kubeconfig " + kc + " apply --server-side -f " + manifest},
		steps.Command{Why: "wait until every CoreDNS replica is ready",
			Shell: "kubectl --kubeconfig " + kc + " -n " + coreDNSNamespace + " rollout status deploy/" + coreDNSDeployment + " --timeout=3m"},
		steps.Command{Why: "the Service every pod's /etc/resolv.conf names (kubelet clusterDNS)",
			Shell: "kubectl --kubeconfig " + kc + " -n " + coreDNSNamespace + " get service " + coreDNSService},
	)
}
