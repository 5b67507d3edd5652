package drill

import (
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
)

// The drill judges a Lease takeover against the lease duration the control
// planes were rendered with: upstream's 15 s, 60 s on TCG control planes.
func TestDrillLeaseDuration(t *testing.T) {
	c := config.Default("ld", config.ArchAMD64, config.ProviderLibvirt)
	if got := LeaseDuration(c); got != 15*time.Second {
		t.Errorf("default libvirt cluster: %v, want 15s", got)
	}
	c.Libvirt = &config.Libvirt{DomainType: config.DomainTypeQEMU}
	if got := LeaseDuration(c); got != 60*time.Second {
		t.Errorf("libvirt.domainType qemu: %v, want 60s", got)
	}
	n := config.Default("ld", config.ArchAMD64, config.ProviderNspawn)
	if got := LeaseDuration(n); got != 15*time.Second {
		t.Errorf("nspawn: %v, want 15s", got)
	}
}

func TestKubeNodeProblems(t *testing.T) {
	got := KubeNodeProblems([]health.KubeNode{
		{Name: "w1", Ready: "True"},
		{Name: "w2", Ready: "True", Problems: []string{"DiskPressure"}},
		{Name: "w3", Ready: "Unknown", Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."},
	})
	want := []string{
		"Node w2 is Ready,DiskPressure",
		"Node w3 is Unknown (NodeStatusUnknown): Kubelet stopped posting node status.",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("KubeNodeProblems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
