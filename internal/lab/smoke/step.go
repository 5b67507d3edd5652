// Package smoke is lab 11-smoke: the step that runs the smoke tests of
// internal/smoketest (encryption at rest, a Deployment, logs, exec,
// port-forward, NodePort, DNS, a pod on the bootstrapped worker) and turns
// failed checks into diffs, and khw smoke (Run). It has no detectors: the
// smoke tests are its grading.
//
// Text: labs/11-smoke.md.
package smoke

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/kube"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/smoketest"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// Waits of 11-smoke: each smoke pod gets SmokeWait to become Ready in
// Check, SmokeApplyWait in Apply (images just imported, a node that joined
// a moment ago). On a slow provider both are scaled (vm.Scaled) up to
// SmokeWaitLimit: every Check makes new pods, and under TCG a pod takes
// minutes to start even on a healthy node.
const (
	SmokeWait      = 2 * time.Minute
	SmokeApplyWait = 5 * time.Minute
	SmokeWaitLimit = 15 * time.Minute
	// smokeRetryLimit caps the scaled retry window of the logs, NodePort
	// and DNS checks (one minute at nspawn speed).
	smokeRetryLimit = 5 * time.Minute
)

// Runner returns the smoke runner for provider p with its retry window
// scaled to p's speed, and the pod wait to use instead of wait.
func Runner(c *config.Cluster, d state.Dir, cfg *rest.Config, p vm.Provider, wait time.Duration) (*smoketest.Runner, time.Duration, error) {
	r, err := smoketest.New(c, d, cfg, p.Dialer())
	if err != nil {
		return nil, 0, err
	}
	r.RetryWindow = vm.Scaled(p, time.Minute, smokeRetryLimit)
	return r, vm.Scaled(p, wait, SmokeWaitLimit), nil
}

// NewStep returns lab 11-smoke: the smoke tests of package smoke
// (encryption at rest, a Deployment, logs, exec, port-forward, a NodePort on
// every worker, cluster DNS from a pod, and a pod on the TLS-bootstrapped
// worker), run through the load balancer as admin.
//
// Check runs every smoke check and returns one diff per failed check, with
// what was seen and where to look. Unlike other steps' Check it creates
// objects, all in the namespace khw-smoke, and deletes that namespace at the
// end: the only way to know that a pod can run is to run one. Apply has
// nothing of its own to change: it runs the checks again with a longer wait
// (SmokeApplyWait) and fails naming each check still failing and its
// evidence; the fix is in the step the check points at.
func NewStep(m *nodeplan.Machines) steps.Step { return &smokeStep{m: m} }

type smokeStep struct{ m *nodeplan.Machines }

// SkipWhenUnchanged: khw up does not run the smoke tests again when they
// passed after the last change and every earlier step is clean (the
// Runner's rule; khw up --smoke runs them).
func (s *smokeStep) SkipWhenUnchanged() {}

func (s *smokeStep) ID() string { return labid.Smoke }

func (s *smokeStep) Title() string { return "Smoke-test the cluster" }

func (s *smokeStep) run(ctx context.Context, env *steps.Env, wait time.Duration) (*smoketest.Report, error) {
	cfg, err := s.m.RestConfig(env, "")
	if err != nil {
		return nil, err
	}
	r, wait, err := Runner(env.Cluster, env.State, cfg, s.m.Provider, wait)
	if err != nil {
		return nil, err
	}
	// A namespace of its own per run, deleted without waiting: a re-run of
	// khw up does not wait for the namespace controller. Those of earlier
	// runs that were interrupted before their cleanup go now.
	removeOldSmokeNamespaces(ctx, env, cfg)
	b := make([]byte, 3)
	rand.Read(b)
	r.Namespace = smoketest.Namespace + "-" + hex.EncodeToString(b)
	log := env.NodeLog("")
	rep := r.Run(ctx, smoketest.Options{Wait: wait, NoCleanupWait: true, Progress: func(c smoketest.Check) {
		fmt.Fprintf(log, "%s %s: %s\n", time.Now().Format(time.RFC3339), s.ID(), checkLine(c))
	}})
	if rep.CleanupErr != "" {
		env.Notef("smoke: %s", rep.CleanupErr)
	}
	return rep, nil
}

// checkLine is one check as the cluster log shows it.
func checkLine(c smoketest.Check) string {
	switch {
	case c.Skipped:
		return "- " + c.Name + ": " + c.Evidence
	case c.OK:
		return "✓ " + c.Name + ": " + c.Evidence
	}
	s := "✗ " + c.Name + ": " + c.Err
	if c.Evidence != "" {
		s += " (seen: " + c.Evidence + ")"
	}
	return s
}

// smokeDiffs turns each failed check into a diff.
func smokeDiffs(rep *smoketest.Report) []steps.Diff {
	var diffs []steps.Diff
	for _, c := range rep.Failed() {
		what := "smoke check " + c.Name + " failed: " + c.Err
		if c.Evidence != "" {
			what += " (seen: " + c.Evidence + ")"
		}
		diffs = append(diffs, steps.Diff{Node: c.Node, What: what, Fix: "fix what the message names, then run the checks again (khw smoke)"})
	}
	return diffs
}

func (s *smokeStep) Check(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
	if env.DryRun {
		// The checks create a namespace, a Secret and pods: not in a run
		// that promises to change nothing.
		env.Notef(labid.Smoke + ": not run in a dry-run (the checks create a namespace and pods); khw smoke runs them")
		return nil, nil
	}
	rep, err := s.run(ctx, env, SmokeWait)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		// Interrupted: the failed checks say nothing about the cluster.
		return nil, err
	}
	return smokeDiffs(rep), nil
}

func (s *smokeStep) Apply(ctx context.Context, env *steps.Env, diffs []steps.Diff) error {
	rep, err := s.run(ctx, env, SmokeApplyWait)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	failed := rep.Failed()
	if len(failed) == 0 {
		return nil
	}
	var lines []string
	for _, c := range failed {
		lines = append(lines, checkLine(c))
	}
	return fmt.Errorf("%d of %d smoke checks failed (khw smoke --keep runs them again and leaves the namespace %s to look at):\n  %s", len(failed), len(rep.Checks), smoketest.Namespace, strings.Join(lines, "\n  "))
}

func (s *smokeStep) Commands(env *steps.Env, diffs []steps.Diff) []steps.Command {
	c := env.Cluster
	k := "kubectl --kubeconfig " + steps.Quote(nodeplan.AdminKubeconfig(env))
	kn := k + " -n " + smoketest.Namespace
	img, err := smoketest.AgnhostImage(c)
	if err != nil {
		img = "registry.k8s.io/e2e-test-images/agnhost:<version>"
	}
	cmds := []steps.Command{
		{Why: "a namespace for the smoke tests", Shell: k + " create namespace " + smoketest.Namespace},
		{Why: "1. encryption at rest: write a Secret", Shell: kn + " create secret generic " + smoketest.SecretName + " --from-literal=mykey=mydata"},
	}
	if cps := c.ControlPlanes(); len(cps) > 0 {
		cmds = append(cmds, steps.Command{Node: cps[0].Name, Why: "its raw value in etcd starts with k8s:enc:aescbc:v1:key1: and holds no plaintext",
			Shell: "sudo etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem get " + smoketest.SecretEtcdKey(smoketest.Namespace, smoketest.SecretName) + " | hexdump -C | head"})
	}
	cmds = append(cmds,
		steps.Command{Why: "2. a Deployment (the image is already imported on the workers: nothing is pulled)",
			Shell: kn + " create deployment " + smoketest.AppName + " --image=" + img + " -- /agnhost netexec --http-port=80\n" +
				kn + " rollout status deploy/" + smoketest.AppName + " --timeout=2m\n" +
				kn + " get pods -l app=" + smoketest.AppName + " -o wide\n" +
				"POD=$(" + kn + " get pods -l app=" + smoketest.AppName + " -o jsonpath='{.items[0].metadata.name}')"},
		steps.Command{Why: "3. logs: the apiserver fetches them from the kubelet (:10250)", Shell: kn + " logs $POD"},
		steps.Command{Why: "4. exec: a command in the container", Shell: kn + " exec $POD -- cat /etc/hostname"},
		steps.Command{Why: "5. port-forward: a local port reaches the pod's port 80",
			Shell: kn + " port-forward $POD 8080:80 &\nsleep 2; curl -s http://127.0.0.1:8080/hostname; kill %1"},
		steps.Command{Why: "6. NodePort: every worker answers, also those without the pod",
			Shell: kn + " expose deployment " + smoketest.AppName + " --type=NodePort --port=80\n" +
				"NODE_PORT=$(" + kn + " get service " + smoketest.AppName + " -o jsonpath='{.spec.ports[0].nodePort}')\n" +
				"for ip in" + workerIPs(env) + "; do curl -s http://$ip:$NODE_PORT/hostname; echo; done"},
		steps.Command{Why: "7. DNS from a pod, through the cluster DNS Service",
			Shell: kn + " exec $POD -- nslookup kubernetes.default.svc." + c.Kubernetes.ClusterDomain + " " + c.Kubernetes.ClusterDNS},
	)
	if bw, ok := smoketest.BootstrapWorker(c); ok {
		pod := smoketest.PinnedApp + "-" + bw.Name
		cmds = append(cmds, steps.Command{Why: "a pod on " + bw.Name + " (TLS bootstrap): logs and exec work only if its kubelet serving cert chains to the CA",
			Shell: kn + " run " + pod + " --image=" + img + " --overrides='{\"spec\":{\"nodeName\":\"" + bw.Name + "\"}}' -- netexec --http-port=80\n" +
				kn + " wait --for=condition=Ready pod/" + pod + " --timeout=2m\n" +
				kn + " logs " + pod + "\n" +
				kn + " exec " + pod + " -- cat /etc/hostname\n" +
				"openssl s_client -connect " + bw.IP + ":10250 -CAfile " + steps.Quote(env.State.PKIDir()+"/ca.pem") + " -verify_return_error </dev/null | grep -E 'subject|Verify return code'"})
	}
	return append(cmds, steps.Command{Why: "clean up", Shell: k + " delete namespace " + smoketest.Namespace + " --wait --timeout=2m"})
}

func workerIPs(env *steps.Env) string {
	var s string
	for _, w := range env.Cluster.Workers() {
		s += " " + w.IP
	}
	return s
}

// removeOldSmokeNamespaces deletes, without waiting, the namespaces
// khw-smoke-<random> of earlier 11-smoke runs (labelled as khw's) that are
// still active, e.g. after an interrupted run. Best effort.
func removeOldSmokeNamespaces(ctx context.Context, env *steps.Env, cfg *rest.Config) {
	cs, err := kube.Clientset(cfg)
	if err != nil {
		return
	}
	l, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=khw"})
	if err != nil {
		return
	}
	for _, ns := range l.Items {
		if strings.HasPrefix(ns.Name, smoketest.Namespace+"-") && ns.DeletionTimestamp == nil {
			if err := cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err == nil {
				fmt.Fprintf(env.NodeLog(""), "%s "+labid.Smoke+": deleted namespace %s left by an earlier run\n", time.Now().Format(time.RFC3339), ns.Name)
			}
		}
	}
}
