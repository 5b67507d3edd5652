package grade

// This file reads YAML (and JSON) and TOML files, flattened to key paths.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml"
	"gopkg.in/yaml.v3"
)

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
				c.Settings = append(c.Settings, Setting{Key: key, Value: yamlValue(v), Line: k.Line, parent: parent, list: v.Kind == yaml.SequenceNode})
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
