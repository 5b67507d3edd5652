package grade

import (
	"bytes"
	"fmt"
	"path"
	"strings"

	"github.com/khw-dev/khw/internal/config"
)

// File is one file that a lab's step installs on one node: khw's reference
// and what the node has.
type File struct {
	// Lab is the lab whose step installs it.
	Lab  string
	Node config.Node
	// Path is the absolute path on the node.
	Path string
	// Input marks a file copied from the state directory (a certificate, a
	// key, a kubeconfig, the encryption config): it is compared as bytes,
	// never parsed, and its content is never shown.
	Input bool
	// Ref is khw's reference content.
	Ref []byte
	// Source is the jumpbox's copy of Ref, for fixes; "" for the one
	// under the state directory's nodes/<node>/.
	Source string
	// Got is the node's content; Missing when the node has no such file.
	Got     []byte
	Missing bool
}

// Judge compares every file with its reference and judges each difference
// by the rules: a setting that breaks or weakens the cluster, or that
// differs from the node's peers, is a mistake with what it breaks and the
// fix; any other difference is a Variant with what the setting does (the
// template's comment). files must hold the step's files on every node it
// handles (the unchanged ones too), so that peers can be compared. Files
// equal to their reference give no finding unless a peer or another
// component disagrees with them. The error is for a reference that does not
// parse (a khw bug).
func Judge(c *config.Cluster, files []File) ([]Finding, error) {
	var all []*parsed
	byNode := map[string]map[string]*parsed{}
	var out []Finding
	for _, f := range files {
		if f.Input {
			continue
		}
		ref, err := Parse(f.Path, f.Ref)
		if err != nil {
			return nil, fmt.Errorf("khw's reference %w", err)
		}
		p := &parsed{f: f, ref: ref}
		if !f.Missing {
			got, err := Parse(f.Path, f.Got)
			if err != nil {
				out = append(out, Finding{Lab: f.Lab, Node: f.Node.Name, Kind: Breaks, Subject: f.Path,
					What:     f.Path + " cannot be read by its program: " + strings.TrimPrefix(err.Error(), f.Path+": "),
					Evidence: f.Path + " on " + f.Node.Name,
					Fix:      "correct its syntax (khw's version: " + stateCopy(f) + "), then " + restart(f.Path)})
				continue
			}
			p.got = got
		}
		all = append(all, p)
		if byNode[f.Node.Name] == nil {
			byNode[f.Node.Name] = map[string]*parsed{}
		}
		byNode[f.Node.Name][f.Path] = p
	}
	out = append(out, judgeInputs(files)...)

	judged := judgedSet{}
	// accepted are the settings a rule checked and found fine: a rule
	// knows that their value works.
	accepted := map[[3]string]string{}
	for _, p := range all {
		f := p.f
		if p.got == nil {
			out = append(out, Finding{Lab: f.Lab, Node: f.Node.Name, Kind: Breaks, Subject: f.Path,
				What: f.Path + " is missing", Evidence: "no file " + f.Path + " on " + f.Node.Name,
				Fix: "install khw's version (" + stateCopy(f) + ") at " + f.Path + ", then " + restart(f.Path)})
			continue
		}
		other := func(op, key string) (string, bool) {
			q := byNode[f.Node.Name][op]
			if q == nil {
				return "", false
			}
			if q.got == nil {
				return "", false
			}
			return q.got.Get(key)
		}
		for _, r := range rules {
			if r.peers || r.path != f.Path {
				continue
			}
			v := value{Node: f.Node, Cluster: c, Other: other}
			v.Ref, v.RefSet = p.ref.Get(r.key)
			v.Got, v.GotSet = p.got.Get(r.key)
			if !v.RefSet && !v.GotSet {
				continue
			}
			problem := r.check(v)
			if problem == "" {
				accepted[[3]string{f.Node.Name, f.Path, r.key}] = r.why
				continue
			}
			judged.mark(f.Node.Name, f.Path, r.key)
			out = append(out, Finding{Lab: f.Lab, Node: f.Node.Name, Kind: r.kind, Subject: f.Path + " " + r.key,
				What: fmt.Sprintf("%s in %s %s", r.key, path.Base(f.Path), problem), Why: r.why,
				Evidence: evidence(p.got, f, r.key),
				Fix:      fix(p.ref, f, r.key)})
		}
	}
	out = append(out, judgePeers(all, judged)...)

	for _, p := range all {
		if p.got == nil {
			continue
		}
		for _, ch := range Compare(p.ref, p.got) {
			if judged.has(p.f.Node.Name, p.f.Path, ch.Key) {
				continue
			}
			fd := Finding{Lab: p.f.Lab, Node: p.f.Node.Name, Kind: NotJudged, Subject: p.f.Path + " " + ch.Key,
				What: path.Base(p.f.Path) + ": " + ch.String(), Why: ch.Meaning,
				Evidence: evidence(p.got, p.f, ch.Key)}
			if why, ok := harmlessChange(p.f.Path, ch); ok {
				fd.Kind = Variant
				fd.Why = strings.TrimSpace(ch.Meaning + " " + why)
			} else if why, ok := accepted[[3]string{p.f.Node.Name, p.f.Path, ch.Key}]; ok {
				fd.Kind = Variant
				fd.Why = strings.TrimSpace(ch.Meaning + " A rule accepts this value (" + why + ").")
			}
			out = append(out, fd)
		}
	}
	return out, nil
}

// judgedSet holds the settings (node, path, key) a rule has judged: they
// are not listed again as variants.
type judgedSet map[[3]string]bool

func (j judgedSet) mark(node, path, key string)     { j[[3]string{node, path, key}] = true }
func (j judgedSet) has(node, path, key string) bool { return j[[3]string{node, path, key}] }

// parsed is a File read as settings; got is nil for a missing file.
type parsed struct {
	f        File
	ref, got *Config
}

// judgePeers applies the peers rules: among the nodes that have the file,
// the nodes whose value is not the most common one (on a tie: not the
// reference's) are inconsistent.
func judgePeers(all []*parsed, judged judgedSet) []Finding {
	var out []Finding
	for _, r := range rules {
		if !r.peers {
			continue
		}
		var group []*parsed
		count := map[string]int{}
		for _, p := range all {
			if p.f.Path != r.path || p.got == nil {
				continue
			}
			v, _ := p.got.Get(r.key)
			group = append(group, p)
			count[v]++
		}
		if len(count) < 2 {
			continue
		}
		best, n, tie := "", 0, false
		for v, c := range count {
			switch {
			case c > n:
				best, n, tie = v, c, false
			case c == n:
				tie = true
			}
		}
		known := true
		if tie {
			known = false
			for _, p := range group {
				if v, ok := p.ref.Get(r.key); ok && count[v] == n {
					best, known = v, true
				}
			}
		}
		for _, p := range group {
			v, _ := p.got.Get(r.key)
			if known && v == best || judged.has(p.f.Node.Name, p.f.Path, r.key) {
				continue
			}
			var others []string
			for _, q := range group {
				if w, _ := q.got.Get(r.key); w != v {
					others = append(others, q.f.Node.Name+" "+orUnset(w))
				}
			}
			judged.mark(p.f.Node.Name, p.f.Path, r.key)
			want := best
			if !known {
				want, _ = p.ref.Get(r.key)
			}
			out = append(out, Finding{Lab: p.f.Lab, Node: p.f.Node.Name, Kind: r.kind, Subject: p.f.Path + " " + r.key,
				What:     fmt.Sprintf("%s in %s is %s on %s but not on its peers (%s)", r.key, path.Base(p.f.Path), orUnset(v), p.f.Node.Name, strings.Join(others, ", ")),
				Why:      r.why,
				Evidence: evidence(p.got, p.f, r.key),
				Fix:      "use one value on every " + roleName(p.f.Node.Role) + ": set " + spell(p.ref, r.key, want) + " in " + p.f.Path + ", then " + restart(p.f.Path)})
		}
	}
	return out
}

// roleName is how a role reads in a sentence.
func roleName(role string) string {
	if role == config.RoleControlPlane {
		return "control plane"
	}
	return role
}

func orUnset(v string) string {
	if v == "" {
		return "not set"
	}
	return v
}

// judgeInputs: a copied file that differs from the state directory's copy
// on some nodes of a role and not on others is inconsistent (the nodes do
// not share the same key, CA or encryption config); one that differs on
// every node is Wrong.
func judgeInputs(files []File) []Finding {
	groups := map[string][]File{}
	var order []string
	for _, f := range files {
		if !f.Input {
			continue
		}
		k := f.Node.Role + "\x00" + f.Path
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], f)
	}
	var out []Finding
	for _, k := range order {
		g := groups[k]
		// Only a file that is the same on every node of the group (a key,
		// the CA, the encryption config; not a node's own certificate) can
		// be inconsistent with the peers.
		shared := true
		for _, f := range g {
			shared = shared && bytes.Equal(f.Ref, g[0].Ref)
		}
		var same []string
		for _, f := range g {
			if shared && !f.Missing && bytes.Equal(f.Got, f.Ref) {
				same = append(same, f.Node.Name)
			}
		}
		for _, f := range g {
			if !f.Missing && bytes.Equal(f.Got, f.Ref) {
				continue
			}
			fd := Finding{Lab: f.Lab, Node: f.Node.Name, Kind: Wrong, Subject: f.Path,
				Evidence: fmt.Sprintf("sha256 of %s on %s differs from the state directory's %s", f.Path, f.Node.Name, stateCopy(f)),
				Fix:      "copy " + stateCopy(f) + " to " + f.Path + " on " + f.Node.Name + ", then " + restart(f.Path)}
			switch {
			case f.Missing:
				fd.Kind = Breaks
				fd.What = f.Path + " is missing"
				fd.Evidence = "no file " + f.Path + " on " + f.Node.Name
			case len(same) > 0:
				fd.Kind = Inconsistent
				verb := " have"
				if len(same) == 1 {
					verb = " has"
				}
				fd.What = f.Path + " is not the file that " + strings.Join(same, ", ") + verb
				fd.Why = "what one node signs, encrypts or trusts with it, its peers must accept: the same file on every " + roleName(f.Node.Role)
			default:
				fd.What = f.Path + " is not the state directory's copy"
			}
			out = append(out, fd)
		}
	}
	return out
}

// stateCopy names where khw keeps its version of f.
func stateCopy(f File) string {
	if f.Source != "" {
		return f.Source
	}
	return "$KHW_STATE_DIR/$KHW_CLUSTER/nodes/" + f.Node.Name + f.Path
}

// spell writes key = value in the syntax of the file's format.
func spell(c *Config, key, v string) string {
	switch c.Format {
	case Unit:
		if strings.HasPrefix(key, "--") {
			if v == "true" {
				return key
			}
			return key + "=" + v
		}
		section, name, _ := strings.Cut(key, ".")
		return "[" + section + "] " + name + "=" + v
	case YAML:
		if c.isList(key) {
			// A list must be written as one: `clusterDNS: 10.32.0.10`
			// does not parse as the kubelet's []string.
			return key + ": [" + strings.ReplaceAll(v, ",", ", ") + "]"
		}
		return key + ": " + v
	case TOML, Sysctl:
		return key + " = " + v
	case HAProxy:
		section, directive, _ := strings.Cut(key, ": ")
		if v == "on" {
			v = ""
		}
		return strings.TrimSpace(directive+" "+v) + " (in " + section + ")"
	}
	return key
}

func evidence(got *Config, f File, key string) string {
	for _, s := range got.Settings {
		if s.Key == key {
			return fmt.Sprintf("%s line %d on %s: %s", f.Path, s.Line, f.Node.Name, spell(got, key, shown(key, s.Value)))
		}
	}
	return fmt.Sprintf("%s on %s does not set %s", f.Path, f.Node.Name, key)
}

func fix(ref *Config, f File, key string) string {
	v, ok := ref.Get(key)
	if !ok {
		return "remove " + key + " from " + f.Path + ", then " + restart(f.Path)
	}
	return "set " + spell(ref, key, v) + " in " + f.Path + " (khw's value), then " + restart(f.Path)
}

// restart says how the program that reads p reads it again.
func restart(p string) string {
	base := path.Base(p)
	switch {
	case strings.HasSuffix(base, ".service"):
		return "systemctl daemon-reload && systemctl restart " + base
	case p == kubeletYAML || strings.HasPrefix(p, "/var/lib/kubelet/"):
		return "systemctl restart kubelet"
	case strings.HasPrefix(p, "/var/lib/kube-proxy/"):
		return "systemctl restart kube-proxy"
	case p == containerdTOML:
		return "systemctl restart containerd"
	case p == haproxyCfg:
		return "systemctl reload haproxy"
	case p == schedulerYAML:
		return "systemctl restart kube-scheduler"
	case strings.HasPrefix(p, "/etc/sysctl.d/"):
		return "sysctl --system"
	case strings.HasPrefix(p, "/etc/modules-load.d/"):
		return "systemctl restart systemd-modules-load"
	case strings.HasPrefix(p, "/etc/etcd/"):
		return "systemctl restart etcd"
	case strings.HasPrefix(p, "/var/lib/kubernetes/"), strings.HasPrefix(p, "/etc/kubernetes/"):
		return "restart the control-plane units that read it"
	}
	return "restart what reads it"
}
