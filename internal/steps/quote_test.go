package steps

import (
	"os/exec"
	"strings"
	"testing"
)

// TestQuote: a safe word stays as it is; anything else comes back from
// bash as the one word it was, with no expansion run.
func TestQuote(t *testing.T) {
	if got := Quote("/var/lib/khw/lab/pki/ca.pem"); got != "/var/lib/khw/lab/pki/ca.pem" {
		t.Errorf("a safe path was quoted: %s", got)
	}
	dir := t.TempDir()
	for _, s := range []string{"", "a b", "$(touch pwned)", "`touch pwned`", "it's", "x;touch pwned", "*", "~", "a\nb", `\`, "$HOME", "-n"} {
		cmd := exec.Command("bash", "-c", "printf '%s\\0' "+Quote(s))
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil || string(out) != s+"\x00" {
			t.Errorf("Quote(%q) = %s: bash made %q of it (%v)", s, Quote(s), out, err)
		}
	}
	if out, _ := exec.Command("ls", "-A", dir).Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("quoting ran a command: %s", out)
	}
}
