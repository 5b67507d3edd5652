package steps

import (
	"context"
	"slices"
	"strings"
	"testing"
)

func ids(steps []Step) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.ID())
	}
	return out
}

func TestSelect(t *testing.T) {
	all := []Step{clean("01-machines", ""), clean("02-pki", ""), clean("03-kubeconfig", ""), clean("04-etcd", "")}
	tests := []struct {
		from, until string
		want        []string
		err         string
	}{
		{"", "", []string{"01-machines", "02-pki", "03-kubeconfig", "04-etcd"}, ""},
		{"02-pki", "", []string{"02-pki", "03-kubeconfig", "04-etcd"}, ""},
		{"", "02-pki", []string{"01-machines", "02-pki"}, ""},
		{"03", "etcd", []string{"03-kubeconfig", "04-etcd"}, ""},
		{"pki", "pki", []string{"02-pki"}, ""},
		{"3", "4", []string{"03-kubeconfig", "04-etcd"}, ""},
		{"0", "", nil, `--from: no step "0"`},
		{"00", "", nil, `--from: no step "00"`},
		{"05-cp", "", nil, `--from: no step "05-cp": valid steps are 01-machines, 02-pki, 03-kubeconfig, 04-etcd`},
		{"", "x", nil, `--until: no step "x"`},
		{"04-etcd", "02-pki", nil, "--from 04-etcd comes after --until 02-pki"},
	}
	for _, tt := range tests {
		got, err := Select(all, tt.from, tt.until)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Select(%q,%q) err = %v, want %q", tt.from, tt.until, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(ids(got), tt.want) {
			t.Errorf("Select(%q,%q) = %v, %v; want %v", tt.from, tt.until, ids(got), err, tt.want)
		}
	}

	if _, err := Select([]Step{clean("04-etcd", ""), clean("04-etcd", "")}, "", ""); err == nil || !strings.Contains(err.Error(), `"04-etcd" appears twice`) {
		t.Errorf("duplicate IDs: err = %v", err)
	}
	if _, err := Lookup([]Step{clean("04-etcd", ""), clean("04-etcd-tls", "")}, "04"); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("ambiguous lookup: err = %v", err)
	}
}

func TestRunFromUntilRunsOnlyThatRange(t *testing.T) {
	r, out := newRunner(t)
	a, b, c := dirty("01-a", "A"), dirty("02-b", "B"), dirty("03-c", "C")
	rep, err := r.Run(context.Background(), []Step{a, b, c}, Options{From: "02-b", Until: "02-b"})
	if err != nil {
		t.Fatal(err)
	}
	if a.checks != 0 || c.checks != 0 || b.applies != 1 {
		t.Fatalf("checks a=%d c=%d, applies b=%d", a.checks, c.checks, b.applies)
	}
	if len(rep.Steps) != 1 || rep.Steps[0].ID != "02-b" {
		t.Fatalf("report %+v", rep.Steps)
	}
	matchLines(t, out.String(), `✓ 02-b  B  \(applied 2 changes, `+dur+`\)`)

	if _, err := r.Run(context.Background(), []Step{a}, Options{From: "nope"}); err == nil || a.checks != 0 {
		t.Fatalf("bad --from: err %v, checks %d", err, a.checks)
	}
}
