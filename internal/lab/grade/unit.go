package grade

// This file reads systemd units: directives, ExecStart and its flags (systemd.service(5), pflag).

import (
	"fmt"
	"sort"
	"strings"
)

// sliceFlags are the flags of the components that take a list and add up
// when repeated (pflag StringSlice and StringArray); any other flag set
// twice keeps its last value, as pflag does.
var sliceFlags = map[string]bool{"--authorization-mode": true, "--enable-admission-plugins": true,
	"--disable-admission-plugins": true, "--etcd-servers": true, "--service-account-issuer": true,
	"--api-audiences": true, "--tls-cipher-suites": true, "--controllers": true, "--node-labels": true}

// parseUnit reads sections, Key=Value directives with backslash
// continuations, and ExecStart's flags ("--a=b", "--a b", bare "--a",
// "-v=2" as "--v").
func (c *Config) parseUnit() error {
	c.flagDocs = unitFlagDocs(c.lines)
	// Only a oneshot service may list several commands; elsewhere a later
	// ExecStart= replaces the earlier one and an empty one resets it
	// (systemd.service(5)).
	oneshot := false
	for _, l := range c.lines {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok && strings.TrimSpace(k) == "Type" && strings.TrimSpace(v) == "oneshot" {
			oneshot = true
		}
	}
	section := ""
	for i := 0; i < len(c.lines); i++ {
		start := i + 1
		l := strings.TrimSpace(c.lines[i])
		if l == "" || isComment(l) || strings.HasPrefix(l, ";") {
			continue
		}
		// The physical lines of one logical line, for the line of each flag.
		parts := []part{{text: strings.TrimSuffix(l, `\`), line: start}}
		for strings.HasSuffix(l, `\`) && i+1 < len(c.lines) {
			i++
			l = strings.TrimSpace(c.lines[i])
			if isComment(l) {
				l = `\`
				continue
			}
			parts = append(parts, part{text: strings.TrimSuffix(l, `\`), line: i + 1})
		}
		first := parts[0].text
		if strings.HasPrefix(first, "[") && strings.HasSuffix(first, "]") {
			section = strings.Trim(first, "[]")
			continue
		}
		name, value, ok := strings.Cut(first, "=")
		if !ok {
			return fmt.Errorf("line %d: %q is not Key=Value", start, first)
		}
		name = strings.TrimSpace(name)
		parts[0].text = value
		if section == "Service" && name == "ExecStart" && strings.TrimSpace(value) == "" {
			c.Settings = dropExec(c.Settings)
			continue
		}
		if section == "Service" && name == "ExecStart" && oneshot {
			// A oneshot's list of commands: each command is one setting.
			var words []string
			for _, p := range parts {
				words = append(words, strings.Fields(p.text)...)
			}
			c.Settings = append(c.Settings, Setting{Key: "ExecStart " + strings.Join(words, " "), Value: "present", Line: start})
			continue
		}
		if section == "Service" && name == "ExecStart" {
			var words []string
			var lines []int
			for _, p := range parts {
				ws, err := splitWords(p.text)
				if err != nil {
					return fmt.Errorf("line %d: %w", p.line, err)
				}
				for _, w := range ws {
					words, lines = append(words, w), append(lines, p.line)
				}
			}
			if len(words) == 0 {
				continue
			}
			c.Settings = append(dropExec(c.Settings), Setting{Key: "ExecStart", Value: strings.TrimLeft(words[0], "-@:+!"), Line: start})
			c.Settings = append(c.Settings, parseFlags(words[1:], lines[1:], start)...)
			continue
		}
		var vals []string
		for _, p := range parts {
			vals = append(vals, strings.TrimSpace(p.text))
		}
		c.Settings = append(c.Settings, Setting{Key: section + "." + name, Value: strings.Join(vals, " "), Line: start})
	}
	return nil
}

// dropExec removes the settings of an earlier ExecStart= (its command and
// flags), which a later one replaces.
func dropExec(in []Setting) []Setting {
	out := in[:0:0]
	for _, s := range in {
		if s.Key != "ExecStart" && !strings.HasPrefix(s.Key, "--") && s.Key != "argument" {
			out = append(out, s)
		}
	}
	return out
}

// part is one physical line of a unit's logical line.
type part struct {
	text string
	line int
}

// parseFlags reads command-line flags as pflag and Go's flag package
// accept them.
func parseFlags(words []string, lines []int, exec int) []Setting {
	var out []Setting
	for i := 0; i < len(words); i++ {
		w, line := words[i], lines[i]
		if !strings.HasPrefix(w, "-") || w == "-" || w == "--" {
			out = append(out, Setting{Key: "argument", Value: w, Line: line, parent: exec})
			continue
		}
		name := "--" + strings.TrimLeft(w, "-")
		value := "true"
		if n, v, ok := strings.Cut(name, "="); ok {
			name, value = n, v
		} else if i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") {
			value = words[i+1]
			i++
		}
		out = append(out, Setting{Key: name, Value: value, Line: line, parent: exec})
	}
	return out
}

// ExecStart returns the argv of the effective ExecStart= of a unit's text
// (`systemctl cat` output with its drop-ins included): continuation lines
// joined, an empty `ExecStart=` resetting the list (as a drop-in does), the
// last one kept, systemd's prefixes (-@:+!) dropped; nil when there is
// none (systemd.service(5), "ExecStart=").
func ExecStart(text string) []string {
	var argv []string
	section := ""
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if isComment(next) {
				next = `\`
			}
			l = strings.TrimSuffix(l, `\`) + " " + next
		}
		l = strings.TrimSpace(strings.TrimSuffix(l, `\`))
		if strings.HasPrefix(l, "[") {
			section = l
			continue
		}
		if k, v, ok := strings.Cut(l, "="); ok && strings.TrimSpace(k) == "ExecStart" && section == "[Service]" {
			words, err := splitWords(strings.TrimLeft(strings.TrimSpace(v), "-@:+!"))
			if err == nil {
				argv = words
			}
		}
	}
	return argv
}

// Flag returns the value of flag name ("client-ca-file", without dashes)
// in argv (argv[0] is the program): "--name=v" or "--name v", a bare
// boolean "--name" is "true", single-dash spellings count too, and the last
// one wins, as in spf13/pflag.
func Flag(argv []string, name string) (string, bool) {
	if len(argv) < 2 {
		return "", false
	}
	val, found := "", false
	for _, s := range parseFlags(argv[1:], make([]int, len(argv)-1), 0) {
		if s.Key == "--"+name {
			val, found = s.Value, true
		}
	}
	return val, found
}

// splitWords splits a command line as systemd does for what units use:
// whitespace, with single or double quotes grouping.
func splitWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, quote := false, rune(0)
	escaped := false
	for _, r := range s {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped, in = false, true
		case r == '\\' && quote != '\'':
			escaped = true
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		// The line is not shown: it may hold a secret.
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

// unitFlagDocs reads a unit's flag table: comment lines "#   --a, --b   text"
// followed by deeper-indented "#      more text" lines. "--x-*" names every
// flag starting with "--x-".
func unitFlagDocs(lines []string) map[string]string {
	docs := map[string]string{}
	var names []string
	var text []string
	flush := func() {
		for _, n := range names {
			docs[n] = strings.Join(strings.Fields(strings.Join(text, " ")), " ")
		}
		names, text = nil, nil
	}
	for _, l := range lines {
		if !isComment(l) {
			flush()
			continue
		}
		body := strings.TrimPrefix(strings.TrimSpace(l), "#")
		trimmed := strings.TrimSpace(body)
		indent := len(body) - len(strings.TrimLeft(body, " "))
		switch {
		case strings.HasPrefix(trimmed, "--") && indent < 6:
			flush()
			head, rest := trimmed, ""
			if i := strings.Index(trimmed, "  "); i > 0 {
				head, rest = trimmed[:i], trimmed[i:]
			}
			for _, n := range strings.Split(head, ",") {
				n = strings.TrimSpace(n)
				n, _, _ = strings.Cut(n, "=")
				if strings.HasPrefix(n, "--") {
					names = append(names, n)
				}
			}
			text = append(text, rest)
		case len(names) > 0 && indent >= 6 && trimmed != "":
			text = append(text, trimmed)
		default:
			flush()
		}
	}
	flush()
	// A flag the table names only inside another flag's text ("--a  ...;
	// --b=x does y") shares that text.
	names = names[:0]
	for n := range docs {
		names = append(names, n)
	}
	sort.Strings(names)
	mentioned := map[string]string{}
	for _, n := range names {
		for _, w := range strings.Fields(docs[n]) {
			f, _, _ := strings.Cut(strings.Trim(w, ".,;:()`"), "=")
			if _, ok := mentioned[f]; !ok && strings.HasPrefix(f, "--") && len(f) > 2 {
				mentioned[f] = docs[n]
			}
		}
	}
	for f, d := range mentioned {
		if _, ok := docs[f]; !ok {
			docs[f] = d
		}
	}
	return docs
}
