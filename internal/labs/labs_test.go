package labs

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/khw-dev/khw/internal/labid"
	labtexts "github.com/khw-dev/khw/labs"
)

// wantIDs are the labs' IDs in the order of the course.
func wantIDs(t *testing.T) []string {
	t.Helper()
	return []string{labid.Machines, labid.PKI, labid.Kubeconfig, labid.Etcd, labid.ControlPlane, labid.LB,
		labid.Workers, labid.PodNetwork, labid.CoreDNS, labid.TLSBootstrap, labid.Smoke, labid.Failover}
}

func TestAllLabsMatchTheBringUpSteps(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	want := wantIDs(t)
	if len(all) != len(want) || len(all) != 12 {
		t.Fatalf("got %d labs, want 12: %v", len(all), want)
	}
	for i, l := range all {
		if l.ID != want[i] {
			t.Errorf("lab %d is %s, want %s (the step IDs of khw up, then 12-failover)", i+1, l.ID, want[i])
		}
		if l.Number != i+1 {
			t.Errorf("%s: Number %d, want %d", l.ID, l.Number, i+1)
		}
		if !strings.HasPrefix(l.Markdown(), fmt.Sprintf("# %02d · %s\n", l.Number, l.Title)) {
			t.Errorf("%s: Markdown() does not start with its title line: %.60q", l.ID, l.Markdown())
		}
		data, err := labtexts.FS.ReadFile(l.ID + ".md")
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
		if lines < 50 || lines > 170 {
			t.Errorf("%s: %d lines; a lab is about 60-140 lines", l.ID, lines)
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

And the leases:

` + "```sh" + `
kubectl -n kube-system get lease
` + "```" + `
## Common mistakes
- a
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
	want := []Block{{Intro: "Look at the members:", Shell: "kubectl get nodes"}, {Intro: "And the leases:", Shell: "kubectl -n kube-system get lease"}}
	if fmt.Sprint(l.Observe) != fmt.Sprint(want) {
		t.Errorf("Observe = %q, want %q", l.Observe, want)
	}
}

func TestParseRejects(t *testing.T) {
	swap := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("test input has no %q", old)
		}
		return strings.Replace(good, old, new, 1)
	}
	noBlock := good[:strings.Index(good, "## Observe")] + "## Observe\nNothing to run.\n" + good[strings.Index(good, "## Common mistakes"):]
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
		{"renamed section", "04-etcd.md", swap("## Upstream", "## Links"), `want "## Upstream"`},
		{"extra section", "04-etcd.md", good + "## More\nx\n", `extra section "## More"`},
		{"empty section", "04-etcd.md", swap("Because.\n", ""), `"## Why this step exists" is empty`},
		{"non-sh block", "04-etcd.md", swap("```sh\nkubectl get nodes", "```bash\nkubectl get nodes"), "must be ```sh"},
		{"no intro", "04-etcd.md", swap("Look at the members:\n", ""), "no sentence before it"},
		{"empty block", "04-etcd.md", swap("kubectl get nodes\n", ""), "empty ```sh block"},
		{"no block", "04-etcd.md", noBlock, "no ```sh block"},
		{"unclosed fence", "04-etcd.md", swap("kubectl -n kube-system get lease\n```", "kubectl -n kube-system get lease\n"), "never closed"},
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
