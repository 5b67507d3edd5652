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

func TestLockIsExclusive(t *testing.T) {
	d := New(t.TempDir(), "lab")
	unlock, err := d.Lock()
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to the open file description, so a second Lock in
	// the same process conflicts just like another process would.
	if _, err := d.Lock(); err == nil || !strings.Contains(err.Error(), "another khw") {
		t.Fatalf("second lock: %v", err)
	}
	unlock()
	u2, err := d.Lock()
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	u2()
	if st, _ := os.Stat(d.Root); st.Mode().Perm() != 0o700 {
		t.Fatalf("cluster dir mode %v", st.Mode().Perm())
	}
}
