package labtext

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/khw-dev/khw/internal/lab/labid"
	labfiles "github.com/khw-dev/khw/labs"
)

// wantIDs are the labs' IDs in the order of the course.
func wantIDs(t *testing.T) []string {
	t.Helper()
	return []string{labid.Machines, labid.PKI, labid.Kubeconfig, labid.Etcd, labid.ControlPlane, labid.LB,
		labid.Workers, labid.PodNetwork, labid.CoreDNS, labid.TLSBootstrap, labid.Smoke, labid.Failover, labid.EtcdBackup, labid.CertRenewal, labid.Upgrade}
}

func TestAllLabsMatchTheBringUpSteps(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	want := wantIDs(t)
	if len(all) != len(want) || len(all) != 15 {
		t.Fatalf("got %d labs, want 15: %v", len(all), want)
	}
	for i, l := range all {
		if l.ID != want[i] {
			t.Errorf("lab %d is %s, want %s (the step IDs of khw up, then 12-failover and the day-2 labs)", i+1, l.ID, want[i])
		}
		if l.Number != i+1 {
			t.Errorf("%s: Number %d, want %d", l.ID, l.Number, i+1)
		}
		if !strings.HasPrefix(l.Markdown(), fmt.Sprintf("# %02d · %s\n", l.Number, l.Title)) {
			t.Errorf("%s: Markdown() does not start with its title line: %.60q", l.ID, l.Markdown())
		}
		data, err := labfiles.FS.ReadFile(l.ID + ".md")
		if err != nil || string(data) != l.Markdown() {
			t.Errorf("%s: Markdown() is not the file's text (err %v)", l.ID, err)
		}
		if l.Title == "" || l.Summary == "" {
			t.Errorf("%s: empty title %q or summary %q", l.ID, l.Title, l.Summary)
		}
	}
}

func TestEveryLabHasTheSectionsInOrder(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range all {
		md := l.Markdown()
		last := -1
		for _, s := range Sections {
			body := l.Sections[s]
			if strings.TrimSpace(body) == "" {
				t.Errorf("%s: section %q is empty", l.ID, s)
			}
			at := strings.Index(md, "\n## "+s+"\n")
			if at < 0 || strings.Count(md, "\n## "+s+"\n") != 1 {
				t.Errorf("%s: heading %q is not there exactly once", l.ID, s)
				continue
			}
			if at < last {
				t.Errorf("%s: heading %q is out of order", l.ID, s)
			}
			last = at
		}
		if len(l.Sections) != len(Sections) {
			t.Errorf("%s: %d sections, want %d", l.ID, len(l.Sections), len(Sections))
		}
		// Common mistakes are bullets: symptom, cause, fix.
		bullets := 0
		for _, ln := range strings.Split(l.Sections[SectionMistakes], "\n") {
			if strings.HasPrefix(ln, "- ") {
				bullets++
			}
		}
		if bullets < 3 {
			t.Errorf("%s: %d bullets in %q, want at least 3", l.ID, bullets, SectionMistakes)
		}
		lines := strings.Count(md, "\n")
		if lines < 80 || lines > 330 {
			t.Errorf("%s: %d lines; a lab is about 120-300 lines", l.ID, lines)
		}
	}
}

var httpsLink = regexp.MustCompile(`https://[a-z0-9.-]+\.[a-z]{2,}/\S*`)

func TestEveryUpstreamSectionLinksHTTPS(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range all {
		up := l.Sections[SectionUpstream]
		if !httpsLink.MatchString(up) {
			t.Errorf("%s: no https link in Upstream:\n%s", l.ID, up)
		}
		if strings.Contains(up, "http://") {
			t.Errorf("%s: Upstream has a plain http:// link", l.ID)
		}
	}
}

func TestObserveBlocksAreReadOnlyAndRunnable(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	stateRef := regexp.MustCompile(`\$\{?KHW_STATE_DIR\}?`)
	for _, l := range all {
		if len(l.Observe) == 0 {
			t.Errorf("%s: no Observe block", l.ID)
		}
		for i, b := range l.Observe {
			name := fmt.Sprintf("%s block %d", l.ID, i+1)
			if strings.TrimSpace(b.Shell) == "" || strings.TrimSpace(b.Intro) == "" {
				t.Errorf("%s: empty shell %q or intro %q", name, b.Shell, b.Intro)
			}
			if err := CheckReadOnly(b.Shell); err != nil {
				t.Errorf("%s: %v\n%s", name, err, b.Shell)
			}
			// Inside khw shell, ssh reaches the nodes only with khw's config.
			for _, ln := range strings.Split(b.Shell, "\n") {
				if strings.Contains(ln, "ssh ") && !strings.Contains(ln, `ssh -F "$KHW_SSH_CONFIG"`) {
					t.Errorf("%s: ssh without -F \"$KHW_SSH_CONFIG\": %s", name, ln)
				}
			}
			// The shell exports the base directory; the cluster's is below it.
			for _, m := range stateRef.FindAllStringIndex(b.Shell, -1) {
				if !strings.HasPrefix(b.Shell[m[1]:], "/$KHW_CLUSTER") {
					t.Errorf("%s: $KHW_STATE_DIR is the base directory; use \"$KHW_STATE_DIR/$KHW_CLUSTER\"", name)
				}
			}
			if strings.Contains(b.Shell, "--kubeconfig") && !strings.Contains(b.Shell, "ssh") && !strings.Contains(b.Shell, "KHW_STATE_DIR") {
				t.Errorf("%s: --kubeconfig on the jumpbox: KUBECONFIG is already the admin kubeconfig", name)
			}
		}
	}
}

// good is a minimal valid lab; the parse tests break one thing at a time.
const good = `# 04 · etcd: the cluster's memory
One paragraph
that wraps.
## Objectives
- Explain why etcd needs a quorum. [CKA: Cluster Architecture]
- Read the member list. [CKA: Troubleshooting] [CKS: Cluster Setup]
- Start three members together. [CKA: Cluster Architecture]

Time: about 25 minutes.
## You should have
The certificates of lab 02:
` + "```sh" + `
ls "$KHW_STATE_DIR/$KHW_CLUSTER/pki"
` + "```" + `
## Why this step exists
Because.
## What khw does
Things.

` + "```sh" + `
## not a heading: inside a code block
` + "```" + `
## Observe
Look at the members:
` + "```sh" + `
kubectl get nodes
` + "```" + `

` + "```text" + `
NAME   STATUS
w1     Ready
` + "```" + `

And the leases:

` + "```sh" + `
kubectl -n kube-system get lease
` + "```" + `
` + "```text" + `
kube-scheduler
` + "```" + `
## Security
**In this lab:** one CA. **In production:** two.
## Common mistakes
- a
## Predict, then observe
- Predict one.
- Predict
  two.
## Quiz

### 1. How many members
may fail?
- a) none
- b) one
Answer: b. Two of three
is a majority.

### 2. Second?
- a) x
- b) y
- c) z

Answer: c. Because.

### 3. Third?
- a) x
- b) y
Answer: a. Because.
## Upstream
- https://etcd.io/docs/v3.7/op-guide/clustering/
`

func TestParseGood(t *testing.T) {
	l, err := Parse("04-etcd.md", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if l.ID != "04-etcd" || l.Number != 4 || l.Title != "etcd: the cluster's memory" {
		t.Errorf("got ID %q Number %d Title %q", l.ID, l.Number, l.Title)
	}
	if l.Summary != "One paragraph that wraps." {
		t.Errorf("Summary %q", l.Summary)
	}
	if !strings.Contains(l.Sections[SectionWhat], "## not a heading") {
		t.Errorf("a heading inside a code block ended the section: %q", l.Sections[SectionWhat])
	}
	want := []Block{{Intro: "Look at the members:", Shell: "kubectl get nodes", Expected: "NAME   STATUS\nw1     Ready"},
		{Intro: "And the leases:", Shell: "kubectl -n kube-system get lease", Expected: "kube-scheduler"}}
	if fmt.Sprint(l.Observe) != fmt.Sprint(want) {
		t.Errorf("Observe = %q, want %q", l.Observe, want)
	}
	if l.Minutes != 25 || len(l.Objectives) != 3 || fmt.Sprint(l.Objectives[1]) != fmt.Sprint(Objective{Text: "Read the member list.", Tags: []string{"CKA: Troubleshooting", "CKS: Cluster Setup"}}) {
		t.Errorf("Minutes %d, Objectives %q", l.Minutes, l.Objectives)
	}
	if l.Have.Shell != `ls "$KHW_STATE_DIR/$KHW_CLUSTER/pki"` || l.Have.Intro != "The certificates of lab 02:" {
		t.Errorf("Have = %q", l.Have)
	}
	if fmt.Sprint(l.Predict) != "[Predict one. Predict two.]" {
		t.Errorf("Predict = %q", l.Predict)
	}
	q := Question{Text: "How many members may fail?", Choices: []string{"none", "one"}, Answer: 1, Why: "Two of three is a majority."}
	if len(l.Quiz) != 3 || fmt.Sprint(l.Quiz[0]) != fmt.Sprint(q) || l.Quiz[1].Answer != 2 || l.Quiz[1].Why != "Because." {
		t.Errorf("Quiz = %+v", l.Quiz)
	}
	if v := l.View(); strings.Contains(v, "Answer:") || !strings.Contains(v, "3 questions: answer them with `khw lab quiz 04-etcd`.\n## Upstream") || !strings.Contains(v, "## Predict") {
		t.Errorf("View() shows the answers or lost a section:\n%s", v)
	}
}

func TestParseRejects(t *testing.T) {
	swap := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("test input has no %q", old)
		}
		return strings.Replace(good, old, new, 1)
	}
	noBlock := good[:strings.Index(good, "## Observe")] + "## Observe\nNothing to run.\n" + good[strings.Index(good, "## Security"):]
	for _, tc := range []struct {
		name, file, text, want string
	}{
		{"bad file name", "etcd.md", good, "NN-name.md"},
		{"file 00", "00-etcd.md", swap("# 04", "# 00"), "labs start at 01"},
		{"number mismatch", "05-etcd.md", good, "title says lab 04 but the file name says 05"},
		{"no middle dot", "04-etcd.md", swap("# 04 · ", "# 04 - "), "04-etcd.md:1:"},
		{"empty", "04-etcd.md", "", "empty"},
		{"no summary", "04-etcd.md", swap("One paragraph\nthat wraps.\n", ""), "no summary"},
		{"two paragraphs", "04-etcd.md", swap("that wraps.", "\nthat wraps."), "one paragraph"},
		{"second title", "04-etcd.md", swap("Because.", "# Another"), "second title"},
		{"wrong order", "04-etcd.md", swap("## Why this step exists\nBecause.\n## What khw does\nThings.", "## What khw does\nThings.\n## Why this step exists\nBecause."), `want "## Why this step exists"`},
		{"missing section", "04-etcd.md", swap("## Common mistakes\n- a\n", ""), `want "## Common mistakes"`},
		{"two objectives", "04-etcd.md", swap("- Start three members together. [CKA: Cluster Architecture]\n", ""), "2 objectives"},
		{"untagged objective", "04-etcd.md", swap("together. [CKA: Cluster Architecture]", "together."), "no exam-domain tag"},
		{"unknown domain", "04-etcd.md", swap("[CKS: Cluster Setup]", "[CKS: Kernel]"), "[CKS: Kernel] is not an exam domain"},
		{"no time", "04-etcd.md", swap("Time: about 25 minutes.", ""), "no time line"},
		{"stray objective text", "04-etcd.md", swap("Time: about 25 minutes.", "Time: 25 min"), `"Objectives" holds only bullets`},
		{"two have blocks", "04-etcd.md", swap("## Why this step exists", "Also:\n```sh\nls\n```\n## Why this step exists"), "exactly one command"},
		{"no expected output", "04-etcd.md", swap("```text\nkube-scheduler\n```\n", ""), "last ```sh block has no ```text block"},
		{"expected output missing mid", "04-etcd.md", swap("```text\nNAME   STATUS\nw1     Ready\n```\n", ""), "before this line has no ```text block"},
		{"orphan text block", "04-etcd.md", swap("And the leases:\n", "And the leases:\n```text\nx\n```\n"), "follows none"},
		{"no security labels", "04-etcd.md", swap("**In production:** two.", "two."), "production fix after **In production:**"},
		{"one prompt", "04-etcd.md", swap("- Predict one.\n", ""), "1 bullets"},
		{"two questions", "04-etcd.md", good[:strings.Index(good, "### 3.")] + good[strings.Index(good, "## Upstream"):], "2 questions; give 3 to 5"},
		{"question out of order", "04-etcd.md", swap("### 2. Second?", "### 5. Second?"), `"### 2. <question>"`},
		{"answer not a choice", "04-etcd.md", swap("Answer: c. Because.", "Answer: d. Because."), "the answer d) is not one of the 3 choices"},
		{"no answer", "04-etcd.md", swap("Answer: a. Because.\n", ""), "question 3 has no answer line"},
		{"no explanation", "04-etcd.md", swap("Answer: a. Because.", "Answer: a."), "explain the answer"},
		{"choice letter", "04-etcd.md", swap("- c) z", "- d) z"), `must start "- c) "`},
		{"one choice", "04-etcd.md", swap("### 3. Third?\n- a) x\n- b) y", "### 3. Third?\n- a) x"), "1 choices"},
		{"renamed section", "04-etcd.md", swap("## Upstream", "## Links"), `want "## Upstream"`},
		{"extra section", "04-etcd.md", good + "## More\nx\n", `extra section "## More"`},
		{"empty section", "04-etcd.md", swap("Because.\n", ""), `"## Why this step exists" is empty`},
		{"non-sh block", "04-etcd.md", swap("```sh\nkubectl get nodes", "```bash\nkubectl get nodes"), "must be ```sh"},
		{"no intro", "04-etcd.md", swap("Look at the members:\n", ""), "no sentence before it"},
		{"empty block", "04-etcd.md", swap("kubectl get nodes\n", ""), "empty ```sh block"},
		{"no block", "04-etcd.md", noBlock, "no ```sh block"},
		{"unclosed fence", "04-etcd.md", swap("kube-scheduler\n```", "kube-scheduler\n"), "never closed"},
		{"no link", "04-etcd.md", swap("https://etcd.io/docs/v3.7/op-guide/clustering/", "etcd.io clustering"), "no https:// link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.file, []byte(tc.text))
			if err == nil {
				t.Fatalf("parsed; want an error with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestParseLangRejectsAnUnknownLanguage(t *testing.T) {
	if _, err := ParseLang("fr", "04-etcd.md", []byte(good)); err == nil || !strings.Contains(err.Error(), `no lab texts in language "fr"`) {
		t.Errorf("err = %v", err)
	}
}

func TestParseFSRejectsDuplicateNumbers(t *testing.T) {
	other := strings.Replace(good, "# 04 · etcd", "# 04 · etcd again", 1)
	_, err := parseFS(fstest.MapFS{"04-etcd.md": {Data: []byte(good)}, "04-etcd2.md": {Data: []byte(other)}})
	if err == nil || !strings.Contains(err.Error(), "both have number 04") {
		t.Errorf("err = %v, want both have number 04", err)
	}
	_, err = parseFS(fstest.MapFS{})
	if err == nil || !strings.Contains(err.Error(), "no lab texts") {
		t.Errorf("err = %v, want no lab texts", err)
	}
}
