package grade

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Op is how a setting differs from the reference.
type Op int

const (
	// Changed: both set it, to different values.
	Changed Op = iota
	// Missing: the reference sets it, the node's file does not.
	Missing
	// Added: the node's file sets it, the reference does not.
	Added
)

// Change is one setting that differs between khw's reference and a node's
// file.
type Change struct {
	Op  Op
	Key string
	// Ref and Got are the values ("" when not set).
	Ref, Got string
	// Meaning is what the reference's comments say the setting does (for
	// Added, what the node's file says, if anything).
	Meaning string
}

// String says the change in one line: "--v: 2 → 4", "--audit-log-path:
// missing (reference: /var/log/kubernetes/audit.log)", "address: added
// (127.0.0.1)".
func (c Change) String() string {
	switch c.Op {
	case Missing:
		return fmt.Sprintf("%s: missing (reference: %s)", c.Key, short(c.Ref))
	case Added:
		return fmt.Sprintf("%s: added (%s)", c.Key, short(c.Got))
	}
	return fmt.Sprintf("%s: %s → %s", c.Key, short(c.Ref), short(c.Got))
}

// short cuts a value for one line of output.
func short(v string) string {
	if v == "" {
		return `""`
	}
	const max = 100
	if utf8.RuneCountInString(v) <= max {
		return v
	}
	r := []rune(v)
	return string(r[:max]) + "…"
}

// Compare returns how got differs from ref, setting by setting: the
// reference's settings in file order (changed or missing), then those only
// got has. Order inside a file, spacing, comments and how a flag is spelt
// (--a=b, --a b, -a=b; a bare boolean flag and =true) are not differences.
func Compare(ref, got *Config) []Change {
	have := map[string]Setting{}
	for _, s := range got.Settings {
		have[s.Key] = s
	}
	want := map[string]bool{}
	var out []Change
	for _, s := range ref.Settings {
		want[s.Key] = true
		g, ok := have[s.Key]
		switch {
		case !ok:
			out = append(out, Change{Op: Missing, Key: s.Key, Ref: shown(s.Key, s.Value), Meaning: ref.Meaning(s)})
		case !sameValue(g.Value, s.Value):
			out = append(out, Change{Op: Changed, Key: s.Key, Ref: shown(s.Key, s.Value), Got: shown(s.Key, g.Value), Meaning: ref.Meaning(s)})
		}
	}
	for _, s := range got.Settings {
		if !want[s.Key] {
			out = append(out, Change{Op: Added, Key: s.Key, Got: shown(s.Key, s.Value), Meaning: got.Meaning(s)})
		}
	}
	return out
}

// hidden stands for a value that may be a secret.
const hidden = "<hidden: may be a secret>"

// secretWords mark a setting whose value may be a credential: HAProxy's
// stats auth and userlist passwords, a unit's Environment= (proxy URLs with
// a password), anything named like a secret, token or password.
var secretWords = []string{"secret", "token", "password", "passwd", "stats auth", "environment", "credential"}

// shown returns v, or hidden when the setting or its value may hold a
// secret: findings never show one.
func shown(key, v string) string {
	k, lv := strings.ToLower(key), strings.ToLower(v)
	if strings.HasSuffix(k, "initial-cluster-token") {
		return v // etcd's cluster identifier, not a credential
	}
	for _, w := range secretWords {
		if strings.Contains(k, w) || strings.Contains(lv, w) {
			return hidden
		}
	}
	return v
}
