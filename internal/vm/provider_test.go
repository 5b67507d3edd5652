package vm

import (
	"testing"
	"time"
)

// slowProvider is a Provider whose machines are n times slower than nspawn.
type slowProvider struct {
	Provider
	n int
}

func (p slowProvider) Slowdown() int { return p.n }

func TestScaled(t *testing.T) {
	for _, tc := range []struct {
		n              int
		d, limit, want time.Duration
	}{
		{n: 1, d: 2 * time.Minute, limit: 15 * time.Minute, want: 2 * time.Minute},
		{n: 0, d: 2 * time.Minute, limit: 15 * time.Minute, want: 2 * time.Minute},
		{n: 5, d: 2 * time.Minute, limit: 15 * time.Minute, want: 10 * time.Minute},
		{n: 15, d: 2 * time.Minute, limit: 15 * time.Minute, want: 15 * time.Minute},
		// A limit below d never shortens the unscaled wait.
		{n: 15, d: 2 * time.Minute, limit: time.Minute, want: 2 * time.Minute},
	} {
		if got := Scaled(slowProvider{n: tc.n}, tc.d, tc.limit); got != tc.want {
			t.Errorf("Scaled(slowdown %d, %v, limit %v) = %v, want %v", tc.n, tc.d, tc.limit, got, tc.want)
		}
	}
	// A provider without Timing runs at nspawn speed.
	if got := Scaled(Provider(nil), time.Minute, time.Hour); got != time.Minute {
		t.Errorf("Scaled(no Timing) = %v, want 1m", got)
	}
}
