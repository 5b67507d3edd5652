package kubeconfig

import (
	"crypto/rand"
	"runtime"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/encryption"
	"github.com/khw-dev/khw/internal/kubeconfig"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/pki"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// TestPlannedWantsAreTheWants: the copies that lab 03's commands show
// before the jumpbox's files exist are the ones khw installs once they do
// (same node, source and target, in the same order).
func TestPlannedWantsAreTheWants(t *testing.T) {
	c := config.Default("kc", runtime.GOARCH, config.ProviderNspawn)
	d := state.New(t.TempDir(), c.Name)
	env := &steps.Env{Cluster: c, State: d}
	s := NewStep(nil)
	planned, err := s.plannedWants(env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Reconcile(c, d.PKIDir(), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kubeconfig.Reconcile(c, d.PKIDir(), d.KubeconfigDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := encryption.Reconcile(d.EncryptionConfigPath(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	wants, err := s.wants(env, false)
	if err != nil {
		t.Fatal(err)
	}
	list := func(ws []*nodeplan.NodeWant) []string {
		var out []string
		for _, w := range ws {
			for _, f := range w.Files {
				out = append(out, w.Node.Name+" "+f.Src+" → "+f.Path)
			}
		}
		return out
	}
	p, w := list(planned), list(wants)
	if len(w) == 0 || len(p) != len(w) {
		t.Fatalf("planned %d copies, installed %d:\n%v\n%v", len(p), len(w), p, w)
	}
	for i := range w {
		if p[i] != w[i] {
			t.Errorf("copy %d: planned %q, installed %q", i, p[i], w[i])
		}
	}
}
