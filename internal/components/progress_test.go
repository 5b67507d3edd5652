package components

import (
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	if s := progressLine(5<<20, 10<<20, 5*time.Second); s != "5.0 MiB / 10.0 MiB  1.0 MiB/s  ETA 5s" {
		t.Errorf("progressLine: %q", s)
	}
	if s := progressLine(2048, -1, time.Second); s != "2.0 KiB  2.0 KiB/s" {
		t.Errorf("unknown total: %q", s)
	}
	if s := HumanBytes(1023); s != "1023 B" {
		t.Errorf("HumanBytes: %q", s)
	}
}
