package nodeplan

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// staleThenFresh is a health check that reports a stale Lease for its
// first n calls, as right after the step before restarted the holder's
// apiserver, and nothing wrong after.
func staleThenFresh(n int) (healthCheck, *int) {
	calls := 0
	return func(context.Context, *steps.Env) ([]steps.Diff, error) {
		calls++
		if calls <= n {
			return []steps.Diff{{What: "Lease kube-system/kube-controller-manager held by cp3 was last renewed 19s ago"}}, nil
		}
		return nil, nil
	}, &calls
}

func rollEnv(t *testing.T) *steps.Env {
	return &steps.Env{State: state.Dir{Root: t.TempDir(), Name: "t"}}
}

// A RollingOnly step waits for a Lease to be taken over instead of
// refusing at the first stale sample (make e2e-day2 met this between
// upgrade-apiservers and upgrade-controllers), and still refuses when the
// cluster stays unhealthy; a step that may change all nodes at once does
// so without waiting.
func TestRollReadyWaitsForHealthBeforeRefusing(t *testing.T) {
	health, calls := staleThenFresh(2)
	s := &ComponentStep{Spec: &ComponentSpec{ID: "upgrade-controllers"}, Rolling: true, RollingOnly: true, Health: health}
	roll, err := s.rollReady(context.Background(), rollEnv(t), 10*time.Second)
	if err != nil || !roll || *calls != 3 {
		t.Fatalf("roll %v, err %v after %d checks; want a roll after the third check", roll, err, *calls)
	}

	health, _ = staleThenFresh(1 << 30)
	s.Health = health
	start := time.Now()
	roll, err = s.rollReady(context.Background(), rollEnv(t), 1500*time.Millisecond)
	if err == nil || roll || !strings.Contains(err.Error(), "changes nodes only one at a time") || !strings.Contains(err.Error(), "last renewed 19s ago") {
		t.Fatalf("roll %v, err %v; want a refusal naming the stale Lease", roll, err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("refused after %v, without waiting", d)
	}

	health, calls = staleThenFresh(1 << 30)
	s = &ComponentStep{Spec: &ComponentSpec{ID: "05-control-plane"}, Rolling: true, Health: health}
	if roll, err := s.rollReady(context.Background(), rollEnv(t), time.Minute); err != nil || roll || *calls != 1 {
		t.Errorf("not RollingOnly: roll %v, err %v, %d checks; want all at once after one check", roll, err, *calls)
	}
}
