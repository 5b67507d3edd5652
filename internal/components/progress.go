package components

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress prints what Fetch does. On a terminal it redraws, every 200 ms, one
// line per running transfer (bytes, rate, ETA) and a total line; finished
// items scroll above them. Elsewhere (a pipe, a file, a test buffer) it prints
// only one line per finished item, so logs stay readable.
type progress struct {
	w     io.Writer
	live  bool
	mu    sync.Mutex
	items []*pitem
	began time.Time
	drawn int // live lines currently on screen
	want  int // items Fetch will start in all
	stop  chan struct{}
	done  chan struct{}
}

// pitem is one transfer's counters. A nil *pitem ignores every call.
type pitem struct {
	label    string
	mu       sync.Mutex
	done     int64
	total    int64 // -1 = unknown
	started  time.Time
	finished bool
}

func newProgress(w io.Writer, items int) *progress {
	p := &progress{w: w, began: time.Now(), want: items}
	if w == nil {
		return p
	}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.live = true
		}
	}
	if p.live {
		p.stop, p.done = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(p.done)
			t := time.NewTicker(200 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					p.mu.Lock()
					p.redraw(nil)
					p.mu.Unlock()
				case <-p.stop:
					return
				}
			}
		}()
	}
	return p
}

func (p *progress) close() {
	if p.live {
		close(p.stop)
		<-p.done
		p.mu.Lock()
		p.redraw(nil)
		p.mu.Unlock()
	}
}

func (p *progress) start(label string) *pitem {
	it := &pitem{label: label, total: -1, started: time.Now()}
	p.mu.Lock()
	p.items = append(p.items, it)
	p.mu.Unlock()
	return it
}

func (it *pitem) set(done, total int64) {
	if it == nil {
		return
	}
	it.mu.Lock()
	it.done, it.total = done, total
	it.mu.Unlock()
}

func (it *pitem) add(n int64) {
	if it == nil {
		return
	}
	it.mu.Lock()
	it.done += n
	it.mu.Unlock()
}

func (it *pitem) snapshot() (done, total int64, started time.Time, finished bool) {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.done, it.total, it.started, it.finished
}

// finishOK prints "<verb> <label> (<size>[, <rate>]) from <source>".
func (p *progress) finishOK(it *pitem, verb, label string, size int64, source string) {
	line := fmt.Sprintf("%s %s (%s", verb, label, HumanBytes(size))
	if _, _, started, _ := it.snapshot(); strings.TrimSpace(verb) == "fetched" {
		d := time.Since(started)
		line += fmt.Sprintf(" in %.1fs, %s/s", d.Seconds(), HumanBytes(rate(size, d)))
	}
	line += ") from " + source
	p.finish(it, line)
}

// finish marks it done and prints line above the live display.
func (p *progress) finish(it *pitem, line string) {
	it.mu.Lock()
	it.finished = true
	it.mu.Unlock()
	p.note(line)
}

// note prints a line (a finished item, a warning).
func (p *progress) note(line string) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live {
		p.redraw([]string{line})
		return
	}
	fmt.Fprintln(p.w, line)
}

// redraw erases the live lines, prints the permanent lines, and draws the
// live lines again. Caller holds p.mu.
func (p *progress) redraw(permanent []string) {
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA\x1b[J", p.drawn)
	}
	for _, l := range permanent {
		b.WriteString(l + "\n")
	}
	p.drawn = 0
	var sumDone, sumTotal int64
	totalKnown := true
	running := 0
	for _, it := range p.items {
		done, total, started, finished := it.snapshot()
		sumDone += done
		if total >= 0 {
			sumTotal += total
		} else {
			totalKnown = false
		}
		if finished {
			continue
		}
		running++
		fmt.Fprintf(&b, "  %-34s %s\n", abbrev(it.label, 34), progressLine(done, total, time.Since(started)))
		p.drawn++
	}
	if running > 0 {
		t := int64(-1)
		if totalKnown {
			t = sumTotal
		}
		label := fmt.Sprintf("total (%d running)", running)
		if waiting := p.want - len(p.items); waiting > 0 {
			label = fmt.Sprintf("total (%d running, %d waiting)", running, waiting)
		}
		fmt.Fprintf(&b, "  %-34s %s\n", label, progressLine(sumDone, t, time.Since(p.began)))
		p.drawn++
	}
	io.WriteString(p.w, b.String())
}

// progressLine renders "12.0 MiB / 45.6 MiB  3.1 MiB/s  ETA 11s".
func progressLine(done, total int64, elapsed time.Duration) string {
	r := rate(done, elapsed)
	s := HumanBytes(done)
	if total >= 0 {
		s += " / " + HumanBytes(total)
	}
	s += fmt.Sprintf("  %s/s", HumanBytes(r))
	if total >= 0 && r > 0 && total > done {
		s += "  ETA " + time.Duration(float64(total-done)/float64(r)*float64(time.Second)).Round(time.Second).String()
	}
	return s
}

// rate is bytes per second over d.
func rate(n int64, d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(float64(n) / d.Seconds())
}

// HumanBytes renders a size in bytes with binary prefixes: "812 B",
// "1.5 MiB" (one decimal, powers of 1024).
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
