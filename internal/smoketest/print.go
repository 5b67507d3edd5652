package smoketest

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/termtext"
)

// WriteCheck writes one check as khw smoke prints it: "✓ name  evidence (1.2s)", or
// "✗ name  error" with the evidence on a second line; "- name …" when
// skipped. Evidence and error come from the cluster: their control
// characters are escaped (termtext).
func WriteCheck(w io.Writer, c Check) {
	w = termtext.NewWriter(w)
	mark, text := "✓", c.Evidence
	switch {
	case c.Skipped:
		mark = "-"
	case !c.OK:
		mark, text = "✗", c.Err
	}
	fmt.Fprintf(w, "%s %-18s %s (%s)\n", mark, c.Name, text, c.Duration.Round(100*time.Millisecond))
	if !c.OK && c.Evidence != "" {
		fmt.Fprintf(w, "  %-18s seen: %s\n", "", c.Evidence)
	}
}

// WriteSummary writes the closing line: how many checks passed and what
// happened to the namespace.
func WriteSummary(w io.Writer, rep *Report) {
	passed := len(rep.Checks) - len(rep.Failed())
	fmt.Fprintf(w, "%d of %d checks passed", passed, len(rep.Checks))
	switch {
	case rep.Kept:
		fmt.Fprintf(w, "; namespace %s kept (kubectl delete namespace %s when done)", rep.Namespace, rep.Namespace)
	case rep.CleanupErr == "":
		fmt.Fprintf(w, "; namespace %s deleted", rep.Namespace)
	}
	fmt.Fprintln(w)
}

// Err is nil when every check passed, else an error naming cluster and
// the failed checks.
func (rep *Report) Err(cluster string) error {
	failed := rep.Failed()
	if len(failed) == 0 {
		return nil
	}
	var names []string
	for _, c := range failed {
		names = append(names, c.Name)
	}
	return fmt.Errorf("cluster %s: %d of %d smoke checks failed: %s", cluster, len(failed), len(rep.Checks), strings.Join(names, ", "))
}
