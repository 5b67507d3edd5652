package lab

import (
	"fmt"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/labtext"
)

// The catalogue is in course order, every row has its text and every text
// its row, and each step answers to its row's ID.
func TestCatalogueIsWhole(t *testing.T) {
	c := config.Default("cat", config.ArchAMD64, config.ProviderNspawn)
	texts, err := labtext.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(texts) != len(catalogue) {
		t.Errorf("%d lab texts, %d catalogue rows", len(texts), len(catalogue))
	}
	last := 0
	for i, l := range All() {
		if l.Number() <= last {
			t.Errorf("row %d %s: number %d is not after %d", i, l.ID, l.Number(), last)
		}
		last = l.Number()
		txt, err := l.Text()
		if err != nil || txt.ID != l.ID {
			t.Errorf("%s: text %q, %v", l.ID, txt.ID, err)
		}
		s := l.Step(nil, c)
		switch {
		case l.Kind == Drill && (s != nil || l.title == "" || l.Up != ""):
			t.Errorf("%s: a drill has no step and no khw up line, but a title", l.ID)
		case l.Kind == Operation && (s != nil || l.title == "" || l.Up != "" || l.begin == nil || l.byHand == nil || l.grade == nil || l.passed == ""):
			t.Errorf("%s: an operation has no step and no khw up line, but a title, begin, byHand, grade and passed", l.ID)
		case l.Kind != Drill && l.Kind != Operation && (s == nil || s.ID() != l.ID || l.Up == ""):
			t.Errorf("%s: step %v, khw up line %q; want a step with this ID and a line", l.ID, s, l.Up)
		}
		for _, line := range strings.Split(l.Up, "\n") {
			if len([]rune(line)) > 60 {
				t.Errorf("%s: khw up --help line over 60 characters: %q", l.ID, line)
			}
		}
	}
	ids := map[string]bool{}
	for _, s := range Steps(nil, c) {
		if ids[s.ID()] {
			t.Errorf("step %s twice", s.ID())
		}
		ids[s.ID()] = true
	}
	if want := len(catalogue) - 4; len(ids) != want {
		t.Errorf("%d steps, want every lab but the drill and the operations (%d)", len(ids), want)
	}
}

// Every detector grades a lab of the catalogue, and they run in course order.
func TestDetectorsBelongToTheCatalogue(t *testing.T) {
	pos := map[string]int{}
	for i, l := range catalogue {
		pos[l.ID] = i
	}
	seen := map[string]bool{}
	for _, l := range catalogue {
		for _, d := range l.Detectors() {
			if pos[d.Lab] != pos[l.ID] {
				t.Errorf("detector %s of lab %s grades lab %q", d.Name, l.ID, d.Lab)
			}
			if seen[d.Name] || d.Doc == "" || d.Run == nil {
				t.Errorf("detector %s: duplicate name, no doc or no run", d.Name)
			}
			seen[d.Name] = true
		}
	}
	var got []string
	for _, d := range catalogue[pos["04-etcd"]].Detectors() {
		got = append(got, d.Name)
	}
	if strings.Join(got, ",") != "etcd-initial-cluster,etcd-certs,etcd-stored-data" {
		t.Errorf("04-etcd's detectors = %v", got)
	}
	if len(catalogue[pos["11-smoke"]].Detectors()) != 0 {
		t.Errorf("11-smoke has detectors")
	}
}

func TestLookupAcceptsAliases(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"04-etcd", "04-etcd"}, {"04", "04-etcd"}, {"4", "04-etcd"}, {"etcd", "04-etcd"}, {" ETCD ", "04-etcd"},
		{"1", "01-machines"}, {"machines", "01-machines"}, {"10", "10-tls-bootstrap"}, {"tls-bootstrap", "10-tls-bootstrap"},
		{"12", "12-failover"}, {"failover", "12-failover"}, {"control-plane", "05-control-plane"}, {"011", "11-smoke"},
	} {
		l, err := Lookup(tc.in)
		if err != nil {
			t.Errorf("Lookup(%q): %v", tc.in, err)
			continue
		}
		if l.ID != tc.want {
			t.Errorf("Lookup(%q) = %s, want %s", tc.in, l.ID, tc.want)
		}
	}
}

func TestLookupRejectsUnknown(t *testing.T) {
	for _, in := range []string{"", "0", "16", "-4", "etc", "04-etc", "4-etcd", "control", "04 etcd"} {
		_, err := Lookup(in)
		if err == nil {
			t.Errorf("Lookup(%q) found a lab", in)
			continue
		}
		for _, want := range []string{fmt.Sprintf("%q", in), "01-machines", "04-etcd", "12-failover"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Lookup(%q) error %q does not name %s", in, err, want)
			}
		}
	}
}

func TestNextFromAndHelp(t *testing.T) {
	if n, ok := Next("04-etcd"); !ok || n.ID != "05-control-plane" {
		t.Errorf("Next(04-etcd) = %s, %v", n.ID, ok)
	}
	if _, ok := Next(labid.Upgrade); ok {
		t.Error("Next of the last lab")
	}
	from := From("10-tls-bootstrap")
	if len(from) != 6 || from[0].ID != "10-tls-bootstrap" || from[5].ID != labid.Upgrade {
		t.Errorf("From(10) = %v", from)
	}
	if From("nope") != nil {
		t.Error("From of an unknown lab")
	}
	help := UpHelp()
	for _, id := range IDs() {
		if strings.Contains(help, id) != (id != "12-failover" && id != labid.EtcdBackup && id != labid.CertRenewal && id != labid.Upgrade) {
			t.Errorf("khw up --help and %s: in it %v", id, strings.Contains(help, id))
		}
	}
	if got := Complete("0", false); len(got) != 9 || got[0] != "01-machines" {
		t.Errorf("Complete(0) = %v", got)
	}
	if got := Complete("1", true); strings.Join(got, " ") != "10-tls-bootstrap 11-smoke" {
		t.Errorf("Complete(1, steps only) = %v", got)
	}
	if got := IDTable(6); strings.Count(got, "\n") != 2 || !strings.HasPrefix(got, "  01-machines  02-pki") {
		t.Errorf("IDTable(6) = %q", got)
	}
}

func TestLanguage(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cases := []struct {
		flag string
		env  func(string) string
		want string
	}{
		{"", env(), "en"},
		{"", env("LANG", "ko_KR.UTF-8"), "ko"},
		{"", env("LANG", "ko_KR.UTF-8", "LC_ALL", "C.UTF-8"), "en"},
		{"", env("LANG", "en_US.UTF-8", "LC_MESSAGES", "ko_KR.UTF-8"), "ko"},
		{"", env("KHW_LANG", "en", "LANG", "ko_KR.UTF-8"), "en"},
		{"ko", env("KHW_LANG", "en"), "ko"},
		{"en", env("LANG", "ko_KR.UTF-8"), "en"},
	}
	for i, tc := range cases {
		got, err := Language(tc.flag, tc.env)
		if err != nil || got != tc.want {
			t.Errorf("case %d: Language(%q, …) = %q, %v; want %q", i, tc.flag, got, err, tc.want)
		}
	}
	if _, err := Language("fr", env()); err == nil || !strings.Contains(err.Error(), `--lang="fr"`) {
		t.Errorf("--lang fr: %v", err)
	}
	if _, err := Language("", env("KHW_LANG", "kr")); err == nil || !strings.Contains(err.Error(), `KHW_LANG="kr"`) {
		t.Errorf("KHW_LANG=kr: %v", err)
	}
}

func TestTextInFallsBackToEnglish(t *testing.T) {
	for _, l := range All() {
		en, err := l.Text()
		if err != nil {
			t.Fatal(err)
		}
		ko, fellBack, err := l.TextIn("ko")
		if err != nil {
			t.Fatal(err)
		}
		if fellBack != (ko.Lang == "en") || (fellBack && ko.Markdown() != en.Markdown()) {
			t.Errorf("%s: fellBack %v with a text in %q", l.ID, fellBack, ko.Lang)
		}
		if !fellBack && (ko.Lang != "ko" || ko.ID != l.ID || len(ko.Quiz) != len(en.Quiz)) {
			t.Errorf("%s: Korean text %s in %q with %d questions (English %d)", l.ID, ko.ID, ko.Lang, len(ko.Quiz), len(en.Quiz))
		}
	}
	if _, _, err := All()[0].TextIn("fr"); err == nil {
		t.Error("TextIn(fr) did not fail")
	}
}
