// Package labtext parses the classroom lab texts embedded by package
// github.com/khw-dev/khw/labs (labs/*.md, and their Korean versions in
// labs/ko/) for `khw lab`.
//
// A lab file NN-name.md has exactly this shape (anything else is a parse
// error naming the file, the line and the fix); the headings are those of
// its language (English shown, see languages):
//
//	# NN · Title                       NN = the two digits of the file name
//	<one paragraph: the summary>
//	## Objectives                      3 bullets "- Verb … [CKA: Domain]", then
//	                                   "Time: about N minutes."
//	## You should have                 a sentence and one ```sh block that
//	                                   shows the earlier labs' result
//	## Why this step exists
//	## What khw does
//	## Observe                         ```sh blocks, each after a sentence and
//	                                   followed by a ```text block: its
//	                                   expected output, trimmed
//	## Security                        "**In this lab:**" the trade-off made
//	                                   for teaching, "**In production:**" the fix
//	## Common mistakes
//	## Predict, then observe           at least two bullets
//	## Quiz                            3-5 "### N. Question", choices "- a) …",
//	                                   then "Answer: x. Why."
//	## Upstream                        at least one https:// link
//
// The ten level-2 headings (Sections) appear once each, in that order.
// Headings inside fenced code blocks do not count. The ```sh blocks run on
// the jumpbox inside `khw shell` (KUBECONFIG = the admin kubeconfig,
// $KHW_SSH_CONFIG for ssh, the state directory at
// "$KHW_STATE_DIR/$KHW_CLUSTER"), so they must only read: see CheckReadOnly.
package labtext

import (
	"fmt"
	"io/fs"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/khw-dev/khw/internal/lab/labid"
	labfiles "github.com/khw-dev/khw/labs"
)

// Section keys: the English headings, which also name the sections of a
// lab in another language (Lab.Sections is keyed by them).
const (
	SectionObjectives = "Objectives"
	SectionHave       = "You should have"
	SectionWhy        = "Why this step exists"
	SectionWhat       = "What khw does"
	SectionObserve    = "Observe"
	SectionSecurity   = "Security"
	SectionMistakes   = "Common mistakes"
	SectionPredict    = "Predict, then observe"
	SectionQuiz       = "Quiz"
	SectionUpstream   = "Upstream"
)

// Sections lists the section keys of a lab in their required order.
var Sections = []string{SectionObjectives, SectionHave, SectionWhy, SectionWhat, SectionObserve,
	SectionSecurity, SectionMistakes, SectionPredict, SectionQuiz, SectionUpstream}

// Lab is one parsed lab text.
type Lab struct {
	// ID is the file name without .md, e.g. "04-etcd": the ID of the
	// bring-up step the lab explains (12-failover has no step).
	ID string
	// Lang is the text's language: "en" or "ko".
	Lang string
	// Number is NN of the ID and of the title line (1-12).
	Number int
	// Title is the title line after "NN · ", e.g. "etcd: the cluster's memory".
	Title string
	// Summary is the paragraph between the title and the first section.
	Summary string
	// Sections maps each key of Sections to its Markdown body, trimmed.
	Sections map[string]string
	// Objectives are the three bullets of "Objectives".
	Objectives []Objective
	// Minutes is the time the lab takes a student, from "Time: about N
	// minutes." (minutes, > 0).
	Minutes int
	// Have is the block of "You should have": the command that shows the
	// earlier labs' result, and what to see.
	Have Block
	// Observe are the ```sh blocks of the Observe section, in order.
	Observe []Block
	// Predict are the bullets of "Predict, then observe", in order.
	Predict []string
	// Quiz are the questions of "Quiz", in order.
	Quiz []Question
	// raw is the whole file.
	raw string
}

// Objective is one bullet of "Objectives": what the student will be able
// to do, and the exam domains it serves.
type Objective struct {
	// Text is the bullet without its tags, starting with a verb.
	Text string
	// Tags are the exam domains in brackets after it, e.g. "CKA:
	// Troubleshooting" (examDomains lists the allowed ones).
	Tags []string
}

// Question is one question of "Quiz".
type Question struct {
	// Text is the question after "### N. ".
	Text string
	// Choices are the answers offered, in order (a, b, c, …), without
	// their letters.
	Choices []string
	// Answer is the index into Choices of the right one.
	Answer int
	// Why explains the answer (Markdown, one or more paragraphs).
	Why string
}

// Block is one command block of the Observe section (or of "You should
// have").
type Block struct {
	// Intro is the Markdown text before the block (joined into one line per
	// paragraph): what to look for in its output.
	Intro string
	// Shell is the block's content without the fences: POSIX sh, read-only.
	Shell string
	// Expected is the ```text block after it: the output to expect,
	// trimmed to what matters ("" in "You should have" when none is given).
	Expected string
}

// examDomains are the allowed objective tags: the domains of the CNCF's
// CKA and CKS curricula (github.com/cncf/curriculum).
var examDomains = map[string]bool{
	"CKA: Cluster Architecture":         true, // "Cluster Architecture, Installation & Configuration"
	"CKA: Workloads and Scheduling":     true,
	"CKA: Services and Networking":      true,
	"CKA: Storage":                      true,
	"CKA: Troubleshooting":              true,
	"CKS: Cluster Setup":                true,
	"CKS: Cluster Hardening":            true,
	"CKS: System Hardening":             true,
	"CKS: Microservice Vulnerabilities": true, // "Minimize Microservice Vulnerabilities"
	"CKS: Supply Chain Security":        true,
	"CKS: Runtime Security":             true, // "Monitoring, Logging and Runtime Security"
}

// language holds what a lab text says in one language: its headings (in
// the order of Sections) and the words the parser looks for.
type language struct {
	code     string
	headings []string
	// timeRE matches the time line of "Objectives"; group 1 is minutes.
	timeRE *regexp.Regexp
	// here and prod are the two labels of "Security".
	here, prod string
	// answerRE matches a quiz answer line; group 1 is its letter, group 2
	// the start of the explanation.
	answerRE *regexp.Regexp
	// quizView replaces the quiz in the text khw lab shows (%d: the number
	// of questions, %s: the lab's ID).
	quizView string
}

var languages = map[string]language{
	"en": {
		code:     "en",
		headings: Sections,
		timeRE:   regexp.MustCompile(`^Time: about ([0-9]+) minutes\.$`),
		here:     "**In this lab:**", prod: "**In production:**",
		answerRE: regexp.MustCompile(`^Answer: ([a-e])\.\s*(.*)$`),
		quizView: "%d questions: answer them with `khw lab quiz %s`.",
	},
	"ko": {
		code: "ko",
		headings: []string{"목표", "시작하기 전에", "이 단계가 필요한 이유", "khw가 하는 일", "관찰",
			"보안", "흔한 실수", "예측한 뒤 관찰하기", "퀴즈", "업스트림 문서"},
		timeRE: regexp.MustCompile(`^시간: 약 ([0-9]+)분\.$`),
		here:   "**이 실습에서는:**", prod: "**운영 환경에서는:**",
		answerRE: regexp.MustCompile(`^정답: ([a-e])\.\s*(.*)$`),
		quizView: "문제 %d개: `khw lab quiz %s`로 풀어 보세요.",
	},
}

// Headings returns the level-2 headings of a lab in language lang, in the
// order of Sections (nil for a language without lab texts).
func Headings(lang string) []string { return languages[lang].headings }

// Markdown returns the lab's whole text as it is in the file.
func (l Lab) Markdown() string { return l.raw }

var (
	fileRE  = regexp.MustCompile(`^([0-9]{2})-([a-z0-9]+(?:-[a-z0-9]+)*)\.md$`)
	titleRE = regexp.MustCompile(`^# ([0-9]{2}) · (\S.*)$`)
	linkRE  = regexp.MustCompile(`https://[^\s)>\]]+`)
)

// Parse parses one English lab file: name is its file name ("04-etcd.md"),
// data its content. Errors name the file and, where there is one, the line
// ("04-etcd.md:12: …") and say what the line should be.
func Parse(name string, data []byte) (Lab, error) { return ParseLang("en", name, data) }

// ParseLang is Parse for a text in language lang ("en" or "ko"): the
// headings and labels are that language's.
func ParseLang(lang, name string, data []byte) (Lab, error) {
	lg, ok := languages[lang]
	if !ok {
		return Lab{}, fmt.Errorf("lab file %q: no lab texts in language %q; have %s", name, lang, strings.Join(Languages(), ", "))
	}
	m := fileRE.FindStringSubmatch(name)
	if m == nil {
		return Lab{}, fmt.Errorf("lab file %q: the name must be NN-name.md (two digits, a dash, lowercase words), e.g. %s.md", name, labid.Etcd)
	}
	num, _ := strconv.Atoi(m[1])
	if num < 1 {
		return Lab{}, fmt.Errorf("lab file %q: number 00 is not a lab; labs start at 01", name)
	}
	l := Lab{ID: strings.TrimSuffix(name, ".md"), Lang: lang, Number: num, Sections: map[string]string{}, raw: string(data)}
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
		return Lab{}, errf(2, "no summary: write one paragraph between the title and \"## %s\"", lg.headings[0])
	}
	if strings.Contains(sum, "\n\n") {
		return Lab{}, errf(2, "the summary must be one paragraph (no blank line inside it)")
	}
	if strings.HasPrefix(sum, "#") || strings.HasPrefix(sum, "```") {
		return Lab{}, errf(2, "the summary must be a plain paragraph, not a heading or code")
	}
	l.Summary = joinParagraph(sum)

	heads := strings.Join(lg.headings, ", ")
	for i, key := range Sections {
		want := lg.headings[i]
		if i >= len(parts) {
			return Lab{}, fmt.Errorf("%s: section \"## %s\" is missing; every lab has, in order: %s", name, want, heads)
		}
		p := parts[i]
		if p.heading != want {
			return Lab{}, errf(p.line, "section %d is \"## %s\", want \"## %s\"; every lab has, in order: %s", i+1, p.heading, want, heads)
		}
		body := strings.TrimSpace(strings.Join(p.body, "\n"))
		if body == "" {
			return Lab{}, errf(p.line, "section \"## %s\" is empty", want)
		}
		l.Sections[key] = body
		var err error
		switch key {
		case SectionObjectives:
			l.Objectives, l.Minutes, err = parseObjectives(lg, p.body, p.first)
		case SectionHave:
			var blocks []Block
			if blocks, err = parseBlocks(p.body, p.first, false); err == nil && len(blocks) != 1 {
				err = fmt.Errorf("%d: \"## %s\" has %d ```sh blocks; give exactly one command that shows the earlier labs' result", p.line, want, len(blocks))
			}
			if err == nil {
				l.Have = blocks[0]
			}
		case SectionObserve:
			l.Observe, err = parseBlocks(p.body, p.first, true)
		case SectionSecurity:
			if !strings.Contains(body, lg.here) || !strings.Contains(body, lg.prod) {
				err = fmt.Errorf("%d: \"## %s\" must say the trade-off after %s and the production fix after %s", p.line, want, lg.here, lg.prod)
			}
		case SectionPredict:
			if l.Predict = bullets(p.body); len(l.Predict) < 2 {
				err = fmt.Errorf("%d: \"## %s\" has %d bullets; give at least two \"- \" prompts", p.line, want, len(l.Predict))
			}
		case SectionQuiz:
			l.Quiz, err = parseQuiz(lg, p.body, p.first)
		}
		if err != nil {
			return Lab{}, fmt.Errorf("%s:%w", name, err)
		}
	}
	if len(parts) > len(Sections) {
		p := parts[len(Sections)]
		return Lab{}, errf(p.line, "extra section \"## %s\" after \"## %s\"; a lab has exactly: %s", p.heading, lg.headings[len(Sections)-1], heads)
	}
	if !linkRE.MatchString(l.Sections[SectionUpstream]) {
		return Lab{}, fmt.Errorf("%s: section \"## %s\" has no https:// link; cite the upstream page that backs the lab", name, lg.headings[len(Sections)-1])
	}
	return l, nil
}

// Languages returns the codes of the languages lab texts exist in, sorted.
func Languages() []string { return slices.Sorted(maps.Keys(languages)) }

// View returns the text khw lab shows: the whole lab, with the quiz's
// questions and answers replaced by one line that points to khw lab quiz.
func (l Lab) View() string {
	q := l.Sections[SectionQuiz]
	if q == "" {
		return l.raw
	}
	return strings.Replace(l.raw, q, fmt.Sprintf(languages[l.Lang].quizView, len(l.Quiz), l.ID), 1)
}

// All parses every English lab of the embedded labs directory (labs.FS)
// and returns them sorted by Number. It fails on the first file that does
// not parse, on two labs with the same number, and when no lab is
// embedded.
func All() ([]Lab, error) { return parseFS(labfiles.FS) }

// AllLang is All for language lang: for "en" the same; for another
// language the labs of its directory (labs/ko/ for "ko"), which may hold
// fewer labs than English (none is an empty list, not an error).
func AllLang(lang string) ([]Lab, error) {
	if lang == "en" {
		return All()
	}
	if _, ok := languages[lang]; !ok {
		return nil, fmt.Errorf("no lab texts in language %q; have %s", lang, strings.Join(Languages(), ", "))
	}
	sub, err := fs.Sub(labfiles.FS, lang)
	if err != nil {
		return nil, err
	}
	return parseLangFS(lang, sub, false)
}

func parseFS(fsys fs.FS) ([]Lab, error) { return parseLangFS("en", fsys, true) }

func parseLangFS(lang string, fsys fs.FS, need bool) ([]Lab, error) {
	names, err := fs.Glob(fsys, "*.md")
	if err != nil {
		return nil, err
	}
	if len(names) == 0 && need {
		return nil, fmt.Errorf("no lab texts are embedded (labs/*.md): a build problem")
	}
	var out []Lab
	seen := map[int]string{}
	for _, n := range names {
		if lang != "en" && n == path.Base(GlossaryFile) {
			continue
		}
		data, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, fmt.Errorf("read lab %s: %w", n, err)
		}
		l, err := ParseLang(lang, path.Base(n), data)
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
