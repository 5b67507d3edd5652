package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm"
)

// PowerAct powers one node on or off and says what it did ("powered off",
// "started").
type PowerAct func(ctx context.Context, p vm.Provider, node string) (string, error)

// Power runs act on each of nodes (names of cluster.yaml, without
// duplicates) in parallel, skipping the nodes already as want says ("on"
// or "off") and failing for absent ones. say gets one line per node as it
// finishes ("cp2: powered off in 1.2s"); it may be called from several
// goroutines at once, never concurrently. It returns how many nodes act
// handled, and every node's error joined.
func Power(ctx context.Context, p vm.Provider, nodes []string, want string, act PowerAct, say func(format string, args ...any)) (int, error) {
	st, err := p.Status(ctx)
	if err != nil {
		return 0, err
	}
	now := map[string]vm.State{}
	for _, s := range st {
		now[s.Name] = s.State
	}
	var mu sync.Mutex
	var errs []error
	said := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		say(format, args...)
	}
	var todo []string
	for _, n := range nodes {
		switch {
		case now[n] == vm.StateAbsent:
			said("%s: absent, not powered %s", n, want)
			errs = append(errs, fmt.Errorf("node %s does not exist (fix: khw up creates it)", n))
		case want == "off" && now[n] == vm.StateStopped:
			said("%s: already off", n)
		case want == "on" && now[n] == vm.StateRunning:
			said("%s: already running", n)
		default:
			todo = append(todo, n)
		}
	}
	results := steps.Parallel(len(todo), func(i int) error {
		n := todo[i]
		start := time.Now()
		what, err := act(ctx, p, n)
		took := time.Since(start).Round(10 * time.Millisecond)
		if err != nil {
			said("%s: FAILED after %s", n, took)
			return err
		}
		said("%s: %s in %s", n, what, took)
		return nil
	})
	done := 0
	for _, err := range results {
		if err == nil {
			done++
		}
		errs = append(errs, err)
	}
	return done, errors.Join(errs...)
}

// PowerOff is khw power off's act: the node shut down gracefully within
// timeout (an error after it: then force), or with force killed at once
// (pulling the plug).
func PowerOff(force bool, timeout time.Duration) PowerAct {
	how := "graceful"
	if force {
		how = "forced"
	}
	return func(ctx context.Context, p vm.Provider, node string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := p.Stop(ctx, node, force); err != nil {
			return "", err
		}
		return "powered off (" + how + ")", nil
	}
}

// PowerOn is khw power on's act: the node booted.
func PowerOn(ctx context.Context, p vm.Provider, node string) (string, error) {
	if err := p.Start(ctx, node); err != nil {
		return "", err
	}
	return "started", nil
}
