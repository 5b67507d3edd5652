package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A node named like a file of pki/ is refused with exit 3 (invalid input)
// by `config validate` and by `pki`, which writes nothing; with no role it
// is exit 3 as well (Validate panicked on it). An oversized cluster.yaml is
// exit 3 too.
func TestConfigValidateRefusesReservedNodeNames(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, e, code := run(t, base, "init", "--provider", "nspawn"); code != 0 {
		t.Fatalf("init: %d %s", code, e)
	}
	p := filepath.Join(base, "khw", "cluster.yaml")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to, words string }{
		{"name: w1,", "name: ca-key,", "nodes[4] (ca-key).name: \"ca-key\": collides with a file khw writes"},
		{"name: w2,", "name: kubernetes-key,", "nodes[5] (kubernetes-key).name"},
		{"name: w1, role: worker,", "name: admin,", "nodes[4] (admin).role"},
	} {
		doc := strings.Replace(string(data), tc.from, tc.to, 1)
		if doc == string(data) {
			t.Fatalf("%q is not in cluster.yaml", tc.from)
		}
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"config validate", "pki"} {
			_, e, code := run(t, base, strings.Fields(cmd)...)
			if code != exitInvalid || !strings.Contains(e, tc.words) {
				t.Errorf("%s with %s: exit %d (want %d), stderr %q lacks %q", cmd, tc.to, code, exitInvalid, e, tc.words)
			}
		}
		if entries, _ := os.ReadDir(filepath.Join(base, "khw", "pki")); len(entries) != 0 {
			t.Errorf("%s: khw pki wrote %d files", tc.to, len(entries))
		}
	}

	big := append(append([]byte{}, data...), []byte("#"+strings.Repeat("x", 1<<20))...)
	if err := os.WriteFile(p, big, 0o600); err != nil {
		t.Fatal(err)
	}
	_, e, code := run(t, base, "config", "validate")
	if code != exitInvalid || !strings.Contains(e, p+" is ") || !strings.Contains(e, "over the 1048576-byte (1 MiB) limit") {
		t.Errorf("a cluster.yaml over 1 MiB: exit %d, %s", code, e)
	}
}
