package render

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/templates"
)

// TestAllWritesPrunesAndIsIdempotent follows a state directory through a first
// render, a no-op second render, a CNI switch, and a removed node.
func TestAllWritesPrunesAndIsIdempotent(t *testing.T) {
	d := t.TempDir()
	c := defaultCluster(t, config.ProviderLibvirt, nil)

	rep, err := All(c, nil, d)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range c.Nodes {
		files, _ := Node(c, n.Name, libvirtFacts())
		for _, f := range files {
			want = append(want, "nodes/"+n.Name+f.Path)
		}
	}
	want = append(want, "manifests/apiserver-to-kubelet-rbac.yaml", "manifests/coredns.yaml", "manifests/tls-bootstrap-rbac.yaml")
	sort.Strings(want)
	if strings.Join(rep.Written, "\n") != strings.Join(want, "\n") || len(rep.Unchanged) != 0 || len(rep.Removed) != 0 {
		t.Fatalf("first render: written %d (want %d), unchanged %v, removed %v", len(rep.Written), len(want), rep.Unchanged, rep.Removed)
	}
	for _, rel := range want {
		st, err := os.Stat(filepath.Join(d, rel))
		if err != nil || st.Mode().Perm() != ConfigMode {
			t.Errorf("%s: %v mode %v", rel, err, st.Mode())
		}
	}
	if st, err := os.Stat(filepath.Join(d, "nodes")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("nodes dir: %v %v, want mode 0700", err, st.Mode())
	}
	hosts, _ := os.ReadFile(filepath.Join(d, "nodes/cp1/etc/hosts"))
	if !strings.Contains(string(hosts), "192.168.122.23\tw3.kubernetes.local w3") {
		t.Errorf("nodes/cp1/etc/hosts: %s", hosts)
	}

	// A second run with the same input changes nothing.
	rep, err = All(c, nil, d)
	if err != nil || rep.Changed() || len(rep.Unchanged) != len(want) {
		t.Fatalf("second render: %v written=%v removed=%v", err, rep.Written, rep.Removed)
	}

	// Leftovers: a stray file in a node dir, a temp file of an interrupted
	// write, a node that is no longer in cluster.yaml, and an extra manifest,
	// which All must leave alone.
	stray := map[string]string{
		"nodes/w1/etc/old.conf":              "x",
		"nodes/w1/etc/.hosts.tmp-123":        "x",
		"nodes/w9/etc/systemd/system/x.unit": "x",
		"manifests/extra.yaml":               "x",
	}
	for rel, content := range stray {
		p := filepath.Join(d, rel)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Switch the CNI: the bridge configs go, the mybridge files come.
	c.Kubernetes.CNI = config.CNIMyBridge
	rep, err = All(c, nil, d)
	if err != nil {
		t.Fatal(err)
	}
	wantRemoved := []string{"nodes/w1/etc/.hosts.tmp-123", "nodes/w1/etc/old.conf", "nodes/w9/etc/systemd/system/x.unit"}
	var wantWritten []string
	for _, w := range []string{"w1", "w2", "w3"} {
		wantRemoved = append(wantRemoved, "nodes/"+w+"/etc/cni/net.d/10-bridge.conf", "nodes/"+w+"/etc/cni/net.d/99-loopback.conf")
		wantWritten = append(wantWritten, "nodes/"+w+"/etc/cni/net.d/10-mybridge.conf", "nodes/"+w+"/etc/cni/net.d/99-myloopback.conf",
			"nodes/"+w+"/etc/containerd/config.toml", "nodes/"+w+"/opt/cni/bin/mybridge", "nodes/"+w+"/opt/cni/bin/myloopback")
	}
	sort.Strings(wantRemoved)
	sort.Strings(wantWritten)
	if strings.Join(rep.Removed, ",") != strings.Join(wantRemoved, ",") {
		t.Errorf("removed %v\nwant    %v", rep.Removed, wantRemoved)
	}
	if strings.Join(rep.Written, ",") != strings.Join(wantWritten, ",") {
		t.Errorf("written %v\nwant    %v", rep.Written, wantWritten)
	}
	if _, err := os.Stat(filepath.Join(d, "nodes/w9")); !os.IsNotExist(err) {
		t.Errorf("nodes/w9 should be gone with its empty directories: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d, "manifests/extra.yaml")); err != nil {
		t.Errorf("manifests/extra.yaml must survive: %v", err)
	}
	st, err := os.Stat(filepath.Join(d, "nodes/w2/opt/cni/bin/mybridge"))
	if err != nil || st.Mode().Perm() != ScriptMode {
		t.Errorf("mybridge in the state dir: %v mode %v, want %v", err, st.Mode(), ScriptMode)
	}
}

func TestAllErrorsLeaveStateUntouched(t *testing.T) {
	c := defaultCluster(t, config.ProviderLibvirt, nil)
	for _, tc := range []struct {
		name    string
		c       *config.Cluster
		facts   map[string]NodeFacts
		errPart string
	}{
		{"facts for an unknown node", c, map[string]NodeFacts{"w7": libvirtFacts()}, `"w7"`},
		{"invalid facts", c, map[string]NodeFacts{"w2": {}}, "ResolvConf"},
		{"invalid cluster", func() *config.Cluster { b := *c; b.Kubernetes.CNI = "flannel"; return &b }(), nil, "kubernetes.cni"},
		{"no cluster", nil, nil, "no cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			_, err := All(tc.c, tc.facts, d)
			if err == nil || !strings.Contains(err.Error(), tc.errPart) {
				t.Fatalf("err = %v, want one containing %q", err, tc.errPart)
			}
			entries, _ := os.ReadDir(d)
			if len(entries) != 0 {
				t.Errorf("state dir has %d entries after a failed render", len(entries))
			}
		})
	}
	if _, err := Node(c, "w7", libvirtFacts()); err == nil || !strings.Contains(err.Error(), "lb, cp1, cp2, cp3, w1, w2, w3") {
		t.Errorf("Node(w7): %v, want an error listing the nodes", err)
	}
}

// TestTemplatesAllUsed: every template file is rendered by some spec (or only
// holds shared definitions) and every spec's source exists, so a template can
// neither be forgotten nor misnamed.
func TestTemplatesAllUsed(t *testing.T) {
	used := map[string]bool{}
	for _, s := range nodeSpecs {
		used[s.src] = true
	}
	for _, s := range manifestSpecs {
		used[s.src] = true
	}
	for src := range used {
		if _, err := fs.Stat(templates.FS, src); err != nil {
			t.Errorf("spec source %s: %v", src, err)
		}
	}
	fs.WalkDir(templates.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !used[p] && !strings.HasSuffix(p, "/header.tmpl") {
			t.Errorf("templates/%s is not rendered by any spec", p)
		}
		return nil
	})
}

// TestParseTemplatesReportsErrors: a broken template is an error naming it.
func TestParseTemplatesReportsErrors(t *testing.T) {
	fsys := fstest.MapFS{"node/x/bad.tmpl": &fstest.MapFile{Data: []byte("{{.Oops")}}
	if _, err := parseTemplates(fsys); err == nil || !strings.Contains(err.Error(), "templates/node/x/bad.tmpl") {
		t.Errorf("err = %v, want one naming templates/node/x/bad.tmpl", err)
	}
}

// pathRefRE finds absolute paths under the directories where certificates,
// keys, kubeconfigs and component configs live.
var pathRefRE = regexp.MustCompile(`(/etc/etcd|/etc/kubernetes|/var/lib/kubernetes|/var/lib/kubelet|/var/lib/kube-proxy)/[A-Za-z0-9._/-]*[A-Za-z0-9]`)

// TestInputsMatchTemplates: every Input is named by a rendered file of its
// node, and every such path a rendered file names is rendered, an Input, or
// created by the component itself.
func TestInputsMatchTemplates(t *testing.T) {
	c := defaultCluster(t, config.ProviderLibvirt, nil)
	for _, n := range c.Nodes {
		files := nodeFiles(t, c, n.Name, libvirtFacts())
		inputs, err := Inputs(c, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		for _, f := range files {
			text.Write(f.Data)
		}
		known := map[string]bool{}
		for p := range files {
			known[p] = true
		}
		for _, in := range inputs {
			known[in.Path] = true
			if !strings.Contains(text.String(), in.Path) {
				t.Errorf("%s: input %s is not used by any rendered file", n.Name, in.Path)
			}
			secret := strings.HasSuffix(in.Path, "-key.pem") || strings.Contains(in.Path, "kubeconfig") || strings.HasSuffix(in.Path, "encryption-config.yaml")
			if secret != (in.Mode == 0o600) {
				t.Errorf("%s: input %s mode %v", n.Name, in.Path, in.Mode)
			}
		}
		if n.TLSBootstrap {
			known["/var/lib/kubelet/kubeconfig"] = true // written by the kubelet after bootstrap
			known["/var/lib/kubelet/pki"] = true        // --cert-dir, created by the kubelet
		}
		for _, ref := range pathRefRE.FindAllString(text.String(), -1) {
			if !known[ref] {
				t.Errorf("%s: rendered files name %s, which is neither rendered nor an input", n.Name, ref)
			}
		}
	}
	if in, err := Inputs(c, "lb"); err != nil || len(in) != 0 {
		t.Errorf("lb inputs %v, %v", in, err)
	}
}

// TestInputsSourcesExist checks that every Input names a file the state
// directory really holds after pki, kubeconfig and encryption ran — so the
// bring-up can push Inputs without a table of its own.
func TestInputsSourcesAreStatePaths(t *testing.T) {
	c := config.Default("khw", config.ArchAMD64, config.ProviderNspawn)
	want := map[string]bool{}
	for _, n := range c.Nodes {
		ins, err := Inputs(c, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range ins {
			if in.Source == "" || strings.HasPrefix(in.Source, "/") || !strings.Contains(in.What, "D/"+in.Source) {
				t.Errorf("%s %s: Source %q does not match its description %q", n.Name, in.Path, in.Source, in.What)
			}
			want[in.Source] = true
		}
	}
	for _, s := range []string{"pki/ca.pem", "pki/ca-key.pem", "encryption-config.yaml", "kubeconfigs/w3-bootstrap.kubeconfig", "pki/w1.pem", "kubeconfigs/w2.kubeconfig"} {
		if !want[s] {
			t.Errorf("no Input has Source %s", s)
		}
	}
}
