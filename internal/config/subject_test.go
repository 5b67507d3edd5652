package config

import (
	"errors"
	"strings"
	"testing"
)

// subjectFields are the pki.subject fields with a setter each.
var subjectFields = []struct {
	field string
	set   func(*Subject, string)
}{
	{"pki.subject.country", func(s *Subject, v string) { s.Country = v }},
	{"pki.subject.state", func(s *Subject, v string) { s.State = v }},
	{"pki.subject.locality", func(s *Subject, v string) { s.Locality = v }},
	{"pki.subject.organizationalUnit", func(s *Subject, v string) { s.OrganizationalUnit = v }},
}

// A cluster.yaml whose state smuggles a second O into the subject of
// the by-hand renewal (openssl req -subj '/ST=Oregon+O=system:masters/…'
// makes w1's kubelet cluster-admin) is refused before anything reads it,
// naming the field and the fix.
func TestSubjectInjectionInClusterYAMLIsRefused(t *testing.T) {
	base, err := Default("khw", ArchARM64, ProviderNspawn).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(string(base), "state: Oregon", `state: "Oregon+O=system:masters"`, 1)
	if doc == string(base) {
		t.Fatal("the default cluster.yaml has no state: Oregon line")
	}
	_, _, err = Parse([]byte(doc), "cluster.yaml")
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Parse accepted state Oregon+O=system:masters: %v", err)
	}
	if len(ve.Errors) != 1 || ve.Errors[0].Field != "pki.subject.state" || !strings.Contains(ve.Errors[0].Problem, `"+"`) ||
		!strings.Contains(ve.Errors[0].Problem, "distinguished name") || ve.Errors[0].Fix == "" {
		t.Fatalf("want one error on pki.subject.state naming \"+\" and a fix, got:\n%v", err)
	}
}

// Every character with a meaning in a distinguished name, control
// characters (C0, DEL, C1) and a leading or trailing space are refused in
// each subject field, with the field named and a fix; plain text, also
// outside ASCII, is kept.
func TestSubjectRefusesDNSpecials(t *testing.T) {
	bad := []struct{ value, words string }{
		{"Oregon+O=system:masters", `"+"`},
		{"Oregon + Washington", `"+"`},
		{"Oregon/Washington", `"/"`},
		{"O=x", `"="`},
		{"Portland, Oregon", `","`},
		{"a;b", `";"`},
		{"a<b", `"<"`},
		{"a>b", `">"`},
		{`a"b`, `"\""`},
		{`a\b`, `"\\"`},
		{"#1", `"#"`},
		{" Oregon", "space"},
		{"Oregon ", "space"},
		{"a\x1b[2Jb", "control or format character"},
		{"a\rb", "control or format character"},
		{"a\x7fb", "control or format character"},
		{"a\u009bb", "control or format character"},
		{"Ore\u202egon", "control or format character"},
		{"Ore\u200bgon", "control or format character"},
		{"Portland, OR", `","`},
	}
	for _, f := range subjectFields {
		for _, b := range bad {
			c := mutate(func(c *Cluster) { f.set(&c.PKI.Subject, b.value) })
			_, err := c.Validate()
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Errorf("%s %q: accepted (%v)", f.field, b.value, err)
				continue
			}
			found := false
			for _, fe := range ve.Errors {
				if fe.Field == f.field && strings.Contains(fe.Problem, b.words) && fe.Fix != "" {
					found = true
				}
			}
			if !found {
				t.Errorf("%s %q: no error on %s with %s and a fix; got:\n%v", f.field, b.value, f.field, b.words, err)
			}
		}
	}
	// Every special is named, and the fix suggests the value without them.
	c := mutate(func(c *Cluster) { c.PKI.Subject.Locality = "Portland, OR; US" })
	if _, err := c.Validate(); err == nil || !strings.Contains(err.Error(), `has ";" ","`) && !strings.Contains(err.Error(), `has "," ";"`) || !strings.Contains(err.Error(), `e.g. "Portland OR US"`) {
		t.Errorf("two specials: %v, want both named and the value without them suggested", err)
	}
	for _, f := range subjectFields[1:] {
		for _, good := range []string{"Oregon", "Kubernetes The Hard Way", "St. John's", "Baden-Württemberg", "서울특별시", "Zone (B): 3"} {
			c := mutate(func(c *Cluster) { f.set(&c.PKI.Subject, good) })
			if _, err := c.Validate(); err != nil {
				t.Errorf("%s %q refused: %v", f.field, good, err)
			}
		}
	}
}
