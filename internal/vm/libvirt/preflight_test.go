package libvirt

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestBridgeNetfilterFinding reads the switch in a real network namespace
// (made with ip netns add, as the e2e's libvirtd namespace is), set with
// sysctl(8) inside it: 1 must warn with the fix, 0 must pass.
func TestBridgeNetfilterFinding(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (ip netns add)")
	}
	if _, err := os.Stat(bridgeNFCallIPTables); err != nil {
		if out, err := exec.Command("modprobe", "br_netfilter").CombinedOutput(); err != nil {
			t.Skipf("br_netfilter not loadable here: %v: %s", err, out)
		}
	}
	ns := fmt.Sprintf("khwt-bnf-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", ns).Run() })
	set := func(v string) {
		t.Helper()
		if out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables="+v).CombinedOutput(); err != nil {
			t.Fatalf("sysctl in %s: %v: %s", ns, err, out)
		}
	}
	path := "/run/netns/" + ns

	set("1")
	f := bridgeNetfilterFinding(path)
	if f.OK || !f.Warning || !strings.Contains(f.Message, "= 1") || !strings.Contains(f.Fix, "bridge-nf-call-iptables=0") {
		t.Errorf("with the switch on: %s", f)
	}
	// Off in the namespace while khw's own namespace has it on (Debian's
	// default once the module is loaded): the namespace's value counts.
	set("0")
	if f := bridgeNetfilterFinding(path); !f.OK || !strings.Contains(f.Message, "= 0") {
		t.Errorf("with the switch off: %s", f)
	}
}
