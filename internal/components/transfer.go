package components

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/khw-dev/khw/internal/fsutil"
)

// checksumFile reads a checksum file once per Fetch call (several artifacts
// share etcd's SHA256SUMS or runc.sha256sum).
func (f *Fetcher) checksumFile(ctx context.Context, run *fetchRun, loc string, isFile bool) ([]byte, error) {
	run.mu.Lock()
	call, ok := run.sums[loc]
	if !ok {
		call = &sumCall{done: make(chan struct{})}
		run.sums[loc] = call
	}
	run.mu.Unlock()
	if ok {
		select {
		case <-call.done:
			return call.data, call.err
		case <-ctx.Done():
			return nil, ctxErr(ctx)
		}
	}
	call.data, call.err = f.getBounded(ctx, run, loc, isFile, maxChecksumFileSize, "checksum file")
	close(call.done)
	return call.data, call.err
}

// getBounded reads a small file (a checksum file or a mirror manifest, at
// most max bytes) from a URL, with retries, or from a directory mirror.
func (f *Fetcher) getBounded(ctx context.Context, run *fetchRun, loc string, isFile bool, max int64, what string) ([]byte, error) {
	if isFile {
		fh, err := os.Open(loc)
		if err != nil {
			return nil, fmt.Errorf("mirror has no %s %s (fix: export the mirror again with `khw mirror export`): %w", what, loc, err)
		}
		defer fh.Close()
		data, err := io.ReadAll(io.LimitReader(fh, max+1))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", loc, err)
		}
		if int64(len(data)) > max {
			return nil, fmt.Errorf("%s %s has more than %d bytes; that is not a %s", what, loc, max, what)
		}
		return data, nil
	}
	var data []byte
	err := f.retry(ctx, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
		if err != nil {
			return permanentError{err}
		}
		req.Header.Set("User-Agent", userAgent)
		resp, err := run.client.Do(req)
		if err != nil {
			return redirectErr(loc, err)
		}
		defer resp.Body.Close()
		run.noteFinal(loc, resp)
		if err := statusError(loc, resp); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return permanentError{fmt.Errorf("GET %s: unexpected HTTP %s", loc, resp.Status)}
		}
		data, err = io.ReadAll(io.LimitReader(resp.Body, max+1))
		if err != nil {
			return fmt.Errorf("GET %s: %w", loc, err)
		}
		if int64(len(data)) > max {
			return permanentError{fmt.Errorf("GET %s: more than %d bytes; that is not a %s", loc, max, what)}
		}
		return nil
	})
	return data, err
}

// statusError classifies a non-success HTTP status: nil for 200 and 206,
// a retryable error for 408, 429 and 5xx, a permanentError otherwise.
func statusError(loc string, resp *http.Response) error {
	switch c := resp.StatusCode; {
	case c == http.StatusOK || c == http.StatusPartialContent:
		return nil
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		return fmt.Errorf("GET %s: HTTP %s", loc, resp.Status)
	case c == http.StatusNotFound:
		return permanentError{fmt.Errorf("GET %s: HTTP %s (fix: check the version in cluster.yaml; with a mirror, check that it holds this file at the official path, e.g. re-run `khw mirror export`)", loc, resp.Status)}
	default:
		return permanentError{fmt.Errorf("GET %s: HTTP %s", loc, resp.Status)}
	}
}

// retry runs op until it succeeds, fails permanently, ctx ends, or the
// retries are used up, waiting RetryWait, 2×RetryWait … (at most 30 s)
// between attempts.
func (f *Fetcher) retry(ctx context.Context, op func() error) error {
	retries := f.Retries
	if retries == 0 {
		retries = DefaultRetries
	}
	wait := f.RetryWait
	if wait <= 0 {
		wait = DefaultRetryWait
	}
	for attempt := 0; ; attempt++ {
		err := op()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return stopped(ctx, err)
		}
		var pe permanentError
		if errors.As(err, &pe) {
			return err
		}
		if attempt >= retries {
			if attempt > 0 {
				return fmt.Errorf("%w (gave up after %d attempts)", err, attempt+1)
			}
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return stopped(ctx, err)
		}
		wait = min(2*wait, maxRetryWait)
	}
}

// ctxErr is ctx's error, with its cause (e.g. "interrupt signal received")
// when there is one; errors.Is(ctxErr(ctx), context.Canceled) holds.
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if c := context.Cause(ctx); c != nil && c != err {
		return fmt.Errorf("%w (%w)", err, c)
	}
	return err
}

// stopped is the error of an operation interrupted by ctx: ctx's error, plus
// op's own error when that says more than the cancellation.
func stopped(ctx context.Context, op error) error {
	if errors.Is(op, ctx.Err()) || errors.Is(op, context.Cause(ctx)) {
		return op
	}
	return fmt.Errorf("%w (%v)", ctxErr(ctx), op)
}

// download copies loc into part: from a directory mirror a plain copy; over
// HTTP with retries, each retry resuming from the bytes already in part. No
// more than limit bytes (0: no bound) end up in part: a longer transfer is
// stopped, part removed, and a permanentError returned.
func (f *Fetcher) download(ctx context.Context, run *fetchRun, loc string, isFile bool, part string, limit int64, it *pitem) error {
	if isFile {
		return copyLocal(ctx, loc, part, limit, it)
	}
	return f.retry(ctx, func() error { return f.attempt(ctx, run, loc, part, limit, it) })
}

// attempt is one HTTP GET of loc, appending to part with a Range request
// when part already holds bytes.
func (f *Fetcher) attempt(ctx context.Context, run *fetchRun, loc, part string, limit int64, it *pitem) error {
	var off int64
	if st, err := os.Stat(part); err == nil {
		off = st.Size()
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, loc, nil)
	if err != nil {
		return permanentError{err}
	}
	req.Header.Set("User-Agent", userAgent)
	if off > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", off))
	}
	resp, err := run.client.Do(req)
	if err != nil {
		return redirectErr(loc, err)
	}
	defer resp.Body.Close()
	run.noteFinal(loc, resp)
	flags := os.O_WRONLY | os.O_CREATE
	switch resp.StatusCode {
	case http.StatusOK:
		flags |= os.O_TRUNC
		off = 0
	case http.StatusPartialContent:
		start, ok := contentRangeStart(resp.Header.Get("Content-Range"))
		if !ok || start != off {
			os.Remove(part)
			return fmt.Errorf("GET %s: asked to resume at byte %d, the server sent Content-Range %q; starting over", loc, off, resp.Header.Get("Content-Range"))
		}
		flags |= os.O_APPEND
	case http.StatusRequestedRangeNotSatisfiable:
		os.Remove(part)
		return fmt.Errorf("GET %s: the server cannot resume at byte %d (HTTP %s); starting over", loc, off, resp.Status)
	default:
		if err := statusError(loc, resp); err != nil {
			return err
		}
		return permanentError{fmt.Errorf("GET %s: unexpected HTTP %s", loc, resp.Status)}
	}
	total := int64(-1)
	if resp.ContentLength >= 0 {
		total = off + resp.ContentLength
	}
	if limit > 0 && total > limit {
		os.Remove(part)
		return tooBig(loc, limit)
	}
	it.set(off, total)
	out, err := os.OpenFile(part, flags, fsutil.PublicMode)
	if err != nil {
		return permanentError{fmt.Errorf("artifact cache: %w", err)}
	}
	stall := f.StallTimeout
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	var stalled atomic.Bool
	timer := time.AfterFunc(stall, func() { stalled.Store(true); cancel() })
	defer timer.Stop()
	buf := make([]byte, 256<<10)
	var n int64
	for {
		m, rerr := resp.Body.Read(buf)
		if m > 0 {
			timer.Reset(stall)
			if limit > 0 && off+n+int64(m) > limit {
				out.Close()
				os.Remove(part)
				return tooBig(loc, limit)
			}
			if _, werr := out.Write(buf[:m]); werr != nil {
				out.Close()
				return permanentError{fmt.Errorf("artifact cache: write %s: %w (fix: free disk space or choose another --cache-dir)", part, werr)}
			}
			n += int64(m)
			it.add(int64(m))
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			out.Close()
			if ctx.Err() != nil {
				return ctxErr(ctx)
			}
			if stalled.Load() {
				return fmt.Errorf("GET %s: no data for %s after %d bytes", loc, stall, off+n)
			}
			return fmt.Errorf("GET %s: transfer cut after %d bytes: %w", loc, off+n, rerr)
		}
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return permanentError{fmt.Errorf("artifact cache: write %s: %w", part, err)}
	}
	if err := out.Close(); err != nil {
		return permanentError{fmt.Errorf("artifact cache: write %s: %w", part, err)}
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return fmt.Errorf("GET %s: got %d of %d bytes", loc, n, resp.ContentLength)
	}
	return nil
}

// contentRangeStart parses the first byte of "bytes START-END/TOTAL".
func contentRangeStart(h string) (int64, bool) {
	rest, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return 0, false
	}
	i := strings.IndexByte(rest, '-')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(rest[:i], 10, 64)
	return n, err == nil
}

// copyLocal copies a file of a directory mirror into part, at most limit
// bytes (0: no bound).
func copyLocal(ctx context.Context, src, part string, limit int64, it *pitem) error {
	in, err := os.Open(src)
	if err != nil {
		return permanentError{fmt.Errorf("mirror has no file %s (fix: export the mirror again with `khw mirror export`, or check --mirror): %w", src, err)}
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return permanentError{err}
	}
	if !st.Mode().IsRegular() {
		return permanentError{fmt.Errorf("mirror path %s is not a regular file", src)}
	}
	if limit > 0 && st.Size() > limit {
		return tooBig(src, limit)
	}
	it.set(0, st.Size())
	out, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fsutil.PublicMode)
	if err != nil {
		return permanentError{fmt.Errorf("artifact cache: %w", err)}
	}
	buf := make([]byte, 1<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			out.Close()
			os.Remove(part)
			return ctxErr(ctx)
		}
		m, rerr := in.Read(buf)
		if m > 0 {
			if n += int64(m); limit > 0 && n > limit { // the file grew while being read
				out.Close()
				os.Remove(part)
				return tooBig(src, limit)
			}
			if _, werr := out.Write(buf[:m]); werr != nil {
				out.Close()
				os.Remove(part)
				return permanentError{fmt.Errorf("artifact cache: write %s: %w (fix: free disk space or choose another --cache-dir)", part, werr)}
			}
			it.add(int64(m))
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			out.Close()
			os.Remove(part)
			return permanentError{fmt.Errorf("read %s: %w", src, rerr)}
		}
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return permanentError{err}
	}
	return out.Close()
}

func (f *Fetcher) client() *http.Client {
	if f.HTTPClient != nil {
		return f.HTTPClient
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = time.Minute
	return &http.Client{Transport: tr}
}

// transport is the RoundTripper handed to go-containerregistry.
func (run *fetchRun) transport() http.RoundTripper {
	if run.client.Transport != nil {
		return run.client.Transport
	}
	return http.DefaultTransport
}

// mirrorFile is where f.Mirror holds rel (a slash path relative to the
// mirror root): a file path for a directory mirror (isFile), else a URL.
func (f *Fetcher) mirrorFile(rel string) (loc string, isFile bool) {
	if isURLMirror(f.Mirror) {
		return strings.TrimRight(f.Mirror, "/") + "/" + rel, false
	}
	return filepath.Join(mirrorDir(f.Mirror), filepath.FromSlash(rel)), true
}

func isURLMirror(m string) bool {
	return strings.HasPrefix(m, "http://") || strings.HasPrefix(m, "https://")
}

func mirrorDir(m string) string { return strings.TrimPrefix(m, "file://") }

// MirrorLocation maps an official URL https://HOST/PATH to where mirror
// holds it: MIRROR/HOST/PATH, where MIRROR is an http(s) base URL (the
// result is a URL, isFile false) or a directory, optionally written as
// file:///dir (the result is a file path, isFile true). An empty mirror
// returns official unchanged. Errors: official is not an absolute http(s)
// URL, has a query, or its path would leave the mirror ("..").
func MirrorLocation(mirror, official string) (loc string, isFile bool, err error) {
	if mirror == "" {
		return official, false, nil
	}
	u, err := url.Parse(official)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" {
		return "", false, fmt.Errorf("cannot map %q into a mirror: want an absolute http(s) URL without a query", official)
	}
	clean := path.Clean("/" + u.Path)
	if clean != u.Path && clean+"/" != u.Path {
		return "", false, fmt.Errorf("cannot map %q into a mirror: its path is not clean", official)
	}
	if isURLMirror(mirror) {
		return strings.TrimRight(mirror, "/") + "/" + u.Host + u.EscapedPath(), false, nil
	}
	return filepath.Join(mirrorDir(mirror), u.Host, filepath.FromSlash(clean)), true, nil
}

// withMirrorCredentials checks an http(s) mirror URL and takes any user
// information (https://user:password@host/) out of it: the returned Fetcher's
// Mirror has none, so no message, progress line or index entry can show the
// password, and its HTTP client adds the credentials as basic auth to
// requests for the mirror's host only.
func (f *Fetcher) withMirrorCredentials() (*Fetcher, error) {
	u, err := url.Parse(f.Mirror)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		shown := f.Mirror
		if err == nil {
			shown = u.Redacted()
		}
		return nil, fmt.Errorf("mirror %q: not a usable base URL (fix: write http(s)://HOST[:PORT][/PATH] without ?query or #fragment, e.g. the URL `khw mirror serve` prints)", shown)
	}
	if u.User == nil {
		return f, nil
	}
	user := u.User
	u.User = nil
	ff := *f
	ff.Mirror = u.String()
	base := f.client()
	c := *base
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = basicAuthTransport{host: u.Host, user: user, next: next}
	ff.HTTPClient = &c
	return &ff, nil
}

// basicAuthTransport adds the mirror's credentials to requests for its host.
type basicAuthTransport struct {
	host string
	user *url.Userinfo
	next http.RoundTripper
}

func (t basicAuthTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == t.host {
		req = req.Clone(req.Context())
		pw, _ := t.user.Password()
		req.SetBasicAuth(t.user.Username(), pw)
	}
	return t.next.RoundTrip(req)
}
