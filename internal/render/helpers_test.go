package render

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/khw-dev/khw/internal/config"
)

// nodeFiles renders one node and indexes its files by target path.
func nodeFiles(t *testing.T, c *config.Cluster, node string, f NodeFacts) map[string]File {
	t.Helper()
	files, err := Node(c, node, f)
	if err != nil {
		t.Fatalf("Node(%s): %v", node, err)
	}
	out := map[string]File{}
	for _, file := range files {
		if _, dup := out[file.Path]; dup {
			t.Fatalf("Node(%s) renders %s twice", node, file.Path)
		}
		out[file.Path] = file
	}
	return out
}

func mustFile(t *testing.T, files map[string]File, p string) string {
	t.Helper()
	f, ok := files[p]
	if !ok {
		t.Fatalf("%s is not rendered", p)
	}
	return string(f.Data)
}

func libvirtFacts() NodeFacts {
	f, _ := DefaultFacts(config.ProviderLibvirt)
	return f
}

func nspawnFacts() NodeFacts {
	f, _ := DefaultFacts(config.ProviderNspawn)
	return f
}

// unit is a parsed systemd unit: key → values per section, plus the flags of
// ExecStart.
type unit struct {
	sections map[string]map[string][]string
	binary   string
	flags    map[string][]string // "--name" → values ("" for a bare flag)
	order    []string            // flags in order
}

// parseUnit reads a unit file the way systemd does for what we use: comments,
// sections, key=value, and backslash continuation lines.
func parseUnit(t *testing.T, text string) *unit {
	t.Helper()
	u := &unit{sections: map[string]map[string][]string{}, flags: map[string][]string{}}
	var section, pending string
	for _, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if pending == "" && (line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";")) {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line = pending + line
		pending = ""
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			u.sections[section] = map[string][]string{}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			t.Fatalf("unit line %q is not key=value inside a section", line)
		}
		u.sections[section][k] = append(u.sections[section][k], v)
	}
	if pending != "" {
		t.Fatalf("unit ends inside a continuation: %q", pending)
	}
	exec := u.sections["Service"]["ExecStart"]
	if len(exec) != 1 {
		t.Fatalf("want exactly one ExecStart, got %q", exec)
	}
	fields := strings.Fields(exec[0])
	u.binary = fields[0]
	for _, f := range fields[1:] {
		if !strings.HasPrefix(f, "--") {
			t.Fatalf("ExecStart argument %q is not a --flag", f)
		}
		k, v, _ := strings.Cut(f, "=")
		u.flags[k] = append(u.flags[k], v)
		u.order = append(u.order, k)
	}
	return u
}

// flag returns the single value of a flag, failing if absent or repeated.
func (u *unit) flag(t *testing.T, name string) string {
	t.Helper()
	v := u.flags[name]
	if len(v) != 1 {
		t.Fatalf("%s: want %s exactly once, got %q", u.binary, name, v)
	}
	return v[0]
}

func (u *unit) has(name string) bool { _, ok := u.flags[name]; return ok }

// yamlMap parses a YAML document into a map.
func yamlMap(t *testing.T, text string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(text), &m); err != nil {
		t.Fatalf("not valid YAML: %v\n%s", err, text)
	}
	return m
}

// dig follows keys through nested maps.
func dig(m map[string]any, keys ...string) (any, bool) {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func keysOf(m map[string]any) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}
