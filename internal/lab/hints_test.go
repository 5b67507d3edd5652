package lab

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// TestHintLadder climbs the ladders of two mistakes one rung per
// NextHint, as khw lab check --hints and khw lab hint do.
func TestHintLadder(t *testing.T) {
	d := state.Dir{Root: t.TempDir(), Name: "t"}
	l, err := Lookup(labid.ControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := NextHint(&out, d, l, "en"); !errors.Is(err, ErrNoHints) || !strings.Contains(err.Error(), "khw lab check 05 --hints") {
		t.Fatalf("no check yet: %v", err)
	}

	g := &Grade{Mistakes: []grade.Finding{
		{Lab: labid.ControlPlane, Node: "cp2", What: "cp2 allows every request", Evidence: "--authorization-mode=AlwaysAllow", Fix: "--authorization-mode=Node,RBAC"},
		{Lab: labid.Etcd, Node: "cp3", What: "etcd on cp3 listens on 127.0.0.1 only", Fix: "--listen-client-urls=https://192.168.122.13:2379,https://127.0.0.1:2379"},
		{Lab: labid.Etcd, Node: "cp3", What: "etcd on cp3 has another token", Fix: "--initial-cluster-token=khw"},
	}}
	if n, err := g.writeFirstHints(&out, d, l, "", "en"); err != nil || n != 3 {
		t.Fatalf("writeFirstHints: %d, %v", n, err)
	}
	first := out.String()
	for _, want := range []string{"✗ lab 05-control-plane: 3 mistakes", "  1. Something is wrong on cp2 (lab 05-control-plane)", "journalctl -u kube-apiserver",
		"  2, 3. Something is wrong on cp3 (lab 04-etcd)", "journalctl -u etcd", "khw lab hint 05"} {
		if !strings.Contains(first, want) {
			t.Errorf("first hints lack %q:\n%s", want, first)
		}
	}
	if strings.Contains(first, "AlwaysAllow") || strings.Contains(first, "Node,RBAC") {
		t.Errorf("the first hints give the answer away:\n%s", first)
	}
	if n, ok := openHints(d, l.ID); !ok || n != 3 {
		t.Errorf("openHints = %d, %v; want 3 (khw lab list shows that instead of the differences)", n, ok)
	}

	want := []string{
		"Mistake 1 of 3, hint 2 of 3:\n  cp2 allows every request",
		"Mistake 1 of 3, hint 3 of 3:\n  Fix: --authorization-mode=Node,RBAC\nThat was the fix",
		"Mistake 2 of 3, hint 2 of 3:\n  etcd on cp3 listens on 127.0.0.1 only",
		"Mistake 2 of 3, hint 3 of 3:\n  Fix: --listen-client-urls",
		"Mistake 3 of 3, hint 2 of 3:\n  etcd on cp3 has another token",
		"Mistake 3 of 3, hint 3 of 3:\n  Fix: --initial-cluster-token=khw",
		"Every hint for the 3 mistakes of lab 05-control-plane is given",
		"Every hint for the 3 mistakes",
	}
	for i, w := range want {
		out.Reset()
		if err := NextHint(&out, d, l, "en"); err != nil {
			t.Fatalf("hint %d: %v", i+1, err)
		}
		if !strings.Contains(out.String(), w) {
			t.Errorf("hint %d: got\n%s\nwant it to contain %q", i+1, out.String(), w)
		}
	}

	// A passing check forgets them.
	if err := dropHints(d, l.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(hintPath(d, l.ID)); !os.IsNotExist(err) {
		t.Errorf("hints kept after a pass: %v", err)
	}

	// A lab without detectors climbs the ladders of the step's differences.
	g = &Grade{Differences: []steps.Diff{{Node: "w1", What: "no route to 10.200.1.0/24", Fix: "systemctl restart khw-pod-routes"}}}
	pn, _ := Lookup(labid.PodNetwork)
	if fs := g.hintFindings(pn); len(fs) != 1 || fs[0].Lab != labid.PodNetwork || fs[0].Fix != "systemctl restart khw-pod-routes" {
		t.Errorf("differences as findings: %+v", fs)
	}
}

// TestNextHintRefusesDamagedState: a hints file whose counters cannot
// index a ladder (a negative one, one past the last rung, a count for
// another number of mistakes) is an error naming the file, what is wrong
// and how to make it again, and the file is left as it was.
func TestNextHintRefusesDamagedState(t *testing.T) {
	l, err := Lookup(labid.ControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	finding := `{"lab": "05-control-plane", "node": "cp1", "what": "w", "fix": "f"}`
	for _, tc := range []struct{ name, file, want string }{
		{"negative", `{"findings": [` + finding + `], "given": [-1]}`, "given[0] is -1, not 0 to 3"},
		{"past the last rung", `{"findings": [` + finding + `, ` + finding + `], "given": [3, 4]}`, "given[1] is 4, not 0 to 3"},
		{"a count per mistake missing", `{"findings": [` + finding + `], "given": []}`, "it counts hints for 0 mistakes but lists 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := state.Dir{Root: t.TempDir(), Name: "t"}
			p := hintPath(d, l.ID)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err := NextHint(&out, d, l, "en")
			if err == nil || !strings.Contains(err.Error(), p+" is damaged: "+tc.want) || !strings.Contains(err.Error(), "khw lab check 05-control-plane --hints") {
				t.Fatalf("NextHint: %v (printed %q); want an error naming %s, %q and the fix", err, out.String(), p, tc.want)
			}
			if data, _ := os.ReadFile(p); string(data) != tc.file {
				t.Errorf("the file changed to %s", data)
			}
		})
	}
}
