package config

import (
	"bytes"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/khw-dev/khw/internal/fsutil"
)

// SetVersion sets versions.<component> to v in the cluster.yaml at path,
// changing only the bytes of that value: the rest of the file (comments,
// blank lines, order, quoting elsewhere) stays as it is. It writes the
// file atomically (0600) only when the result still parses and
// validates. Errors: the file has no versions.<component>, or its value
// is not on one line (a block scalar), the result is invalid (nothing
// written), the file cannot be read or written.
func SetVersion(path, component, v string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	field := lookup(&root, "versions", component)
	if field == nil {
		return fmt.Errorf("%s has no versions.%s: add it (khw config show prints the defaults)", path, component)
	}
	out, err := replaceScalar(data, field, v)
	if err != nil {
		return fmt.Errorf("%s versions.%s: %w; set it to %s by hand", path, component, err, v)
	}
	if _, _, err := Parse(out, path); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, out, fsutil.SecretMode)
}

// replaceScalar returns data with the one-line scalar n (as yaml.v3 parsed
// it from data: 1-based Line and Column) replaced by the plain scalar v: a
// quoted value up to its closing quote, a plain one up to a comment or
// the end of its line.
func replaceScalar(data []byte, n *yaml.Node, v string) ([]byte, error) {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if n.Line < 1 || n.Line > len(lines) || n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return nil, fmt.Errorf("its value is not a scalar on one line")
	}
	line := lines[n.Line-1]
	runes := []rune(string(line)) // yaml.v3 counts columns in runes
	if n.Column < 1 || n.Column-1 > len(runes) {
		return nil, fmt.Errorf("its value is not where the parser put it")
	}
	start := len(string(runes[:n.Column-1]))
	rest := line[start:]
	end := 0
	switch {
	case n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 && len(rest) > 0:
		q := rest[0]
		k := bytes.IndexByte(rest[1:], q)
		if k < 0 {
			return nil, fmt.Errorf("its quoted value continues on the next line")
		}
		end = k + 2
	default:
		end = len(bytes.TrimRight(rest, "\r\n"))
		if k := bytes.Index(rest, []byte(" #")); k >= 0 && k < end {
			end = k
		}
		end = len(bytes.TrimRight(rest[:end], " \t"))
	}
	if string(rest[:end]) != n.Value && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
		return nil, fmt.Errorf("its value %q is not where the parser put it", n.Value)
	}
	var out bytes.Buffer
	for i, l := range lines {
		if i == n.Line-1 {
			out.Write(line[:start])
			out.WriteString(v)
			out.Write(rest[end:])
			continue
		}
		out.Write(l)
	}
	return out.Bytes(), nil
}

// lookup follows mapping keys from a document node to a scalar value.
func lookup(n *yaml.Node, keys ...string) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	for _, k := range keys {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	if n.Kind != yaml.ScalarNode {
		return nil
	}
	return n
}
