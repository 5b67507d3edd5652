package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
)

func TestResolveAndLoad(t *testing.T) {
	t.Setenv(EnvCluster, "")
	base := t.TempDir()
	if d, err := Resolve(base, ""); err != nil || d.Name != config.DefaultName {
		t.Fatalf("empty base: %v %v", d, err)
	}
	for _, n := range []string{"alpha", "beta"} {
		c := config.Default(n, config.ArchAMD64, config.ProviderNspawn)
		os.MkdirAll(filepath.Join(base, n), 0o700)
		if _, err := c.Save(New(base, n).ConfigPath()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Resolve(base, ""); err == nil || !strings.Contains(err.Error(), "alpha") {
		t.Fatalf("two clusters must be named: %v", err)
	}
	t.Setenv(EnvCluster, "beta")
	d, err := Resolve(base, "")
	if err != nil || d.Name != "beta" {
		t.Fatalf("env: %v %v", d, err)
	}
	if d.PKIDir() != filepath.Join(d.Root, "pki") || d.KubeconfigDir() != filepath.Join(d.Root, "kubeconfigs") {
		t.Fatal("paths")
	}
	if _, _, err := d.Load(); err != nil {
		t.Fatal(err)
	}
	// A cluster.yaml whose name does not match its directory is refused.
	os.Rename(filepath.Join(base, "alpha"), filepath.Join(base, "gamma"))
	if _, _, err := New(base, "gamma").Load(); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("mismatch: %v", err)
	}
}
