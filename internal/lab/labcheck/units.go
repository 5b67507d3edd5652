package labcheck

import (
	"github.com/khw-dev/khw/internal/lab/grade"
)

// unitShell prints a unit with its drop-ins as systemd sees them, or nothing
// when systemd does not know it.
func unitShell(unit string) string { return "systemctl cat -- " + unit + " 2>/dev/null || true" }

// unitCmd is the command line of a systemd unit's ExecStart.
type unitCmd struct {
	unit string
	argv []string
}

// readUnit returns the argv of unit's last ExecStart on node (drop-ins
// included: `systemctl cat`), found false when systemd does not know the
// unit or it has no ExecStart.
func (e *env) readUnit(node, unit string) (unitCmd, bool, error) {
	out, err := e.run(node, unitShell(unit))
	if err != nil {
		return unitCmd{}, false, err
	}
	argv := grade.ExecStart(out)
	return unitCmd{unit: unit, argv: argv}, len(argv) > 0, nil
}

// flag returns the value of --name in the unit's ExecStart (grade.Flag).
func (u unitCmd) flag(name string) (string, bool) { return grade.Flag(u.argv, name) }

// evidence shows one flag as the unit has it.
func (u unitCmd) evidence(name string) string {
	if v, ok := u.flag(name); ok {
		return u.unit + " has --" + name + "=" + v
	}
	return u.unit + " has no --" + name
}
