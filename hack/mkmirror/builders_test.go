package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestDerive(t *testing.T) {
	dir := t.TempDir()
	lg, err := newJobLog(dir, "derive")
	if err != nil {
		t.Fatal(err)
	}
	defer lg.close()
	out := filepath.Join(dir, "x.tar.gz")
	calls := 0
	mk := func() error { calls++; return os.WriteFile(out, []byte("x"), 0o644) }
	for i, recipe := range []string{"a", "a", "b", "b"} {
		if err := derive(out, recipe, lg, mk); err != nil {
			t.Fatal(err)
		}
		if want := []int{1, 1, 2, 2}[i]; calls != want {
			t.Errorf("step %d (recipe %s): %d builds, want %d", i, recipe, calls, want)
		}
	}
	os.Remove(out)
	if derive(out, "b", lg, mk); calls != 3 {
		t.Errorf("missing output with a matching recipe: not rebuilt")
	}
	if err := derive(out, "c", lg, func() error { return errors.New("boom") }); err == nil {
		t.Error("failed make: no error")
	}
	if _, err := os.Stat(out + ".recipe"); err == nil {
		t.Error("failed make left a recipe behind")
	}
}
