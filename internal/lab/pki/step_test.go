package pki

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// TestCommandsMakeThePKI runs the jumpbox half of lab 02's commands, as
// khw lab 02 --by-hand shows them, with the real cfssl and cfssljson
// (Debian's golang-cfssl, which make deps installs) in a fresh state
// directory: the step's own check must then find nothing to change on the
// jumpbox. The node copies are shown for every node but lb before any
// cert exists.
func TestCommandsMakeThePKI(t *testing.T) {
	for _, tool := range []string{"bash", "cfssl", "cfssljson"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (make deps installs golang-cfssl): %v", tool, err)
		}
	}
	c := config.Default("t", config.ArchAMD64, config.ProviderNspawn)
	env := &steps.Env{Cluster: c, State: state.Dir{Root: t.TempDir()}}
	s := NewStep(nil)
	before, err := s.workstationDiffs(env)
	if err != nil || len(before) == 0 {
		t.Fatalf("an empty PKI directory: %d diffs, %v; want every cert missing", len(before), err)
	}
	cmds := s.Commands(env, before)
	script := "set -euo pipefail\n"
	shown := ""
	for _, cmd := range cmds {
		shown += cmd.String() + "\n"
		if cmd.Node == "" && !strings.HasPrefix(cmd.Shell, "scp ") {
			script += cmd.Shell + "\n"
		}
	}
	if out, err := exec.Command("bash", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("the commands failed: %v\n%s\nscript:\n%s", err, out, script)
	}
	after, err := s.workstationDiffs(env)
	if err != nil || len(after) != 0 {
		t.Errorf("after the commands, the check finds %v (err %v), want nothing to change", after, err)
	}
	for _, n := range c.Nodes {
		if n.Role == config.RoleLoadBalancer {
			continue // HAProxy passes TLS through: lb needs no cert
		}
		want := "/pki/ca.pem " + n.Name + ":"
		if !strings.Contains(shown, want) {
			t.Errorf("no copy of ca.pem to %s in the commands:\n%s", n.Name, shown)
		}
	}
}
