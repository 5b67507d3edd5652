package integration

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/khw-dev/khw/internal/kube"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/smoketest"
)

// TestSmokeOnRealControlPlane runs the parts of the smoke tests and of
// 09-coredns that need no worker against the real etcd + kube-apiserver +
// controller-manager + scheduler: the namespace (with the default
// ServiceAccount the controller-manager makes), the encryption check that
// reads the raw Secret from etcd, the Deployment check failing with the
// scheduler's reason (there is no node), the cleanup through the namespace
// controller, and the CoreDNS manifest applied and then clean by dry run.
func TestSmokeOnRealControlPlane(t *testing.T) {
	cp := startControlPlane(t)
	ctx := context.Background()
	var d net.Dialer
	r, err := smoketest.New(cp.c, cp.d, cp.adminCfg, d.DialContext)
	if err != nil {
		t.Fatal(err)
	}
	r.Poll = 200 * time.Millisecond

	if err := r.Prepare(ctx, 90*time.Second); err != nil {
		t.Fatal(err)
	}

	t.Run("encryption: the raw etcd value starts with the aescbc key1 prefix", func(t *testing.T) {
		c := r.Encryption(ctx)
		if !c.OK {
			t.Fatalf("encryption check failed: %s", c.Err)
		}
		if !strings.Contains(c.Evidence, `= "k8s:enc:aescbc:v1:key1:" + `) || !strings.Contains(c.Evidence, `no plaintext "mydata"`) {
			t.Errorf("evidence %q", c.Evidence)
		}
		// Run again: the Secret is replaced, and still encrypted.
		if c := r.Encryption(ctx); !c.OK {
			t.Fatalf("second run: %s", c.Err)
		}
		t.Logf("evidence: %s", c.Evidence)
	})

	t.Run("deployment: without workers the scheduler's reason is reported", func(t *testing.T) {
		c, pod := r.Deployment(ctx, 20*time.Second)
		if c.OK || pod != nil {
			t.Fatalf("a pod became ready without any node: %+v", c)
		}
		if !strings.Contains(c.Err, "not scheduled: Unschedulable") || !strings.Contains(c.Err, "every worker is Ready") {
			t.Errorf("error %q, want the scheduler's Unschedulable reason and the hint", c.Err)
		}
		t.Logf("error: %s", c.Err)
	})

	t.Run("cleanup: the namespace controller removes the namespace", func(t *testing.T) {
		if err := r.Cleanup(ctx, 90*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := cp.admin.CoreV1().Namespaces().Get(ctx, smoketest.Namespace, metav1.GetOptions{}); err == nil {
			t.Fatal("namespace still there")
		}
	})

	t.Run("coredns: the manifest applies, then its dry run is unchanged", func(t *testing.T) {
		files, err := render.Manifests(cp.c)
		if err != nil {
			t.Fatal(err)
		}
		var manifest []byte
		for _, f := range files {
			if f.Path == "coredns.yaml" {
				manifest = f.Data
			}
		}
		if manifest == nil {
			t.Fatal("no coredns.yaml rendered")
		}
		if _, err := kube.Apply(ctx, cp.adminCfg, manifest); err != nil {
			t.Fatal(err)
		}
		res, err := kube.ApplyDryRun(ctx, cp.adminCfg, manifest)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range res {
			if a.Action != "unchanged" {
				t.Errorf("after apply, the dry run says %s: 09-coredns would never be clean", a)
			}
		}
		svc, err := cp.admin.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil || svc.Spec.ClusterIP != cp.c.Kubernetes.ClusterDNS {
			t.Fatalf("kube-dns: %v %v, want clusterIP %s", svc.Spec.ClusterIP, err, cp.c.Kubernetes.ClusterDNS)
		}
		// No worker: the pods stay Pending, and the description says why.
		var why string
		waitFor(t, "coredns pods described as unschedulable", 30*time.Second, func() error {
			why = smoketest.WhyNotReady(ctx, cp.admin, "kube-system", "k8s-app=kube-dns")
			if !strings.Contains(why, "not scheduled: Unschedulable") {
				return errString(why)
			}
			return nil
		})
		t.Logf("coredns pods: %s", why)
	})
}

type errString string

func (e errString) Error() string { return string(e) }
