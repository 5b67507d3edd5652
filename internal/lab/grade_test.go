package lab

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/steps"
)

// refStep is a step of lab 04 with two files on cp1 and cp2.
type refStep struct{ refs []steps.Reference }

func (s refStep) ID() string    { return labid.Etcd }
func (s refStep) Title() string { return "etcd" }
func (s refStep) Check(context.Context, *steps.Env) ([]steps.Diff, error) {
	return nil, nil
}
func (s refStep) Apply(context.Context, *steps.Env, []steps.Diff) error { return nil }
func (s refStep) Commands(*steps.Env, []steps.Diff) []steps.Command     { return nil }
func (s refStep) References(context.Context, *steps.Env) ([]steps.Reference, error) {
	return s.refs, nil
}

// nodeFiles serves files per node; a read of anything else fails the test.
type nodeFiles struct {
	t     *testing.T
	files map[string]string
	reads []string
}

func (n *nodeFiles) ReadFile(_ context.Context, node, p string) ([]byte, error) {
	n.reads = append(n.reads, node+":"+p)
	s, ok := n.files[node+":"+p]
	if !ok {
		return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	}
	return []byte(s), nil
}
func (n *nodeFiles) Run(context.Context, string, string) (string, error) {
	n.t.Fatal("Run called")
	return "", nil
}

const unitRef = `[Service]
ExecStart=/usr/local/bin/etcd \
  --client-cert-auth \
  --v=2
`

func TestJudgeFilesExplainsOnlyWhatDiffers(t *testing.T) {
	const unit = "/etc/systemd/system/etcd.service"
	step := refStep{refs: []steps.Reference{
		{Node: "cp1", Path: unit, Data: []byte(unitRef)},
		{Node: "cp2", Path: unit, Data: []byte(unitRef)},
		{Node: "cp1", Path: "/etc/etcd/ca.pem", Input: true, Data: []byte("CA")},
	}}
	co, _ := testCourse(t, step)
	src := &nodeFiles{t: t, files: map[string]string{
		"cp2:" + unit:          strings.Replace(unitRef, "  --client-cert-auth \\\n", "", 1),
		"cp1:/etc/etcd/ca.pem": "CA",
	}}
	diffs := []steps.Diff{
		{Kind: steps.DiffContent, Node: "cp2", Subject: unit, What: "differs"},
		{Kind: steps.DiffContent, Node: "cp1", Subject: "/etc/etcd/ca.pem", What: "mode 0600, want 0644"},
		{Kind: steps.DiffUnit, Node: "cp2", Subject: "etcd.service", What: "not active"},
	}
	g := &Grade{}
	rest, err := co.judgeFiles(context.Background(), mustLab(t, labid.Etcd), diffs, src, g)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(src.reads, " ") != "cp2:"+unit+" cp1:/etc/etcd/ca.pem" {
		t.Errorf("read %v, want only the files the step found different", src.reads)
	}
	if len(g.Mistakes) != 1 || g.Mistakes[0].Kind != grade.Weakens || g.Mistakes[0].Node != "cp2" || g.Mistakes[0].Lab != labid.Etcd {
		t.Errorf("mistakes %v, want cp2's --client-cert-auth", g.Mistakes)
	}
	// ca.pem has khw's content: its mode difference stays, as does the
	// unit's.
	var left []string
	for _, d := range rest {
		left = append(left, d.Node+" "+d.Subject)
	}
	if strings.Join(left, ",") != "cp1 /etc/etcd/ca.pem,cp2 etcd.service" {
		t.Errorf("left %v", left)
	}
}

// A restart that follows from a file khw would replace is no difference of
// its own; a unit that does not run is a mistake.
func TestAddStepDiffsLeavesOutWhatFollows(t *testing.T) {
	g := &Grade{}
	g.addStepDiffs(mustLab(t, labid.Etcd), []steps.Diff{
		{Kind: steps.DiffFollows, Node: "cp1", Subject: "etcd.service", What: "etcd.service must restart to read khw's /etc/systemd/system/etcd.service"},
		{Kind: steps.DiffUnit, Node: "cp2", Subject: "etcd.service", What: "etcd.service is not running"},
		{Node: "cp3", Subject: "/usr/local/bin/etcd", What: "/usr/local/bin/etcd differs"},
	})
	if len(g.Mistakes) != 1 || g.Mistakes[0].Node != "cp2" || len(g.Differences) != 1 || g.Differences[0].Node != "cp3" {
		t.Fatalf("mistakes %v, differences %v", g.Mistakes, g.Differences)
	}
}

// A required node setting the step found wrong is a mistake with its
// evidence, unless the lab excuses it on that node: then a variant.
func TestRequiredSettingsAreMistakesUnlessExcused(t *testing.T) {
	l := mustLab(t, labid.Workers)
	diffs := []steps.Diff{
		{Kind: steps.DiffRequired, Node: "w1", Subject: "sysctl net.ipv4.ip_forward", What: "net.ipv4.ip_forward is not 1", Evidence: "/proc/sys/net/ipv4/ip_forward = 0", Fix: "sysctl -w net.ipv4.ip_forward=1"},
		{Kind: steps.DiffRequired, Node: "w2", Subject: "swap", What: "swap is on", Evidence: "swapon --show lists a swap area", Fix: "swapoff -a"},
	}
	l.excuse = func(_ context.Context, d steps.Diff, _ labcheck.Source) (grade.Finding, bool, error) {
		return grade.Finding{Node: d.Node, Kind: grade.Variant, What: "excused"}, d.Subject == "swap", nil
	}
	g := &Grade{}
	rest, err := applyExcuses(context.Background(), l, diffs, nil, g)
	if err != nil {
		t.Fatal(err)
	}
	g.addStepDiffs(l, rest)
	if len(g.Variants) != 1 || g.Variants[0].Node != "w2" {
		t.Errorf("variants %v, want w2's swap", g.Variants)
	}
	if len(g.Mistakes) != 1 || g.Mistakes[0].Node != "w1" || g.Mistakes[0].Kind != grade.Breaks ||
		g.Mistakes[0].Evidence != "/proc/sys/net/ipv4/ip_forward = 0" || g.Mistakes[0].Fix == "" || len(g.Differences) != 0 {
		t.Errorf("mistakes %v, differences %v; want w1's ip_forward as a mistake with its evidence", g.Mistakes, g.Differences)
	}
}
