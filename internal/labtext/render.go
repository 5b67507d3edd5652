package labtext

import (
	"fmt"
	"io"
	"os"

	"github.com/charmbracelet/glamour"
	"golang.org/x/term"
)

// Render writes the lab's text as View has it to w (RenderMarkdown).
func (l Lab) Render(w io.Writer, plain bool) { RenderMarkdown(w, l.View(), plain) }

// RenderMarkdown writes md to w: rendered for a terminal (glamour, wrapped
// to its width, style $GLAMOUR_STYLE or dark) when w is one and not plain,
// else as it is.
func RenderMarkdown(w io.Writer, md string, plain bool) {
	f, isFile := w.(*os.File)
	if plain || !isFile || !term.IsTerminal(int(f.Fd())) {
		fmt.Fprintln(w, md)
		return
	}
	width := 100
	if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 40 {
		width = min(cols-2, 110)
	}
	style := glamour.WithStandardStyle("dark")
	if p := os.Getenv("GLAMOUR_STYLE"); p != "" {
		style = glamour.WithStylePath(p)
	}
	r, err := glamour.NewTermRenderer(style, glamour.WithWordWrap(width))
	if err == nil {
		if out, err := r.Render(md); err == nil {
			fmt.Fprint(w, out)
			return
		}
	}
	fmt.Fprintln(w, md)
}
