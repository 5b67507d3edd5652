package labtext

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	// inlineCodeSpanRE matches a code span of prose whose lines were joined.
	inlineCodeSpanRE = regexp.MustCompile("`([^`]+)`")
	// linkOfRE matches a link, without the punctuation or backtick after it.
	linkOfRE = regexp.MustCompile("https://[^\\s)>\\]`'\"]*[^\\s)>\\]`'\".,:;?!]")
)

// proseOf returns md outside fenced code blocks with its lines joined by
// spaces and runs of white space made one, so that a code span wrapped over
// two lines reads as one.
func proseOf(md string) string {
	var keep []string
	in := false
	for _, ln := range strings.Split(md, "\n") {
		if fenceMarker(ln) != "" {
			in = !in
			continue
		}
		if !in {
			keep = append(keep, ln)
		}
	}
	return strings.Join(strings.Fields(strings.Join(keep, " ")), " ")
}

// translations returns each Korean lab with its English original.
func translations(t *testing.T) [][2]Lab {
	t.Helper()
	en, err := All()
	if err != nil {
		t.Fatal(err)
	}
	ko, err := AllLang("ko")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]Lab{}
	for _, l := range en {
		byID[l.ID] = l
	}
	var out [][2]Lab
	for _, k := range ko {
		e, ok := byID[k.ID]
		if !ok {
			t.Errorf("ko/%s.md has no English lab %s.md", k.ID, k.ID)
			continue
		}
		out = append(out, [2]Lab{e, k})
	}
	return out
}

// TestKoreanLabsMatchTheEnglish checks that a Korean lab says the same
// things as its English original where a student must match them: the same
// objectives' exam tags and time, the same commands with the same expected
// output, every inline code span (commands, flags, paths, error strings
// stay English), every link, the same number of mistakes and prompts, and
// the same quiz with the same answers.
func TestKoreanLabsMatchTheEnglish(t *testing.T) {
	for _, p := range translations(t) {
		e, k := p[0], p[1]
		same := func(what string, a, b any) {
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Errorf("%s: %s differ:\n  en %v\n  ko %v", k.ID, what, a, b)
			}
		}
		same("the number", e.Number, k.Number)
		same("the minutes", e.Minutes, k.Minutes)
		var et, kt [][]string
		for i := range e.Objectives {
			et, kt = append(et, e.Objectives[i].Tags), append(kt, k.Objectives[i].Tags)
		}
		same("the objectives' tags", et, kt)
		same("the You-should-have block", e.Have, Block{Intro: e.Have.Intro, Shell: k.Have.Shell, Expected: k.Have.Expected})
		same("the number of Observe blocks", len(e.Observe), len(k.Observe))
		for i := range min(len(e.Observe), len(k.Observe)) {
			same(fmt.Sprintf("Observe block %d", i+1), e.Observe[i].Shell+"\n"+e.Observe[i].Expected, k.Observe[i].Shell+"\n"+k.Observe[i].Expected)
		}
		same("the number of prompts", len(e.Predict), len(k.Predict))
		same("the number of mistakes", len(bullets(strings.Split(e.Sections[SectionMistakes], "\n"))), len(bullets(strings.Split(k.Sections[SectionMistakes], "\n"))))
		same("the number of questions", len(e.Quiz), len(k.Quiz))
		for i := range min(len(e.Quiz), len(k.Quiz)) {
			same(fmt.Sprintf("question %d's answer and number of choices", i+1), []int{e.Quiz[i].Answer, len(e.Quiz[i].Choices)}, []int{k.Quiz[i].Answer, len(k.Quiz[i].Choices)})
		}
		for _, link := range linkOfRE.FindAllString(e.Markdown(), -1) {
			if !strings.Contains(k.Markdown(), link) {
				t.Errorf("%s: the Korean text lacks the link %s", k.ID, link)
			}
		}
		kp := proseOf(k.Markdown())
		for _, m := range inlineCodeSpanRE.FindAllStringSubmatch(proseOf(e.Markdown()), -1) {
			if !strings.Contains(kp, "`"+m[1]+"`") {
				t.Errorf("%s: the Korean text lacks `%s` (commands, flags, paths and errors stay in English)", k.ID, m[1])
			}
		}
	}
}

// TestKoreanLabsUseTheGlossary checks that where an English lab uses a
// glossary term, its Korean text uses the glossary's Korean term (the part
// before any parenthesis, as the glossary writes it).
func TestKoreanLabsUseTheGlossary(t *testing.T) {
	terms, err := Glossary()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range translations(t) {
		e, k := p[0], p[1]
		prose := strings.ToLower(strings.Join(sentences(e.Markdown()), " "))
		for _, term := range terms {
			en := strings.ToLower(strings.TrimSpace(strings.Split(term.English, "(")[0]))
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(en) + `\b`).MatchString(prose) {
				continue
			}
			ko := strings.TrimSpace(strings.Split(term.Korean, "(")[0])
			if !strings.Contains(k.Markdown(), ko) {
				t.Errorf("%s: the English text says %q; the Korean one never says %q (labs/ko/glossary.md)", k.ID, term.English, ko)
			}
		}
	}
}

// TestKoreanLabsAreThere requires a Korean text for every lab.
func TestKoreanLabsAreThere(t *testing.T) {
	var have []string
	for _, p := range translations(t) {
		have = append(have, p[1].ID)
	}
	en, _ := All()
	var missing []string
	for _, l := range en {
		if !slices.Contains(have, l.ID) {
			missing = append(missing, l.ID)
		}
	}
	if len(missing) > 0 {
		t.Errorf("Korean texts: %d of %d labs; missing labs/ko/ for %v", len(have), len(en), missing)
	}
}

func TestProseOfJoinsWrappedCodeSpans(t *testing.T) {
	md := "Run `kubectl get\n  nodes`.\n```sh\n`not prose`\n```\nSee https://lb:6443`, or https://x.example/a_(b).\n"
	p := proseOf(md)
	if got := inlineCodeSpanRE.FindAllString(p, -1); strings.Join(got, "|") != "`kubectl get nodes`" {
		t.Errorf("code spans of %q: %q", p, got)
	}
	if got := linkOfRE.FindAllString(md, -1); strings.Join(got, " ") != "https://lb:6443 https://x.example/a_(b" {
		t.Errorf("links: %q", got)
	}
}
