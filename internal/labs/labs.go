// Package labs parses the classroom lab texts embedded by package
// github.com/khw-dev/khw/labs (labs/*.md) for `khw lab`.
//
// A lab file NN-name.md has exactly this shape (anything else is a parse
// error naming the file, the line and the fix):
//
//	# NN · Title                       NN = the two digits of the file name
//	<one paragraph: the summary>
//	## Why this step exists
//	## What khw does
//	## Observe                         ```sh blocks, each after a sentence
//	## Common mistakes
//	## Upstream                        at least one https:// link
//
// The five level-2 headings (Sections) appear once each, in that order.
// Headings inside fenced code blocks do not count. In "Observe", every fenced
// block is a ```sh block, and the text between the previous block (or the
// heading) and it is its Intro: what to look for in its output. The blocks
// run on the jumpbox inside `khw shell` (KUBECONFIG = the admin kubeconfig,
// $KHW_SSH_CONFIG for ssh, the state directory at
// "$KHW_STATE_DIR/$KHW_CLUSTER"), so they must only read: see CheckReadOnly.
package labs

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/khw-dev/khw/internal/labid"
	labtexts "github.com/khw-dev/khw/labs"
)

// Section headings, in the order every lab has them.
const (
	SectionWhy      = "Why this step exists"
	SectionWhat     = "What khw does"
	SectionObserve  = "Observe"
	SectionMistakes = "Common mistakes"
	SectionUpstream = "Upstream"
)

// Sections lists the level-2 headings of a lab in their required order.
var Sections = []string{SectionWhy, SectionWhat, SectionObserve, SectionMistakes, SectionUpstream}

// Lab is one parsed lab text.
type Lab struct {
	// ID is the file name without .md, e.g. "04-etcd": the ID of the
	// bring-up step the lab explains (12-failover has no step).
	ID string
	// Number is NN of the ID and of the title line (1-12).
	Number int
	// Title is the title line after "NN · ", e.g. "etcd: the cluster's memory".
	Title string
	// Summary is the paragraph between the title and the first section.
	Summary string
	// Sections maps each heading of Sections to its Markdown body, trimmed.
	Sections map[string]string
	// Observe are the ```sh blocks of the Observe section, in order.
	Observe []Block
	// raw is the whole file.
	raw string
}

// Block is one command block of the Observe section.
type Block struct {
	// Intro is the Markdown text before the block (joined into one line per
	// paragraph): what to look for in its output.
	Intro string
	// Shell is the block's content without the fences: POSIX sh, read-only.
	Shell string
}

// Markdown returns the lab's whole text as it is in the file.
func (l Lab) Markdown() string { return l.raw }

var (
	fileRE  = regexp.MustCompile(`^([0-9]{2})-([a-z0-9]+(?:-[a-z0-9]+)*)\.md$`)
	titleRE = regexp.MustCompile(`^# ([0-9]{2}) · (\S.*)$`)
	linkRE  = regexp.MustCompile(`https://[^\s)>\]]+`)
)

// Parse parses one lab file: name is its file name ("04-etcd.md"), data its
// content. Errors name the file and, where there is one, the line
// ("04-etcd.md:12: …") and say what the line should be.
func Parse(name string, data []byte) (Lab, error) {
	m := fileRE.FindStringSubmatch(name)
	if m == nil {
		return Lab{}, fmt.Errorf("lab file %q: the name must be NN-name.md (two digits, a dash, lowercase words), e.g. %s.md", name, labid.Etcd)
	}
	num, _ := strconv.Atoi(m[1])
	if num < 1 {
		return Lab{}, fmt.Errorf("lab file %q: number 00 is not a lab; labs start at 01", name)
	}
	l := Lab{ID: strings.TrimSuffix(name, ".md"), Number: num, Sections: map[string]string{}, raw: string(data)}
	errf := func(line int, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...))
	}

	lines := splitLines(string(data))
	if len(lines) == 0 {
		return Lab{}, fmt.Errorf("%s: the file is empty; it must start with the title line \"# %s · Title\"", name, m[1])
	}
	tm := titleRE.FindStringSubmatch(lines[0])
	if tm == nil {
		return Lab{}, errf(1, "the first line is %q; it must be the title \"# %s · Title\" (with the middle dot ·)", lines[0], m[1])
	}
	if tm[1] != m[1] {
		return Lab{}, errf(1, "the title says lab %s but the file name says %s; make them the same", tm[1], m[1])
	}
	l.Title = strings.TrimSpace(tm[2])

	// Split into the summary and the sections, ignoring headings inside
	// fenced code blocks.
	type part struct {
		heading string
		line    int // line number of the heading (1-based)
		body    []string
		first   int // line number of body[0]
	}
	var summary []string
	var parts []*part
	fence := ""
	fenceLine := 0
	for i := 1; i < len(lines); i++ {
		ln := lines[i]
		if f := fenceMarker(ln); f != "" {
			switch {
			case fence == "":
				fence, fenceLine = f, i+1
			case strings.HasPrefix(strings.TrimSpace(ln), fence) && strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(ln), string(fence[0]))) == "":
				fence = ""
			}
		} else if fence == "" {
			if strings.HasPrefix(ln, "# ") {
				return Lab{}, errf(i+1, "a second title %q; a lab has one level-1 heading, the first line", ln)
			}
			if strings.HasPrefix(ln, "## ") {
				parts = append(parts, &part{heading: strings.TrimSpace(ln[3:]), line: i + 1, first: i + 2})
				continue
			}
		}
		if len(parts) == 0 {
			summary = append(summary, ln)
		} else {
			parts[len(parts)-1].body = append(parts[len(parts)-1].body, ln)
		}
	}
	if fence != "" {
		return Lab{}, errf(fenceLine, "this code fence %s is never closed; end it with a line %s", fence, fence)
	}

	sum := strings.TrimSpace(strings.Join(summary, "\n"))
	if sum == "" {
		return Lab{}, errf(2, "no summary: write one paragraph between the title and \"## %s\"", SectionWhy)
	}
	if strings.Contains(sum, "\n\n") {
		return Lab{}, errf(2, "the summary must be one paragraph (no blank line inside it)")
	}
	if strings.HasPrefix(sum, "#") || strings.HasPrefix(sum, "```") {
		return Lab{}, errf(2, "the summary must be a plain paragraph, not a heading or code")
	}
	l.Summary = joinParagraph(sum)

	for i, want := range Sections {
		if i >= len(parts) {
			return Lab{}, fmt.Errorf("%s: section \"## %s\" is missing; every lab has, in order: %s", name, want, strings.Join(Sections, ", "))
		}
		p := parts[i]
		if p.heading != want {
			return Lab{}, errf(p.line, "section %d is \"## %s\", want \"## %s\"; every lab has, in order: %s", i+1, p.heading, want, strings.Join(Sections, ", "))
		}
		body := strings.TrimSpace(strings.Join(p.body, "\n"))
		if body == "" {
			return Lab{}, errf(p.line, "section \"## %s\" is empty", want)
		}
		l.Sections[want] = body
		if want == SectionObserve {
			blocks, err := parseObserve(p.body, p.first)
			if err != nil {
				return Lab{}, fmt.Errorf("%s:%w", name, err)
			}
			l.Observe = blocks
		}
	}
	if len(parts) > len(Sections) {
		p := parts[len(Sections)]
		return Lab{}, errf(p.line, "extra section \"## %s\" after \"## %s\"; a lab has exactly: %s", p.heading, SectionUpstream, strings.Join(Sections, ", "))
	}
	if !linkRE.MatchString(l.Sections[SectionUpstream]) {
		return Lab{}, fmt.Errorf("%s: section \"## %s\" has no https:// link; cite the upstream page that backs the lab", name, SectionUpstream)
	}
	return l, nil
}

// parseObserve splits the Observe section's lines (the first one is line
// first of the file) into blocks. Every fenced block must be ```sh, have a
// non-empty body and an intro sentence before it; text after the last
// block is allowed (a closing remark) but not needed.
func parseObserve(body []string, first int) ([]Block, error) {
	var blocks []Block
	var intro []string
	var shell []string
	in := false
	for i, ln := range body {
		lineNo := first + i
		if f := fenceMarker(ln); f != "" && (!in || strings.Trim(strings.TrimSpace(ln), f[:1]) == "") {
			t := strings.TrimSpace(ln)
			if !in {
				info := strings.TrimSpace(strings.TrimLeft(t, string(f[0])))
				if info != "sh" {
					return nil, fmt.Errorf("%d: the Observe section runs its code blocks, so each must be ```sh (got %q)", lineNo, t)
				}
				if strings.TrimSpace(strings.Join(intro, "\n")) == "" {
					return nil, fmt.Errorf("%d: this ```sh block has no sentence before it; say what to look for in its output", lineNo)
				}
				in, shell = true, nil
				continue
			}
			sh := strings.TrimSpace(strings.Join(shell, "\n"))
			if sh == "" {
				return nil, fmt.Errorf("%d: empty ```sh block", lineNo)
			}
			blocks = append(blocks, Block{Intro: joinParagraph(strings.TrimSpace(strings.Join(intro, "\n"))), Shell: sh})
			in, intro = false, nil
			continue
		}
		if in {
			shell = append(shell, ln)
		} else {
			intro = append(intro, ln)
		}
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%d: the Observe section has no ```sh block; give at least one command to look at the result", first)
	}
	return blocks, nil
}

// fenceMarker returns "```" or "~~~" when ln opens or closes a fenced code
// block (CommonMark: up to three spaces of indentation), else "".
func fenceMarker(ln string) string {
	t := strings.TrimLeft(ln, " ")
	if len(ln)-len(t) > 3 {
		return ""
	}
	for _, f := range []string{"```", "~~~"} {
		if strings.HasPrefix(t, f) {
			return f
		}
	}
	return ""
}

// joinParagraph keeps paragraphs (blank-line separated) and list items on
// their own lines but joins the wrapped lines of each into one.
func joinParagraph(s string) string {
	var out []string
	for _, para := range strings.Split(s, "\n\n") {
		var cur []string
		var items []string
		for _, ln := range strings.Split(para, "\n") {
			t := strings.TrimSpace(ln)
			if t == "" {
				continue
			}
			if strings.HasPrefix(t, "- ") || strings.HasPrefix(t, "* ") {
				if len(cur) > 0 {
					items = append(items, strings.Join(cur, " "))
				}
				cur = []string{t}
				continue
			}
			cur = append(cur, t)
		}
		if len(cur) > 0 {
			items = append(items, strings.Join(cur, " "))
		}
		if len(items) > 0 {
			out = append(out, strings.Join(items, "\n"))
		}
	}
	return strings.Join(out, "\n\n")
}

func splitLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader([]byte(s)))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		out = append(out, strings.TrimRight(sc.Text(), "\r"))
	}
	return out
}

// All parses every lab of the embedded labs directory (labs.FS) and returns
// them sorted by Number. It fails on the first file that does not parse,
// on two labs with the same number, and when no lab is embedded.
func All() ([]Lab, error) { return parseFS(labtexts.FS) }

func parseFS(fsys fs.FS) ([]Lab, error) {
	names, err := fs.Glob(fsys, "*.md")
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no lab texts are embedded (labs/*.md): a build problem")
	}
	var out []Lab
	seen := map[int]string{}
	for _, n := range names {
		data, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, fmt.Errorf("read lab %s: %w", n, err)
		}
		l, err := Parse(path.Base(n), data)
		if err != nil {
			return nil, err
		}
		if other, dup := seen[l.Number]; dup {
			return nil, fmt.Errorf("labs %s and %s both have number %02d; give each lab its own number", other, l.ID, l.Number)
		}
		seen[l.Number] = l.ID
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out, nil
}
