package nspawn

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/vm"
)

// TestNamespaceOwnership: two state directories with a cluster of the same
// name must not share (or destroy) one namespace and its nodes.
func TestNamespaceOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP (needs root): writes " + OwnerDir)
	}
	if err := CheckHost(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	c := config.Default("own"+strings.ReplaceAll(t.Name()[len(t.Name())-4:], "/", ""), runtime.GOARCH, config.ProviderNspawn)
	a, err := New(c, Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(c, Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(ownerPath(c.Name)) })
	if err := a.checkOwner(); err != nil {
		t.Fatalf("unclaimed namespace: %v", err)
	}
	if err := a.claim(); err != nil {
		t.Fatal(err)
	}
	if err := a.checkOwner(); err != nil {
		t.Errorf("owner's own check: %v", err)
	}
	var fe *vm.ForeignOwnerError
	if err := b.Destroy(context.Background()); !errors.As(err, &fe) || !strings.Contains(err.Error(), "give this cluster another name") {
		t.Errorf("Destroy from another state dir: %v, want a vm.ForeignOwnerError", err)
	}
	if err := b.Start(context.Background(), "cp1"); !errors.As(err, &fe) {
		t.Errorf("Start from another state dir: %v", err)
	}
	if err := b.Stop(context.Background(), "cp1", true); !errors.As(err, &fe) {
		t.Errorf("Stop from another state dir: %v", err)
	}
	st, _ := b.Status(context.Background())
	for _, n := range st {
		if n.State != vm.StateAbsent {
			t.Errorf("the other state dir sees %s as %s", n.Name, n.State)
		}
	}
	if owner(c.Name) != a.opts.StateDir {
		t.Errorf("owner changed to %q", owner(c.Name))
	}
}
