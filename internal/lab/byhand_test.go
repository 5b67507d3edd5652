package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// TestByHandScriptRuns runs the script with bash, ssh replaced by a
// function that runs the here-document locally and records the node: the
// jumpbox's commands run as they are, a node's commands get the node's
// text verbatim (no expansion on the jumpbox), and the first failure stops
// the script.
func TestByHandScriptRuns(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	d := state.Dir{Root: dir}
	out := filepath.Join(dir, "out")
	cmds := []steps.Command{
		{Why: "on the jumpbox", Shell: "echo jumpbox >> " + out},
		{Node: "cp1", Why: "two lines\non cp1", Shell: "echo \"cp1 $HOME_ON_NODE\" >> " + out + "\necho second >> " + out + "\n"},
		{Node: "w1", Shell: "false\necho never >> " + out},
		{Shell: "echo never >> " + out},
	}
	p, err := writeByHand(d, "04-etcd", cmds)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 || p != ByHandPath(d, "04-etcd") {
		t.Fatalf("script %s: %v %v", p, fi, err)
	}
	script, _ := os.ReadFile(p)
	if !strings.Contains(string(script), "# two lines on cp1\nssh -F \"$KHW_SSH_CONFIG\" cp1 bash -se <<'KHW_CP1'\n") {
		t.Errorf("script:\n%s", script)
	}
	// ssh NODE bash -se runs its stdin here, as the node would.
	fake := "ssh() { echo \"node $3\" >> " + out + "; HOME_ON_NODE=set bash -se; }\nexport -f ssh\n"
	cmd := exec.Command("bash", "-c", fake+"bash "+p)
	cmd.Env = append(os.Environ(), "KHW_SSH_CONFIG=/x")
	if err := cmd.Run(); err == nil {
		t.Error("the script went on after a command failed on w1")
	}
	got, _ := os.ReadFile(out)
	if want := "jumpbox\nnode cp1\ncp1 set\nsecond\nnode w1\n"; string(got) != want {
		t.Errorf("ran:\n%s\nwant:\n%s", got, want)
	}
}
