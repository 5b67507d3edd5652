// Package grade is the labs' shared grading kit: it reads a node's config
// file as settings (a systemd unit flag by flag, a YAML/JSON/TOML/HAProxy
// config key by key), says how it differs from khw's reference and what
// each changed setting does, and judges the difference with rules taken
// from what the components require: a variant (fine), a value that breaks
// or weakens the cluster, or a value inconsistent with the node's peers.
//
// The meaning of a setting is the comment that khw's own template gives it
// (templates/node/...): the comment block right above the line that sets it,
// or for a unit's flags the flag table at the top of the unit. The rules
// (rules.go) cite the upstream source of each.
//
// The rule for what goes where:
//   - A step's Check (internal/steps) says whether the nodes are as khw
//     builds them: files byte for byte, units enabled, active and started
//     after their files, the cluster's health. It is what `khw up` acts on.
//   - Grading (`khw lab check`, internal/lab) starts from that Check: a
//     machine or unit that does not run is a mistake as it stands; a file
//     whose bytes differ is read from the node and judged here, setting by
//     setting, against the step's own reference (steps.Referencer); what
//     follows only from another difference (steps.DiffFollows) is left out.
//   - The detectors (internal/labcheck) add what no single file shows:
//     certificates and their chain, RBAC, bootstrap tokens, CSRs, routes.
//     They must not judge a setting that a rule here judges.
//
// Grading and Check share their probes: the reference files come from the
// step (the same rendering `khw up` installs), and node files are read
// through the session's SSH pool (lab.Source).
package grade

import (
	"fmt"
	"path"
	"strings"
)

// Format is how a config file is read.
type Format int

const (
	// Lines: every non-comment line is one setting (modules-load.d).
	Lines Format = iota
	// Unit: a systemd unit; ExecStart's flags are settings of their own.
	Unit
	// YAML also reads JSON (CNI configs).
	YAML
	TOML
	HAProxy
	// Sysctl: "key = value" lines (sysctl.d).
	Sysctl
)

// FormatOf returns the format of a node file from its path.
func FormatOf(p string) Format {
	base := path.Base(p)
	switch {
	case strings.HasSuffix(base, ".service"):
		return Unit
	case strings.HasSuffix(base, ".yaml"), strings.HasSuffix(base, ".yml"),
		strings.HasPrefix(p, "/etc/cni/net.d/"):
		return YAML
	case strings.HasSuffix(base, ".toml"):
		return TOML
	case base == "haproxy.cfg":
		return HAProxy
	case strings.HasPrefix(p, "/etc/sysctl.d/"):
		return Sysctl
	}
	return Lines
}

// Setting is one setting of a config file.
type Setting struct {
	// Key names it in the file's own terms: a unit's flag "--bind-address"
	// or directive "Service.Restart" (ExecStart's binary is "ExecStart"); a
	// YAML/JSON path "authentication.anonymous.enabled" (list items
	// "plugins[0].type"); a TOML path "plugins.'io.containerd.cri.v1.images'.snapshotter";
	// an HAProxy "defaults: timeout connect" or "backend kube-apiservers:
	// server cp1"; a sysctl name; a line of a Lines file.
	Key string
	// Value is the setting's value as text: a bare unit flag is "true",
	// a YAML/TOML list is its items joined by ",", a repeated directive its
	// values joined by " ".
	Value string
	// Line is the 1-based line that sets it.
	Line int
	// parent is the line of the enclosing key or table (0: none), where
	// the meaning is looked for when the setting's own line has no comment.
	parent int
	// list marks a YAML sequence of scalars (Value joins its items).
	list bool
}

// Config is a parsed config file.
type Config struct {
	Format   Format
	Settings []Setting
	lines    []string
	// flagDocs maps a unit flag (or a prefix ending in "*") to the
	// meaning the unit's flag table gives it.
	flagDocs map[string]string
	// up maps the line of a YAML key or TOML table to the line of the key
	// or table that encloses it.
	up map[int]int
}

// Parse reads data as the config file at node path p. A file that cannot
// be parsed in its format is an error naming the line where possible.
func Parse(p string, data []byte) (*Config, error) {
	c := &Config{Format: FormatOf(p), lines: strings.Split(string(data), "\n"), up: map[int]int{}}
	var err error
	switch c.Format {
	case Unit:
		err = c.parseUnit()
	case YAML:
		err = c.parseYAML(data)
	case TOML:
		err = c.parseTOML(data)
	case HAProxy:
		c.parseHAProxy()
	case Sysctl:
		c.parseSysctl()
	default:
		c.parseLines()
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	c.Settings = mergeRepeated(c.Settings)
	return c, nil
}

// isList reports whether the file sets key to a YAML list of scalars.
func (c *Config) isList(key string) bool {
	for _, s := range c.Settings {
		if s.Key == key {
			return s.list
		}
	}
	return false
}

// Get returns the value of key and whether the file sets it.
func (c *Config) Get(key string) (string, bool) {
	for _, s := range c.Settings {
		if s.Key == key {
			return s.Value, true
		}
	}
	return "", false
}

// mergeRepeated merges a key set more than once, keeping its first line: a
// flag's last value wins (a list flag's values are joined with ","); a
// unit directive's or HAProxy keyword's values are joined with " " (After=
// a, After= b is After=a b).
func mergeRepeated(in []Setting) []Setting {
	idx := map[string]int{}
	var out []Setting
	for _, s := range in {
		i, ok := idx[s.Key]
		switch {
		case !ok:
			idx[s.Key] = len(out)
			out = append(out, s)
		case sliceFlags[s.Key]:
			out[i].Value += "," + s.Value
		case strings.HasPrefix(s.Key, "--"):
			out[i].Value, out[i].Line = s.Value, s.Line
		default:
			out[i].Value += " " + s.Value
		}
	}
	return out
}

func isComment(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "#") }

// Meaning returns what the file's own comments say about s: for a unit
// flag the flag table's entry, else the comment block right above the
// line that sets it (or above its enclosing key or table, or above the run
// of HAProxy lines of the same keyword it belongs to). The file's leading
// comment block describes the whole file and is nobody's meaning. "" when
// the file says nothing.
func (c *Config) Meaning(s Setting) string {
	if c.Format == Unit && strings.HasPrefix(s.Key, "--") {
		if d, ok := c.flagDocs[s.Key]; ok {
			return d
		}
		best, doc := "", ""
		for k, d := range c.flagDocs {
			if p, ok := strings.CutSuffix(k, "*"); ok && strings.HasPrefix(s.Key, p) && len(p) > len(best) {
				best, doc = p, d
			}
		}
		return doc
	}
	for line := s.Line; line > 0; {
		if m := c.commentAbove(line); m != "" {
			return m
		}
		next := c.parentOf(line, s)
		if next <= 0 || next >= line {
			return ""
		}
		line = next
	}
	return ""
}

// parentOf returns where to look next for the meaning of s after line.
func (c *Config) parentOf(line int, s Setting) int {
	if line == s.Line && s.parent > 0 && s.parent != s.Line {
		return s.parent
	}
	if c.Format == HAProxy && line >= 2 {
		word := func(l string) string {
			f := strings.Fields(l)
			if len(f) == 0 {
				return ""
			}
			return f[0]
		}
		prev := c.lines[line-2]
		if !isComment(prev) && strings.TrimSpace(prev) != "" && word(prev) == word(c.lines[line-1]) {
			return line - 1
		}
	}
	return c.up[line]
}

// commentAbove returns the comment block that ends right above line,
// joined into one paragraph; "" when there is none or it is the file's
// leading block.
func (c *Config) commentAbove(line int) string {
	above := line - 2 // the 0-based index of the line above
	i := above
	for i >= 0 && isComment(c.lines[i]) {
		i--
	}
	if i == above || i < 0 {
		return ""
	}
	var parts []string
	for _, l := range c.lines[i+1 : above+1] {
		parts = append(parts, strings.TrimPrefix(strings.TrimSpace(l), "#"))
	}
	return strings.Join(strings.Fields(strings.Join(parts, " ")), " ")
}
