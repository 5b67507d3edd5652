package grade

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// harmlessRule knows that a change of one setting works: only such a
// difference is a Variant. Every other difference that no rule judges is
// NotJudged, and the lab's live tryout decides.
type harmlessRule struct {
	// path matches the node path (suffix match when it starts with "*").
	path string
	// key matches the setting's key.
	key *regexp.Regexp
	// ok says whether the change is harmless (both values, the op).
	ok func(c Change) bool
	// why says why, with the upstream source.
	why string
}

// harmless are the changes known to work. Keep each narrow: a value check
// that lets through only what the reason covers.
var harmless = []harmlessRule{
	{path: "*.service", key: regexp.MustCompile(`^--v$`), ok: changedTo(intIn(0, 10)),
		why: "Harmless: klog's log verbosity only changes how much the component logs (https://github.com/kubernetes/community/blob/master/contributors/devel/sig-instrumentation/logging.md)."},
	{path: "/etc/systemd/system/etcd.service", key: regexp.MustCompile(`^--log-level$`), ok: changedTo(func(v string) bool { return slices.Contains([]string{"debug", "info", "warn", "error"}, v) }),
		why: "Harmless: etcd's log level only changes how much it logs (https://etcd.io/docs/v3.7/op-guide/configuration/)."},
	{path: haproxyCfg, key: regexp.MustCompile(`^(defaults|backend \S+|frontend \S+|listen \S+)(: timeout (connect|client|server|tunnel|check|http-request|queue))$`), ok: changedTo(positiveHAProxyTime),
		why: "Harmless: any positive timeout works; it only changes how long HAProxy waits before it gives up a connection or a check (https://docs.haproxy.org/2.8/configuration.html#4-timeout%20connect). 0 would mean no timeout at all."},
	{path: haproxyCfg, key: regexp.MustCompile(`^(backend \S+|listen \S+): (default-server|server \S+) (inter|fastinter|downinter)$`), ok: changedTo(positiveHAProxyTime),
		why: "Harmless: it changes how fast HAProxy notices a failed or a recovered apiserver (lab 06's arithmetic), not whether it does (https://docs.haproxy.org/2.8/configuration.html#5.2-inter)."},
	{path: haproxyCfg, key: regexp.MustCompile(`^(backend \S+|listen \S+): (default-server|server \S+) (fall|rise)$`), ok: changedTo(intIn(1, 10)),
		why: "Harmless: it changes how many checks in a row mark an apiserver DOWN or UP again, not whether HAProxy does (https://docs.haproxy.org/2.8/configuration.html#5.2-fall)."},
	{path: haproxyCfg, key: regexp.MustCompile(`^global: stats timeout$`), ok: changedTo(positiveHAProxyTime),
		why: "Harmless: it only bounds an idle session on HAProxy's runtime socket."},
}

// harmlessChange reports whether a rule of harmless knows change ch of the
// file at p to work, and why.
func harmlessChange(p string, ch Change) (string, bool) {
	for _, h := range harmless {
		pathOK := h.path == p || (strings.HasPrefix(h.path, "*") && strings.HasSuffix(p, h.path[1:]))
		if pathOK && h.key.MatchString(ch.Key) && h.ok(ch) {
			return h.why, true
		}
	}
	return "", false
}

// changedTo accepts a change of a set value to one that valid accepts.
func changedTo(valid func(string) bool) func(Change) bool {
	return func(c Change) bool { return c.Op == Changed && valid(c.Got) }
}

// intIn accepts an integer from lo to hi.
func intIn(lo, hi int) func(string) bool {
	return func(s string) bool {
		n, err := strconv.Atoi(s)
		return err == nil && n >= lo && n <= hi
	}
}

// haproxyTime is HAProxy's time format: a number and an optional unit
// (us, ms, s, m, h, d; milliseconds by default), HAProxy 2.8 manual §2.5.
var haproxyTime = regexp.MustCompile(`^([0-9]+)(us|ms|s|m|h|d)?$`)

func positiveHAProxyTime(s string) bool {
	m := haproxyTime.FindStringSubmatch(s)
	if m == nil {
		return false
	}
	n, err := strconv.Atoi(m[1])
	return err == nil && n > 0
}
