// Package docs holds khw's documentation; its test checks that every
// relative link and anchor in README.md, CONTRIBUTING.md and docs/ resolves.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository, relative to this package's directory.
const repoRoot = ".."

// pages returns the Markdown files whose links are checked, relative to
// repoRoot: the READMEs at the top, CONTRIBUTING.md, hack/README.md and
// everything under docs/.
func pages(t *testing.T) []string {
	t.Helper()
	var out []string
	tops, err := filepath.Glob(filepath.Join(repoRoot, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, tops...)
	out = append(out, filepath.Join(repoRoot, "hack", "README.md"))
	err = filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, filepath.Join(repoRoot, "docs", p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	// headingLink is a link inside a heading; its text counts for the slug.
	headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// prose returns the lines of a Markdown file outside fenced code blocks, with
// code spans blanked, keyed by 1-based line number.
func prose(text string) map[int]string {
	lines := map[int]string{}
	in := false
	for i, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if !in {
			lines[i+1] = codeSpan.ReplaceAllString(l, "")
		}
	}
	return lines
}

// slug is GitHub's anchor for a heading: lower case, every character that is
// not a letter, digit, space, hyphen or underscore dropped, spaces made
// hyphens (github.com/gjtorikian/html-pipeline TableOfContentsFilter, which
// GitHub's Markdown rendering uses). Markup characters go first.
func slug(h string) string {
	h = headingLink.ReplaceAllString(h, "$1")
	h = strings.ToLower(h)
	var b strings.Builder
	for _, r := range h {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors returns every anchor a Markdown file defines: its headings' slugs
// (a repeated slug gets -1, -2 … as on GitHub) and explicit <a name/id>.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	in := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if in {
			continue
		}
		if m := heading.FindStringSubmatch(l); m != nil {
			s := slug(m[2])
			if n := seen[s]; n > 0 {
				out[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// targets returns each link target of a file with its line number.
func targets(text string) map[int][]string {
	out := map[int][]string{}
	for n, l := range prose(text) {
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			out[n] = append(out[n], m[1])
		}
		if m := refDef.FindStringSubmatch(l); m != nil {
			out[n] = append(out[n], m[1])
		}
	}
	return out
}

func TestRelativeLinksResolve(t *testing.T) {
	ps := pages(t)
	if len(ps) < 10 {
		t.Fatalf("only %d Markdown pages found; the walk is broken", len(ps))
	}
	anchorCache := map[string]map[string]bool{}
	anchorsOf := func(p string) (map[string]bool, error) {
		if a, ok := anchorCache[p]; ok {
			return a, nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		anchorCache[p] = anchors(string(b))
		return anchorCache[p], nil
	}
	checked := 0
	for _, p := range ps {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, p)
		byLine := targets(string(b))
		lines := make([]int, 0, len(byLine))
		for n := range byLine {
			lines = append(lines, n)
		}
		slices.Sort(lines)
		for _, n := range lines {
			for _, target := range byLine[n] {
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, frag, _ := strings.Cut(target, "#")
				dest := p
				if file != "" {
					dest = filepath.Join(filepath.Dir(p), filepath.FromSlash(file))
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s:%d: link %q: %s does not exist", rel, n, target, file)
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", rel, n, target)
					continue
				}
				a, err := anchorsOf(dest)
				if err != nil {
					t.Errorf("%s:%d: link %q: %v", rel, n, target, err)
					continue
				}
				if !a[frag] {
					t.Errorf("%s:%d: link %q: no heading or anchor %q in %s", rel, n, target, frag, filepath.Base(dest))
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d relative links checked; the link pattern is broken", checked)
	}
}

// TestSlugAndLinkParsing pins the parsing rules above on GitHub's own
// examples, so that a broken rule cannot make every link look fine.
func TestSlugAndLinkParsing(t *testing.T) {
	for h, want := range map[string]string{
		"Exit codes":                    "exit-codes",
		"`khw up` fails at 04-etcd":     "khw-up-fails-at-04-etcd",
		"Day 2: etcd, certs & upgrades": "day-2-etcd-certs--upgrades",
		"시작하기 (nspawn)":                 "시작하기-nspawn",
		"[Labs](labs.md) by hand":       "labs-by-hand",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
	text := "# A\n## A\n```\n# not a heading [x](nope.md)\n```\nsee [b](b.md#a-1) and `[c](c.md)` <a id=\"x\"></a>\n[ref]: d.md\n"
	a := anchors(text)
	for _, want := range []string{"a", "a-1", "x"} {
		if !a[want] {
			t.Errorf("anchors: %q missing from %v", want, a)
		}
	}
	if a["not-a-heading-xnopemd"] || a["not-a-heading-x"] {
		t.Errorf("a comment in a code block was taken for a heading: %v", a)
	}
	var got []string
	for _, ts := range targets(text) {
		got = append(got, ts...)
	}
	slices.Sort(got)
	if want := []string{"b.md#a-1", "d.md"}; !slices.Equal(got, want) {
		t.Errorf("targets = %v, want %v", got, want)
	}
}

// TestREADMEStaysShort keeps the README a page a newcomer reads in five
// minutes: at most 150 lines, and no dated figure or CI history (those
// belong in docs/measurements.md).
func TestREADMEStaysShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 150 {
		t.Errorf("README.md has %d lines; keep it at most 150 and move details into docs/", len(lines))
	}
	dated := regexp.MustCompile(`\b20\d\d-[01]\d-[0-3]\d\b`)
	for i, l := range lines {
		if m := dated.FindString(l); m != "" {
			t.Errorf("README.md:%d holds a date (%s): dated figures and history go to docs/measurements.md", i+1, m)
		}
	}
}
