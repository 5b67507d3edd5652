package labtext

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// parseBlocks splits a section's lines (the first one is line first of the
// file) into ```sh blocks. Each must have a non-empty body and an intro
// sentence before it; a ```text block right after it (blank lines between
// are allowed) is its expected output, required when expected is set. Text
// after the last block is allowed (a closing remark) but not needed.
func parseBlocks(body []string, first int, expected bool) ([]Block, error) {
	var blocks []Block
	var intro, code []string
	info := ""     // the open fence's info string ("" outside a fence)
	in := false    // inside a fence
	after := false // the last thing seen was a ```sh block (only blank lines since)
	for i, ln := range body {
		lineNo := first + i
		f := fenceMarker(ln)
		switch {
		case f != "" && !in:
			info = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(ln), string(f[0])))
			switch {
			case info == "text" && after:
			case info == "text":
				return nil, fmt.Errorf("%d: a ```text block shows the expected output of the ```sh block right before it; this one follows none", lineNo)
			case info != "sh":
				return nil, fmt.Errorf("%d: the commands of this section are run, so each block must be ```sh (its expected output a ```text block after it); got %q", lineNo, strings.TrimSpace(ln))
			case expected && after:
				return nil, fmt.Errorf("%d: the ```sh block before this one has no ```text block with its expected output; add one after it", lineNo)
			case strings.TrimSpace(strings.Join(intro, "\n")) == "":
				return nil, fmt.Errorf("%d: this ```sh block has no sentence before it; say what to look for in its output", lineNo)
			}
			in, code = true, nil
		case f != "" && strings.Trim(strings.TrimSpace(ln), f[:1]) == "":
			in = false
			text := strings.TrimSpace(strings.Join(code, "\n"))
			if text == "" {
				return nil, fmt.Errorf("%d: empty ```%s block", lineNo, info)
			}
			if info == "text" {
				blocks[len(blocks)-1].Expected = text
				after = false
				continue
			}
			blocks = append(blocks, Block{Intro: joinParagraph(strings.TrimSpace(strings.Join(intro, "\n"))), Shell: text})
			intro, after = nil, true
		case in:
			code = append(code, ln)
		default:
			if strings.TrimSpace(ln) != "" {
				if expected && after {
					return nil, fmt.Errorf("%d: the ```sh block before this line has no ```text block with its expected output; add one right after it", lineNo)
				}
				after = false
			}
			intro = append(intro, ln)
		}
	}
	if expected && after {
		return nil, fmt.Errorf("%d: the last ```sh block has no ```text block with its expected output; add one after it", first+len(body)-1)
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%d: no ```sh block; give at least one command to look at the result", first)
	}
	return blocks, nil
}

// parseObjectives reads the bullets of "Objectives" (each with at least one
// exam-domain tag) and its time line; there must be three bullets.
func parseObjectives(lg language, body []string, first int) ([]Objective, int, error) {
	var out []Objective
	minutes := 0
	for i, ln := range body {
		lineNo := first + i
		t := strings.TrimSpace(ln)
		switch {
		case t == "":
		case strings.HasPrefix(t, "- "):
			o := Objective{Text: strings.TrimSpace(t[2:])}
			for strings.HasSuffix(o.Text, "]") {
				open := strings.LastIndex(o.Text, "[")
				if open < 0 {
					break
				}
				tag := o.Text[open+1 : len(o.Text)-1]
				if !examDomains[tag] {
					return nil, 0, fmt.Errorf("%d: [%s] is not an exam domain; use one of %s", lineNo, tag, strings.Join(slices.Sorted(maps.Keys(examDomains)), "; "))
				}
				o.Tags = append([]string{tag}, o.Tags...)
				o.Text = strings.TrimSpace(o.Text[:open])
			}
			if len(o.Tags) == 0 {
				return nil, 0, fmt.Errorf("%d: this objective has no exam-domain tag; end it with one, e.g. [CKA: Troubleshooting]", lineNo)
			}
			out = append(out, o)
		case lg.timeRE.MatchString(t):
			minutes, _ = strconv.Atoi(lg.timeRE.FindStringSubmatch(t)[1])
		default:
			return nil, 0, fmt.Errorf("%d: %q: \"Objectives\" holds only bullets and the time line (%s)", lineNo, clip(t, 40), lg.timeRE)
		}
	}
	if len(out) != 3 {
		return nil, 0, fmt.Errorf("%d: %d objectives; give exactly three, each starting with a verb", first, len(out))
	}
	if minutes <= 0 {
		return nil, 0, fmt.Errorf("%d: no time line; end the objectives with one matching %s", first, lg.timeRE)
	}
	return out, minutes, nil
}

// parseQuiz reads 3-5 questions: "### N. Question" (N counting from 1),
// two to five choices "- a) …" in letter order, and an answer line naming
// one of them followed by its explanation.
func parseQuiz(lg language, body []string, first int) ([]Question, error) {
	var out []Question
	var why []string
	finish := func(lineNo int) error {
		if len(out) == 0 {
			return nil
		}
		q := &out[len(out)-1]
		q.Why = joinParagraph(strings.TrimSpace(strings.Join(why, "\n")))
		switch {
		case len(q.Choices) < 2:
			return fmt.Errorf("%d: question %d has %d choices; give 2 to 5 as \"- a) …\"", lineNo, len(out), len(q.Choices))
		case q.Answer < 0:
			return fmt.Errorf("%d: question %d has no answer line (%s)", lineNo, len(out), lg.answerRE)
		case q.Why == "":
			return fmt.Errorf("%d: question %d: explain the answer after its letter", lineNo, len(out))
		}
		return nil
	}
	for i, ln := range body {
		lineNo := first + i
		t := strings.TrimSpace(ln)
		if strings.HasPrefix(t, "### ") {
			if err := finish(lineNo); err != nil {
				return nil, err
			}
			want := fmt.Sprintf("### %d. ", len(out)+1)
			if !strings.HasPrefix(t, want) || len(t) == len(want) {
				return nil, fmt.Errorf("%d: %q: questions are numbered in order, \"%s<question>\"", lineNo, clip(t, 40), want)
			}
			out = append(out, Question{Text: t[len(want):], Answer: -1})
			why = nil
			continue
		}
		if len(out) == 0 {
			if t != "" {
				return nil, fmt.Errorf("%d: text before the first question; start with \"### 1. \"", lineNo)
			}
			continue
		}
		q := &out[len(out)-1]
		if q.Answer >= 0 {
			why = append(why, ln)
			continue
		}
		if m := lg.answerRE.FindStringSubmatch(t); m != nil {
			q.Answer = int(m[1][0] - 'a')
			if q.Answer >= len(q.Choices) {
				return nil, fmt.Errorf("%d: the answer %s) is not one of the %d choices", lineNo, m[1], len(q.Choices))
			}
			why = append(why, m[2])
			continue
		}
		if strings.HasPrefix(t, "- ") {
			letter := string(rune('a' + len(q.Choices)))
			if !strings.HasPrefix(t, "- "+letter+") ") {
				return nil, fmt.Errorf("%d: choice %d of question %d must start \"- %s) \"", lineNo, len(q.Choices)+1, len(out), letter)
			}
			if len(q.Choices) == 5 {
				return nil, fmt.Errorf("%d: question %d has more than 5 choices", lineNo, len(out))
			}
			q.Choices = append(q.Choices, strings.TrimSpace(t[5:]))
			continue
		}
		if t != "" && len(q.Choices) > 0 {
			return nil, fmt.Errorf("%d: %q after the choices of question %d; the answer line comes next (%s)", lineNo, clip(t, 40), len(out), lg.answerRE)
		}
		if t != "" {
			q.Text += " " + t
		}
	}
	if err := finish(first + len(body)); err != nil {
		return nil, err
	}
	if len(out) < 3 || len(out) > 5 {
		return nil, fmt.Errorf("%d: %d questions; give 3 to 5", first, len(out))
	}
	return out, nil
}

// bullets returns the "- " items of a section's lines, each joined into
// one line.
func bullets(body []string) []string {
	var out []string
	for _, item := range strings.Split(joinParagraph(strings.Join(body, "\n")), "\n") {
		if t := strings.TrimSpace(item); strings.HasPrefix(t, "- ") {
			out = append(out, strings.TrimSpace(t[2:]))
		}
	}
	return out
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
