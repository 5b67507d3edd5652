package steps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
)

// mapStep is an in-memory step: its actual state is a map the test controls,
// keyed "node/thing". Check compares it to desired; Apply sets the keys the
// diffs name (parsed back from Diff.Fix), except keys in stuck.
type mapStep struct {
	id, title string
	desired   map[string]string
	actual    map[string]string
	stuck     map[string]bool // Apply "fixes" these to a wrong value
	checkErr  error
	applyErr  error
	delay     time.Duration // inside Check
	onApply   func()

	checks, applies int
	applied         [][]Diff
}

func (s *mapStep) ID() string    { return s.id }
func (s *mapStep) Title() string { return s.title }

func (s *mapStep) Check(ctx context.Context, env *Env) ([]Diff, error) {
	s.checks++
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	if s.checkErr != nil {
		return nil, s.checkErr
	}
	keys := make([]string, 0, len(s.desired))
	for k := range s.desired {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var diffs []Diff
	for _, k := range keys {
		if s.actual[k] != s.desired[k] {
			node, thing, _ := strings.Cut(k, "/")
			diffs = append(diffs, Diff{
				Node: node,
				What: fmt.Sprintf("%s is %q, want %q", thing, s.actual[k], s.desired[k]),
				Fix:  fmt.Sprintf("set %s to %s", thing, s.desired[k]),
			})
		}
	}
	return diffs, nil
}

func (s *mapStep) Apply(ctx context.Context, env *Env, diffs []Diff) error {
	s.applies++
	s.applied = append(s.applied, diffs)
	if s.onApply != nil {
		s.onApply()
	}
	if s.applyErr != nil {
		return s.applyErr
	}
	for _, d := range diffs {
		var thing, val string
		if _, err := fmt.Sscanf(d.Fix, "set %s to %s", &thing, &val); err != nil {
			return fmt.Errorf("bad fix %q: %v", d.Fix, err)
		}
		k := d.Node + "/" + thing
		if s.stuck[k] {
			val = "wrong"
		}
		s.actual[k] = val
		fmt.Fprintf(env.NodeLog(d.Node), "set %s=%s\n", thing, val)
	}
	return nil
}

func (s *mapStep) Commands(env *Env, diffs []Diff) []Command {
	var out []Command
	for _, d := range diffs {
		var thing, val string
		fmt.Sscanf(d.Fix, "set %s to %s", &thing, &val)
		out = append(out, Command{Node: d.Node, Shell: fmt.Sprintf("echo %s | sudo tee /etc/%s", val, thing), Why: d.Fix})
	}
	return out
}

func newEnv(t *testing.T) *Env {
	t.Helper()
	dir := state.New(t.TempDir(), "test")
	return NewEnv(config.Default("test", "arm64", "nspawn"), dir)
}

func newRunner(t *testing.T) (*Runner, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	env := newEnv(t)
	t.Cleanup(func() { env.Close() })
	return NewRunner(env, &out), &out
}

func clean(id, title string) *mapStep {
	return &mapStep{id: id, title: title, desired: map[string]string{"cp1/a": "1"}, actual: map[string]string{"cp1/a": "1"}}
}

func dirty(id, title string) *mapStep {
	return &mapStep{id: id, title: title,
		desired: map[string]string{"cp1/etcd": "active", "cp2/etcd": "active", "cp2/cert": "ok"},
		actual:  map[string]string{"cp1/etcd": "inactive", "cp2/cert": "ok"},
	}
}

// matchLines checks out line by line against regexps (anchored).
func matchLines(t *testing.T, out string, want ...string) {
	t.Helper()
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if !regexp.MustCompile("^" + want[i] + "$").MatchString(got[i]) {
			t.Errorf("line %d = %q, want match %q", i+1, got[i], want[i])
		}
	}
}

const dur = `\d+\.\ds`

func TestRunAppliesThenSecondRunIsClean(t *testing.T) {
	r, out := newRunner(t)
	a := dirty("01-a", "Alpha")
	b := clean("02-b", "Beta")
	steps := []Step{a, b}

	rep, err := r.Run(context.Background(), steps, Options{})
	if err != nil {
		t.Fatal(err)
	}
	matchLines(t, out.String(),
		`✓ 01-a  Alpha  \(applied 2 changes, `+dur+`\)`,
		`✓ 02-b  Beta  \(clean, `+dur+`\)`,
	)
	if a.applies != 1 || a.checks != 2 || b.applies != 0 || b.checks != 1 {
		t.Fatalf("calls: a apply %d check %d, b apply %d check %d", a.applies, a.checks, b.applies, b.checks)
	}
	// Apply got exactly the differing keys, not the one already right.
	if len(a.applied[0]) != 2 || a.applied[0][0].Node != "cp1" || a.applied[0][1].Node != "cp2" {
		t.Fatalf("Apply got %v", a.applied[0])
	}
	if a.actual["cp1/etcd"] != "active" || a.actual["cp2/etcd"] != "active" {
		t.Fatalf("state not fixed: %v", a.actual)
	}
	if len(rep.Steps) != 2 || !rep.Steps[0].Applied || rep.Steps[0].Clean || len(rep.Steps[0].Diffs) != 2 ||
		!rep.Steps[1].Clean || rep.Steps[1].Applied {
		t.Fatalf("report %+v", rep.Steps)
	}
	if got := rep.Changed(); !slices.Equal(got, []string{"01-a"}) {
		t.Fatalf("Changed = %v", got)
	}

	out.Reset()
	rep, err = r.Run(context.Background(), steps, Options{})
	if err != nil {
		t.Fatal(err)
	}
	matchLines(t, out.String(),
		`✓ 01-a  Alpha  \(clean, `+dur+`\)`,
		`✓ 02-b  Beta  \(clean, `+dur+`\)`,
	)
	if a.applies != 1 || b.applies != 0 {
		t.Fatalf("second run applied: a %d b %d", a.applies, b.applies)
	}
	for _, s := range rep.Steps {
		if !s.Clean || s.Applied || len(s.Diffs) != 0 {
			t.Fatalf("second run step %s not clean: %+v", s.ID, s)
		}
	}
	if len(rep.Changed()) != 0 {
		t.Fatalf("second run changed %v", rep.Changed())
	}

	// The Runner's own log records the trail; the step's node logs exist, 0600.
	trail, err := os.ReadFile(r.Env.NodeLogPath(""))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(trail), "01-a check: 2 difference(s)") || !strings.Contains(string(trail), "01-a verify: clean") {
		t.Fatalf("runner log:\n%s", trail)
	}
}

func TestApplyThatDoesNotFixEverythingFails(t *testing.T) {
	r, out := newRunner(t)
	a := dirty("04-etcd", "Bootstrap the etcd cluster")
	a.stuck = map[string]bool{"cp2/etcd": true}
	next := clean("05-cp", "Control plane")

	rep, err := r.Run(context.Background(), []Step{a, next}, Options{})
	var se *StepError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want *StepError", err)
	}
	if se.Step != "04-etcd" || se.Phase != PhaseVerify || se.Node != "cp2" || se.Err != nil {
		t.Fatalf("StepError %+v", se)
	}
	if len(se.Diffs) != 1 || se.Diffs[0].What != `etcd is "wrong", want "active"` {
		t.Fatalf("remaining diffs %v", se.Diffs)
	}
	msg := err.Error()
	cp2log := filepath.Join(r.Env.State.LogsDir(), "cp2.log")
	for _, want := range []string{"step 04-etcd (Bootstrap the etcd cluster): still differs after apply on node cp2",
		`cp2: etcd is "wrong", want "active" (fix: set etcd to active)`, "look at: " + cp2log} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if next.checks != 0 {
		t.Fatal("step after a failed one was checked")
	}
	if len(rep.Steps) != 1 || rep.Steps[0].Err != err || len(rep.Steps[0].Remaining) != 1 || rep.Steps[0].Applied {
		t.Fatalf("report %+v", rep.Steps)
	}
	matchLines(t, out.String(), `✗ 04-etcd  Bootstrap the etcd cluster  \(failed in verify, `+dur+`\)`)
}

func TestCheckErrorNamesNodeAndStops(t *testing.T) {
	refused := errors.New("ssh: connect to 192.168.122.13:22: connection refused")
	r, out := newRunner(t)
	a := dirty("04-etcd", "Bootstrap the etcd cluster")
	a.checkErr = OnNode("cp3", refused)
	next := clean("05-cp", "Control plane")

	_, err := r.Run(context.Background(), []Step{a, next}, Options{})
	var se *StepError
	if !errors.As(err, &se) || se.Phase != PhaseCheck || se.Node != "cp3" {
		t.Fatalf("err = %#v", err)
	}
	if !errors.Is(err, refused) {
		t.Fatal("StepError does not unwrap to the step's error")
	}
	want := "step 04-etcd (Bootstrap the etcd cluster): check failed on node cp3: ssh: connect to 192.168.122.13:22: connection refused\n  look at: " + r.Env.NodeLogPath("")
	if err.Error() != want {
		t.Fatalf("message\n%s\nwant\n%s", err, want)
	}
	if a.applies != 0 || next.checks != 0 {
		t.Fatalf("apply %d, next checks %d", a.applies, next.checks)
	}
	matchLines(t, out.String(), `✗ 04-etcd  Bootstrap the etcd cluster  \(failed in check, `+dur+`\)`)
}

func TestApplyError(t *testing.T) {
	r, _ := newRunner(t)
	a := dirty("02-pki", "Certificates")
	a.applyErr = errors.New("cfssl: sign: bad CSR")
	_, err := r.Run(context.Background(), []Step{a}, Options{})
	var se *StepError
	if !errors.As(err, &se) || se.Phase != PhaseApply || len(se.Diffs) != 2 || se.Node != "" {
		t.Fatalf("err = %#v", err)
	}
	for _, want := range []string{"apply failed: cfssl: sign: bad CSR", "while fixing:", `- cp2: etcd is "", want "active"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%s", want, err)
		}
	}
	if a.checks != 1 {
		t.Fatalf("checked %d times after a failed apply", a.checks)
	}
}

func TestDryRunNeverApplies(t *testing.T) {
	r, out := newRunner(t)
	a := clean("01-a", "Alpha")
	b := dirty("02-b", "Beta")
	c := dirty("03-c", "Gamma")
	rep, err := r.Run(context.Background(), []Step{a, b, c}, Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.applies+b.applies+c.applies != 0 {
		t.Fatal("dry-run called Apply")
	}
	if !r.Env.DryRun {
		t.Fatal("Env.DryRun not set for the steps")
	}
	if c.checks != 0 {
		t.Fatal("step after a would-change step was checked")
	}
	if b.actual["cp1/etcd"] != "inactive" {
		t.Fatal("dry-run changed state")
	}
	matchLines(t, out.String(),
		`✓ 01-a  Alpha  \(clean, `+dur+`\)`,
		`• 02-b  Beta  \(would change 2, `+dur+`\)`,
		regexp.QuoteMeta(`    - cp1: etcd is "inactive", want "active" (fix: set etcd to active)`),
		regexp.QuoteMeta(`    - cp2: etcd is "", want "active" (fix: set etcd to active)`),
		`    # set etcd to active`,
		regexp.QuoteMeta(`    cp1$ echo active | sudo tee /etc/etcd`),
		`    # set etcd to active`,
		regexp.QuoteMeta(`    cp2$ echo active | sudo tee /etc/etcd`),
		`- 03-c  Gamma  \(not checked: 02-b would change\)`,
	)
	if len(rep.Steps) != 3 || !rep.DryRun || rep.Steps[1].Applied || len(rep.Steps[1].Commands) != 2 ||
		rep.Steps[2].NotChecked != "02-b would change" {
		t.Fatalf("report %+v", rep.Steps)
	}
	if got := rep.Changed(); !slices.Equal(got, []string{"02-b"}) {
		t.Fatalf("Changed = %v", got)
	}
}

func TestVerbosePrintsFixedDiffs(t *testing.T) {
	r, out := newRunner(t)
	r.Env.Verbosity = 1
	if _, err := r.Run(context.Background(), []Step{dirty("01-a", "Alpha")}, Options{}); err != nil {
		t.Fatal(err)
	}
	matchLines(t, out.String(),
		`✓ 01-a  Alpha  \(applied 2 changes, `+dur+`\)`,
		regexp.QuoteMeta(`    fixed cp1: etcd is "inactive", want "active" (fix: set etcd to active)`),
		regexp.QuoteMeta(`    fixed cp2: etcd is "", want "active" (fix: set etcd to active)`),
	)
}

func TestCancelStopsBetweenSteps(t *testing.T) {
	r, out := newRunner(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := dirty("01-a", "A"), dirty("02-b", "B")
	a.onApply = cancel // Ctrl-C arrives while 01-a applies

	rep, err := r.Run(ctx, []Step{a, b}, Options{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if !strings.Contains(err.Error(), "interrupted before step 02-b (steps up to 01-a finished") {
		t.Fatalf("message %q", err)
	}
	if b.checks != 0 {
		t.Fatal("step after cancellation was checked")
	}
	if len(rep.Steps) != 1 || !rep.Steps[0].Applied {
		t.Fatalf("report %+v", rep.Steps)
	}
	matchLines(t, out.String(),
		`✓ 01-a  A  \(applied 2 changes, `+dur+`\)`,
		`✗ 02-b  B  \(not started: interrupted\)`,
	)
}

func TestSpinnerOnTTYOnly(t *testing.T) {
	env := newEnv(t)
	defer env.Close()
	var buf bytes.Buffer
	r := &Runner{Env: env, Out: &buf, TTY: true, SpinInterval: time.Millisecond}
	s := clean("01-a", "Alpha")
	s.delay = 30 * time.Millisecond
	if _, err := r.Run(context.Background(), []Step{s}, Options{}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !regexp.MustCompile("\r\x1b\\[K⠋ 01-a  Alpha  \\(checking " + dur + "\\)").MatchString(out) {
		t.Fatalf("no spinner frame in %q", out)
	}
	if n := strings.Count(out, "\r\x1b[K"); n < 3 {
		t.Fatalf("spinner redrew %d times in 30ms at 1ms", n)
	}
	if !regexp.MustCompile("\r\x1b\\[K✓ 01-a  Alpha  \\(clean, " + dur + "\\)\n$").MatchString(out) {
		t.Fatalf("final line not drawn over the spinner: %q", out)
	}
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("spinner wrote newlines: %q", out)
	}

	// Not a terminal: a buffer or a regular file gets plain lines, no "\r".
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, w := range []interface {
		Write([]byte) (int, error)
	}{&bytes.Buffer{}, f} {
		if NewRunner(env, w).TTY {
			t.Fatalf("%T detected as a terminal", w)
		}
	}
	r2 := NewRunner(env, f)
	r2.SpinInterval = time.Millisecond
	if _, err := r2.Run(context.Background(), []Step{s}, Options{}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(f.Name())
	if strings.Contains(string(data), "\r") {
		t.Fatalf("spinner on a non-terminal: %q", data)
	}
}

func TestFmtDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                        "0.0s",
		340 * time.Millisecond:   "0.3s",
		12449 * time.Millisecond: "12.4s",
		72400 * time.Millisecond: "1m12s",
	} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestDiffAndCommandString(t *testing.T) {
	tests := []struct{ got, want string }{
		{Diff{Node: "cp1", What: "etcd.service is not active", Fix: "start etcd.service"}.String(), "cp1: etcd.service is not active (fix: start etcd.service)"},
		{Diff{What: "pki/ca.pem is missing"}.String(), "pki/ca.pem is missing"},
		{Command{Shell: "cfssl gencert -initca ca-csr.json | cfssljson -bare ca", Why: "make the CA"}.String(), "# make the CA\n$ cfssl gencert -initca ca-csr.json | cfssljson -bare ca"},
		{Command{Node: "cp1", Shell: "cat <<EOF | sudo tee /x\na\nEOF\n"}.String(), "cp1$ cat <<EOF | sudo tee /x\na\nEOF"},
		{Command{Node: "lb", Shell: "sudo systemctl daemon-reload\nsudo systemctl enable haproxy.service\n"}.String(), "lb$ sudo systemctl daemon-reload\nlb$ sudo systemctl enable haproxy.service"},
		{Command{Shell: "kubectl create secret x \\\n  --from-literal a=b"}.String(), "$ kubectl create secret x \\\n  --from-literal a=b"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// Parallel runs every call at once, keeps each error at its index and
// does not stop the others when one fails.
func TestParallel(t *testing.T) {
	started := make(chan int, 3)
	release := make(chan struct{})
	done := make(chan []error)
	go func() {
		done <- Parallel(3, func(i int) error {
			started <- i
			<-release // all three must be running before any returns
			if i == 1 {
				return OnNode("cp2", errors.New("boom"))
			}
			return nil
		})
	}()
	for range 3 {
		<-started
	}
	close(release)
	errs := <-done
	var ne *NodeError
	if len(errs) != 3 || errs[0] != nil || errs[2] != nil || !errors.As(errs[1], &ne) || ne.Node != "cp2" {
		t.Fatalf("errs %v", errs)
	}
	if got := Parallel(0, func(int) error { t.Error("called"); return nil }); len(got) != 0 {
		t.Errorf("n=0: %v", got)
	}
}
