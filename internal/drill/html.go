package drill

import (
	"bytes"
	"fmt"
	"html/template"
	"math"
	"time"
)

// The picture's geometry in CSS pixels. A screenshot test reads the
// picture back through Geometry, so these are its only definition.
const (
	svgLabelW    = 190 // lane names, left of the plot
	svgPlotW     = 960 // the time axis
	svgMarginR   = 20
	svgAxisH     = 34 // tick labels and mark names above the plot
	svgBandH     = 22 // the row of operation steps, when there are steps
	svgSignalH   = 18 // a signal's lane
	svgLabelledH = 26 // a signal's lane with labels (two rows of them)
	svgPartH     = 13 // a part's lane
	svgLaneGap   = 3
	svgGroupGap  = 6 // before each signal's lane but the first
)

// FrameColor is the colour of the 1 px frame drawn around the plot (lanes
// and step bands): unique in the picture, so a screenshot test finds the
// plot by it.
const FrameColor = "#123456"

// stateColor is the fill of each lane state.
var stateColor = map[string]string{StateOK: "#3c9a4a", StateFail: "#d62f2f", StateNone: "#cfcfcf"}

// Geometry is where Picture's parts are drawn, in CSS pixels from the top
// left corner of the plot frame's inside: lane i spans LaneY[i] to
// LaneY[i]+LaneH[i]; an instant t is at X(t).
type Geometry struct {
	pic    Picture
	Width  float64 // the plot's width
	Height float64 // the plot's height (bands and lanes)
	BandY  float64 // the step bands' row (when there are bands)
	LaneY  []float64
	LaneH  []float64
	// top is the frame's y in the SVG.
	top float64
}

// Geometry lays p out.
func (p Picture) Geometry() Geometry {
	g := Geometry{pic: p, Width: svgPlotW, top: svgAxisH}
	y := float64(svgLaneGap)
	if len(p.Bands) > 0 {
		g.BandY = y
		y += svgBandH + svgGroupGap
	}
	for i, l := range p.Lanes {
		h := float64(svgPartH)
		if l.Part == "" {
			h = svgSignalH
			if len(l.Labels) > 0 {
				h = svgLabelledH
			}
			if i > 0 {
				y += svgGroupGap
			}
		}
		g.LaneY = append(g.LaneY, y)
		g.LaneH = append(g.LaneH, h)
		y += h + svgLaneGap
	}
	g.Height = y
	return g
}

// X is instant t on the plot (clamped to it).
func (g Geometry) X(t time.Time) float64 {
	span := g.pic.End.Sub(g.pic.Start).Seconds()
	if span <= 0 {
		return 0
	}
	f := t.Sub(g.pic.Start).Seconds() / span
	return math.Max(0, math.Min(1, f)) * g.Width
}

// tickStep picks a tick interval giving about eight ticks over span.
func tickStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second,
		30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour} {
		if span/s <= 10 {
			return s
		}
	}
	return span / 8
}

// relLabel is t relative to the picture's zero: "+12 s", "−3 s", "+2 min".
func (g Geometry) relLabel(t time.Time, step time.Duration) string {
	d := t.Sub(g.pic.Zero)
	sign := "+"
	if d < 0 {
		sign, d = "−", -d
	}
	switch {
	case step >= time.Hour:
		return fmt.Sprintf("%s%g h", sign, math.Round(d.Hours()*10)/10)
	case step >= time.Minute:
		return fmt.Sprintf("%s%g min", sign, math.Round(d.Minutes()*10)/10)
	}
	return fmt.Sprintf("%s%g s", sign, math.Round(d.Seconds()*10)/10)
}

// SVG draws the picture: lane names on the left, each lane's spans in
// colour (a span's tooltip gives its times and error), labels on the etcd
// and leases lanes, the step bands above the lanes, the marks across
// them, and a time axis counted from Zero. Every text is escaped. A
// picture without lanes (no samples) is "".
func (p Picture) SVG() template.HTML {
	if len(p.Lanes) == 0 {
		return ""
	}
	g := p.Geometry()
	var b bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	esc := template.HTMLEscapeString
	ox, oy := float64(svgLabelW), g.top
	width, height := svgLabelW+svgPlotW+svgMarginR, g.top+g.Height+8
	w(`<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="sans-serif" font-size="11">`, width, height, width, height)
	w(`<rect x="0" y="0" width="%d" height="%.0f" fill="#ffffff"/>`, width, height)
	// Axis: ticks at multiples of step from Zero.
	span := p.End.Sub(p.Start)
	step := tickStep(span)
	first := p.Zero.Add(-time.Duration(math.Floor(p.Zero.Sub(p.Start).Seconds()/step.Seconds())) * step)
	for t := first; !t.After(p.End); t = t.Add(step) {
		x := ox + g.X(t)
		w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`, x, oy, x, oy+g.Height)
		w(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`, x, oy-6, esc(g.relLabel(t, step)))
	}
	// Step bands.
	for i, bd := range p.Bands {
		x0, x1 := ox+g.X(bd.From), ox+g.X(bd.To)
		fill := []string{"#c9d9f0", "#a9c2e6"}[i%2]
		tip := fmt.Sprintf("%d %s: %s … %s", i+1, bd.Text, g.relLabel(bd.From, 0), g.relLabel(bd.To, 0))
		if bd.Err != "" {
			fill, tip = "#f2a3a3", tip+": "+bd.Err
		}
		w(`<g><title>%s</title><rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" stroke="#ffffff" shape-rendering="crispEdges"/>`, esc(tip), x0, oy+g.BandY, math.Max(1, x1-x0), svgBandH, fill)
		// The step's number (the steps table's first column) and as much
		// of its name as fits.
		if label := fmt.Sprintf("%d %s", i+1, bd.Text); x1-x0 >= 9 {
			if x1-x0 < 24 {
				label = fmt.Sprint(i + 1)
			}
			w(`<svg x="%.1f" y="%.1f" width="%.1f" height="%d"><text x="2" y="15" fill="#1d2b3a">%s</text></svg>`, x0, oy+g.BandY, x1-x0, svgBandH, esc(label))
		}
		w(`</g>`)
	}
	if len(p.Bands) > 0 {
		w(`<text x="%d" y="%.1f" text-anchor="end" font-weight="bold" fill="#1d2b3a">steps</text>`, svgLabelW-8, oy+g.BandY+15)
	}
	// Lanes.
	for i, l := range p.Lanes {
		y, h := oy+g.LaneY[i], g.LaneH[i]
		name, weight, size := l.Title(), "bold", 11
		if l.Part != "" {
			weight, size = "normal", 10
		}
		shown := name
		if r := []rune(name); len(r) > 28 {
			shown = string(r[:27]) + "…"
		}
		w(`<text x="%d" y="%.1f" text-anchor="end" font-weight="%s" font-size="%d" fill="#1d2b3a"><title>%s</title>%s</text>`, svgLabelW-8, y+h-3, weight, size, esc(name), esc(shown))
		for _, s := range l.Spans {
			x0, x1 := ox+g.X(s.From), ox+g.X(s.To)
			tip := fmt.Sprintf("%s %s: %s … %s", name, s.State, g.relLabel(s.From, 0), g.relLabel(s.To, 0))
			if s.Text != "" {
				tip += ": " + s.Text
			}
			w(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="%s" shape-rendering="crispEdges"><title>%s</title></rect>`,
				x0, y, math.Max(1, x1-x0), h, stateColor[s.State], esc(tip))
		}
		// Two rows of labels; each label takes the first row where it does
		// not overlap the previous one (about 6 px per character).
		var rowEnd [2]float64
		for _, m := range l.Labels {
			x := ox + g.X(m.At)
			width := 6 * float64(len([]rune(m.Text)))
			// Right of its mark, or left of it near the plot's right edge.
			tx, anchor := x+3, "start"
			if tx+width > ox+g.Width {
				tx, anchor = x-3, "end"
			}
			left := tx
			if anchor == "end" {
				left = tx - width
			}
			row := 0 // the row that is free, else the one that ends first
			if left < rowEnd[0] && (left >= rowEnd[1] || rowEnd[1] < rowEnd[0]) {
				row = 1
			}
			rowEnd[row] = left + width
			ly := y + h - 3
			if row == 1 {
				ly = y + h - 14
			}
			w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#111" stroke-width="1.5"/>`, x, y, x, y+h)
			w(`<text x="%.1f" y="%.1f" text-anchor="%s" font-size="10" fill="#111" stroke="#ffffff" stroke-width="3" paint-order="stroke">%s</text>`, tx, ly, anchor, esc(m.Text))
		}
	}
	// Marks across the lanes, names above the axis labels' line.
	prevEnd, up := -1.0, false
	for _, m := range p.Marks {
		x := ox + g.X(m.At)
		// A name that would run into the previous one goes a row higher.
		up = x+4 < prevEnd && !up
		ty := oy - 18
		if up {
			ty -= 11
		}
		prevEnd = x + 4 + 7*float64(len([]rune(m.Text)))
		w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#111" stroke-width="2" stroke-dasharray="5,3"/>`, x, oy-2, x, oy+g.Height)
		w(`<text x="%.1f" y="%.1f" font-weight="bold" fill="#111" stroke="#ffffff" stroke-width="3" paint-order="stroke">%s</text>`, x+4, ty, esc(m.Text))
	}
	// The frame, last, so it is never covered.
	w(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="%s" stroke-width="1" shape-rendering="crispEdges"/>`, ox-0.5, oy-0.5, g.Width+1, g.Height+1, FrameColor)
	w(`</svg>`)
	return template.HTML(b.String())
}

// htmlPage is what report.html shows, in order.
type htmlPage struct {
	Title   string
	Passed  bool
	Verdict string
	Intro   []string
	Picture template.HTML
	Tables  []table
	// Notes are lines after the tables (etcd's leaders and raft terms).
	Notes    []string
	Timeline []string
}

var pageTmpl = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} — {{.Verdict}}</title>
<style>
body { margin: 16px 24px; font: 14px/1.45 sans-serif; color: #1d2b3a; background: #ffffff; }
h1 { font-size: 20px; margin: 0 0 6px; }
h1 .pass { color: #2b7a36; } h1 .fail { color: #c62222; }
h2 { font-size: 16px; margin: 22px 0 6px; }
p { margin: 4px 0; }
.legend span { display: inline-block; width: 12px; height: 12px; vertical-align: -2px; margin: 0 4px 0 12px; }
table { border-collapse: collapse; margin: 4px 0 8px; }
th, td { border: 1px solid #c8d0da; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #eef2f7; }
td.mark { text-align: center; font-weight: bold; }
td.✓ { color: #2b7a36; } td.✗ { color: #c62222; }
svg.timeline { max-width: 100%; height: auto; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; font-size: 12px; }
</style>
</head>
<body>
<h1>{{.Title}} — <span class="{{if .Passed}}pass{{else}}fail{{end}}">{{.Verdict}}</span></h1>
{{range .Intro}}<p>{{.}}</p>
{{end}}{{if .Picture}}<div class="picture">{{.Picture}}</div>
<p class="legend">Each lane is one thing the prober watched, sampled about twice a second (every 2 s on TCG VMs):<span style="background:#3c9a4a"></span>healthy<span style="background:#d62f2f"></span>failing<span style="background:#cfcfcf"></span>not seen. Hover a stretch for its times and error.</p>
{{else}}<p><b>No samples were recorded</b>: there is nothing to draw.</p>
{{end}}{{range .Tables}}{{if .Rows}}<h2>{{.Title}}</h2>
<table><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{$marks := .Marks}}{{range .Rows}}<tr>{{range $i, $c := .}}{{if and $marks (eq $i 0)}}<td class="mark {{$c}}">{{$c}}</td>{{else}}<td>{{$c}}</td>{{end}}{{end}}</tr>
{{end}}</table>
{{end}}{{end}}{{range .Notes}}<p>{{.}}</p>
{{end}}<h2>Timeline</h2>
<pre>{{range .Timeline}}{{.}}
{{end}}</pre>
</body>
</html>
`))

func (p htmlPage) render() ([]byte, error) {
	var b bytes.Buffer
	if err := pageTmpl.Execute(&b, p); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// HTML renders the drill's report as one self-contained page (no script,
// no request: its Content-Security-Policy allows none): the verdict, the
// timeline picture drawn from samples, the tables of report.md.
func (r Report) HTML(samples []Sample) ([]byte, error) {
	verdict := "PASSED"
	if !r.Passed {
		verdict = "FAILED"
	}
	intro := fmt.Sprintf("Cluster %s: khw break %s. Broken at %s UTC", r.Cluster, r.Spec.CommandLine(), r.BrokeAt.UTC().Format("2006-01-02 15:04:05.0"))
	if r.HealedAt != nil {
		intro += fmt.Sprintf(", healed %s later", r.BrokenFor)
	} else {
		intro += fmt.Sprintf(", not healed (watched %s)", r.BrokenFor)
	}
	if r.Recovery != nil {
		intro += fmt.Sprintf(", every signal healthy again %s after the heal", *r.Recovery)
	}
	page := htmlPage{Title: "Drill " + r.ID, Passed: r.Passed, Verdict: verdict, Intro: []string{intro + "."}, Picture: r.Picture(samples).SVG(),
		Tables: []table{r.verdictTable(), r.signalTable(), r.leaseTable(), r.partTable()}}
	for _, a := range r.Actions {
		page.Intro = append(page.Intro, "Done: "+a.String())
	}
	etcd := fmt.Sprintf("etcd leaders: %s. Raft term %d → %d (%d election(s)).", leaderSeq(r.Etcd), r.Etcd.TermBefore, r.Etcd.TermAfter, r.Etcd.Elections)
	if r.Etcd.QuorumBackAfterHeal != nil {
		etcd += fmt.Sprintf(" All members healthy with a leader %s after the heal.", *r.Etcd.QuorumBackAfterHeal)
	}
	page.Notes = []string{etcd}
	for _, e := range r.Timeline {
		page.Timeline = append(page.Timeline, e.Line(r.BrokeAt))
	}
	return page.render()
}

// HTML renders the operation's report as one self-contained page: its
// steps as bands over the lanes drawn from samples, the tables of
// report.md, the timeline.
func (r OpReport) HTML(samples []Sample) ([]byte, error) {
	verdict := "done"
	if r.Err != "" {
		verdict = "FAILED"
	}
	intro := fmt.Sprintf("Cluster %s: %s, started %s UTC, took %s", r.Cluster, r.Command, r.StartedAt.UTC().Format("2006-01-02 15:04:05.0"), r.Took)
	if r.Recovery != nil {
		intro += fmt.Sprintf(", every signal healthy again %s after it", *r.Recovery)
	}
	page := htmlPage{Title: r.title(), Passed: r.Err == "", Verdict: verdict,
		Intro: []string{intro + "."}, Picture: r.Picture(samples, r.EndedAt).SVG(), Tables: []table{r.stepTable(), r.signalTable()}}
	if r.Err != "" {
		page.Intro = append(page.Intro, "Error: "+r.Err)
	}
	for _, f := range r.Facts {
		page.Notes = append(page.Notes, f.Name+": "+f.Value)
	}
	for _, e := range r.Timeline {
		page.Timeline = append(page.Timeline, e.Line(r.StartedAt))
	}
	return page.render()
}
