package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// hintState is <state>/labs/hints-<ID>.json: the mistakes the last
// `khw lab check ID --hints` found and how many rungs of each one's ladder
// were given. A check that passes removes it.
type hintState struct {
	Checked  time.Time       `json:"checked"`
	Findings []grade.Finding `json:"findings"`
	// Given is how many rungs of Findings[i]'s ladder were shown.
	Given []int `json:"given"`
}

func hintPath(d state.Dir, id string) string {
	return filepath.Join(d.Root, "labs", "hints-"+id+".json")
}

// hintFindings are what a hint ladder is built for: the mistakes, or when
// there are none (a lab without detectors) the step's differences.
func (g *Grade) hintFindings(l Lab) []grade.Finding {
	if len(g.Mistakes) > 0 {
		return g.Mistakes
	}
	var out []grade.Finding
	for _, d := range g.Differences {
		out = append(out, grade.Finding{Lab: l.ID, Node: d.Node, Subject: d.Subject, What: d.What, Evidence: d.Evidence, Fix: d.Fix})
	}
	return out
}

// writeFirstHints saves g's findings for khw lab hint and prints the first
// rung of each one's ladder: where to look, not yet what is wrong, then
// what to do next (next; "" names khw lab hint). It returns how many
// findings it saved.
func (g *Grade) writeFirstHints(w io.Writer, d state.Dir, l Lab, next, lang string) (int, error) {
	fs := g.hintFindings(l)
	st := hintState{Checked: time.Now().UTC(), Findings: fs, Given: make([]int, len(fs))}
	for _, warn := range g.Warnings {
		fmt.Fprintf(w, "! %s\n", warn)
	}
	if lang == "ko" {
		fmt.Fprintf(w, "✗ 실습 %s: 실수 %d개. 볼 곳:\n", l.ID, len(fs))
	} else {
		fmt.Fprintf(w, "✗ lab %s: %d %s. Where to look:\n", l.ID, len(fs), steps.Plural(len(fs), "mistake", "mistakes"))
	}
	// Mistakes with the same first hint (one node, one lab) share a line.
	var order []string
	nums := map[string][]string{}
	for i, f := range fs {
		st.Given[i] = 1
		first := grade.LadderIn(f, byID(f.Lab).Look, lang)[0]
		if nums[first] == nil {
			order = append(order, first)
		}
		nums[first] = append(nums[first], strconv.Itoa(i+1))
	}
	for _, first := range order {
		fmt.Fprintf(w, "  %s. %s\n", strings.Join(nums[first], ", "), first)
	}
	label := "Next: "
	if lang == "ko" {
		label = "다음: "
	}
	if next == "" {
		next = fmt.Sprintf("khw lab hint %02d (one more hint each time); after a fix, khw lab check %02d --hints", l.Number(), l.Number())
		if lang == "ko" {
			next = fmt.Sprintf("khw lab hint %02d(한 번에 힌트 하나), 고친 뒤에는 khw lab check %02d --hints", l.Number(), l.Number())
		}
	}
	fmt.Fprintf(w, "%s%s\n", label, next)
	return len(fs), saveHints(d, l.ID, st)
}

func saveHints(d state.Dir, id string, st hintState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(hintPath(d, id), append(data, '\n'), fsutil.SecretMode)
}

// dropHints forgets the hints of lab id (its check passed).
func dropHints(d state.Dir, id string) error {
	if err := os.Remove(hintPath(d, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// loadHints reads the saved hint ladders of lab id. Errors: none saved
// (fs.ErrNotExist), or a file that does not parse or does not hold what
// writeFirstHints writes (see hintState.check); both name the file and
// how to make it again.
func loadHints(d state.Dir, id string) (hintState, error) {
	var st hintState
	p := hintPath(d, id)
	data, err := os.ReadFile(p)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return hintState{}, fmt.Errorf("%s is damaged (%v): delete it, or run khw lab check %s --hints again to write it anew", p, err, id)
	}
	if err := st.check(); err != nil {
		return hintState{}, fmt.Errorf("%s is damaged: %v; delete it, or run khw lab check %s --hints again to write it anew", p, err, id)
	}
	return st, nil
}

// check says what in st a ladder cannot be climbed with: one Given per
// finding, each from 0 to grade.Rungs (it indexes the finding's ladder).
func (st hintState) check() error {
	if len(st.Given) != len(st.Findings) {
		return fmt.Errorf("it counts hints for %d mistakes but lists %d", len(st.Given), len(st.Findings))
	}
	for i, g := range st.Given {
		if g < 0 || g > grade.Rungs {
			return fmt.Errorf("given[%d] is %d, not 0 to %d (the rungs of a mistake's ladder)", i, g, grade.Rungs)
		}
	}
	return nil
}

// openHints says how many mistakes the saved hint ladders of lab id have,
// false when there are none.
func openHints(d state.Dir, id string) (int, bool) {
	st, err := loadHints(d, id)
	if err != nil || len(st.Findings) == 0 {
		return 0, false
	}
	return len(st.Findings), true
}

// ErrNoHints: there is no ladder to climb for the lab (no check with
// --hints found a mistake since it last passed).
var ErrNoHints = errors.New("no hints")

// NextHint prints the next rung of the first mistake whose ladder is not
// climbed yet, from the last `khw lab check ID --hints`, and records it.
// When every rung is given it says so. Errors: ErrNoHints (wrapped, with
// what to run) when there is nothing saved; a state file that cannot be
// read or written.
func NextHint(w io.Writer, d state.Dir, l Lab, lang string) error {
	st, err := loadHints(d, l.ID)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w for lab %s: run khw lab check %02d --hints first (a lab that passed its last check has none)", ErrNoHints, l.ID, l.Number())
	}
	if err != nil {
		return err
	}
	for i, f := range st.Findings {
		if st.Given[i] >= grade.Rungs {
			continue
		}
		rung := grade.LadderIn(f, byID(f.Lab).Look, lang)[st.Given[i]]
		st.Given[i]++
		if lang == "ko" {
			fmt.Fprintf(w, "실수 %d/%d, 힌트 %d/%d:\n  %s\n", i+1, len(st.Findings), st.Given[i], grade.Rungs, rung)
		} else {
			fmt.Fprintf(w, "Mistake %d of %d, hint %d of %d:\n  %s\n", i+1, len(st.Findings), st.Given[i], grade.Rungs, rung)
		}
		if st.Given[i] == grade.Rungs {
			if lang == "ko" {
				fmt.Fprintf(w, "이것이 고치는 법이었습니다. 고친 뒤 khw lab check %02d --hints를 실행하세요.\n", l.Number())
			} else {
				fmt.Fprintf(w, "That was the fix. Make it, then khw lab check %02d --hints.\n", l.Number())
			}
		}
		return saveHints(d, l.ID, st)
	}
	fmt.Fprintf(w, "Every hint for the %d %s of lab %s is given (checked %s). Fix them, then khw lab check %02d --hints.\n",
		len(st.Findings), steps.Plural(len(st.Findings), "mistake", "mistakes"), l.ID, st.Checked.Local().Format("15:04"), l.Number())
	return nil
}
