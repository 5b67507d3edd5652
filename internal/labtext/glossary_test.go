package labtext

import (
	"strings"
	"testing"
)

// TestGlossaryHasTheFieldsTerms: the terms #17 names, and those the lab
// texts lean on, are in the glossary with a Korean term and a meaning.
func TestGlossaryHasTheFieldsTerms(t *testing.T) {
	terms, err := Glossary()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]Term{}
	for _, term := range terms {
		have[term.English] = term
	}
	for _, want := range []string{
		"certificate signing request (CSR)", "subject alternative name (SAN)", "quorum", "lease", "raft term",
		"bootstrap token", "podCIDR", "certificate authority (CA)", "kubeconfig", "leader election",
		"Container Network Interface (CNI)", "encryption at rest", "RBAC", "Node authorizer", "admission controller",
	} {
		if _, ok := have[want]; !ok {
			t.Errorf("the glossary lacks %q", want)
		}
	}
	for _, term := range terms {
		if strings.Contains(term.Meaning, "\n") || len([]rune(term.Meaning)) > 120 {
			t.Errorf("%s: the meaning is more than one short line (%d characters)", term.English, len([]rune(term.Meaning)))
		}
	}
}

func TestParseGlossaryRejects(t *testing.T) {
	head := "| English | 한국어 | 뜻 |\n|---|---|---|\n"
	for name, text := range map[string]string{
		"no table":     "# 용어집\n",
		"bad header":   "| English | Korean | meaning |\n|---|---|---|\n| quorum | 쿼럼 | 과반수 |\n",
		"two cells":    head + "| quorum | 쿼럼 |\n",
		"empty cell":   head + "| quorum |  | 과반수 |\n",
		"not Korean":   head + "| quorum | 쿼럼 | majority |\n",
		"listed twice": head + "| quorum | 쿼럼 | 과반수 |\n| Quorum | 쿼럼 | 과반수 |\n",
		"text after":   head + "| quorum | 쿼럼 | 과반수 |\nmore text\n",
	} {
		if _, err := parseGlossary(text); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	terms, err := parseGlossary("intro\n\n" + head + "| quorum | 쿼럼 | 과반수의 합의 |\n")
	if err != nil || len(terms) != 1 || terms[0].Korean != "쿼럼" {
		t.Errorf("a good glossary: %v %+v", err, terms)
	}
}
