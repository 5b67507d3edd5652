package lab

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"

	"github.com/khw-dev/khw/internal/labtext"
)

// ErrQuizNoAnswer is Quiz's error when the input ended before every
// question had an answer: a usage mistake (the answers come one per line).
var ErrQuizNoAnswer = errors.New("no answer (stdin closed): answer each question with its letter on a line of its own")

// quizWords are the quiz's own words in a lab text's language (English
// when the language has none).
type quizWords struct{ prompt, again, right, wrong, score, partial string }

var quizLang = map[string]quizWords{
	"en": {prompt: "Your answer (a-%c): ", again: "(one letter, a to %c)\n", right: "✓ right: %c.\n", wrong: "✗ not %c: the answer is %c) %s\n", score: "\n%d of %d right.\n", partial: "The input ended after %[2]d of %[3]d questions: %[1]d right so far.\n"},
	"ko": {prompt: "답 (a-%c): ", again: "(a부터 %c까지 글자 하나로 답하세요)\n", right: "✓ 정답: %c.\n", wrong: "✗ %c는 틀렸습니다. 정답은 %c) %s\n", score: "\n%[2]d문제 중 %[1]d문제를 맞혔습니다.\n", partial: "%[3]d문제 중 %[2]d문제까지 답하고 입력이 끝났습니다. 지금까지 %[1]d문제를 맞혔습니다.\n"},
}

// Quiz asks the questions of lab text t in order on ui.Out: each with its
// lettered choices in a new order each run (ui.QuizOrder; random when nil,
// so that a choice's place and letter tell nothing), the explanation's
// references to choices relabelled to match; one answer read from ui.In per question (a letter,
// case ignored, "b)" allowed; anything else asks again), then whether it
// was right and the text's explanation, in the text's language. It ends
// with the score (words.score takes right, then total), or, when the input
// ends first, the score so far (words.partial: right, answered, total). It needs no
// cluster. Errors: ErrQuizNoAnswer (input ended), or a wrong answer
// (the error gives the score and how to try again); nil when every answer
// was right.
func Quiz(t labtext.Lab, ui UI) error {
	if len(t.Quiz) == 0 {
		return fmt.Errorf("lab %s has no quiz", t.ID)
	}
	in := bufio.NewReader(ui.In)
	words, ok := quizLang[t.Lang]
	if !ok {
		words = quizLang["en"]
	}
	order := ui.QuizOrder
	if order == nil {
		order = rand.Perm
	}
	right := 0
	for i, q := range t.Quiz {
		q = Shuffle(q, order(len(q.Choices)))
		ui.say("\n%d/%d. %s\n", i+1, len(t.Quiz), q.Text)
		for j, c := range q.Choices {
			ui.say("  %c) %s\n", 'a'+j, c)
		}
		got, err := readChoice(ui, in, words, len(q.Choices))
		if err != nil {
			ui.say(words.partial, right, i, len(t.Quiz))
			return err
		}
		if got == q.Answer {
			right++
			ui.say(words.right, 'a'+q.Answer)
		} else {
			ui.say(words.wrong, 'a'+got, 'a'+q.Answer, q.Choices[q.Answer])
		}
		ui.say("  %s\n", strings.ReplaceAll(q.Why, "\n", "\n  "))
	}
	ui.say(words.score, right, len(t.Quiz))
	if right < len(t.Quiz) {
		return fmt.Errorf("lab %s quiz: %d of %d right; read the explanations above (and the lab: khw lab %s), then try again with khw lab quiz %s", t.ID, right, len(t.Quiz), t.ID, t.ID)
	}
	return nil
}

// readChoice asks with words.prompt and reads answer lines until one names
// one of n choices (another answer, not an empty line, is told the form);
// it returns the choice's index.
func readChoice(ui UI, in *bufio.Reader, words quizWords, n int) (int, error) {
	last := 'a' + rune(n) - 1
	for {
		ui.say(words.prompt, last)
		line, err := in.ReadString('\n')
		a := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(line)), ")")
		if len(a) == 1 && rune(a[0]) >= 'a' && rune(a[0]) <= last {
			ui.say("\n")
			return int(a[0] - 'a'), nil
		}
		if err != nil {
			ui.say("\n")
			return 0, ErrQuizNoAnswer
		}
		if a != "" {
			ui.say(words.again, last)
		}
	}
}

// choiceRef matches a reference to a choice by its letter in a quiz
// explanation: "Choice a", "choice b", "Answer c" in English, "보기 d" in
// Korean (the forms the lab texts use; TestQuizWhyNamesChoicesOnlyByRef
// keeps it that way). Group 2 is the letter.
var choiceRef = regexp.MustCompile(`(\b[Cc]hoice|\b[Aa]nswer|보기) ([a-e])\b`)

// Shuffle returns q with its choices in the order perm gives (the choice
// shown at place i is q.Choices[perm[i]]), its Answer the new place of the
// right choice, and every choiceRef in its explanation relabelled to the
// new letters. perm must be a permutation of len(q.Choices); any other
// value returns q unchanged.
func Shuffle(q labtext.Question, perm []int) labtext.Question {
	n := len(q.Choices)
	if len(perm) != n {
		return q
	}
	place := make([]int, n) // place[original] = displayed index
	seen := make([]bool, n)
	for i, o := range perm {
		if o < 0 || o >= n || seen[o] {
			return q
		}
		seen[o] = true
		place[o] = i
	}
	out := q
	out.Choices = make([]string, n)
	for i, o := range perm {
		out.Choices[i] = q.Choices[o]
	}
	out.Answer = place[q.Answer]
	out.Why = choiceRef.ReplaceAllStringFunc(q.Why, func(m string) string {
		sub := choiceRef.FindStringSubmatch(m)
		o := int(sub[2][0] - 'a')
		if o >= n {
			return m
		}
		return sub[1] + " " + string(rune('a'+place[o]))
	})
	return out
}
