package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
)

// TestInitForceKeepsProviderAndArch: init --force starts over from the
// defaults, but the provider's default is libvirt, so without this an
// nspawn cluster started over would become a libvirt one.
func TestInitForceKeepsProviderAndArch(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	read := func() *config.Cluster {
		t.Helper()
		c, _, err := config.Load(filepath.Join(base, "lab", "cluster.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if _, e, code := run(t, base, "init", "--name", "lab", "--arch", "amd64", "--provider", "nspawn"); code != 0 {
		t.Fatalf("init: exit %d: %s", code, e)
	}
	_, e, code := run(t, base, "init", "--name", "lab", "--force", "--kubernetes-version", config.PreviousKubernetes)
	if code != 0 {
		t.Fatalf("init --force: exit %d: %s", code, e)
	}
	if c := read(); c.Provider != config.ProviderNspawn || c.Arch != config.ArchAMD64 || c.Versions.Kubernetes != config.PreviousKubernetes {
		t.Errorf("after init --force: provider %s, arch %s, kubernetes %s; want nspawn, amd64, %s", c.Provider, c.Arch, c.Versions.Kubernetes, config.PreviousKubernetes)
	}
	if !strings.Contains(e, "keeping provider nspawn and arch amd64") {
		t.Errorf("init --force does not say what it kept: %q", e)
	}
	if _, e, code := run(t, base, "init", "--name", "lab", "--force", "--provider", "libvirt"); code != 0 {
		t.Fatalf("init --force --provider libvirt: exit %d: %s", code, e)
	} else if strings.Contains(e, "keeping provider") {
		t.Errorf("an explicit --provider was overridden: %q", e)
	}
	if c := read(); c.Provider != config.ProviderLibvirt || c.Arch != config.ArchAMD64 {
		t.Errorf("after init --force --provider libvirt: provider %s, arch %s", c.Provider, c.Arch)
	}
}
