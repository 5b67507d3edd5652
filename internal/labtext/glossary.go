package labtext

import (
	"fmt"
	"strings"
	"unicode"

	labfiles "github.com/khw-dev/khw/labs"
)

// GlossaryFile is the bilingual glossary in the embedded lab texts.
const GlossaryFile = "ko/glossary.md"

// Term is one row of the glossary: the English term, the Korean one the
// Korean texts use, and one line of meaning (in Korean).
type Term struct {
	English, Korean, Meaning string
}

// Glossary parses GlossaryFile: a Markdown table whose header is
// "| English | 한국어 | 뜻 |", one row per term. Errors name the line: a row
// with other than three cells, an empty cell, a meaning not in Korean, a
// term listed twice. (The Korean term may be the English one, as Korean
// documentation writes kubeconfig.)
func Glossary() ([]Term, error) {
	data, err := labfiles.FS.ReadFile(GlossaryFile)
	if err != nil {
		return nil, err
	}
	return parseGlossary(string(data))
}

func parseGlossary(text string) ([]Term, error) {
	var out []Term
	seen := map[string]int{}
	inTable := false
	for i, ln := range strings.Split(text, "\n") {
		n := i + 1
		if !strings.HasPrefix(ln, "|") {
			if inTable && strings.TrimSpace(ln) != "" {
				return nil, fmt.Errorf("%s:%d: text after the table; the glossary is one table", GlossaryFile, n)
			}
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(ln), "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		if len(cells) != 3 {
			return nil, fmt.Errorf("%s:%d: %d cells, want 3 (English | 한국어 | 뜻)", GlossaryFile, n, len(cells))
		}
		if !inTable {
			if cells[0] != "English" || cells[1] != "한국어" || cells[2] != "뜻" {
				return nil, fmt.Errorf("%s:%d: the header must be | English | 한국어 | 뜻 |", GlossaryFile, n)
			}
			inTable = true
			continue
		}
		if strings.Trim(cells[0], "-") == "" {
			continue // the |---| line
		}
		t := Term{English: cells[0], Korean: cells[1], Meaning: cells[2]}
		if t.English == "" || t.Korean == "" || t.Meaning == "" {
			return nil, fmt.Errorf("%s:%d: an empty cell", GlossaryFile, n)
		}
		if !hasHangul(t.Meaning) {
			return nil, fmt.Errorf("%s:%d: %q: the meaning must be in Korean", GlossaryFile, n, t.English)
		}
		key := strings.ToLower(t.English)
		if first, dup := seen[key]; dup {
			return nil, fmt.Errorf("%s:%d: %q is already on line %d", GlossaryFile, n, t.English, first)
		}
		seen[key] = n
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no table of terms", GlossaryFile)
	}
	return out, nil
}

// hasHangul says whether s has a Hangul letter.
func hasHangul(s string) bool {
	for _, r := range s {
		if unicode.Is(unicode.Hangul, r) {
			return true
		}
	}
	return false
}
