package challenge

import (
	"regexp"
	"testing"
)

// TestWordsSameVerbs: each language has every line, with the English
// line's format verbs in the same order.
func TestWordsSameVerbs(t *testing.T) {
	verbs := regexp.MustCompile(`%[a-zA-Z]`)
	for lang, ws := range words {
		for key, en := range english {
			w, ok := ws[key]
			if !ok {
				t.Errorf("%s: no line %q", lang, key)
				continue
			}
			if a, b := verbs.FindAllString(en, -1), verbs.FindAllString(w, -1); len(a) != len(b) {
				t.Errorf("%s %q: verbs %v, English %v", lang, key, b, a)
			} else {
				for i := range a {
					if a[i] != b[i] {
						t.Errorf("%s %q: verbs %v, English %v", lang, key, b, a)
						break
					}
				}
			}
		}
		for key := range ws {
			if _, ok := english[key]; !ok {
				t.Errorf("%s: line %q that English lacks", lang, key)
			}
		}
	}
}
