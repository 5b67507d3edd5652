package steps

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestNodeLog(t *testing.T) {
	env := newEnv(t)
	logs := env.State.LogsDir()

	// A pre-existing, too-wide log is tightened and appended to.
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(logs, "cp1.log")
	if err := os.WriteFile(p, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprintf(env.NodeLog("cp1"), "line %02d\n", i)
		}()
	}
	wg.Wait()
	if err := env.Close(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(env.NodeLog("cp1"), "after close")
	env.Close()

	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("cp1.log mode %v, want 0600", st.Mode().Perm())
	}
	if dst, _ := os.Stat(logs); dst.Mode().Perm() != 0o700 {
		t.Fatalf("logs dir mode %v, want 0700", dst.Mode().Perm())
	}
	data, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 22 || lines[0] != "old" || lines[21] != "after close" {
		t.Fatalf("log content:\n%s", data)
	}
	for i := range 20 {
		if !slices.Contains(lines, fmt.Sprintf("line %02d", i)) {
			t.Fatalf("line %d missing or torn:\n%s", i, data)
		}
	}

	// A new log is created 0600; node "" is the cluster log; no escape.
	fmt.Fprintln(env.NodeLog("w3"), "x")
	env.Close()
	if st, err := os.Stat(filepath.Join(logs, "w3.log")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("w3.log: %v %v", st, err)
	}
	for node, want := range map[string]string{"": "_khw.log", "cp2": "cp2.log", "../x": "_.._x.log", "..": "_...log"} {
		got := env.NodeLogPath(node)
		if got != filepath.Join(logs, want) {
			t.Errorf("NodeLogPath(%q) = %s, want %s", node, got, filepath.Join(logs, want))
		}
	}
	if filepath.Dir(env.NodeLogPath("../../etc/passwd")) != logs {
		t.Error("node name escapes the logs directory")
	}

	// An Env without a state directory refuses to write to the working dir.
	bad := &Env{}
	if _, err := bad.NodeLog("cp1").Write([]byte("x")); err == nil || !strings.Contains(err.Error(), "State.Root is empty") {
		t.Fatalf("write without state dir: %v", err)
	}
}

func TestStepLogNamedInErrorWhenItExists(t *testing.T) {
	r, _ := newRunner(t)
	a := dirty("04-etcd", "Bootstrap the etcd cluster")
	a.stuck = map[string]bool{"cp1/etcd": true, "cp2/etcd": true}
	_, err := r.Run(context.Background(), []Step{a}, Options{})
	var se *StepError
	if !errors.As(err, &se) {
		t.Fatal(err)
	}
	// Two nodes left: no single Node, both logs named, then the runner log.
	want := []string{r.Env.NodeLogPath("cp1"), r.Env.NodeLogPath("cp2"), r.Env.NodeLogPath("")}
	if se.Node != "" || !slices.Equal(se.Logs, want) {
		t.Fatalf("Node %q Logs %v, want %v", se.Node, se.Logs, want)
	}
}
