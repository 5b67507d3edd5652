package render

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current templates")

const goldenDir = "testdata/golden"

// defaultCluster is the cluster of cluster-facts.md with provider p, after an
// optional change.
func defaultCluster(t *testing.T, provider string, change func(c *config.Cluster)) *config.Cluster {
	t.Helper()
	c := config.Default("khw", config.ArchARM64, provider)
	if change != nil {
		change(c)
	}
	if _, err := c.Validate(); err != nil {
		t.Fatalf("test cluster does not validate: %v", err)
	}
	return c
}

// renderTree renders every node of c with the provider's default facts into
// a map "node/target/path" → content.
func renderTree(t *testing.T, c *config.Cluster) map[string][]byte {
	t.Helper()
	facts, err := DefaultFacts(c.Provider)
	if err != nil {
		t.Fatal(err)
	}
	tree := map[string][]byte{}
	for _, n := range c.Nodes {
		files, err := Node(c, n.Name, facts)
		if err != nil {
			t.Fatalf("Node(%s): %v", n.Name, err)
		}
		for _, f := range files {
			tree[path.Join(n.Name, f.Path)] = f.Data
		}
	}
	return tree
}

// readTree reads every file below dir into a map keyed by slash path.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	tree := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		tree[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return tree
}

func writeTree(t *testing.T, dir string, tree map[string][]byte) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for rel, b := range tree {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// firstDiff describes the first differing line of two texts.
func firstDiff(want, got []byte) string {
	wl, gl := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("line %d:\n  golden: %q\n  now:    %q", i+1, w, g)
		}
	}
	return "(identical lines, different bytes)"
}

// compareTrees fails for every path whose content differs or that is only on
// one side.
func compareTrees(t *testing.T, dir string, want, got map[string][]byte) {
	t.Helper()
	var paths []string
	for p := range want {
		paths = append(paths, p)
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		w, inWant := want[p]
		g, inGot := got[p]
		switch {
		case !inWant:
			t.Errorf("%s/%s is rendered but has no golden file (run go test ./internal/render -update and review the diff)", dir, p)
		case !inGot:
			t.Errorf("%s/%s is a golden file but is no longer rendered (run -update if that is intended)", dir, p)
		case !bytes.Equal(w, g):
			t.Errorf("%s/%s differs from its golden file at %s\n(run go test ./internal/render -update and review the diff)", dir, p, firstDiff(w, g))
		}
	}
}

// TestGoldenDefaultCluster compares every rendered file of the default libvirt
// cluster, and the manifests, byte for byte with testdata/golden/libvirt and
// testdata/golden/manifests.
func TestGoldenDefaultCluster(t *testing.T) {
	c := defaultCluster(t, config.ProviderLibvirt, nil)
	got := renderTree(t, c)
	manifests, err := Manifests(c)
	if err != nil {
		t.Fatal(err)
	}
	gotManifests := map[string][]byte{}
	for _, f := range manifests {
		gotManifests[f.Path] = f.Data
	}
	nodesDir := filepath.Join(goldenDir, "libvirt")
	manifestsDir := filepath.Join(goldenDir, "manifests")
	if *update {
		writeTree(t, nodesDir, got)
		writeTree(t, manifestsDir, gotManifests)
	}
	compareTrees(t, nodesDir, readTree(t, nodesDir), got)
	compareTrees(t, manifestsDir, readTree(t, manifestsDir), gotManifests)
}

// TestGoldenVariants keeps the variants reviewable: testdata/golden/<variant>
// holds only the files that differ from, or are missing in, the default
// libvirt tree, and <variant>/REMOVED lists default files the variant no
// longer renders. Of the workers only w1 (cert issued by khw) and w3 (TLS
// bootstrap) are stored; w2 is like w1 with its own podCIDR, which the
// semantic tests check for every worker.
func TestGoldenVariants(t *testing.T) {
	base := renderTree(t, defaultCluster(t, config.ProviderLibvirt, nil))
	variants := []struct {
		name   string
		change func(c *config.Cluster)
		prov   string
	}{
		{"nspawn", nil, config.ProviderNspawn},
		{"mybridge", func(c *config.Cluster) { c.Kubernetes.CNI = config.CNIMyBridge }, config.ProviderLibvirt},
		{"tcg", func(c *config.Cluster) { c.Libvirt = &config.Libvirt{DomainType: config.DomainTypeQEMU} }, config.ProviderLibvirt},
	}
	skipped := func(p string) bool { return strings.HasPrefix(p, "w2/") }
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			got := renderTree(t, defaultCluster(t, v.prov, v.change))
			diff := map[string][]byte{}
			var removed []string
			for p, b := range got {
				if old, ok := base[p]; (!ok || !bytes.Equal(old, b)) && !skipped(p) {
					diff[p] = b
				}
			}
			for p := range base {
				if _, ok := got[p]; !ok && !skipped(p) {
					removed = append(removed, p)
				}
			}
			sort.Strings(removed)
			if len(removed) > 0 {
				diff["REMOVED"] = []byte(strings.Join(removed, "\n") + "\n")
			}
			dir := filepath.Join(goldenDir, v.name)
			if *update {
				writeTree(t, dir, diff)
			}
			compareTrees(t, dir, readTree(t, dir), diff)
		})
	}
}
