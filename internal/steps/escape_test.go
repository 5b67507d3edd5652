package steps

import (
	"context"
	"strings"
	"testing"
)

// A difference read on a node (a unit or file name with an ESC sequence
// and a carriage return) is printed with those escaped: they would clear
// the terminal and overwrite the line.
func TestRunnerEscapesNodeText(t *testing.T) {
	const nodeText, shown = "x\x1b[2J\ry", `x\x1b[2J\x0dy`
	r, out := newRunner(t)
	s := &mapStep{id: "01-a", title: "A", desired: map[string]string{"cp1/" + nodeText: "1"}, actual: map[string]string{}}
	if _, err := r.Run(context.Background(), []Step{s}, Options{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); strings.ContainsAny(got, "\x1b\r") || strings.Count(got, shown) != 3 {
		t.Errorf("want the node's text escaped in What, Fix and the command's comment, no raw control character:\n%q", got)
	}
}
