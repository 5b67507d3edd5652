package labcheck

import (
	"testing"
)

// TestGoodClusterHasNoMistakes runs every lab's detectors against the
// cluster khw itself builds: any mistake here is a false positive.
func TestGoodClusterHasNoMistakes(t *testing.T) {
	for _, lab := range testLabs {
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

// testLabs are the catalogue's IDs in order (package lab, which imports this
// one: its test checks the two agree).
var testLabs = []string{
	"01-machines", "02-pki", "03-kubeconfig", "04-etcd", "05-control-plane", "06-lb",
	"07-workers", "08-pod-network", "09-coredns", "10-tls-bootstrap", "11-smoke", "12-failover",
}
