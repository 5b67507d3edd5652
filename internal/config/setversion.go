package config

import (
	"bytes"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/khw-dev/khw/internal/fsutil"
)

// SetVersion sets versions.<component> to v in the cluster.yaml at path,
// keeping the rest of the file (comments, order) as it is, and writes it
// atomically (0600) only when the result still parses and validates.
// Errors: the file has no versions.<component>, the result is invalid
// (nothing written), the file cannot be read or written.
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
	field.Value, field.Tag, field.Style = v, "!!str", 0
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	if _, _, err := Parse(buf.Bytes(), path); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, buf.Bytes(), fsutil.SecretMode)
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
