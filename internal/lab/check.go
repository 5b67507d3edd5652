package lab

import (
	"context"
	"fmt"
	"io"

	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/termtext"
)

// Check grades lab l as khw lab check does and prints the result to
// ui.Out: the mistakes (each with evidence and fix), the variants with
// what their setting does, the other differences (at most 12), and the
// verdict. The failover lab passes once a drill passed its verdict since
// the last reset. Errors: the lab does not pass (the error counts the
// problems), or it could not be graded.
func (c *Course) Check(ctx context.Context, l Lab, ui UI) error {
	if l.Kind == Drill {
		done, err := c.DrillDone(l)
		if err != nil {
			return err
		}
		if !done {
			return fmt.Errorf("%s: no drill has passed its verdict since the last reset: run khw lab %d or khw break etcd --count 1 --for 20s", l.ID, l.Number())
		}
		ui.say("✓ %s: a drill passed its verdict since the last reset\n", l.ID)
		return nil
	}
	if l.Kind == Operation {
		return c.checkOperation(ctx, l, ui)
	}
	ui.say("Checking lab %s on the live nodes…\n", l.ID)
	g, err := c.Grade(ctx, l)
	if err != nil {
		return err
	}
	if !g.Pass() && len(g.Mistakes) == 0 && len(g.Differences) == 0 {
		g.write(ui.Out, l)
		return fmt.Errorf("lab %s could not be checked: %s", l.ID, g.Status.Detail)
	}
	if ui.Hints && !g.Pass() {
		n, err := g.writeFirstHints(termtext.NewWriter(ui.Out), c.S.Dir, l, ui.NextHint, ui.Lang)
		if err != nil {
			return err
		}
		return fmt.Errorf("lab %s: %d %s to find", l.ID, n, steps.Plural(n, "mistake", "mistakes"))
	}
	g.write(ui.Out, l)
	if g.Pass() {
		if err := dropHints(c.S.Dir, l.ID); err != nil {
			return err
		}
	}
	if !g.Pass() {
		n := len(g.Mistakes)
		if n == 0 {
			n = len(g.Differences)
		}
		return fmt.Errorf("lab %s: %d problem(s); fix them and run khw lab check %s again", l.ID, n, l.ID)
	}
	if g.Detectors == 0 {
		ui.say("✓ lab %s passes: its step's own check finds nothing to change\n", l.ID)
		return nil
	}
	ui.say("✓ lab %s passes: no mistake found (%d %s)\n", l.ID, g.Detectors, steps.Plural(g.Detectors, "check", "checks"))
	return nil
}

// checkOperation grades an Operation lab: each mistake with its evidence
// and fix; none marks the lab done.
func (c *Course) checkOperation(ctx context.Context, l Lab, ui UI) error {
	ui.say("Checking lab %s on the live cluster…\n", l.ID)
	fs, err := l.grade(ctx, c.S)
	if err != nil {
		return err
	}
	for _, f := range fs {
		ui.say("✗ %s\n", f.String())
	}
	if len(fs) > 0 {
		return fmt.Errorf("lab %s: %d %s and run khw lab check %s again", l.ID, len(fs), steps.Plural(len(fs), "problem; fix it", "problems; fix them"), l.ID)
	}
	if err := MarkDone(c.S.Dir, l.ID); err != nil {
		return err
	}
	ui.say("✓ lab %s passes: %s\n", l.ID, l.passed)
	return nil
}

// write prints g's findings for lab l, mistakes first, with control
// characters escaped (termtext): the findings hold text read on the nodes.
func (g *Grade) write(w io.Writer, l Lab) {
	w = termtext.NewWriter(w)
	if g.Status.Status == Unknown {
		fmt.Fprintf(w, "! the step's own check failed: %s\n", g.Status.Detail)
	}
	for _, warn := range g.Warnings {
		fmt.Fprintf(w, "! %s\n", warn)
	}
	for _, m := range g.Mistakes {
		fmt.Fprintf(w, "✗ %s\n", m.String())
	}
	if len(g.Variants) > 0 {
		fmt.Fprintf(w, "Variants of khw's reference that a rule knows to work (information):\n")
		for _, v := range g.Variants {
			fmt.Fprintf(w, "  ~ %s: %s\n", v.Node, v.What)
			if v.Why != "" {
				fmt.Fprintf(w, "      what it does: %s\n", v.Why)
			}
		}
	}
	if len(g.NotJudged) > 0 {
		tryout := "the lab's live tryout passed with them"
		if len(g.Mistakes) > 0 || g.Detectors == 0 {
			tryout = "see the mistakes above; the lab's live tryout decides"
		}
		fmt.Fprintf(w, "Not judged: no rule knows whether these differences from khw's reference work (%s):\n", tryout)
		for _, v := range g.NotJudged {
			fmt.Fprintf(w, "  ? %s: %s\n", v.Node, v.What)
			if v.Why != "" {
				fmt.Fprintf(w, "      what it does: %s\n", v.Why)
			}
		}
	}
	if len(g.Differences) == 0 {
		return
	}
	label := "Differences from khw's reference (information; a correct hand-made variant may differ)"
	if g.Detectors == 0 {
		label = "What is missing or different"
	}
	fmt.Fprintf(w, "%s:\n", label)
	for i, d := range g.Differences {
		if i == 12 {
			fmt.Fprintf(w, "  … and %d more (khw up --dry-run --from %s --until %s lists them all)\n", len(g.Differences)-12, l.ID, l.ID)
			break
		}
		fmt.Fprintf(w, "  - %s\n", d.String())
	}
}
