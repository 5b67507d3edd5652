// Package challenge is khw challenge: troubleshooting challenges on the
// live cluster. A challenge snapshots the nodes and the state directory,
// injects one fault of the catalogue through guarded actions (cluster
// nodes only), shows the student the symptom and the goal, and grades the
// repair with the goal's probe (the cluster is healthy, as a drill needs
// it) and the fault's lab's own check (khw lab check), which names causes
// from what it reads on the nodes, never from the fault's row. Hints come
// in a ladder (where to look, what is wrong, the fix); giving up shows the
// answer and restores the snapshot. Every end is kept as a Result.
package challenge

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/coredns"
	"github.com/khw-dev/khw/internal/lab/etcd"
	"github.com/khw-dev/khw/internal/lab/fault"
	"github.com/khw-dev/khw/internal/lab/kubeconfig"
	"github.com/khw-dev/khw/internal/lab/lb"
	"github.com/khw-dev/khw/internal/lab/pki"
	"github.com/khw-dev/khw/internal/lab/tlsbootstrap"
	"github.com/khw-dev/khw/internal/lab/workers"
	"github.com/khw-dev/khw/internal/labtext"
)

// Catalogue returns every fault, by lab, then level, then ID: the rows of
// the lab folders (internal/lab/<name>/faults.go).
func Catalogue() []fault.Fault {
	var all []fault.Fault
	for _, rows := range [][]fault.Fault{pki.Faults(), kubeconfig.Faults(), etcd.Faults(), lb.Faults(), workers.Faults(), coredns.Faults(), tlsbootstrap.Faults()} {
		all = append(all, rows...)
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Lab != b.Lab {
			return a.Lab < b.Lab
		}
		if a.Level != b.Level {
			return a.Level < b.Level
		}
		return a.ID < b.ID
	})
	return all
}

// Lookup returns the fault with id. Errors name the IDs there are.
func Lookup(id string) (fault.Fault, error) {
	var ids []string
	for _, f := range Catalogue() {
		if f.ID == id {
			return f, nil
		}
		ids = append(ids, f.ID)
	}
	return fault.Fault{}, fmt.Errorf("no challenge %q; khw challenge list shows them (%s)", id, strings.Join(ids, ", "))
}

// Pick chooses a fault: lab ("" any; an ID such as "04-etcd"), level (0
// any), at random among those that match when random, else the first not
// yet solved (by solved IDs), else the first. Errors: nothing matches.
func Pick(lab string, level int, random bool, solved map[string]bool) (fault.Fault, error) {
	var match []fault.Fault
	for _, f := range Catalogue() {
		if (lab == "" || f.Lab == lab) && (level == 0 || f.Level == level) {
			match = append(match, f)
		}
	}
	if len(match) == 0 {
		what := []string{}
		if lab != "" {
			what = append(what, "lab "+lab)
		}
		if level != 0 {
			what = append(what, fmt.Sprintf("level %d", level))
		}
		return fault.Fault{}, fmt.Errorf("no challenge for %s; khw challenge list shows them", strings.Join(what, " and "))
	}
	if random {
		return match[rand.IntN(len(match))], nil
	}
	for _, f := range match {
		if !solved[f.ID] {
			return f, nil
		}
	}
	return match[0], nil
}

// Texts returns the challenge texts in lang, each missing one in English
// (fellBack lists those).
func Texts(lang string) (texts map[string]labtext.ChallengeText, fellBack []string, err error) {
	en, err := labtext.Challenges("en")
	if err != nil {
		return nil, nil, err
	}
	if lang == "" || lang == "en" {
		return en, nil, nil
	}
	other, err := labtext.Challenges(lang)
	if err != nil {
		return nil, nil, err
	}
	for id, t := range en {
		if _, ok := other[id]; !ok {
			other[id] = t
			fellBack = append(fellBack, id)
		}
	}
	sort.Strings(fellBack)
	return other, fellBack, nil
}

// Fault is a row of the catalogue (package fault).
type Fault = fault.Fault

// SolvedIDs returns the IDs of the challenges solved at least once.
func SolvedIDs(s Store) (map[string]bool, error) {
	rs, err := s.Results()
	out := map[string]bool{}
	for _, r := range rs {
		if r.Outcome == Solved {
			out[r.ID] = true
		}
	}
	return out, err
}

// Request is what khw challenge start asks for: an ID, or a lab (ID,
// number or name; "" any) and a level (0 any), Random among those.
type Request struct {
	ID     string
	Lab    string
	Level  int
	Random bool
}

// RequestError is a request that names nothing or contradicts itself: a
// bad command line.
type RequestError struct{ Err error }

func (e *RequestError) Error() string { return e.Err.Error() }
func (e *RequestError) Unwrap() error { return e.Err }

// Choose resolves r: the fault with r.ID, else Pick's choice, the first
// not yet solved in s unless r.Random. Errors: *RequestError, or the
// results that could not be read.
func Choose(s Store, r Request) (Fault, error) {
	bad := func(err error) (Fault, error) { return Fault{}, &RequestError{err} }
	if r.ID != "" {
		if r.Lab != "" || r.Level != 0 || r.Random {
			return bad(fmt.Errorf("give a challenge ID or --lab/--level/--random, not both"))
		}
		f, err := Lookup(r.ID)
		if err != nil {
			return bad(err)
		}
		return f, nil
	}
	if r.Level < 0 || r.Level > 3 {
		return bad(fmt.Errorf("--level %d: use 1, 2 or 3", r.Level))
	}
	id := ""
	if r.Lab != "" {
		l, err := lab.Lookup(r.Lab)
		if err != nil {
			return bad(err)
		}
		id = l.ID
	}
	solved, err := SolvedIDs(s)
	if err != nil {
		return Fault{}, err
	}
	f, err := Pick(id, r.Level, r.Random, solved)
	if err != nil {
		return bad(err)
	}
	return f, nil
}
