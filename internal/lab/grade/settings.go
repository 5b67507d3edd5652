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
	"sort"
	"strconv"
	"strings"

	toml "github.com/pelletier/go-toml"
	"gopkg.in/yaml.v3"
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

// Get returns the value of key and whether the file sets it.
func (c *Config) Get(key string) (string, bool) {
	for _, s := range c.Settings {
		if s.Key == key {
			return s.Value, true
		}
	}
	return "", false
}

// sliceFlags are the flags of the components that take a list and add up
// when repeated (pflag StringSlice and StringArray); any other flag set
// twice keeps its last value, as pflag does.
var sliceFlags = map[string]bool{"--authorization-mode": true, "--enable-admission-plugins": true,
	"--disable-admission-plugins": true, "--etcd-servers": true, "--service-account-issuer": true,
	"--api-audiences": true, "--tls-cipher-suites": true, "--controllers": true, "--node-labels": true}

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

// parseYAML flattens a YAML (or JSON) document: mapping keys joined by ".",
// list items as "[i]"; a list of scalars is one setting, its items joined
// by ",".
func (c *Config) parseYAML(data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	if len(doc.Content) == 0 {
		return nil
	}
	c.walkYAML(doc.Content[0], "", 0)
	return nil
}

func (c *Config) walkYAML(n *yaml.Node, prefix string, parent int) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := k.Value
			if prefix != "" {
				key = prefix + "." + k.Value
			}
			if v.Kind == yaml.ScalarNode || scalarList(v) {
				c.Settings = append(c.Settings, Setting{Key: key, Value: yamlValue(v), Line: k.Line, parent: parent})
				continue
			}
			if len(v.Content) == 0 {
				c.Settings = append(c.Settings, Setting{Key: key, Value: "", Line: k.Line, parent: parent})
				continue
			}
			if parent > 0 && parent < k.Line {
				c.up[k.Line] = parent
			}
			c.walkYAML(v, key, k.Line)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			key := prefix + "[" + strconv.Itoa(i) + "]"
			if item.Kind == yaml.ScalarNode {
				c.Settings = append(c.Settings, Setting{Key: key, Value: item.Value, Line: item.Line, parent: parent})
				continue
			}
			c.walkYAML(item, key, parent)
		}
	case yaml.AliasNode:
		c.walkYAML(n.Alias, prefix, parent)
	}
}

func scalarList(n *yaml.Node) bool {
	if n.Kind != yaml.SequenceNode {
		return false
	}
	for _, item := range n.Content {
		if item.Kind != yaml.ScalarNode {
			return false
		}
	}
	return len(n.Content) > 0
}

func yamlValue(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	var items []string
	for _, item := range n.Content {
		items = append(items, item.Value)
	}
	return strings.Join(items, ",")
}

// parseTOML flattens a TOML document by table path; a key with a dot in it
// is quoted as in the file ('io.containerd.cri.v1.images').
func (c *Config) parseTOML(data []byte) error {
	t, err := toml.LoadBytes(data)
	if err != nil {
		return err
	}
	c.walkTOML(t, nil, "", 0)
	return nil
}

func tomlKey(k string) string {
	if strings.ContainsAny(k, ". ") {
		return "'" + k + "'"
	}
	return k
}

func (c *Config) walkTOML(t *toml.Tree, path []string, prefix string, parent int) {
	keys := t.Keys()
	sort.Slice(keys, func(i, j int) bool {
		return t.GetPositionPath([]string{keys[i]}).Line < t.GetPositionPath([]string{keys[j]}).Line
	})
	for _, k := range keys {
		key := tomlKey(k)
		if prefix != "" {
			key = prefix + "." + key
		}
		line := t.GetPositionPath([]string{k}).Line
		switch v := t.GetPath([]string{k}).(type) {
		case *toml.Tree:
			if parent > 0 && parent < line {
				c.up[line] = parent
			}
			c.walkTOML(v, append(path, k), key, line)
		case []*toml.Tree:
			for i, sub := range v {
				c.walkTOML(sub, append(path, k), key+"["+strconv.Itoa(i)+"]", line)
			}
		default:
			c.Settings = append(c.Settings, Setting{Key: key, Value: tomlValue(v), Line: line, parent: parent})
		}
	}
}

func tomlValue(v any) string {
	switch x := v.(type) {
	case []any:
		var items []string
		for _, i := range x {
			items = append(items, tomlValue(i))
		}
		return strings.Join(items, ",")
	case string:
		return x
	}
	return fmt.Sprint(v)
}

// haproxyTwoWord are the HAProxy keywords whose second word is part of the
// setting's name ("timeout connect", "option redispatch").
var haproxyTwoWord = map[string]bool{"timeout": true, "option": true, "stats": true, "http-check": true,
	"tcp-check": true, "http-request": true, "tcp-request": true, "http-response": true}

// haproxyParams are the server/default-server parameters that take a value
// (https://docs.haproxy.org/2.8/configuration.html#5.2); the others are
// bare words such as check, check-ssl, backup.
var haproxyParams = map[string]bool{"inter": true, "fastinter": true, "downinter": true, "fall": true, "rise": true,
	"verify": true, "port": true, "addr": true, "weight": true, "maxconn": true, "maxqueue": true, "minconn": true,
	"on-marked-down": true, "on-marked-up": true, "on-error": true, "slowstart": true, "ca-file": true, "crt": true,
	"sni": true, "check-sni": true, "resolvers": true, "init-addr": true, "observe": true, "error-limit": true,
	"agent-port": true, "agent-inter": true, "proto": true, "alpn": true, "check-alpn": true}

// haproxySections are the keywords that open a section; HAProxy does not
// care about indentation.
var haproxySections = map[string]bool{"global": true, "defaults": true, "frontend": true, "backend": true,
	"listen": true, "peers": true, "resolvers": true, "userlist": true, "cache": true, "program": true,
	"http-errors": true, "ring": true, "mailers": true}

// parseHAProxy reads sections (a section keyword and its name) and
// their directives; server and default-server lines are split into one
// setting per parameter ("backend b: server cp1 inter").
func (c *Config) parseHAProxy() {
	section := ""
	for i, raw := range c.lines {
		l := strings.TrimSpace(raw)
		if l == "" || isComment(l) {
			continue
		}
		if j := strings.IndexAny(l, "#"); j > 0 && (l[j-1] == ' ' || l[j-1] == '\t') {
			l = strings.TrimSpace(l[:j])
		}
		f := strings.Fields(l)
		line := i + 1
		if haproxySections[f[0]] {
			section = strings.Join(f, " ")
			continue
		}
		neg := ""
		if f[0] == "no" && len(f) > 1 {
			neg, f = "no ", f[1:]
		}
		name, rest := f[0], f[1:]
		if haproxyTwoWord[name] && len(rest) > 0 {
			name, rest = name+" "+rest[0], rest[1:]
		}
		key := section + ": " + neg + name
		switch name {
		case "server":
			if len(rest) < 2 {
				break
			}
			key += " " + rest[0]
			c.Settings = append(c.Settings, Setting{Key: key, Value: rest[1], Line: line})
			c.Settings = append(c.Settings, haproxyServerParams(key, rest[2:], line)...)
			continue
		case "default-server":
			c.Settings = append(c.Settings, haproxyServerParams(key, rest, line)...)
			continue
		}
		value := strings.Join(rest, " ")
		if value == "" {
			value = "on"
		}
		c.Settings = append(c.Settings, Setting{Key: key, Value: value, Line: line})
	}
}

func haproxyServerParams(key string, words []string, line int) []Setting {
	var out []Setting
	for i := 0; i < len(words); i++ {
		v := "on"
		if haproxyParams[words[i]] && i+1 < len(words) {
			v = words[i+1]
			out = append(out, Setting{Key: key + " " + words[i], Value: v, Line: line, parent: line})
			i++
			continue
		}
		out = append(out, Setting{Key: key + " " + words[i], Value: v, Line: line, parent: line})
	}
	return out
}

func (c *Config) parseSysctl() {
	for i, raw := range c.lines {
		l := strings.TrimSpace(raw)
		if l == "" || isComment(l) || strings.HasPrefix(l, ";") {
			continue
		}
		k, v, _ := strings.Cut(l, "=")
		// sysctl.d(5): "/" separates like "."; a leading "-" only says
		// that a failure to set it is ignored.
		k = strings.ReplaceAll(strings.TrimPrefix(strings.TrimSpace(k), "-"), "/", ".")
		c.Settings = append(c.Settings, Setting{Key: k, Value: strings.TrimSpace(v), Line: i + 1})
	}
}

func (c *Config) parseLines() {
	for i, raw := range c.lines {
		l := strings.TrimSpace(raw)
		if l == "" || isComment(l) {
			continue
		}
		c.Settings = append(c.Settings, Setting{Key: l, Value: "present", Line: i + 1})
	}
}

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
