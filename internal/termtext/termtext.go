// Package termtext makes text from the nodes safe to print on a terminal.
//
// A node is the student's machine: a unit name, a file's content or an
// error message read there may hold ESC sequences that clear the screen,
// move the cursor or rewrite what khw printed before. Escape shows every
// control character as text instead, so what reaches the terminal is only
// printable characters, newlines and tabs.
package termtext

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape returns s with each character a terminal would act on written as
// visible text: C0 controls (U+0000–U+001F) but "\n" and "\t", and DEL
// (U+007F) as \xHH ("\x1b[2J" becomes `\x1b[2J`, "\r" becomes `\x0d`); C1
// controls (U+0080–U+009F, which include the one-character CSI U+009B) as
// \u00HH; a byte that is not valid UTF-8 as \xHH, since a terminal not in
// UTF-8 mode reads 0x80–0x9F as C1 controls. An ESC sequence is thus
// printed as its characters and does nothing. Everything else is kept,
// "\" included: the result is for reading, not for parsing back. s
// without such characters is returned as is.
func Escape(s string) string {
	// RuneError stands for an invalid byte here; a real U+FFFD is kept below.
	i := strings.IndexFunc(s, func(r rune) bool { return control(r) || r == utf8.RuneError })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case control(r) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case control(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// control reports whether a terminal acts on r: a C0 control but newline
// and tab, DEL, or a C1 control; or whether it changes how the text around
// it reads: a bidirectional control (Unicode property Bidi_Control, such as
// U+202E RIGHT-TO-LEFT OVERRIDE, which can show "gpj.exe" as "exe.jpg").
func control(r rune) bool {
	return (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) || unicode.Is(unicode.Bidi_Control, r)
}

// NewWriter returns a writer that passes everything written to w through
// Escape. Each Write is escaped on its own, so a UTF-8 character split
// between two writes is shown as \xHH escapes (fmt's Fprint functions
// write once per call and never split one). It reports len(p) written
// when w took all of the escaped text, and w's error otherwise.
func NewWriter(w io.Writer) io.Writer { return writer{w} }

type writer struct{ w io.Writer }

func (e writer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(e.w, Escape(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
