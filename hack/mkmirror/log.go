package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// jobLog collects one job's output in CACHE/logs/<job>.log and prints
// progress lines (not tool output) to stderr prefixed with the job name.
type jobLog struct {
	name  string
	path  string
	mu    sync.Mutex
	f     *os.File
	lines []string // last lines of tool output, for error messages
	part  string
}

var stderrMu sync.Mutex

func newJobLog(cache, name string) (*jobLog, error) {
	dir := filepath.Join(cache, "logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := filepath.Join(dir, sanitizeModElem(name)+".log")
	f, err := os.Create(p)
	if err != nil {
		return nil, err
	}
	return &jobLog{name: name, path: p, f: f}, nil
}

// Write takes tool output (go build, gcc, apt-get): into the file and the
// tail buffer.
func (l *jobLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Write(p)
	s := l.part + string(p)
	parts := strings.Split(s, "\n")
	l.part = parts[len(parts)-1]
	l.lines = append(l.lines, parts[:len(parts)-1]...)
	if len(l.lines) > 200 {
		l.lines = l.lines[len(l.lines)-200:]
	}
	return len(p), nil
}

// printf reports progress on stderr and in the log.
func (l *jobLog) printf(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	l.mu.Lock()
	fmt.Fprintf(l.f, "[mkmirror %s] %s\n", time.Now().Format("15:04:05"), msg)
	l.mu.Unlock()
	stderrMu.Lock()
	fmt.Fprintf(os.Stderr, "%s %-28s %s\n", time.Now().Format("15:04:05"), l.name, msg)
	stderrMu.Unlock()
}

// warn is printf with a banner that is hard to miss.
func (l *jobLog) warn(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	l.printf("\n%s\n!!! WARNING: %s\n%s", strings.Repeat("!", 78), msg, strings.Repeat("!", 78))
}

func (l *jobLog) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := l.lines
	if l.part != "" {
		lines = append(append([]string(nil), lines...), l.part)
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (l *jobLog) close() { l.f.Close() }
