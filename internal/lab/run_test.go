package lab

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/state"
)

func TestAskAnswers(t *testing.T) {
	l, err := Lookup(labid.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in      string
		all     bool
		stopped bool
		errText string
	}{
		{in: "\n"},
		{in: "y\n"},
		{in: "maybe\nA\n", all: true},
		{in: "no\n", stopped: true, errText: "khw lab check " + l.ID},
		{in: "", errText: "--yes"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		all, err := ask(UI{Out: &out}, bufio.NewReader(strings.NewReader(c.in)), l)
		if all != c.all || errors.Is(err, ErrStopped) != c.stopped || (c.errText == "") != (err == nil) {
			t.Errorf("answer %q: all %v, err %v", c.in, all, err)
		}
		if err != nil && !strings.Contains(err.Error(), c.errText) {
			t.Errorf("answer %q: error %q does not say %q", c.in, err, c.errText)
		}
		if want := strings.Count(c.in, "\n") + map[bool]int{true: 1}[c.in == ""]; strings.Count(out.String(), "Go on?") != want {
			t.Errorf("answer %q: asked %d times, want %d:\n%s", c.in, strings.Count(out.String(), "Go on?"), want, out.String())
		}
	}
}

func TestIndentWriterAcrossWrites(t *testing.T) {
	var out bytes.Buffer
	w := &indentWriter{w: &out, bol: true}
	for _, p := range []string{"a\nb", "c\n", "\nd\n"} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	if want := "    a\n    bc\n    \n    d\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

func TestWriteListCutsLongDetail(t *testing.T) {
	var out bytes.Buffer
	rows := []LabStatus{{ID: labid.Etcd, Status: Drifted, Detail: strings.Repeat("x", 200), DoneAt: &time.Time{}}}
	if err := WriteList(&out, rows, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "LAB") || !strings.Contains(lines[1], strings.Repeat("x", 110)+"…") || strings.Contains(lines[1], strings.Repeat("x", 111)) {
		t.Errorf("table:\n%s", out.String())
	}
}

func TestWhatNextSkipsLabsAlreadyDone(t *testing.T) {
	c, _ := testCourse(t)
	etcd := mustLab(t, labid.Etcd)
	if got := c.whatNext(etcd); got != "Next: khw lab "+labid.ControlPlane {
		t.Errorf("nothing done: %q", got)
	}
	for _, id := range []string{labid.ControlPlane, labid.LB} {
		if err := MarkDone(c.S.Dir, id); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.whatNext(etcd); got != "Next: khw lab "+labid.Workers {
		t.Errorf("05 and 06 done: %q", got)
	}
	for _, l := range From(labid.Workers) {
		if err := MarkDone(c.S.Dir, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.whatNext(etcd); !strings.HasPrefix(got, "Every later lab is done") {
		t.Errorf("all done: %q", got)
	}
	if got := c.whatNext(All()[len(All())-1]); got != "That was the last lab." {
		t.Errorf("last lab: %q", got)
	}
}

func TestConfirmDrill(t *testing.T) {
	l, err := Lookup(labid.Failover)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in      string
		yes     bool
		ok      bool
		errText string
	}{
		{in: "y\n", ok: true},
		{in: "YES\n", ok: true},
		{yes: true, ok: true},
		{in: "\n", errText: "khw lab " + l.ID},
		{in: "n\n", errText: "stopped before applying"},
		{in: "", errText: "--yes"},
	} {
		var out bytes.Buffer
		err := confirmDrill(UI{Out: &out, In: strings.NewReader(c.in), Yes: c.yes}, l)
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), c.errText)) {
			t.Errorf("answer %q (yes %v): err %v", c.in, c.yes, err)
		}
		if c.yes != (out.Len() == 0) {
			t.Errorf("answer %q (yes %v): asked %q", c.in, c.yes, out.String())
		}
	}
}

// TestByHandAgainOnAClusterBuiltByUp: a lab done by khw up has no snapshot,
// so the hint must not send the student to a khw lab reset that refuses.
func TestByHandAgainOnAClusterBuiltByUp(t *testing.T) {
	d := state.Dir{Root: t.TempDir(), Name: "khw"}
	c := &Course{S: &cluster.Session{Dir: d, Config: &config.Cluster{Provider: "nspawn"}}}
	etcd := mustLab(t, labid.Etcd)
	got := c.byHandAgain(etcd)
	if strings.Contains(got, "khw lab reset") || !strings.Contains(got, "khw init --name lab --provider nspawn && khw lab 01 --cluster lab") {
		t.Errorf("no snapshot: %q", got)
	}
	if err := c.CanReset(etcd); err == nil {
		t.Fatalf("CanReset passed without a snapshot; the hint's premise is wrong")
	}
	if err := os.MkdirAll(filepath.Join(d.Root, "labs", "snapshots", "before-"+labid.Etcd), 0o700); err != nil {
		t.Fatal(err)
	}
	if got := c.byHandAgain(etcd); !strings.Contains(got, "khw lab reset 04-etcd") {
		t.Errorf("with a snapshot: %q", got)
	}
}

// TestWaitByHandNamesTheCluster: the shell the student opens in another
// terminal must be this cluster's, whatever KHW_CLUSTER says there.
func TestWaitByHandNamesTheCluster(t *testing.T) {
	var out bytes.Buffer
	if !waitByHand(UI{Out: &out, In: strings.NewReader("\n")}, "lab", mustLab(t, labid.Etcd), nil, "/s/lab/labs/by-hand-04-etcd.sh", "later") {
		t.Fatal("waitByHand returned false on an answered prompt")
	}
	if !strings.Contains(out.String(), "`khw --cluster lab shell`") {
		t.Errorf("the prompt does not name the cluster's shell:\n%s", out.String())
	}
}
