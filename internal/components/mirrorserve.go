package components

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// CheckMirrorDir returns nil if dir looks like a mirror: it has
// khw-mirror.json, or a top-level directory named after a host of the
// catalog (dl.k8s.io, github.com, registry.k8s.io, …) as a mirror made by
// hand would. It guards `khw mirror serve` against publishing a home
// directory by mistake; a khw-mirror.json that does not parse is refused.
func CheckMirrorDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("mirror directory: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("mirror directory %s is not a directory", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, MirrorManifestFile)); err == nil {
		_, err := readMirrorManifest(dir)
		return err
	}
	hosts := mirrorHosts()
	for _, h := range hosts {
		if st, err := os.Stat(filepath.Join(dir, h)); err == nil && st.IsDir() {
			return nil
		}
	}
	return fmt.Errorf("%s does not look like a khw mirror: it has no %s and none of the directories %s (fix: create it with `khw mirror export %s`)",
		dir, MirrorManifestFile, strings.Join(hosts, ", "), dir)
}

// MirrorServer is an http.Server for MirrorHandler(dir, logw) with the
// timeouts above: header 10 s, request 30 s, keep-alive idle 2 min, and 1 min
// for each write to the client to progress. Errors: those of MirrorHandler.
func MirrorServer(dir string, logw io.Writer) (*http.Server, error) {
	h, err := MirrorHandler(dir, logw)
	if err != nil {
		return nil, err
	}
	return &http.Server{Handler: h, ReadHeaderTimeout: mirrorReadHeaderTimeout, ReadTimeout: mirrorReadTimeout, IdleTimeout: mirrorIdleTimeout}, nil
}

// MirrorHandler serves the mirror directory dir read-only over HTTP: GET and
// HEAD only (others get 405), Range requests supported (so Fetchers resume),
// files and directories whose name starts with "." are hidden (404, and left
// out of directory listings; an export in progress writes such temporary
// files), symlinks leaving dir are not followed (os.Root; such a path is
// answered 403). Only khw-mirror.json and what lies under a top-level
// directory named after a catalog host (dl.k8s.io, github.com, …) is
// served, and no path through a symbolic link inside dir (a link could
// point at a hidden file, or at one outside the catalog's trees): other
// paths get 404, and listings leave them out. Each request is logged to logw (nil: no log) as
// "<RFC 3339 time> <client> <method> <quoted path> <status> <bytes> <duration>",
// the path Go-quoted so a request cannot forge log lines or terminal escapes.
// Errors: dir does not look like a mirror (CheckMirrorDir).
func MirrorHandler(dir string, logw io.Writer) (http.Handler, error) {
	if err := CheckMirrorDir(dir); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("mirror directory: %w", err)
	}
	served := map[string]bool{MirrorManifestFile: true}
	for _, h := range mirrorHosts() {
		served[h] = true
	}
	files := http.FileServerFS(hideDotFiles{forbidEscapes{root.FS()}, root, served})
	var logMu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK, rc: http.NewResponseController(w)}
		switch {
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			rec.Header().Set("Allow", "GET, HEAD")
			http.Error(rec, "read-only mirror: only GET and HEAD", http.StatusMethodNotAllowed)
		case hasHiddenElement(r.URL.Path) || !servable(root, served, r.URL.Path):
			http.NotFound(rec, r)
		default:
			files.ServeHTTP(rec, r)
		}
		if logw != nil {
			logMu.Lock()
			fmt.Fprintf(logw, "%s %s %s %q %d %d %s\n", start.Format(time.RFC3339), r.RemoteAddr, r.Method, r.URL.Path,
				rec.status, rec.n, time.Since(start).Round(time.Millisecond))
			logMu.Unlock()
		}
	}), nil
}

// ctxReader stops a copy once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// forbidEscapes turns os.Root's refusal of a symlink that leaves the mirror
// (an error http.FileServer would answer with 500, which clients retry) into
// fs.ErrPermission, answered 403 Forbidden and not retried.
type forbidEscapes struct{ fs.FS }

func (f forbidEscapes) Open(name string) (fs.File, error) {
	file, err := f.FS.Open(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	return file, err
}

// servable reports whether the URL path p may be served: "/" (the top
// listing), khw-mirror.json, or a path under a catalog host's directory,
// with no symbolic link on the way.
func servable(root *os.Root, served map[string]bool, p string) bool {
	rel := strings.Trim(path.Clean("/"+p), "/")
	if rel == "" {
		return true
	}
	elems := strings.Split(rel, "/")
	if !served[elems[0]] {
		return false
	}
	for i := range elems {
		st, err := root.Lstat(strings.Join(elems[:i+1], "/"))
		if err != nil {
			return true // missing: the file server answers 404 itself
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return false
		}
	}
	return true
}

// hideDotFiles leaves names starting with "." out of directory listings
// (hasHiddenElement answers 404 for them), symbolic links, and at the top
// everything servable refuses.
type hideDotFiles struct {
	fs.FS
	root   *os.Root
	served map[string]bool
}

func (h hideDotFiles) Open(name string) (fs.File, error) {
	f, err := h.FS.Open(name)
	if err != nil {
		return nil, err
	}
	if d, ok := f.(fs.ReadDirFile); ok {
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return dirWithoutDots{d, name == ".", h.served}, nil
		}
	}
	return f, nil
}

type dirWithoutDots struct {
	fs.ReadDirFile
	top    bool
	served map[string]bool
}

// ReadDir filters the entries; with n > 0 it may return fewer than n, which
// fs.ReadDirFile allows, and http.FileServer reads listings with n <= 0.
func (d dirWithoutDots) ReadDir(n int) ([]fs.DirEntry, error) {
	es, err := d.ReadDirFile.ReadDir(n)
	out := es[:0]
	for _, e := range es {
		if strings.HasPrefix(e.Name(), ".") || e.Type()&fs.ModeSymlink != 0 || (d.top && !d.served[e.Name()]) {
			continue
		}
		out = append(out, e)
	}
	return out, err
}

func hasHiddenElement(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if strings.HasPrefix(e, ".") {
			return true
		}
	}
	return false
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	n      int64
	rc     *http.ResponseController
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	s.rc.SetWriteDeadline(time.Now().Add(mirrorWriteIdle))
	n, err := s.ResponseWriter.Write(p)
	s.n += int64(n)
	return n, err
}

// ServeUntil serves srv on ln until ctx ends, then shuts it down: requests
// in flight get grace to finish, then are closed (clients resume with Range
// requests) and a line saying so goes to logw. Errors: the server failed
// while serving, or its shutdown failed.
func ServeUntil(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration, logw io.Writer) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("mirror serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		srv.Close()
		fmt.Fprintf(logw, "requests still in flight after %s were closed; clients resume them\n", grace)
		err = nil
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("mirror serve: shutdown: %w", err)
	}
	return nil
}

// Timeouts of MirrorServer. A download has no overall deadline (a 1 GiB
// image on a slow classroom network takes minutes); instead each write must
// make progress within mirrorWriteIdle, so a client that stops reading does
// not hold a connection and its file open for ever.
var (
	mirrorReadHeaderTimeout = 10 * time.Second
	mirrorReadTimeout       = 30 * time.Second // requests are GET/HEAD without a body
	mirrorIdleTimeout       = 2 * time.Minute  // keep-alive between requests
	mirrorWriteIdle         = time.Minute
)

// ServeMirror is khw mirror serve once dir and its pin (digest) are
// checked: srv listens on listen and serves until ctx ends (ServeUntil,
// with 10 s of grace for downloads in flight). out gets the address, a
// note when only this machine can reach it, the pin and the command
// clients run, then "Stopped."; errOut the server's log. Errors: the
// address cannot be listened on (saying to choose another), ServeUntil's.
func ServeMirror(ctx context.Context, srv *http.Server, dir, digest, listen string, out, errOut io.Writer) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (fix: choose another --listen address or port)", listen, err)
	}
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "Serving mirror %s at %s/ (read-only; Ctrl-C to stop)\n", dir, url)
	if host, port, _ := net.SplitHostPort(ln.Addr().String()); net.ParseIP(host).IsLoopback() {
		fmt.Fprintf(out, "Only this machine can reach it; for others use --listen 0.0.0.0:%s\n", port)
	}
	fmt.Fprintf(out, "Mirror pin: %s\nClients: khw fetch --mirror %s --mirror-digest %s\n", digest, url, digest)
	if err := ServeUntil(ctx, srv, ln, 10*time.Second, errOut); err != nil {
		return err
	}
	fmt.Fprintln(out, "Stopped.")
	return nil
}
