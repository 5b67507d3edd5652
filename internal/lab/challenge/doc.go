package challenge

import (
	"fmt"
	"io"
	"strings"
)

// CatalogueMarkdown is the catalogue as the Markdown table of
// docs/challenges.md: one row per fault, by lab and level, with its
// English title, the lab whose check grades it and its source.
func CatalogueMarkdown() (string, error) {
	texts, _, err := Texts("en")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	labs := map[string]bool{}
	fmt.Fprintln(&b, "| ID | lab | level | graded by | what the student sees | source |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|")
	for _, f := range Catalogue() {
		labs[f.Lab] = true
		checked := "its lab"
		if f.CheckedBy() != f.Lab {
			checked = "lab " + f.CheckedBy()
		}
		fmt.Fprintf(&b, "| `%s` | %s | %d | %s | %s | [%s](%s) |\n", f.ID, f.Lab, f.Level, checked,
			strings.ReplaceAll(texts[f.ID].Title, "|", `\|`), strings.ReplaceAll(f.Source.Title, "|", `\|`), f.Source.URL)
	}
	fmt.Fprintf(&b, "\n%d challenges over %d labs.\n", len(Catalogue()), len(labs))
	return b.String(), nil
}

// WriteLabChallenges ends a lab's text (khw lab NN) with the challenges
// that belong to lab labID, in lang, and how to practise them; nothing
// when the lab has none.
func WriteLabChallenges(w io.Writer, labID, lang string) error {
	texts, _, err := Texts(lang)
	if err != nil {
		return err
	}
	var rows []string
	for _, f := range Catalogue() {
		if f.Lab == labID {
			rows = append(rows, fmt.Sprintf("- `%s` (level %d): %s", f.ID, f.Level, texts[f.ID].Title))
		}
	}
	if len(rows) == 0 {
		return nil
	}
	num, _, _ := strings.Cut(labID, "-")
	head, practise := "Challenges", "Practise finding them on a live cluster: `khw challenge start --lab %s` (the first you have not solved), or `khw challenge start ID`."
	if lang == "ko" {
		head, practise = "도전 과제", "살아 있는 클러스터에서 찾아내는 연습을 하세요. `khw challenge start --lab %s`(아직 풀지 않은 첫 과제) 또는 `khw challenge start ID`입니다."
	}
	_, err = fmt.Fprintf(w, "\n## %s\n\n%s\n\n"+practise+"\n", head, strings.Join(rows, "\n"), num)
	return err
}
