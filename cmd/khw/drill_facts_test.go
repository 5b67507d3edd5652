package main

import (
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
)

// The drill judges a Lease takeover against the lease duration the control
// planes were rendered with: upstream's 15 s, 60 s on TCG control planes.
func TestDrillLeaseDuration(t *testing.T) {
	c := config.Default("ld", config.ArchAMD64, config.ProviderLibvirt)
	if got := leaseDuration(c); got != 15*time.Second {
		t.Errorf("default libvirt cluster: %v, want 15s", got)
	}
	c.Libvirt = &config.Libvirt{DomainType: config.DomainTypeQEMU}
	if got := leaseDuration(c); got != 60*time.Second {
		t.Errorf("libvirt.domainType qemu: %v, want 60s", got)
	}
	n := config.Default("ld", config.ArchAMD64, config.ProviderNspawn)
	if got := leaseDuration(n); got != 15*time.Second {
		t.Errorf("nspawn: %v, want 15s", got)
	}
}
