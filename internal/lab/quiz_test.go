package lab

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/labtext"
)

func quizText() labtext.Lab {
	return labtext.Lab{ID: "04-etcd", Quiz: []labtext.Question{
		{Text: "Members that may fail of three?", Choices: []string{"none", "one", "two"}, Answer: 1, Why: "Two of three is a majority."},
		{Text: "Port for peers?", Choices: []string{"2379", "2380"}, Answer: 1, Why: "2379 is for clients."},
	}}
}

func TestQuizAllRight(t *testing.T) {
	var out bytes.Buffer
	// A letter out of range and a word are asked again; case and ")" are ignored.
	err := Quiz(quizText(), UI{QuizOrder: inOrder, Out: &out, In: strings.NewReader("d\nmaybe\nB)\nb\n")})
	if err != nil {
		t.Fatalf("Quiz: %v\n%s", err, out.String())
	}
	for _, want := range []string{"1/2. Members that may fail of three?", "  c) two", "Your answer (a-c): ", "✓ right: b.", "Two of three is a majority.", "Your answer (a-b): ", "2 of 2 right."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Count(out.String(), "Your answer (a-c): ") != 3 || strings.Count(out.String(), "(one letter, a to c)") != 2 {
		t.Errorf("question 1 was not asked again after d and maybe:\n%s", out.String())
	}
}

func TestQuizWrongAnswer(t *testing.T) {
	var out bytes.Buffer
	err := Quiz(quizText(), UI{QuizOrder: inOrder, Out: &out, In: strings.NewReader("a\nb\n")})
	if err == nil || !strings.Contains(err.Error(), "1 of 2 right") || !strings.Contains(err.Error(), "khw lab quiz 04-etcd") {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(out.String(), "✗ not a: the answer is b) one") || !strings.Contains(out.String(), "2379 is for clients.") {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestQuizInputEnds(t *testing.T) {
	var out bytes.Buffer
	if err := Quiz(quizText(), UI{QuizOrder: inOrder, Out: &out, In: strings.NewReader("b\nb")}); err != nil {
		t.Fatalf("an answer without a newline at the end of input: %v", err)
	}
	out.Reset()
	err := Quiz(quizText(), UI{QuizOrder: inOrder, Out: &out, In: strings.NewReader("b\n")})
	if !errors.Is(err, ErrQuizNoAnswer) {
		t.Errorf("err = %v, want ErrQuizNoAnswer", err)
	}
	if want := "The input ended after 1 of 2 questions: 1 right so far."; !strings.Contains(out.String(), want) {
		t.Errorf("the score so far is lost; output:\n%s\nwant %q", out.String(), want)
	}
}

func TestQuizSpeaksTheTextsLanguage(t *testing.T) {
	q := quizText()
	q.Lang = "ko"
	var out bytes.Buffer
	_ = Quiz(q, UI{QuizOrder: inOrder, Out: &out, In: strings.NewReader("b\na\n")})
	for _, want := range []string{"답 (a-c): ", "✓ 정답: b.", "✗ a는 틀렸습니다. 정답은 b) 2380", "2문제 중 1문제를 맞혔습니다."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// inOrder shows the choices as the text lists them.
func inOrder(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

func TestQuizShufflesChoicesAndRelabelsWhy(t *testing.T) {
	q := labtext.Question{Text: "Which?", Choices: []string{"alpha", "beta", "gamma"}, Answer: 1,
		Why: "beta is right. Choice a is tempting; choice c is not. 보기 a)는 아닙니다. Answer b again."}
	got := Shuffle(q, []int{2, 0, 1})
	if want := []string{"gamma", "alpha", "beta"}; strings.Join(got.Choices, ",") != strings.Join(want, ",") {
		t.Errorf("choices %v, want %v", got.Choices, want)
	}
	if got.Answer != 2 {
		t.Errorf("answer %d, want 2 (beta is shown third)", got.Answer)
	}
	if want := "beta is right. Choice b is tempting; choice a is not. 보기 b)는 아닙니다. Answer c again."; got.Why != want {
		t.Errorf("why = %q\nwant  %q", got.Why, want)
	}
	if Shuffle(q, []int{0, 0, 1}).Answer != 1 || Shuffle(q, []int{0, 1}).Answer != 1 {
		t.Errorf("a non-permutation changed the question")
	}
	var out bytes.Buffer
	err := Quiz(labtext.Lab{ID: "04-etcd", Quiz: []labtext.Question{q}}, UI{QuizOrder: func(n int) []int { return []int{2, 0, 1} }, Out: &out, In: strings.NewReader("c\n")})
	if err != nil || !strings.Contains(out.String(), "  c) beta") || !strings.Contains(out.String(), "Choice b is tempting") {
		t.Errorf("err %v; output:\n%s", err, out.String())
	}
}

// TestQuizWhyNamesChoicesOnlyByRef reads every quiz of every lab text, in
// every language, and checks that its explanation names a choice by letter
// only in a form Shuffle relabels: any other "b)" or "c and d" would point
// at the wrong choice once the choices are shuffled.
func TestQuizWhyNamesChoicesOnlyByRef(t *testing.T) {
	// A bare letter: "b)", "c and d", or in Korean a letter with a particle
	// ("c가 맞아", "b는 틀렸습니다").
	bare := regexp.MustCompile("(^|[^A-Za-z0-9_])[a-e]\\)|\\b(and|or) [a-e]\\b|\\b[a-e] (and|or)\\b|(^|[^A-Za-z0-9_`/.-])[a-e](가|는|를|도|의|처럼|와|과|이|은|만)")
	n := 0
	for _, lang := range []string{"en", "ko"} {
		for _, l := range mustLabs(t, lang) {
			for i, q := range l.Quiz {
				n++
				rest := choiceRef.ReplaceAllString(q.Why, "REF")
				if m := bare.FindString(rest); m != "" {
					t.Errorf("%s (%s) question %d: the explanation names a choice as %q, which Shuffle cannot relabel; write \"Choice x\" (보기 x)", l.ID, lang, i+1, m)
				}
				for _, m := range choiceRef.FindAllStringSubmatch(q.Why, -1) {
					if int(m[2][0]-'a') >= len(q.Choices) {
						t.Errorf("%s (%s) question %d: %q names no choice", l.ID, lang, i+1, m[0])
					}
				}
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d questions read", n)
	}
}

func mustLabs(t *testing.T, lang string) []labtext.Lab {
	t.Helper()
	ls, err := labtext.AllLang(lang)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}
