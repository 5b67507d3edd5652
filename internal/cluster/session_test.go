package cluster

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm"
)

// The libvirt provider is built without contacting libvirtd, and VMs get
// longer waits than nspawn nodes: 15× while the domain type is not known
// (it may turn out TCG), 3× with KVM configured.
func TestNewProviderLibvirt(t *testing.T) {
	c := config.Default("lv", config.ArchAMD64, config.ProviderLibvirt)
	p, err := NewProvider(c, state.New(t.TempDir(), "lv"), "", nil)
	if err != nil || p.Name() != config.ProviderLibvirt {
		t.Fatalf("libvirt: %v, %v", p, err)
	}
	if got := vm.Slowdown(p); got != 15 {
		t.Errorf("libvirt slowdown before the domain type is known = %d, want 15", got)
	}
	c.Libvirt = &config.Libvirt{DomainType: config.DomainTypeKVM}
	if p, err = NewProvider(c, state.New(t.TempDir(), "lv"), "", nil); err != nil || vm.Slowdown(p) != 3 {
		t.Errorf("libvirt with domainType kvm: slowdown %v (%v), want 3", vm.Slowdown(p), err)
	}
}

func TestNewProviderUnknown(t *testing.T) {
	c := config.Default("x", config.ArchAMD64, config.ProviderLibvirt)
	c.Provider = "docker"
	_, err := NewProvider(c, state.New(t.TempDir(), "x"), "", nil)
	if err == nil || !strings.Contains(err.Error(), `"docker"`) || !strings.Contains(err.Error(), config.ProviderNspawn) {
		t.Fatalf("unknown provider: %v; want an error naming it and the valid ones", err)
	}
}

// Each access level opens what it says and writes only what it says.
func TestOpenAccess(t *testing.T) {
	c := config.Default("lv", config.ArchAMD64, config.ProviderLibvirt)
	c.Libvirt = &config.Libvirt{DomainType: config.DomainTypeQEMU}
	for _, tc := range []struct {
		access   Access
		pool     bool
		writeKey bool
	}{
		{ProviderOnly, false, false},
		{ReadOnly, true, false},
		{ReadWrite, true, true},
	} {
		d := state.New(t.TempDir(), "lv")
		s, err := Open(c, d, tc.access, nil)
		if err != nil {
			t.Fatalf("access %d: %v", tc.access, err)
		}
		if (s.Pool != nil) != tc.pool {
			t.Errorf("access %d: pool %v, want pool %v", tc.access, s.Pool != nil, tc.pool)
		}
		_, serr := os.Stat(KeyPath(d))
		if wrote := serr == nil; wrote != tc.writeKey {
			t.Errorf("access %d: key written %v, want %v (%v)", tc.access, wrote, tc.writeKey, serr)
		}
		if !tc.writeKey {
			if _, err := os.Stat(d.Root); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("access %d created the state directory %s: %v", tc.access, d.Root, err)
			}
		}
		tg := s.Target()
		if tg.Cluster != c || tg.PKIDir != d.PKIDir() || tg.Dial == nil || tg.Slowdown != 15 || s.Slowdown() != 15 {
			t.Errorf("access %d: target %+v; want this cluster, its pki/, the provider's dialer, slowdown 15", tc.access, tg)
		}
		if err := s.Close(); err != nil {
			t.Errorf("access %d: close: %v", tc.access, err)
		}
	}
	if err := (*Session)(nil).Close(); err != nil {
		t.Errorf("nil session close: %v", err)
	}
}

// Without an admin kubeconfig the error says how to make one.
func TestAdminRESTConfigNamesFix(t *testing.T) {
	c := config.Default("lv", config.ArchAMD64, config.ProviderLibvirt)
	d := state.New(t.TempDir(), "lv")
	s, err := Open(c, d, ProviderOnly, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Clientset(); err == nil || !strings.Contains(err.Error(), "khw kubeconfig") || !strings.Contains(err.Error(), "admin.kubeconfig") {
		t.Fatalf("no kubeconfig: %v; want an error naming the file and khw kubeconfig", err)
	}
}
