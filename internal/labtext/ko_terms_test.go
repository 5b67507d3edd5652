package labtext

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"testing"
	"unicode"

	labfiles "github.com/khw-dev/khw/labs"
)

// koTermVariants lists, for some concepts of the glossary, the words a
// Korean text may use for them: the Korean terms translators reach for, and
// the English word left untranslated. The glossary's entry (its Korean term,
// the part before any parenthesis) must be one of them; a Korean text that
// uses any other one fails TestKoreanTextsUseOneTermPerConcept, which names
// the file, the line and the term to use instead.
//
// A variant matches where a word starts (a Korean word takes its particles
// at its end, so 랩을 matches 랩 and 부트스트랩 does not); an English variant
// must also end a word, and matches in any case. Code blocks, inline code
// and links are not prose and are not searched: `is healthy` in etcd's
// output stays as etcd prints it.
var koTermVariants = []struct {
	English  string   // the glossary entry's English term, as the glossary writes it
	Variants []string // every word for that concept, the glossary's choice among them
}{
	// The guide's own unit: kubernetes.io/ko and the labs say 실습.
	{"lab", []string{"실습", "랩"}},
	// The API verb and what it streams: kubernetes.io/ko writes 감시
	// (glossary "컨트롤러": "클러스터의 공유된 상태를 감시하고"; the Service page:
	// kube-proxy "…의 추가와 제거를 감시한다"). RBAC's verb stays `watch`.
	{"watch", []string{"감시", "워치"}},
	// kubernetes.io/ko says a node is 정상 (concepts/architecture/nodes).
	{"healthy", []string{"정상", "건강", "헬시", "healthy"}},
	// kubernetes.io/ko's 한글화 용어집: revision | 리비전.
	{"revision", []string{"리비전", "리비젼", "개정 번호"}},
	{"compaction", []string{"컴팩션", "콤팩션", "컴팩트"}},
	{"informer", []string{"인포머", "정보 제공자"}},
	{"serving certificate", []string{"서빙 인증서", "서빙(serving) 인증서", "서비스 인증서", "서버용 인증서"}},
	{"signer", []string{"서명자", "사이너", "서명 주체"}},
	{"requestor", []string{"요청자", "리퀘스터", "요청 주체"}},
	// kubernetes.io/ko's 한글화 용어집 transliterates masquerading; the labs
	// name the iptables target, MASQUERADE.
	{"masquerade", []string{"마스커레이드", "마스커레이딩", "매스커레이드"}},
	// The labs keep 갱신 for renewal (lab 14), so rotation is 교체, the word
	// Korean security documentation uses for key rotation.
	{"certificate rotation", []string{"인증서 교체", "인증서 로테이션", "인증서 순환", "인증서 회전", "인증서 자동 갱신"}},
}

// koPredictLabel starts every prompt of "예측한 뒤 관찰하기", as "Predict: "
// starts every English one.
const koPredictLabel = "예측: "

// koText is one Korean file of the labs: its path for messages and its
// lines.
type koText struct {
	path  string
	lines []string
}

func koTexts(t *testing.T) []koText {
	t.Helper()
	names, err := fs.Glob(labfiles.FS, "ko/*.md")
	if err != nil || len(names) == 0 {
		t.Fatalf("no Korean texts embedded (labs/ko/*.md): %v", err)
	}
	var out []koText
	for _, n := range names {
		data, err := labfiles.FS.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, koText{path: path.Join("labs", n), lines: strings.Split(string(data), "\n")})
	}
	return out
}

var koURLRE = regexp.MustCompile(`https?://\S+`)

// koProseLines returns the lines of a Korean text with what is not prose
// blanked out: fenced blocks, inline code (a span may wrap onto the next
// line of its paragraph) and links. In the glossary it keeps only the
// Korean term and the meaning of each row: the English column names the
// concept in English on purpose.
func koProseLines(k koText) []string {
	glossary := path.Base(k.path) == path.Base(GlossaryFile)
	out := make([]string, len(k.lines))
	inFence, inSpan := false, false
	for i, ln := range k.lines {
		if fenceMarker(ln) != "" {
			inFence, inSpan = !inFence, false
			continue
		}
		if inFence {
			continue
		}
		if strings.TrimSpace(ln) == "" {
			inSpan = false
			continue
		}
		if glossary {
			cells := strings.Split(strings.Trim(strings.TrimSpace(ln), "|"), "|")
			if !strings.HasPrefix(ln, "|") || len(cells) != 3 {
				continue
			}
			ln = "|" + cells[1] + "|" + cells[2] + "|"
		}
		var b strings.Builder
		for _, r := range ln {
			switch {
			case r == '`':
				inSpan = !inSpan
				b.WriteRune(' ')
			case inSpan:
				b.WriteRune(' ')
			default:
				b.WriteRune(r)
			}
		}
		out[i] = koURLRE.ReplaceAllStringFunc(b.String(), func(u string) string { return strings.Repeat(" ", len(u)) })
	}
	return out
}

// koTermAt returns the byte offsets where term starts a word in line.
func koTermAt(line, term string) []int {
	ascii := true
	for _, r := range term {
		if r > unicode.MaxASCII {
			ascii = false
		}
	}
	hay := line
	if ascii {
		hay, term = strings.ToLower(line), strings.ToLower(term)
	}
	var at []int
	for from := 0; ; {
		i := strings.Index(hay[from:], term)
		if i < 0 {
			return at
		}
		i += from
		from = i + len(term)
		if i > 0 {
			if r := lastRune(hay[:i]); unicode.IsLetter(r) || unicode.IsDigit(r) {
				continue
			}
		}
		if ascii && from < len(hay) {
			if r := rune(hay[from]); r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
				continue
			}
		}
		at = append(at, i)
	}
}

// koOtherTermAt returns where variant starts a word in line, leaving out
// the places that are part of the chosen term (a variant may be a piece
// of it, or it a piece of the variant).
func koOtherTermAt(line, variant, chosen string) []int {
	var at []int
	uses := koTermAt(line, chosen)
next:
	for _, i := range koTermAt(line, variant) {
		for _, j := range uses {
			if i < j+len(chosen) && j < i+len(variant) {
				continue next
			}
		}
		at = append(at, i)
	}
	return at
}

func lastRune(s string) rune {
	r := []rune(s)
	return r[len(r)-1]
}

// koChoice returns the Korean term of a glossary entry as the Korean texts
// write it: the part before any parenthesis.
func koChoice(term Term) string {
	return strings.TrimSpace(strings.Split(term.Korean, "(")[0])
}

// TestKoreanTextsUseOneTermPerConcept: for each concept of koTermVariants,
// the Korean labs and the glossary's meanings use the term the glossary
// chooses, never one of the other variants.
func TestKoreanTextsUseOneTermPerConcept(t *testing.T) {
	terms, err := Glossary()
	if err != nil {
		t.Fatal(err)
	}
	chosen := map[string]string{}
	for _, term := range terms {
		chosen[term.English] = koChoice(term)
	}
	texts := koTexts(t)
	for _, c := range koTermVariants {
		use, ok := chosen[c.English]
		if !ok {
			t.Errorf("%s has no entry %q; koTermVariants names it", GlossaryFile, c.English)
			continue
		}
		found := false
		for _, v := range c.Variants {
			found = found || v == use
		}
		if !found {
			t.Errorf("%s chooses %q for %q, which koTermVariants does not list among %q: add it there, or fix the glossary", GlossaryFile, use, c.English, c.Variants)
			continue
		}
		for _, k := range texts {
			for i, ln := range koProseLines(k) {
				for _, v := range c.Variants {
					if v != use && len(koOtherTermAt(ln, v, use)) > 0 {
						t.Errorf("%s:%d: %q; the glossary's term for %q is %q", k.path, i+1, v, c.English, use)
					}
				}
			}
		}
	}
}

// TestKoreanPredictPromptsShareOneLabel: every prompt of "예측한 뒤 관찰하기"
// starts with the same label, as every English prompt starts with
// "Predict: ".
func TestKoreanPredictPromptsShareOneLabel(t *testing.T) {
	for _, p := range translations(t) {
		e, k := p[0], p[1]
		for _, prompt := range e.Predict {
			if !strings.HasPrefix(prompt, "Predict: ") {
				t.Errorf("%s: an English prompt does not start with \"Predict: \" (%.40q…); koPredictLabel follows that label", e.ID, prompt)
			}
		}
		file := path.Join("labs", "ko", k.ID+".md")
		lines := strings.Split(k.raw, "\n")
		in := false
		for i, ln := range lines {
			if strings.HasPrefix(ln, "## ") {
				in = strings.TrimSpace(ln[3:]) == koSectionName(SectionPredict)
				continue
			}
			if in && strings.HasPrefix(ln, "- ") && !strings.HasPrefix(ln, "- "+koPredictLabel) {
				t.Errorf("%s:%d: a prompt starts %.20q; start it with %q", file, i+1, strings.TrimPrefix(ln, "- "), koPredictLabel)
			}
		}
	}
}

// koSectionName returns the Korean heading of an English section key.
func koSectionName(en string) string {
	for i, s := range Sections {
		if s == en {
			return Headings("ko")[i]
		}
	}
	panic(fmt.Sprintf("no section %q", en))
}

func TestKoTermAtFindsWordStarts(t *testing.T) {
	for _, c := range []struct {
		line, term string
		want       int
	}{
		{"이 랩에서는", "랩", 1},
		{"랩을 시작합니다", "랩", 1},
		{"TLS 부트스트랩(TLS bootstrap)", "랩", 0},
		{"세 멤버가 모두 healthy여야 합니다", "healthy", 1},
		{"is Healthy.", "healthy", 1},
		{"unhealthy", "healthy", 0},
		{"healthyish", "healthy", 0},
		{"감시(watch)하고, 워치를 다시", "워치", 1},
	} {
		if got := len(koTermAt(c.line, c.term)); got != c.want {
			t.Errorf("koTermAt(%q, %q): %d matches, want %d", c.line, c.term, got, c.want)
		}
	}
	lines := koProseLines(koText{path: "labs/ko/x.md", lines: []string{
		"`etcdctl endpoint", "health` 는 is healthy를", "", "```text", "is healthy", "```", "see https://x/healthy",
	}})
	for i, ln := range lines {
		if len(koTermAt(ln, "healthy")) != map[int]int{1: 1}[i] {
			t.Errorf("prose line %d %q: healthy found %d times", i+1, ln, len(koTermAt(ln, "healthy")))
		}
	}
}
