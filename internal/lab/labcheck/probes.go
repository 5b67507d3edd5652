package labcheck

import (
	"strings"

	"github.com/khw-dev/khw/internal/lab/grade"
)

// ExecsShell lists the executable files of dir by name.
func ExecsShell(dir string) string {
	return `for f in '` + dir + `'/*; do [ -f "$f" ] && [ -x "$f" ] && echo "${f##*/}"; done; true`
}

// LsShell lists dir's entries by name, or nothing when it does not exist.
func LsShell(dir string) string { return "ls -1A '" + dir + "' 2>/dev/null || true" }

// RouteShell prints the IPv4 routing table.
const RouteShell = "ip -4 route show 2>/dev/null || true"

// UnitShell prints a unit with its drop-ins as systemd sees them, or nothing
// when systemd does not know it.
func UnitShell(unit string) string { return "systemctl cat -- " + unit + " 2>/dev/null || true" }

// UnitCmd is the command line of a systemd unit's ExecStart.
type UnitCmd struct {
	Unit string
	Argv []string
}

// ReadUnit returns the argv of unit's last ExecStart on node (drop-ins
// included: `systemctl cat`), found false when systemd does not know the
// unit or it has no ExecStart.
func (e *Env) ReadUnit(node, unit string) (UnitCmd, bool, error) {
	out, err := e.Run(node, UnitShell(unit))
	if err != nil {
		return UnitCmd{}, false, err
	}
	argv := grade.ExecStart(out)
	return UnitCmd{Unit: unit, Argv: argv}, len(argv) > 0, nil
}

// Flag returns the value of --name in the unit's ExecStart (grade.Flag).
func (u UnitCmd) Flag(name string) (string, bool) { return grade.Flag(u.Argv, name) }

// Evidence shows one flag as the unit has it.
func (u UnitCmd) Evidence(name string) string {
	if v, ok := u.Flag(name); ok {
		return u.Unit + " has --" + name + "=" + v
	}
	return u.Unit + " has no --" + name
}

// OneLine is err's text on one line, for a finding's What.
func OneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
