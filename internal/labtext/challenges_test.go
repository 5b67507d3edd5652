package labtext

import (
	"strings"
	"testing"
)

const goodChallenge = "# 06 · x\n\nintro\n\n## lb-x-y · A title\n\n### Symptom\ns\n\n### Goal\ng\n\n### Where to look\nw\n\n### What is wrong\nv\n\n### The fix\nDo it:\n\n```sh\nssh lb true\n```\n\n```text\nnot run\n```\n\n```sh\nkubectl get nodes\n```\n\n### Why\ny\n"

func TestParseChallenges(t *testing.T) {
	ts, err := ParseChallenges("en", "06-lb.md", goodChallenge)
	if err != nil {
		t.Fatal(err)
	}
	c := ts[0]
	if c.ID != "lb-x-y" || c.Lab != "06-lb" || c.Title != "A title" || c.Symptom != "s" || c.Goal != "g" || c.Why != "y" || c.Hints[0] != "w" || c.Hints[1] != "v" {
		t.Errorf("parsed %+v", c)
	}
	if c.FixScript != "ssh lb true\nkubectl get nodes" {
		t.Errorf("fix script %q: want the ```sh blocks only", c.FixScript)
	}
	for name, tc := range map[string]struct{ file, text, want string }{
		"section out of order": {"06-lb.md", strings.Replace(goodChallenge, "### Goal\ng\n\n### Where to look", "### Where to look\ng\n\n### Goal", 1), "out of place"},
		"no sh block":          {"06-lb.md", strings.ReplaceAll(goodChallenge, "```sh", "```bash"), "no ```sh block"},
		"empty section":        {"06-lb.md", strings.Replace(goodChallenge, "### Goal\ng\n", "### Goal\n", 1), "is empty"},
		"missing Why":          {"06-lb.md", strings.Split(goodChallenge, "### Why")[0], "ends after"},
		"bad heading":          {"06-lb.md", strings.Replace(goodChallenge, "## lb-x-y · A title", "## lb-x-y: A title", 1), "fault-id · Title"},
		"bad file name":        {"lb.md", goodChallenge, "NN-name.md"},
		"open fence":           {"06-lb.md", goodChallenge + "```sh\n", "not closed"},
		"text before sections": {"06-lb.md", strings.Replace(goodChallenge, "### Symptom", "stray\n### Symptom", 1), "text before its first section"},
	} {
		if _, err := ParseChallenges("en", tc.file, tc.text); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
}

// TestChallengesParse: the embedded texts parse in both languages.
func TestChallengesParse(t *testing.T) {
	for _, lang := range []string{"en", "ko"} {
		ts, err := Challenges(lang)
		if err != nil {
			t.Fatalf("%s: %v", lang, err)
		}
		if len(ts) == 0 {
			t.Errorf("%s: no challenge texts", lang)
		}
	}
}
