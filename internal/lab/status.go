package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// CheckTimeout bounds one step's Check in a status read.
const CheckTimeout = 90 * time.Second

// StepStatus checks one step and classifies it: Done (no diffs), Drifted
// (diffs, but progress says it was completed), NotDone, or Unknown (the
// Check failed). detail holds up to three diffs or the error.
func StepStatus(ctx context.Context, s steps.Step, env *steps.Env, prog Progress) (LabStatus, []steps.Diff) {
	st := LabStatus{ID: s.ID(), Title: s.Title()}
	if t, ok := prog[s.ID()]; ok {
		st.DoneAt = &t
	}
	cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	diffs, err := s.Check(cctx, env)
	switch {
	case err != nil:
		st.Status, st.Detail = Unknown, oneLine(err.Error())
	case len(diffs) == 0:
		st.Status = Done
	case st.DoneAt != nil:
		st.Status, st.Detail = Drifted, summarize(diffs)
	default:
		st.Status, st.Detail = NotDone, summarize(diffs)
	}
	return st, diffs
}

func summarize(diffs []steps.Diff) string {
	var parts []string
	for i, d := range diffs {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(diffs)-3))
			break
		}
		parts = append(parts, d.String())
	}
	return oneLine(strings.Join(parts, "; "))
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// List reads the status of every lab: the steps in order (all), then
// 12-failover and the day-2 labs. Once a step is not done, the later ones are NotDone without
// running their Check ("not checked: needs NN first": it would read a state
// the earlier step has not made, e.g. SSH to machines that do not exist),
// except that a step recorded as completed is still checked, to tell drift. 11-smoke is done when it was completed
// and every earlier step is done; 12-failover when a drill report passed;
// an Operation (13-etcd-backup) when its check passed since the last reset.
func List(ctx context.Context, all []steps.Step, env *steps.Env, d state.Dir) ([]LabStatus, error) {
	prog, err := LoadProgress(d)
	if err != nil {
		return nil, err
	}
	var out []LabStatus
	blocked := ""
	for _, s := range all {
		if byID(s.ID()).Kind == Test {
			st := LabStatus{ID: s.ID(), Title: s.Title(), Status: NotDone}
			if t, ok := prog[s.ID()]; ok {
				st.DoneAt = &t
				st.Status, st.Detail = Done, "passed "+t.Local().Format("2006-01-02 15:04")+" (khw lab check "+s.ID()+" runs it again)"
			}
			if blocked != "" {
				st.Status, st.Detail = NotDone, "not checked: needs "+blocked+" first"
			}
			out = append(out, st)
			continue
		}
		if blocked != "" {
			if _, ok := prog[s.ID()]; !ok {
				out = append(out, LabStatus{ID: s.ID(), Title: s.Title(), Status: NotDone, Detail: "not checked: needs " + blocked + " first"})
				continue
			}
		}
		st, _ := StepStatus(ctx, s, env, prog)
		// A lab not done (or whose check failed) blocks the later checks;
		// a drifted one does not: what came after it was built.
		if (st.Status == NotDone || st.Status == Unknown) && blocked == "" {
			blocked = s.ID()
		}
		out = append(out, st)
	}
	for _, l := range catalogue {
		switch l.Kind {
		case Drill:
			fo := LabStatus{ID: l.ID, Title: l.title, Status: NotDone, Detail: fmt.Sprintf("run khw lab %d (or khw break … --for 30s)", l.Number())}
			if t, ok := prog[l.ID]; ok {
				fo.DoneAt = &t
				fo.Status, fo.Detail = Done, "a drill passed its verdict"
				if id, ok := PassedDrill(d); ok {
					fo.Detail = "drill " + id + " passed its verdict"
				}
			}
			out = append(out, fo)
		case Operation:
			op := LabStatus{ID: l.ID, Title: l.title, Status: NotDone, Detail: fmt.Sprintf("run khw lab %d (or khw lab %d --by-hand, then khw lab check %d)", l.Number(), l.Number(), l.Number())}
			if t, ok := prog[l.ID]; ok {
				op.DoneAt = &t
				op.Status, op.Detail = Done, "passed its check "+t.Local().Format("2006-01-02 15:04")+" (khw lab check "+l.ID+" grades the cluster again)"
			}
			out = append(out, op)
		}
	}
	return out, nil
}

// PassedDrill returns the newest drill whose report passed.
func PassedDrill(d state.Dir) (string, bool) {
	files, _ := filepath.Glob(filepath.Join(d.Root, "drills", "*", "report.json"))
	for i := len(files) - 1; i >= 0; i-- {
		data, err := os.ReadFile(files[i])
		if err != nil {
			continue
		}
		var r struct {
			ID     string `json:"id"`
			Passed bool   `json:"passed"`
		}
		if json.Unmarshal(data, &r) == nil && r.Passed {
			return r.ID, true
		}
	}
	return "", false
}
