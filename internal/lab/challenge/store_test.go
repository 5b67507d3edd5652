package challenge

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestStoreFinishKeepsResults(t *testing.T) {
	s := Store{Dir: t.TempDir() + "/challenges"}
	if _, err := s.Active(); !errors.Is(err, ErrNone) {
		t.Fatalf("Active on an empty store: %v, want ErrNone", err)
	}
	t0 := time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC)
	a := Active{ID: "lb-backend-port", Lab: "06-lb", Level: 1, Started: t0, Injected: t0.Add(10 * time.Second), Hints: 2, Checks: 3}
	if err := s.SaveActive(a); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{s.Dir: 0o700, s.activePath(): 0o600} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, st.Mode().Perm(), err, want)
		}
	}
	r, err := s.Finish(a, Solved, "", t0.Add(100*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if r.Seconds != 90 || r.Hints != 2 || r.Checks != 3 || r.Outcome != Solved {
		t.Errorf("result %+v: want 90 s from the injection, 2 hints, 3 checks, solved", r)
	}
	// A crash after the result was written but before the active record
	// was removed: finishing again must not count it twice.
	if err := s.SaveActive(a); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(a, Solved, "", t0.Add(200*time.Second)); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Results()
	if err != nil || len(rs) != 1 {
		t.Fatalf("results %v (%v), want one", rs, err)
	}
	if _, err := s.Active(); !errors.Is(err, ErrNone) {
		t.Errorf("Active after Finish: %v, want ErrNone", err)
	}
}

func TestRefuseDuring(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	var out bytes.Buffer
	now := time.Now()
	if err := s.RefuseDuring("khw up", false, &out, now); err != nil {
		t.Fatalf("no challenge: %v", err)
	}
	if err := s.SaveActive(Active{ID: "lb-bind-loopback", Lab: "06-lb", Started: now, Injected: now}); err != nil {
		t.Fatal(err)
	}
	err := s.RefuseDuring("khw up", false, &out, now)
	if err == nil || !strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), "lb-bind-loopback") {
		t.Fatalf("during a challenge: %v, want a refusal naming the challenge and --force", err)
	}
	if err := s.RefuseDuring("khw up", true, &out, now); err != nil {
		t.Fatal(err)
	}
	rs, _ := s.Results()
	if len(rs) != 1 || rs[0].Outcome != Ended || rs[0].By != "khw up --force" {
		t.Errorf("results %+v: want one ended by khw up --force", rs)
	}
	if !strings.Contains(out.String(), "not solved") {
		t.Errorf("khw up --force said %q; want that the challenge ended not solved", out.String())
	}
}

func TestPeekIsKeptOnce(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	var out bytes.Buffer
	if err := s.Peek("khw lab check 04-etcd", &out); err != nil || out.Len() != 0 {
		t.Fatalf("no challenge: %v, %q; want nothing", err, out.String())
	}
	now := time.Now()
	if err := s.SaveActive(Active{ID: "etcd-peer-ca", Lab: "04-etcd", Started: now, Injected: now}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Peek("khw lab check 04-etcd", &out); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Peek("khw up --dry-run", &out); err != nil {
		t.Fatal(err)
	}
	a, _ := s.Active()
	if len(a.Peeked) != 2 || !strings.Contains(out.String(), "shows the answer") {
		t.Fatalf("peeked %v, said %q: want two commands, each once, and a note", a.Peeked, out.String())
	}
	r, err := s.Finish(a, Solved, "", now.Add(time.Minute))
	if err != nil || len(r.Peeked) != 2 {
		t.Errorf("result %+v (%v): want the two commands kept", r, err)
	}
}
