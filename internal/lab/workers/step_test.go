package workers

import (
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/steps"
)

// Each line the kernel-settings probe prints is one required-setting
// difference with what breaks, the evidence and the fix; a clean node
// prints none.
func TestHostPrepDiffs(t *testing.T) {
	if d := hostPrepDiffs("w1", "\n"); len(d) != 0 {
		t.Fatalf("clean node: %v", d)
	}
	out := "module br_netfilter\nmodule overlay\nsysctl net.ipv4.ip_forward 0\nsysctl net.bridge.bridge-nf-call-iptables missing\nswap on\nswap fstab\n"
	got := hostPrepDiffs("w2", out)
	want := []struct{ subject, what, evidence string }{
		{"kernel module br_netfilter", "Services do not work", "bridge-nf-call-iptables does not exist"},
		{"kernel module overlay", "overlayfs", "/proc/filesystems"},
		{"sysctl net.ipv4.ip_forward", "net.ipv4.ip_forward is not 1: the node does not route", "/proc/sys/net/ipv4/ip_forward = 0"},
		{"sysctl net.bridge.bridge-nf-call-iptables", "skips iptables", "= missing"},
		{SubjectSwap, "swap is on", "swapon --show"},
		{SubjectSwapFstab, "after a reboot", "/etc/fstab has a swap line"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d diffs, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		d := got[i]
		if d.Kind != steps.DiffRequired || d.Node != "w2" || d.Subject != w.subject || !strings.Contains(d.What, w.what) ||
			!strings.Contains(d.Evidence, w.evidence) || d.Fix == "" {
			t.Errorf("diff %d = %+v; want subject %q, what ~%q, evidence ~%q, a fix", i, d, w.subject, w.what, w.evidence)
		}
	}
}
