package labcheck

import (
	"testing"
)

// TestGoodClusterHasNoMistakes runs every lab's detectors against the
// cluster khw itself builds: any mistake here is a false positive.
func TestGoodClusterHasNoMistakes(t *testing.T) {
	for _, lab := range Labs {
		t.Run(lab, func(t *testing.T) {
			f := newFixture(t)
			ms, err := f.check(t, lab)
			if err != nil {
				t.Fatalf("Check(%s): %v", lab, err)
			}
			for _, m := range ms {
				t.Errorf("false positive:\n%s", m)
			}
		})
	}
}
