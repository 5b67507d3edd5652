package lab

import (
	"bytes"
	"errors"
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
	err := Quiz(quizText(), UI{Out: &out, In: strings.NewReader("d\nmaybe\nB)\nb\n")})
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
	err := Quiz(quizText(), UI{Out: &out, In: strings.NewReader("a\nb\n")})
	if err == nil || !strings.Contains(err.Error(), "1 of 2 right") || !strings.Contains(err.Error(), "khw lab quiz 04-etcd") {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(out.String(), "✗ not a: the answer is b) one") || !strings.Contains(out.String(), "2379 is for clients.") {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestQuizInputEnds(t *testing.T) {
	var out bytes.Buffer
	if err := Quiz(quizText(), UI{Out: &out, In: strings.NewReader("b\nb")}); err != nil {
		t.Fatalf("an answer without a newline at the end of input: %v", err)
	}
	out.Reset()
	err := Quiz(quizText(), UI{Out: &out, In: strings.NewReader("b\n")})
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
	_ = Quiz(q, UI{Out: &out, In: strings.NewReader("b\na\n")})
	for _, want := range []string{"답 (a-c): ", "✓ 정답: b.", "✗ a는 틀렸습니다. 정답은 b) 2380", "2문제 중 1문제를 맞혔습니다."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
