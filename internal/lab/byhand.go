package lab

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// ByHandPath is where khw lab LAB --by-hand writes the commands it shows:
// <state>/labs/by-hand-<id>.sh.
func ByHandPath(d state.Dir, id string) string {
	return filepath.Join(d.Root, "labs", "by-hand-"+id+".sh")
}

// byHandScript renders cmds as one bash script to run inside khw shell:
// the jumpbox's commands as they are, each node's through ssh -F
// "$KHW_SSH_CONFIG" as a quoted here-document (nothing in it is expanded
// on the jumpbox), each after its "# why" line. It stops at the first
// command that fails (set -e), as a student would.
func byHandScript(id string, cmds []steps.Command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/bash\n# The commands of khw lab %s --by-hand, in order. Run inside khw shell.\nset -euo pipefail\n", id)
	for _, c := range cmds {
		b.WriteString("\n")
		if c.Why != "" {
			b.WriteString("# " + strings.ReplaceAll(c.Why, "\n", " ") + "\n")
		}
		sh := strings.TrimRight(c.Shell, "\n")
		if c.Node == "" {
			b.WriteString(sh + "\n")
			continue
		}
		fmt.Fprintf(&b, "ssh -F \"$KHW_SSH_CONFIG\" %s bash -se <<'KHW_%s'\nset -e\n%s\nKHW_%s\n", c.Node, strings.ToUpper(c.Node), sh, strings.ToUpper(c.Node))
	}
	return b.String()
}

// writeByHand writes byHandScript of cmds to ByHandPath (0600, atomic) and
// returns its path.
func writeByHand(d state.Dir, id string, cmds []steps.Command) (string, error) {
	p := ByHandPath(d, id)
	if err := fsutil.MkdirAllPrivate(filepath.Dir(p)); err != nil {
		return "", err
	}
	return p, fsutil.WriteFileAtomic(p, []byte(byHandScript(id, cmds)), 0o600)
}
