package labcheck

import (
	"strings"
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
	argv := parseExecStart(out)
	return unitCmd{unit: unit, argv: argv}, len(argv) > 0, nil
}

// parseExecStart returns the argv of the effective ExecStart of a unit file
// text: continuation lines joined, an empty `ExecStart=` resetting the list
// (as in a drop-in), the last one kept, systemd's prefixes (-@:+!) dropped.
// See systemd.service(5), "ExecStart=".
func parseExecStart(text string) []string {
	var lines []string
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimRight(l, " \t\r")
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		lines = append(lines, cur+l)
		cur = ""
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	var last string
	section := ""
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[") {
			section = t
			continue
		}
		if section != "[Service]" || !strings.HasPrefix(t, "ExecStart=") {
			continue
		}
		last = strings.TrimSpace(strings.TrimPrefix(t, "ExecStart="))
	}
	last = strings.TrimLeft(last, "-@:+!")
	return shellWords(last)
}

// shellWords splits s into words, honouring single and double quotes.
func shellWords(s string) []string {
	var out []string
	var b strings.Builder
	in := false
	var q rune
	for _, r := range s {
		switch {
		case q != 0:
			if r == q {
				q = 0
			} else {
				b.WriteRune(r)
			}
		case r == '\'' || r == '"':
			q, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, b.String())
				b.Reset()
				in = false
			}
		default:
			b.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, b.String())
	}
	return out
}

// flag returns the value of --name in argv ("--name=v" or "--name v"; a
// bare boolean "--name" is "true"); the last occurrence wins, as in
// spf13/pflag. Single-dash spellings count too.
func (u unitCmd) flag(name string) (string, bool) {
	val, found := "", false
	for i := 1; i < len(u.argv); i++ {
		a := u.argv[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		k, v, hasEq := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if k != name {
			continue
		}
		found = true
		switch {
		case hasEq:
			val = v
		case i+1 < len(u.argv) && !strings.HasPrefix(u.argv[i+1], "-"):
			val = u.argv[i+1]
			i++
		default:
			val = "true"
		}
	}
	return val, found
}

// evidence shows one flag as the unit has it.
func (u unitCmd) evidence(name string) string {
	if v, ok := u.flag(name); ok {
		return u.unit + " has --" + name + "=" + v
	}
	return u.unit + " has no --" + name
}
