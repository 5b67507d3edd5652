package labtext

import (
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The lab texts are for readers of English as a second language (B1/B2):
// short sentences. Limits of issue #17: no sentence over 35 words, an
// average under 20 words per lab.
const (
	maxSentenceWords = 35
	maxAverageWords  = 20.0
)

var (
	inlineCodeRE = regexp.MustCompile("`[^`]*`")
	urlRE        = regexp.MustCompile(`https?://\S+`)
	// sentenceEndRE ends a sentence at . ! or ? (after an optional closing
	// bracket or quote) followed by a space and a letter (a sentence may
	// start with "etcd"), a digit, an opening bracket or quote, or a code
	// token.
	sentenceEndRE = regexp.MustCompile(`[.!?]["')]?\s+["'(]?[\pL0-9\x60]`)
)

// sentences returns the prose sentences of a lab's Markdown: the text
// outside code fences, headings, tables and the Upstream section, one unit
// per paragraph or list item, split at sentence ends; inline code and
// links count as one word each.
func sentences(md string) []string {
	var out []string
	var para []string
	flush := func() {
		if len(para) == 0 {
			return
		}
		text := strings.Join(para, " ")
		para = nil
		text = inlineCodeRE.ReplaceAllString(text, "`code`")
		text = urlRE.ReplaceAllString(text, "URL")
		text = strings.NewReplacer("**", "", "e.g.", "eg", "i.e.", "ie", "vs.", "vs", "etc.", "etc").Replace(text)
		for {
			loc := sentenceEndRE.FindStringIndex(text)
			if loc == nil {
				break
			}
			cut := loc[1] - 1 // the next sentence starts at its first character
			out = append(out, strings.TrimSpace(text[:cut]))
			text = text[cut:]
		}
		if t := strings.TrimSpace(text); t != "" {
			out = append(out, t)
		}
	}
	inFence, skip := false, false
	for _, ln := range strings.Split(md, "\n") {
		t := strings.TrimSpace(ln)
		if fenceMarker(ln) != "" {
			flush()
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if strings.HasPrefix(t, "#") {
			flush()
			skip = t == "## "+SectionUpstream
			continue
		}
		switch {
		case skip:
		case t == "" || strings.HasPrefix(t, "|"):
			flush()
		case strings.HasPrefix(t, "- ") || strings.HasPrefix(t, "* ") || numberedItem(t):
			flush()
			para = append(para, t)
		default:
			para = append(para, t)
		}
	}
	flush()
	return out
}

func numberedItem(t string) bool {
	i := strings.IndexFunc(t, func(r rune) bool { return !unicode.IsDigit(r) })
	return i > 0 && strings.HasPrefix(t[i:], ". ")
}

// words counts the words of a sentence: the fields holding a letter or a
// digit (list markers and lone punctuation are not words).
func words(s string) int {
	n := 0
	for _, f := range strings.Fields(s) {
		if strings.IndexFunc(f, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0 {
			n++
		}
	}
	return n
}

func TestSentencesSplitsProse(t *testing.T) {
	md := "# 01 · T\nOne two three. four `five. six` seven!\n\n```sh\nnot. Prose here\n```\n| a. B | c |\n- Item one. Item two, e.g. this\n  wraps.\n## Upstream\n- skipped: https://x.example/a. B\n"
	got := sentences(md)
	want := []string{"One two three.", "four `code` seven!", "- Item one.", "Item two, eg this wraps."}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("sentences = %q, want %q", got, want)
	}
	if n := words("- Item one, `code` — done."); n != 4 {
		t.Errorf("words = %d, want 4", n)
	}
}

// TestLabsArePlainEnglish checks the sentence lengths of every English lab.
// With -v it prints each lab's average and longest sentence.
func TestLabsArePlainEnglish(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range all {
		ss := sentences(l.Markdown())
		total, longest := 0, ""
		for _, s := range ss {
			n := words(s)
			total += n
			if n > words(longest) {
				longest = s
			}
			if n > maxSentenceWords {
				t.Errorf("%s: a sentence of %d words (at most %d): %q", l.ID, n, maxSentenceWords, s)
			}
		}
		avg := float64(total) / float64(len(ss))
		t.Logf("%s: %d sentences, %.1f words on average, longest %d", l.ID, len(ss), avg, words(longest))
		if avg >= maxAverageWords {
			t.Errorf("%s: %.1f words per sentence on average; keep it under %.0f", l.ID, avg, maxAverageWords)
		}
	}
}
