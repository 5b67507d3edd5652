package labtext

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"

	labfiles "github.com/khw-dev/khw/labs"
)

// ChallengeText is one troubleshooting challenge's text in one language,
// from labs/challenges/NN-name.md (labs/ko/challenges/ in Korean): a
// level-2 heading "## fault-id · Title" and then the level-3 sections
// ChallengeSections, in that order.
type ChallengeText struct {
	// ID is the fault's ID, Lab the lab the file is named after
	// ("04-etcd").
	ID, Lab string
	Title   string
	// Symptom is what the student is shown at the start: what kubectl,
	// curl or a pod sees, never the cause.
	Symptom string
	// Goal is what must work again for the challenge to be solved.
	Goal string
	// Hints are the ladder: where to look, what is wrong, the fix.
	Hints [3]string
	// FixScript is the fix's ```sh blocks, joined: what a student types in
	// khw shell (the proof runs exactly this).
	FixScript string
	// Why is the explanation shown once the challenge ends.
	Why string
}

// ChallengeSections are the level-3 headings of a challenge, in order:
// the symptom, the goal, the three rungs of the hint ladder (the third
// holds the fix's commands) and the explanation.
var ChallengeSections = map[string][]string{
	"en": {"Symptom", "Goal", "Where to look", "What is wrong", "The fix", "Why"},
	"ko": {"증상", "목표", "어디를 볼까", "무엇이 잘못됐나", "고치는 법", "왜 그런가"},
}

var (
	challengeFileRE    = regexp.MustCompile(`^([0-9]{2}-[a-z0-9]+(?:-[a-z0-9]+)*)\.md$`)
	challengeHeadingRE = regexp.MustCompile(`^## ([a-z][a-z0-9-]*) · (\S.*)$`)
)

// Challenges returns the challenge texts of language lang by fault ID.
// Errors name the file and line and say what the line should be.
func Challenges(lang string) (map[string]ChallengeText, error) {
	dir := "challenges"
	if lang != "en" {
		dir = lang + "/challenges"
	}
	sub, err := fs.Sub(labfiles.FS, dir)
	if err != nil {
		return nil, err
	}
	return parseChallengesFS(lang, sub)
}

func parseChallengesFS(lang string, fsys fs.FS) (map[string]ChallengeText, error) {
	names, err := fs.Glob(fsys, "*.md")
	if err != nil {
		return nil, err
	}
	out := map[string]ChallengeText{}
	for _, n := range names {
		data, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		ts, err := ParseChallenges(lang, path.Base(n), string(data))
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if _, dup := out[t.ID]; dup {
				return nil, fmt.Errorf("challenge %s is written twice (the second in %s); give each its own ID", t.ID, n)
			}
			out[t.ID] = t
		}
	}
	return out, nil
}

// ParseChallenges parses one challenge file of language lang: name is its
// file name ("04-etcd.md"), text its content: a level-1 title, then one
// level-2 heading per challenge with its sections.
func ParseChallenges(lang, name, text string) ([]ChallengeText, error) {
	heads, ok := ChallengeSections[lang]
	if !ok {
		return nil, fmt.Errorf("challenge file %s: no challenge texts in language %q", name, lang)
	}
	m := challengeFileRE.FindStringSubmatch(name)
	if m == nil {
		return nil, fmt.Errorf("challenge file %q: name it after its lab, NN-name.md", name)
	}
	var out []ChallengeText
	var cur *ChallengeText
	var section int // index into heads of the section being read, -1 before the first
	var body []string
	inFence := ""
	flush := func(line int) error {
		if cur == nil {
			return nil
		}
		text := strings.TrimSpace(strings.Join(body, "\n"))
		if section >= 0 && text == "" {
			return fmt.Errorf("%s:%d: section %q of %s is empty", name, line, heads[section], cur.ID)
		}
		switch section {
		case 0:
			cur.Symptom = text
		case 1:
			cur.Goal = text
		case 2, 3:
			cur.Hints[section-2] = text
		case 4:
			cur.Hints[2] = text
			cur.FixScript = shBlocks(body)
			if cur.FixScript == "" {
				return fmt.Errorf("%s:%d: %s's %q has no ```sh block: write the commands a student types in khw shell", name, line, cur.ID, heads[4])
			}
		case 5:
			cur.Why = text
		}
		body = nil
		return nil
	}
	finish := func(line int) error {
		if cur == nil {
			return nil
		}
		if err := flush(line); err != nil {
			return err
		}
		if section != len(heads)-1 {
			return fmt.Errorf("%s:%d: challenge %s ends after %q; it needs the sections %s in that order", name, line, cur.ID, heads[max(section, 0)], strings.Join(heads, ", "))
		}
		out = append(out, *cur)
		return nil
	}
	lines := strings.Split(text, "\n")
	for i, ln := range lines {
		n := i + 1
		if f := fenceMarker(ln); f != "" && (inFence == "" || inFence == f) {
			if inFence == "" {
				inFence = f
			} else {
				inFence = ""
			}
		}
		if inFence != "" || !strings.HasPrefix(ln, "#") {
			if cur == nil {
				continue // the file's introduction
			}
			if section < 0 && strings.TrimSpace(ln) != "" {
				return nil, fmt.Errorf("%s:%d: %s: text before its first section; begin with \"### %s\"", name, n, cur.ID, heads[0])
			}
			body = append(body, ln)
			continue
		}
		switch {
		case strings.HasPrefix(ln, "# "):
			if i != 0 {
				return nil, fmt.Errorf("%s:%d: only the first line is a level-1 title", name, n)
			}
		case strings.HasPrefix(ln, "## "):
			if err := finish(n); err != nil {
				return nil, err
			}
			hm := challengeHeadingRE.FindStringSubmatch(ln)
			if hm == nil {
				return nil, fmt.Errorf("%s:%d: %q: write a challenge's heading as \"## fault-id · Title\"", name, n, ln)
			}
			cur = &ChallengeText{ID: hm[1], Lab: m[1], Title: hm[2]}
			section, body = -1, nil
		case strings.HasPrefix(ln, "### "):
			if cur == nil {
				return nil, fmt.Errorf("%s:%d: a section before the first challenge heading", name, n)
			}
			h := strings.TrimSpace(ln[4:])
			want := section + 1
			if want >= len(heads) || h != heads[want] {
				return nil, fmt.Errorf("%s:%d: %s: section %q out of place; the sections are %s, in that order", name, n, cur.ID, h, strings.Join(heads, ", "))
			}
			if err := flush(n); err != nil {
				return nil, err
			}
			section = want
		default:
			return nil, fmt.Errorf("%s:%d: %q: use level 2 for a challenge and level 3 for its sections", name, n, ln)
		}
	}
	if inFence != "" {
		return nil, fmt.Errorf("%s: a code block is not closed", name)
	}
	if err := finish(len(lines)); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no challenge in it", name)
	}
	return out, nil
}

// shBlocks joins the bodies of the ```sh blocks in lines.
func shBlocks(lines []string) string {
	var out []string
	in := false
	for _, ln := range lines {
		t := strings.TrimSpace(ln)
		switch {
		case !in && t == "```sh":
			in = true
		case in && t == "```":
			in = false
		case in:
			out = append(out, ln)
		}
	}
	return strings.Join(slices.Clip(out), "\n")
}
