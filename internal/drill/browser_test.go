package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// chromiumPath finds Debian's Chromium. Without it the browser tests skip,
// unless KHW_BROWSER_TEST=1 (make test sets it after installing chromium),
// where its absence fails them.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("KHW_BROWSER_TEST") == "1" {
		t.Fatal("KHW_BROWSER_TEST=1 but chromium is not installed (make deps installs it)")
	}
	t.Skip("chromium is not installed (make deps installs it)")
	return ""
}

// screenshot loads file in headless Chromium (scale 1, a fresh profile, no
// background requests) and decodes its PNG screenshot of w×h CSS pixels.
func screenshot(t *testing.T, bin, file string, w, h int) image.Image {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--force-device-scale-factor=1", "--hide-scrollbars", fmt.Sprintf("--window-size=%d,%d", w, h), "--screenshot="+out, "file://"+file)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("KHW_KEEP_SCREENSHOTS") != "" {
		_ = os.WriteFile(filepath.Join(os.Getenv("KHW_KEEP_SCREENSHOTS"), filepath.Base(filepath.Dir(file))+".png"), mustRead(t, out), 0o644)
	}
	return img
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hexColor parses "#rrggbb".
func hexColor(t *testing.T, s string) color.RGBA {
	t.Helper()
	v, err := strconv.ParseUint(s[1:], 16, 32)
	if err != nil || len(s) != 7 {
		t.Fatalf("colour %q", s)
	}
	return color.RGBA{uint8(v >> 16), uint8(v >> 8), uint8(v), 255}
}

func near(c color.Color, want color.RGBA) bool {
	r, g, b, _ := c.RGBA()
	d := func(a uint32, b uint8) bool { x := int(a>>8) - int(b); return x >= -8 && x <= 8 }
	return d(r, want.R) && d(g, want.G) && d(b, want.B)
}

// plotOrigin finds the plot frame (FrameColor) in img and returns the top
// left corner of its inside, after checking the frame's size against g.
func plotOrigin(t *testing.T, img image.Image, g Geometry) image.Point {
	t.Helper()
	frame := hexColor(t, FrameColor)
	box := image.Rectangle{Min: img.Bounds().Max, Max: img.Bounds().Min}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			if near(img.At(x, y), frame) {
				box.Min.X, box.Min.Y = min(box.Min.X, x), min(box.Min.Y, y)
				box.Max.X, box.Max.Y = max(box.Max.X, x+1), max(box.Max.Y, y+1)
			}
		}
	}
	if box.Empty() {
		t.Fatal("the plot frame is not in the screenshot")
	}
	if dw, dh := box.Dx()-int(g.Width+2), box.Dy()-int(g.Height+2); dw < -1 || dw > 1 || dh < -1 || dh > 1 {
		t.Fatalf("the plot frame is %v (%dx%d), the layout says %.0fx%.0f", box, box.Dx(), box.Dy(), g.Width+2, g.Height+2)
	}
	return box.Min.Add(image.Pt(1, 1))
}

// TestHTMLReportInChromium loads a drill's and an operation's report.html,
// written by the store as a drill writes them, in headless Chromium and
// reads the screenshot: every lane is drawn, every failing window of
// report.json (read back from the file) is red on its signal's lane and
// the baseline is green on every lane, the worker whose pod failed for one
// sample has its thin red stretch, and the operation's steps are bands.
func TestHTMLReportInChromium(t *testing.T) {
	bin := chromiumPath(t)
	red, green, grey := hexColor(t, stateColor[StateFail]), hexColor(t, stateColor[StateOK]), hexColor(t, stateColor[StateNone])

	t.Run("drill", func(t *testing.T) {
		r, samples := pictureDrill(t)
		store := Store{Dir: t.TempDir()}
		_, js, err := store.WriteReport(r, samples)
		if err != nil {
			t.Fatal(err)
		}
		var file Report
		if err := json.Unmarshal(mustRead(t, js), &file); err != nil {
			t.Fatal(err)
		}
		pic := r.Picture(samples)
		g := pic.Geometry()
		img := screenshot(t, bin, store.HTMLPath(r.ID), 1280, 1000)
		o := plotOrigin(t, img, g)
		// A lane's top pixel row: labels (etcd's leaders, Lease moves) are
		// written lower on the lane.
		at := func(lane int, tm time.Time) color.Color {
			return img.At(o.X+int(g.X(tm)), o.Y+int(g.LaneY[lane])+1)
		}
		laneOf := map[string]int{}
		for i, l := range pic.Lanes {
			laneOf[string(l.Signal)+"/"+l.Part] = i
			// Present: its baseline, 2 s before the break, is drawn (every
			// lane of this drill is healthy or not seen there).
			if c := at(i, file.BrokeAt.Add(-2*time.Second)); !near(c, green) && !near(c, grey) {
				t.Errorf("lane %s/%s: the baseline is %v, not drawn", l.Signal, l.Part, c)
			}
		}
		windows := 0
		for _, s := range file.Signals {
			i, ok := laneOf[string(s.Signal)+"/"]
			if !ok {
				t.Errorf("signal %s of report.json has no lane", s.Signal)
				continue
			}
			if c := at(i, file.BrokeAt.Add(-2*time.Second)); !near(c, green) {
				t.Errorf("%s is %v before the break, want green", s.Signal, c)
			}
			sec := func(v Seconds) time.Time { return file.BrokeAt.Add(time.Duration(float64(v) * float64(time.Second))) }
			healthyFrom := Seconds(0)
			for _, w := range s.Windows {
				windows++
				if c := at(i, sec((w.From+w.To)/2)); !near(c, red) {
					t.Errorf("%s at %+.1f s (window %v…%v of report.json) is %v, want red", s.Signal, float64(w.From+w.To)/2, w.From, w.To, c)
				}
				// Between two windows (and before the first) it is green
				// (probed 40% of the way: the halfway point of this drill
				// is the heal's mark).
				if w.From-healthyFrom >= 1 {
					if c := at(i, sec(healthyFrom+(w.From-healthyFrom)*0.4)); !near(c, green) {
						t.Errorf("%s at %+.1f s, between failing windows, is %v, want green", s.Signal, float64(healthyFrom+(w.From-healthyFrom)*0.4), c)
					}
				}
				healthyFrom = w.To
			}
			if end := Seconds(file.EndedAt.Sub(file.BrokeAt).Seconds()); end-healthyFrom >= 1 {
				if c := at(i, sec(healthyFrom+(end-healthyFrom)*0.4)); !near(c, green) {
					t.Errorf("%s at %+.1f s, after its last window, is %v, want green", s.Signal, float64(healthyFrom+(end-healthyFrom)*0.4), c)
				}
			}
		}
		if windows < 5 {
			t.Fatalf("only %d failing windows in report.json: the drill should have more", windows)
		}
		if c := at(laneOf["workload/w2"], file.BrokeAt.Add(5250*time.Millisecond)); !near(c, red) {
			t.Errorf("w2's 0.5 s failure is %v, want red", c)
		}
		if c := at(laneOf["workload/w1"], file.BrokeAt.Add(5250*time.Millisecond)); !near(c, green) {
			t.Errorf("w1 at the same time is %v, want green", c)
		}
	})

	t.Run("operation", func(t *testing.T) {
		t0 := time.Now().Truncate(time.Second)
		s := &scenario{t0: t0}
		s.run(-3*time.Second, 14*time.Second, SigAPIRead, func(at time.Duration, x *Sample) {
			if at >= 4*time.Second && at < 5*time.Second {
				x.OK, x.Err = false, "EOF"
			}
		})
		s.run(-3*time.Second, 14*time.Second, SigAPIWrite, func(at time.Duration, x *Sample) {})
		rep := OpReport{ID: "y", Cluster: "c", Operation: "pki renew", Command: "khw pki renew --all", StartedAt: t0, EndedAt: t0.Add(10 * time.Second),
			Steps: []OpStep{{Name: "04-etcd", From: 0, To: 6}, {Name: "05-control-plane", From: 6, To: 10, Err: "cp2: timeout"}}}
		rep.Err = "step 05-control-plane: cp2: timeout"
		rep = rep.analyze(s.out, t0.Add(14*time.Second))
		store := Store{Dir: t.TempDir()}
		if _, _, err := store.WriteOpReport(rep, s.out); err != nil {
			t.Fatal(err)
		}
		pic := rep.Picture(s.out, rep.EndedAt)
		g := pic.Geometry()
		img := screenshot(t, bin, store.HTMLPath(rep.ID), 1280, 900)
		o := plotOrigin(t, img, g)
		band := func(tm time.Time) color.Color { return img.At(o.X+int(g.X(tm)), o.Y+int(g.BandY)+4) }
		if c := band(t0.Add(time.Second)); !near(c, hexColor(t, "#c9d9f0")) {
			t.Errorf("step 04-etcd's band is %v", c)
		}
		if c := band(t0.Add(9 * time.Second)); !near(c, hexColor(t, "#f2a3a3")) {
			t.Errorf("the failed step's band is %v, want pink", c)
		}
		if c := img.At(o.X+int(g.X(t0.Add(4500*time.Millisecond))), o.Y+int(g.LaneY[0])+1); !near(c, red) {
			t.Errorf("api-read's EOF at +4.5 s is %v, want red", c)
		}
		if c := img.At(o.X+int(g.X(t0.Add(4500*time.Millisecond))), o.Y+int(g.LaneY[1])+1); !near(c, green) {
			t.Errorf("api-write at +4.5 s is %v, want green", c)
		}
	})
}
