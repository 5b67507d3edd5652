package drill

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// pictureDrill is a drill of 40 s with parts: etcd members, HAProxy
// backends, a worker whose pod fails for 0.5 s, a Lease moving, a node
// never seen by one sample.
func pictureDrill(t *testing.T) (Report, []Sample) {
	t.Helper()
	rec, samples := etcdQuorumLoss(t)
	s := &scenario{t0: rec.BrokeAt}
	s.run(-3*time.Second, 40*time.Second, SigHAProxy, func(at time.Duration, x *Sample) {
		x.Parts = map[string]string{"cp1": "UP", "cp2": "UP", "cp3": "UP"}
		if at >= 2*time.Second && at < 22*time.Second {
			x.OK, x.Err = false, "cp1 DOWN"
			x.Parts["cp1"] = "DOWN"
		}
	})
	s.run(-3*time.Second, 40*time.Second, SigLeases, func(at time.Duration, x *Sample) {
		h := "cp1"
		if at >= 18*time.Second {
			h = "cp3"
		}
		x.Leases = map[string]LeaseState{"kube-scheduler": {Holder: h, Fresh: true}}
	})
	s.run(-3*time.Second, 40*time.Second, SigNodes, func(at time.Duration, x *Sample) {
		x.Parts = map[string]string{"w1": "Ready", "w2": "Ready"}
		if at == 10*time.Second {
			delete(x.Parts, "w2")
		}
	})
	samples = append(samples, s.out...)
	for i := range samples {
		if samples[i].Signal == SigWorkload && samples[i].At.Equal(rec.BrokeAt.Add(5*time.Second)) {
			samples[i].OK, samples[i].Err = false, "w2: connection refused <b>"
			samples[i].Parts = map[string]string{"w1": "", "w2": "connection refused <b>", "w3": ""}
		}
	}
	return Analyze(rec, samples, facts()), samples
}

func TestPictureLanesFollowTheReport(t *testing.T) {
	r, samples := pictureDrill(t)
	pic := r.Picture(samples)
	var names []string
	for _, l := range pic.Lanes {
		names = append(names, string(l.Signal)+"/"+l.Part)
	}
	want := "api-read/ api-write/ etcd/ leases/ haproxy/ haproxy/cp1 haproxy/cp2 haproxy/cp3 workload/ workload/w1 workload/w2 workload/w3 nodes/ nodes/w1 nodes/w2"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("lanes:\n got %s\nwant %s", got, want)
	}
	if !pic.Start.Equal(r.BrokeAt.Add(-3*time.Second)) || !pic.End.Equal(r.EndedAt) || !pic.Zero.Equal(r.BrokeAt) {
		t.Errorf("axis %v … %v from %v", pic.Start, pic.End, pic.Zero)
	}
	// Every signal lane fails exactly in the report's windows.
	for _, l := range pic.Lanes {
		if l.Part != "" {
			continue
		}
		sum, ok := r.signal(l.Signal)
		if !ok {
			t.Fatalf("no summary for %s", l.Signal)
		}
		var fails []Window
		for _, s := range l.Spans {
			if s.State == StateFail {
				fails = append(fails, Window{From: rel(Record{BrokeAt: r.BrokeAt}, s.From), To: rel(Record{BrokeAt: r.BrokeAt}, s.To)})
			}
		}
		if len(fails) != len(sum.Windows) {
			t.Fatalf("%s: lane fails %v, report windows %v", l.Signal, fails, sum.Windows)
		}
		for i, w := range sum.Windows {
			if fails[i].From != w.From || fails[i].To != w.To {
				t.Errorf("%s window %d: lane %v…%v, report %v…%v", l.Signal, i, fails[i].From, fails[i].To, w.From, w.To)
			}
		}
	}
	lane := func(sig Signal, part string) Lane {
		for _, l := range pic.Lanes {
			if l.Signal == sig && l.Part == part {
				return l
			}
		}
		t.Fatalf("no lane %s/%s", sig, part)
		return Lane{}
	}
	// A part's lane: w2's pod failed for one sample (0.5 s); its text is the part's value.
	var w2 []string
	for _, s := range lane(SigWorkload, "w2").Spans {
		w2 = append(w2, s.State+"@"+string(rel(Record{BrokeAt: r.BrokeAt}, s.From).String())+":"+s.Text)
	}
	if got := strings.Join(w2, " "); got != "ok@-3.0 s: fail@5.0 s:connection refused <b> ok@5.5 s:" {
		t.Errorf("w2 spans: %s", got)
	}
	// HAProxy's UP is healthy, DOWN fails; a node missing from a sample is not seen.
	if got := len(lane(SigHAProxy, "cp2").Spans); got != 1 {
		t.Errorf("haproxy cp2 always UP: %d spans", got)
	}
	if sp := lane(SigHAProxy, "cp1").Spans; len(sp) != 3 || sp[1].State != StateFail || sp[1].Text != "DOWN" {
		t.Errorf("haproxy cp1 spans %+v", sp)
	}
	if sp := lane(SigNodes, "w2").Spans; len(sp) != 3 || sp[1].State != StateNone {
		t.Errorf("nodes w2 spans %+v", sp)
	}
	// Labels: etcd's leaders, the Lease's move.
	var labels []string
	for _, l := range []Lane{lane(SigEtcd, ""), lane(SigLeases, "")} {
		for _, m := range l.Labels {
			labels = append(labels, rel(Record{BrokeAt: r.BrokeAt}, m.At).String()+" "+m.Text)
		}
	}
	if got := strings.Join(labels, "; "); got != "-3.0 s leader cp1; 0.5 s no leader; 28.0 s leader cp3; 18.0 s scheduler → cp3" {
		t.Errorf("labels: %s", got)
	}
	if len(pic.Marks) != 2 || pic.Marks[0].Text != "break" || !pic.Marks[1].At.Equal(*r.HealedAt) {
		t.Errorf("marks %+v", pic.Marks)
	}
}

func TestHTMLIsSelfContainedAndEscaped(t *testing.T) {
	r, samples := pictureDrill(t)
	r.Actions[0].Node = `cp1"><script>alert(1)</script>`
	page, err := r.HTML(samples)
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	for _, bad := range []string{"<script", "<img", "<link", "<iframe", "@import", "url("} {
		if strings.Contains(strings.ToLower(html), bad) {
			t.Errorf("the page contains %q", bad)
		}
	}
	// The only URL is the SVG namespace, which is a name, not a request.
	urls := regexp.MustCompile(`https?://[^"'\s<>]+`).FindAllString(html, -1)
	for _, u := range urls {
		if u != "http://www.w3.org/2000/svg" {
			t.Errorf("the page names %s", u)
		}
	}
	for _, want := range []string{"Content-Security-Policy", "default-src &#39;none&#39;", "&lt;script&gt;alert(1)&lt;/script&gt;",
		"connection refused &lt;b&gt;", verdictHTML(r.Passed), "leader cp3", "scheduler → cp3", FrameColor} {
		if !strings.Contains(html, want) && !strings.Contains(html, strings.ReplaceAll(want, "&#39;", "'")) {
			t.Errorf("the page lacks %q", want)
		}
	}
	// One rect per span plus the background and the frame.
	spans := 0
	for _, l := range r.Picture(samples).Lanes {
		spans += len(l.Spans)
	}
	if got := strings.Count(html, "<rect "); got != spans+2 {
		t.Errorf("%d rects, want %d spans + background + frame", got, spans)
	}
}

func TestOperationPictureHasItsSteps(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	s := &scenario{t0: t0}
	s.run(-3*time.Second, 14*time.Second, SigAPIRead, func(at time.Duration, x *Sample) {
		if at >= 4*time.Second && at < 5*time.Second {
			x.OK, x.Err = false, "EOF"
		}
	})
	rep := OpReport{ID: "y", Cluster: "c", Operation: "pki renew", Command: "khw pki renew --all", StartedAt: t0, EndedAt: t0.Add(10 * time.Second),
		Steps: []OpStep{{Name: "04-etcd", From: 0, To: 6}, {Name: "05-control-plane", From: 6, To: 10, Err: "cp2: <timeout>"}}}
	rep.Err = "step 05-control-plane: cp2: <timeout>"
	rep = rep.analyze(s.out, t0.Add(14*time.Second))
	pic := rep.Picture(s.out, rep.EndedAt)
	if len(pic.Bands) != 2 || !pic.Bands[1].From.Equal(t0.Add(6*time.Second)) || pic.Bands[1].Err == "" {
		t.Fatalf("bands %+v", pic.Bands)
	}
	if !pic.End.Equal(t0.Add(14 * time.Second)) {
		t.Errorf("the picture ends at %v, want the last sample", pic.End)
	}
	page, err := rep.HTML(s.out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`Pki renew y — <span class="fail">FAILED</span>`, "05-control-plane", "cp2: &lt;timeout&gt;", "Error: step 05-control-plane"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	g := pic.Geometry()
	if x := g.X(t0.Add(-3 * time.Second)); x != 0 {
		t.Errorf("X(start) = %v", x)
	}
	if x := g.X(t0.Add(14 * time.Second)); x != g.Width {
		t.Errorf("X(end) = %v, want %v", x, g.Width)
	}
	if x := g.X(t0.Add(99 * time.Second)); x != g.Width {
		t.Errorf("X past the end = %v, want it clamped", x)
	}
}

func verdictHTML(passed bool) string {
	if passed {
		return `Drill x — <span class="pass">PASSED</span>`
	}
	return `Drill x — <span class="fail">FAILED</span>`
}
