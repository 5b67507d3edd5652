package lab

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/labtext"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// fakeOperation is lab 13's row with its parts replaced: begin and grade
// count their calls, and grade finds the mistakes in *mistakes.
func fakeOperation(t *testing.T, begins *[]bool, mistakes *[]grade.Finding) Lab {
	l := mustLab(t, labid.EtcdBackup)
	l.begin = func(_ context.Context, _ *cluster.Session, again bool) error {
		*begins = append(*begins, again)
		return nil
	}
	l.byHand = func(context.Context, *config.Cluster, state.Dir) []steps.Command {
		return []steps.Command{{Why: "part 1", Shell: "kubectl create namespace khw-lab13"}}
	}
	l.grade = func(context.Context, *cluster.Session) ([]grade.Finding, error) { return *mistakes, nil }
	return l
}

// An Operation lab asks first, snapshots the nodes (for khw lab reset),
// records its start, runs the operation or shows the by-hand commands,
// and is done only when its check finds nothing; a second try after an
// unfinished one keeps the first record.
func TestRunOperation(t *testing.T) {
	if _, err := exec.LookPath("rsync"); err != nil {
		t.Skip("rsync not installed (make deps installs it)")
	}
	co, p := testCourse(t)
	ctx := context.Background()
	var begins []bool
	var mistakes []grade.Finding
	l := fakeOperation(t, &begins, &mistakes)
	text := labtext.Lab{}
	operated := 0
	ui := func(in string) (UI, *bytes.Buffer) {
		var out bytes.Buffer
		return UI{Out: &out, Err: &out, In: strings.NewReader(in), Observe: func(context.Context, string, io.Writer) error { return nil },
			Operate: func(context.Context, Lab) error { operated++; return nil }}, &out
	}

	// No: nothing happens.
	u, out := ui("n\n")
	if err := co.Run(ctx, l, text, u); !errors.Is(err, ErrStopped) || operated != 0 || len(p.calls) != 0 || len(begins) != 0 {
		t.Fatalf("answer no: %v, operated %d, provider %v, begins %v\n%s", err, operated, p.calls, begins, out)
	}

	// Yes, and the check finds a mistake: not done, the snapshot is kept.
	mistakes = []grade.Finding{{Lab: labid.EtcdBackup, What: "ConfigMap khw-lab13/lost exists", Evidence: "found", Fix: "restore"}}
	u, out = ui("y\n")
	err := co.Run(ctx, l, text, u)
	if err == nil || !strings.Contains(err.Error(), "1 problem") || !strings.Contains(out.String(), "✗ [13-etcd-backup] cluster: ConfigMap khw-lab13/lost exists") {
		t.Fatalf("a mistake: %v\n%s", err, out)
	}
	if operated != 1 || len(p.calls) != 1 || p.calls[0] != "snapshot before-"+labid.EtcdBackup || len(begins) != 1 || begins[0] {
		t.Errorf("first try: operated %d, provider %v, begins %v", operated, p.calls, begins)
	}
	if prog, _ := LoadProgress(co.S.Dir); len(prog) != 0 {
		t.Errorf("done with a mistake: %v", prog)
	}

	// By hand, the second try: the snapshot and the first record are
	// kept, the commands are shown and written, and a pass marks it done.
	mistakes = nil
	p.calls = nil
	u, out = ui("\n")
	u.ByHand = true
	if err := co.Run(ctx, l, text, u); err != nil {
		t.Fatalf("by hand: %v\n%s", err, out)
	}
	if operated != 1 || len(p.calls) != 0 || len(begins) != 2 || !begins[1] {
		t.Errorf("by hand: operated %d, provider %v, begins %v", operated, p.calls, begins)
	}
	for _, want := range []string{"kept from your first try", "$ kubectl create namespace khw-lab13", "✓ lab 13-etcd-backup passes: " + l.passed} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("by hand: output lacks %q:\n%s", want, out)
		}
	}
	if data, err := os.ReadFile(ByHandPath(co.S.Dir, l.ID)); err != nil || !strings.Contains(string(data), "kubectl create namespace khw-lab13") {
		t.Errorf("by-hand script: %v\n%s", err, data)
	}
	if prog, _ := LoadProgress(co.S.Dir); len(prog) != 1 {
		t.Errorf("not done after a pass: %v", prog)
	}
}
