package labtext

import (
	"testing"
	"unicode/utf8"
)

// maxLongestRight is the largest share of a language's questions whose
// right answer may be the strictly longest choice. With four choices chance
// is 25%; a quiz above it teaches "pick the longest" instead of the lab.
const maxLongestRight = 0.20

// rightIsLongest reports whether q's right answer is longer, in characters,
// than every other choice.
func rightIsLongest(q Question) bool {
	n := utf8.RuneCountInString(q.Choices[q.Answer])
	for i, c := range q.Choices {
		if i != q.Answer && utf8.RuneCountInString(c) >= n {
			return false
		}
	}
	return true
}

// TestQuizRightAnswerIsNotTheLongest checks, for each language, that the
// right answer is the strictly longest choice in at most maxLongestRight of
// the questions and in at most one question of each lab, so that the length
// of a choice tells a student nothing. Shuffling the choices hides their
// letters, not their lengths.
func TestQuizRightAnswerIsNotTheLongest(t *testing.T) {
	for _, lang := range Languages() {
		labs, err := AllLang(lang)
		if err != nil {
			t.Fatal(err)
		}
		total, longest := 0, 0
		for _, l := range labs {
			var inLab []int
			for i, q := range l.Quiz {
				total++
				if rightIsLongest(q) {
					longest++
					inLab = append(inLab, i+1)
					t.Logf("%s (%s) question %d: the right answer is the longest choice: %q", l.ID, lang, i+1, q.Choices[q.Answer])
				}
			}
			if len(inLab) > 1 {
				t.Errorf("%s (%s): the right answer is the longest choice in questions %v; allow it in at most one question per lab (lengthen a distractor or shorten the answer)", l.ID, lang, inLab)
			}
		}
		if total == 0 {
			t.Fatalf("%s: no questions read", lang)
		}
		ratio := float64(longest) / float64(total)
		t.Logf("%s: the right answer is the longest choice in %d of %d questions (%.0f%%; at most %.0f%%)", lang, longest, total, 100*ratio, 100*maxLongestRight)
		if ratio > maxLongestRight {
			t.Errorf("%s: the right answer is the longest choice in %d of %d questions (%.0f%%); at most %.0f%% allowed, see the questions logged above", lang, longest, total, 100*ratio, 100*maxLongestRight)
		}
	}
}
