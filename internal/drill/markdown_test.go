package drill

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/renderer/html"
)

// renderMarkdown renders md as GitHub-flavoured Markdown, raw HTML kept
// (as a renderer that trusts the file would), so that any tag the report
// let through shows up as a tag.
func renderMarkdown(t *testing.T, md string) string {
	t.Helper()
	var out bytes.Buffer
	gm := goldmark.New(goldmark.WithExtensions(extension.GFM), goldmark.WithRendererOptions(html.WithUnsafe()))
	if err := gm.Convert([]byte(md), &out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// hostile are field values that, written into report.md as they are, add
// tags, a link, table cells or lines of their own.
const (
	tagInCell     = "a|b <img src=x onerror=alert(1)>\nc"
	backslashPipe = `dir C:\|rest`
	fenceBreaker  = "x\n```\n<script>alert(1)</script>"
	codeBreaker   = "c`<b>bold</b>`"
	linkAndEntity = "[click](javascript:alert(1)) &amp; <iframe src=x>"
)

// liveTag finds an HTML tag a field brought in.
var liveTag = regexp.MustCompile(`<(img|script|b|iframe|a)\b`)

// checkRendered fails t when html has a tag from a field, a field that was
// split or left its cell, or a timeline line that escaped its code block.
func checkRendered(t *testing.T, md, html string, cells ...string) {
	t.Helper()
	if m := liveTag.FindString(html); m != "" {
		t.Errorf("report.md lets %q through; rendered:\n%s\nfrom:\n%s", m, html, md)
	}
	for _, c := range cells {
		if !strings.Contains(html, "<td>"+c+"</td>") {
			t.Errorf("no cell <td>%s</td> in:\n%s\nfrom:\n%s", c, html, md)
		}
	}
	if !strings.Contains(html, "x ``` &lt;script&gt;alert(1)&lt;/script&gt;\n</code></pre>") {
		t.Errorf("the timeline event is not one line inside the code block:\n%s\nfrom:\n%s", html, md)
	}
}

// TestReportMarkdownKeepsFieldsInert: text from a drill's and an
// operation's fields (evidence, errors, names, facts, timeline events)
// stays text in report.md: no tag, link or entity of its own, each in its
// table cell, and the timeline in its code block.
func TestReportMarkdownKeepsFieldsInert(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	win := []Window{{From: 1, To: 2, Duration: 1, Errors: []string{tagInCell, backslashPipe}}}
	rep := Report{ID: "20261205-100000-node-w1", Cluster: codeBreaker, Spec: Spec{Kind: KindNode, Nodes: []string{"w1"}},
		Actions: []Action{{Node: "w1<b>x</b>", PowerOff: true}}, BrokeAt: t0,
		Expectations: []Expectation{{Text: linkAndEntity, Result: Fail, Evidence: tagInCell}, {Text: "t", Result: Pass, Evidence: backslashPipe}},
		Signals:      []SignalSummary{{Signal: SigAPIRead, Windows: win}},
		Leases:       []LeaseSummary{{Name: "kube-scheduler", HolderBefore: "cp1<b>", HolderAfter: "cp2"}},
		Etcd:         EtcdSummary{LeaderBefore: "cp1<b>"},
		Timeline:     []Event{{At: t0, Signal: SigAPIRead, Text: fenceBreaker}}}
	md := rep.Markdown()
	checkRendered(t, md, renderMarkdown(t, md),
		"a|b &lt;img src=x onerror=alert(1)&gt; c", `dir C:\|rest`, "[click](javascript:alert(1)) &amp;amp; &lt;iframe src=x&gt;", "cp1&lt;b&gt;")

	op := OpReport{ID: "20261205-100000-etcd-restore", Cluster: codeBreaker, Operation: "etcd restore", Command: "khw etcd restore /tmp/a`<b>x</b>`.db",
		StartedAt: t0, Err: fenceBreaker, Steps: []OpStep{{Name: "copy", Err: tagInCell}, {Name: "stop", Err: backslashPipe}},
		Facts:    []OpFact{{Name: "snapshot", Value: linkAndEntity}},
		Signals:  []SignalSummary{{Signal: SigAPIRead, Windows: win}},
		Timeline: []Event{{At: t0, Signal: SigAPIRead, Text: fenceBreaker}}}
	md = op.Markdown()
	html := renderMarkdown(t, md)
	checkRendered(t, md, html, "a|b &lt;img src=x onerror=alert(1)&gt; c", `dir C:\|rest`)
	for _, want := range []string{
		"<code>c`&lt;b&gt;bold&lt;/b&gt;`</code>",                       // the cluster, whole in its code span
		"<code>khw etcd restore /tmp/a`&lt;b&gt;x&lt;/b&gt;`.db</code>", // the command
		"<li>snapshot: [click](javascript:alert(1)) &amp;amp; &lt;iframe src=x&gt;</li>",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("rendered report lacks %s:\n%s\nfrom:\n%s", want, html, md)
		}
	}
}
