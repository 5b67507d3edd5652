package components

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// maxRedirects is how many redirects one request follows, as net/http's
// default policy.
const maxRedirects = 10

// redirectRule is what a download may be redirected to: hosts lists the
// only other hosts allowed (nil: any https host), and pinned says that the
// catalog pins the file's digest, so that a plain-http hop to one of hosts
// cannot change what is accepted.
type redirectRule struct {
	hosts  []string
	pinned bool
}

type redirectKey struct{}

// withRedirects returns ctx carrying r's redirect rule for its requests.
func withRedirects(ctx context.Context, r Resolved, pinned bool) context.Context {
	return context.WithValue(ctx, redirectKey{}, redirectRule{hosts: r.Redirects, pinned: pinned})
}

// checkRedirect is the Fetcher's http.Client CheckRedirect: it follows a
// redirect only where the request's redirectRule allows it, and never from
// https to plain http unless the rule names the host and the digest is
// pinned (a checksum file or manifest read over plain http would prove
// nothing). The error names both URLs and the rule.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	from := via[0].URL
	rule, _ := req.Context().Value(redirectKey{}).(redirectRule)
	host := req.URL.Hostname()
	allowed := host == from.Hostname() || slices.Contains(rule.hosts, host)
	if rule.hosts != nil && !allowed {
		return redirectRefused("%s redirected to %s, a host the catalog does not allow for this download (allowed: %s)", from, req.URL, strings.Join(append([]string{from.Hostname()}, rule.hosts...), ", "))
	}
	if from.Scheme == "https" && req.URL.Scheme != "https" && !(slices.Contains(rule.hosts, host) && rule.pinned) {
		return redirectRefused("%s redirected to %s, which is not https: refused (only a download whose digest the catalog pins may follow a redirect to a host the catalog names over plain http)", from, req.URL)
	}
	return nil
}

// withRedirectPolicy returns a copy of c that follows redirects by
// checkRedirect.
func withRedirectPolicy(c *http.Client) *http.Client {
	cc := *c
	cc.CheckRedirect = checkRedirect
	return &cc
}

// noteFinal records that a request for loc was answered from final, after
// redirects.
func (run *fetchRun) noteFinal(loc string, resp *http.Response) {
	if resp == nil || resp.Request == nil || resp.Request.URL == nil {
		return
	}
	final := resp.Request.URL.String()
	if final == loc {
		return
	}
	run.mu.Lock()
	if run.finals == nil {
		run.finals = map[string]string{}
	}
	run.finals[loc] = final
	run.mu.Unlock()
}

// source is how a download from loc names where its bytes came from: loc,
// or "FINAL (redirected from LOC)".
func (run *fetchRun) source(loc string) string {
	run.mu.Lock()
	final, ok := run.finals[loc]
	run.mu.Unlock()
	if !ok {
		return loc
	}
	return final + " (redirected from " + loc + ")"
}

// redirectRefusedError is checkRedirect's refusal.
type redirectRefusedError struct{ msg string }

func (e *redirectRefusedError) Error() string { return e.msg }

func redirectRefused(format string, args ...any) error {
	return &redirectRefusedError{msg: fmt.Sprintf(format, args...)}
}

// redirectErr wraps the error of a GET of loc: a refused redirect is
// permanent (retrying asks the same server again), anything else as it is.
func redirectErr(loc string, err error) error {
	var rr *redirectRefusedError
	if errors.As(err, &rr) {
		return permanentError{fmt.Errorf("GET %s: %w", loc, rr)}
	}
	return fmt.Errorf("GET %s: %w", loc, err)
}
