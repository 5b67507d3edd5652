package kubeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every file Reconcile writes, read as the kubeconfig of a worker named N
// (N.kubeconfig, N-bootstrap.kubeconfig), gives an N that config.Validate
// refuses, unless N is that node: a worker cannot be named admin, kube-proxy,
// admin-cp, kube-controller-manager, kube-scheduler or w3-bootstrap, and the
// list cannot drift from what this package writes.
func TestConfigRefusesEveryNameOfAKubeconfig(t *testing.T) {
	pkiDir, _ := newPKI(t)
	out := filepath.Join(t.TempDir(), "kubeconfigs")
	c := defaultCluster()
	if _, err := Reconcile(c, pkiDir, out); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, e := range entries {
		for _, suffix := range []string{bootstrapFileSuffix, nodeFileSuffix} {
			n, ok := strings.CutSuffix(e.Name(), suffix)
			if _, isNode := c.Node(n); !ok || isNode {
				continue
			}
			bad := defaultCluster()
			bad.Nodes[5].Name = n // w2
			_, err := bad.Validate()
			if err == nil || !strings.Contains(err.Error(), "nodes[5] ("+n+").name") || !strings.Contains(err.Error(), "collides") {
				t.Errorf("kubeconfig writes %s, but a worker named %q is accepted: %v", e.Name(), n, err)
			}
			checked++
		}
	}
	if checked < 6 {
		t.Errorf("only %d names checked", checked)
	}
}
