package termtext

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text, ünïcödé, 서울, \\ and U+FFFD \ufffd", "plain text, ünïcödé, 서울, \\ and U+FFFD \ufffd"},
		{"line 1\n\tline 2\n", "line 1\n\tline 2\n"},
		{"\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"ok\rFAKE", `ok\x0dFAKE`},
		{"\x00\x07\x08\x0b\x0c\x7f", `\x00\x07\x08\x0b\x0c\x7f`},
		{"a\u009b2Jb\u0085c", `a\u009b2Jb\u0085c`},
		{"raw \x9b2J and \xff", `raw \x9b2J and \xff`},
		{"\x1b]0;title\x07", `\x1b]0;title\x07`},
		{"invoice\u202egpj.exe and \u2066x\u2069", `invoice\u202egpj.exe and \u2066x\u2069`},
	} {
		if got := Escape(tc.in); got != tc.want {
			t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Every rune and every invalid byte comes out as valid UTF-8 without a
// control character but newline and tab.
func TestEscapeLeavesNoControl(t *testing.T) {
	var all []byte
	for r := rune(0); r < 0x300; r++ {
		all = fmt.Appendf(all, "%c", r)
	}
	for b := 0x80; b < 0x100; b++ {
		all = append(all, byte(b))
	}
	out := Escape(string(all))
	if !utf8.ValidString(out) {
		t.Fatal("Escape left invalid UTF-8")
	}
	for _, r := range out {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			t.Fatalf("Escape left %U", r)
		}
	}
}

type failWriter struct{}

func (failWriter) Write(p []byte) (int, error) { return 0, errors.New("disk full") }

func TestWriter(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	n, err := fmt.Fprintf(w, "unit %s failed\n", "x\x1b[2Jy")
	if err != nil || n != len("unit x\x1b[2Jy failed\n") || b.String() != "unit x\\x1b[2Jy failed\n" {
		t.Errorf("Fprintf = %d, %v; wrote %q", n, err, b.String())
	}
	if _, err := NewWriter(failWriter{}).Write([]byte("a")); err == nil {
		t.Error("the underlying writer's error was lost")
	}
}
