package render

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/khw-dev/khw/internal/config"
)

func TestDefaultFacts(t *testing.T) {
	for _, tc := range []struct {
		provider string
		want     NodeFacts
	}{
		{config.ProviderLibvirt, NodeFacts{ResolvConf: "/run/systemd/resolve/resolv.conf"}},
		{config.ProviderNspawn, NodeFacts{CgroupV1: true, Container: true, ResolvConf: "/etc/resolv.conf"}},
	} {
		got, err := DefaultFacts(tc.provider)
		if err != nil || got != tc.want {
			t.Errorf("DefaultFacts(%s) = %+v, %v; want %+v", tc.provider, got, err, tc.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("DefaultFacts(%s) does not validate: %v", tc.provider, err)
		}
	}
	if _, err := DefaultFacts("docker"); err == nil || !strings.Contains(err.Error(), `"docker"`) {
		t.Errorf("unknown provider: err = %v, want one naming it", err)
	}
	c := defaultCluster(t, config.ProviderNspawn, nil)
	all, err := DefaultFactsFor(c)
	if err != nil || len(all) != len(c.Nodes) || !all["w3"].Container {
		t.Errorf("DefaultFactsFor = %v, %v", all, err)
	}
}

func TestParseFacts(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      NodeFacts
		errPart   string
	}{
		{"ubuntu vm", "cgroupfs=cgroup2fs\ncontainer=none\nresolved=yes\n", NodeFacts{ResolvConf: ResolvConfSystemd}, ""},
		{"nspawn v1", "cgroupfs=tmpfs\ncontainer=systemd-nspawn\nresolved=no\n", NodeFacts{CgroupV1: true, Container: true, ResolvConf: ResolvConfPlain}, ""},
		{"no detect-virt", "cgroupfs=cgroup2fs\ncontainer=\nresolved=no\n", NodeFacts{ResolvConf: ResolvConfPlain}, ""},
		{"missing key", "cgroupfs=cgroup2fs\nresolved=no\n", NodeFacts{}, `"container" is missing`},
		{"bad fs", "cgroupfs=ext4\ncontainer=none\nresolved=no\n", NodeFacts{}, `"ext4"`},
		{"garbage", "hello\n", NodeFacts{}, "not key=value"},
		{"twice", "cgroupfs=tmpfs\ncgroupfs=tmpfs\ncontainer=none\nresolved=no\n", NodeFacts{}, "twice"},
		{"bad resolved", "cgroupfs=tmpfs\ncontainer=none\nresolved=maybe\n", NodeFacts{}, `"maybe"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFacts([]byte(tc.out))
			if tc.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("err = %v, want one containing %q", err, tc.errPart)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestFactsProbeHere runs the probe on this machine and compares its cgroup
// answer with the file system magic of /sys/fs/cgroup read directly.
func TestFactsProbeHere(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs("/sys/fs/cgroup", &st); err != nil {
		t.Skipf("no /sys/fs/cgroup here: %v", err)
	}
	const cgroup2Magic = 0x63677270
	out, err := exec.Command(sh, "-c", FactsProbe).Output()
	if err != nil {
		t.Fatalf("FactsProbe failed: %v", err)
	}
	f, err := ParseFacts(out)
	if err != nil {
		t.Fatalf("ParseFacts(%q): %v", out, err)
	}
	if want := st.Type != cgroup2Magic; f.CgroupV1 != want {
		t.Errorf("probe says CgroupV1=%v, statfs magic %#x says %v", f.CgroupV1, st.Type, want)
	}
	if _, err := os.Stat(f.ResolvConf); err != nil {
		t.Errorf("probe chose resolvConf %s, which does not exist here: %v", f.ResolvConf, err)
	}
}

func TestFactsValidate(t *testing.T) {
	c := defaultCluster(t, config.ProviderLibvirt, nil)
	for _, bad := range []string{"", "resolv.conf", "/etc/../etc/resolv.conf"} {
		if _, err := Node(c, "w1", NodeFacts{ResolvConf: bad}); err == nil || !strings.Contains(err.Error(), "ResolvConf") {
			t.Errorf("ResolvConf %q: err = %v, want a ResolvConf error", bad, err)
		}
	}
}
