package config

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestPreviousKubernetesIsWhatE2EDay2Tests: lab 15 tells students to start
// at PreviousKubernetes, which must be the release make e2e-day2 builds a
// cluster at and upgrades (Makefile UPGRADE_FROM), one minor below the
// default.
func TestPreviousKubernetesIsWhatE2EDay2Tests(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if want := "UPGRADE_FROM ?= " + PreviousKubernetes + "\n"; !strings.Contains(string(mk), want) {
		t.Errorf("Makefile lacks %q", want)
	}
	prev, cur := semverRE.FindStringSubmatch(PreviousKubernetes), semverRE.FindStringSubmatch(DefaultVersions.Kubernetes)
	if prev == nil || cur == nil {
		t.Fatalf("not versions: %s, %s", PreviousKubernetes, DefaultVersions.Kubernetes)
	}
	p, _ := strconv.Atoi(prev[2])
	c, _ := strconv.Atoi(cur[2])
	if prev[1] != cur[1] || p+1 != c {
		t.Errorf("PreviousKubernetes %s is not one minor below %s", PreviousKubernetes, DefaultVersions.Kubernetes)
	}
}
