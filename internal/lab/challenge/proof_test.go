package challenge

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Env of the proof (TestCatalogueOnLiveCluster): the khw binary, and which
// faults to prove: "all", IDs separated by commas, or "rotate:N" (N faults
// in a row of the catalogue, starting at N × the day of the year: the
// whole catalogue over the days).
const (
	envProofBin    = "KHW_PROOF_BIN"
	envProofFaults = "KHW_PROOF_FAULTS"
)

// TestCatalogueOnLiveCluster proves each chosen fault on a live cluster
// built by khw (the cluster of $KHW_CLUSTER in $KHW_STATE_DIR, healthy),
// through the khw binary only, as a student would: khw challenge start;
// khw challenge check fails; khw lab check (the challenge's lab) fails and
// prints every string of the fault's Named, without being told the
// fault; the fix of the fault's text runs in khw shell (bash -e); khw
// challenge check passes (asked again every 10 s, at most 3 minutes: a
// kubelet registers, a pod restarts); and khw up --dry-run finds every
// step clean. It prints a table: fault, the check that named it, seconds.
// Skipped without $KHW_PROOF_BIN (hack/e2e.sh sets it).
func TestCatalogueOnLiveCluster(t *testing.T) {
	bin := os.Getenv(envProofBin)
	if bin == "" {
		t.Skipf("SKIP: $%s is not set (make e2e-challenges runs the proof on a live cluster)", envProofBin)
	}
	faults, err := chooseProof(os.Getenv(envProofFaults), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(faults))
	for i, f := range faults {
		ids[i] = f.ID
	}
	fmt.Printf("Proving %d of %d faults: %s\n", len(faults), len(Catalogue()), strings.Join(ids, ", "))
	texts, _, err := Texts("en")
	if err != nil {
		t.Fatal(err)
	}
	var table []string
	failed := 0
	for _, f := range faults {
		t0 := time.Now()
		err := proveOne(t, bin, f, texts[f.ID].FixScript)
		secs := time.Since(t0).Seconds()
		mark := "ok"
		if err != nil {
			failed++
			mark = "FAILED: " + err.Error()
			t.Errorf("%s: %v", f.ID, err)
			if _, gerr := khw(bin, "challenge", "give-up"); gerr != nil {
				t.Errorf("%s: give-up after the failure: %v", f.ID, gerr)
			}
		}
		table = append(table, fmt.Sprintf("  %-28s %-26s %5.0f s  %s", f.ID, "lab check "+f.CheckedBy(), secs, mark))
	}
	fmt.Printf("\nFault proof (%d faults, %d failed):\n  %-28s %-26s %7s\n%s\n", len(faults), failed, "fault", "named by", "time", strings.Join(table, "\n"))
}

// proveOne runs the proof of f (see TestCatalogueOnLiveCluster).
func proveOne(t *testing.T, bin string, f Fault, fix string) error {
	t.Helper()
	if out, err := khw(bin, "challenge", "start", f.ID); err != nil {
		return fmt.Errorf("khw challenge start: %v\n%s", err, out)
	}
	if out, err := khw(bin, "challenge", "check"); err == nil || exitCode(err) != 1 {
		return fmt.Errorf("khw challenge check on the broken cluster: %v (want exit 1)\n%s", err, out)
	}
	out, err := khw(bin, "lab", "check", f.CheckedBy())
	if err == nil {
		return fmt.Errorf("khw lab check %s passed the broken cluster\n%s", f.CheckedBy(), out)
	}
	for _, n := range f.Named {
		if !strings.Contains(out, n) {
			return fmt.Errorf("khw lab check %s does not say %q\n%s", f.CheckedBy(), n, out)
		}
	}
	script := filepath.Join(t.TempDir(), "fix.sh")
	if err := os.WriteFile(script, []byte(fix+"\n"), 0o600); err != nil {
		return err
	}
	if out, err := khw(bin, "shell", "--", "bash", "-e", script); err != nil {
		return fmt.Errorf("the fix in khw shell: %v\n%s", err, out)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := khw(bin, "challenge", "check")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("khw challenge check after the fix still fails: %v\n%s", err, out)
		}
		time.Sleep(10 * time.Second)
	}
	out, err = khw(bin, "up", "--dry-run")
	if err != nil || !strings.Contains(out, "dry-run: every step is clean") {
		return fmt.Errorf("khw up --dry-run after the fix is not clean: %v\n%s", err, out)
	}
	return nil
}

// khw runs the khw binary with the test's environment and returns its
// combined output.
func khw(bin string, args ...string) (string, error) {
	var buf bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// chooseProof returns the faults that spec names (see envProofFaults).
func chooseProof(spec string, now time.Time) ([]Fault, error) {
	all := Catalogue()
	switch {
	case spec == "" || spec == "all":
		return all, nil
	case strings.HasPrefix(spec, "rotate:"):
		n, err := strconv.Atoi(strings.TrimPrefix(spec, "rotate:"))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("$%s=%q: rotate:N with N ≥ 1", envProofFaults, spec)
		}
		n = min(n, len(all))
		start := (now.YearDay() * n) % len(all)
		var out []Fault
		for i := range n {
			out = append(out, all[(start+i)%len(all)])
		}
		return out, nil
	}
	var out []Fault
	for _, id := range strings.Split(spec, ",") {
		f, err := Lookup(strings.TrimSpace(id))
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}
