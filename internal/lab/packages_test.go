package lab

import (
	"slices"

	"github.com/khw-dev/khw/internal/lab/lb"
	"github.com/khw-dev/khw/internal/lab/podnet"
	"github.com/khw-dev/khw/internal/lab/workers"

	"testing"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
)

// Every package a step installs is in components.NodeDebs, which the
// mirror builder puts into the mirror.
func TestNodeDebsListsEveryStepPackage(t *testing.T) {
	c := config.Default("x", config.ArchAMD64, config.ProviderNspawn)
	c.Kubernetes.CNI = config.CNIMyBridge
	var all []nodeplan.WantPackage
	all = append(all, workers.WorkerPackages(c)...)
	for _, s := range []*nodeplan.ComponentStep{lb.NewStep(nil).(*nodeplan.ComponentStep), podnet.NewStep(nil, c).(*nodeplan.ComponentStep)} {
		all = append(all, s.Spec.Packages...)
	}
	for _, p := range all {
		if !slices.Contains(components.NodeDebs, p.Name) {
			t.Errorf("package %s is installed by a step but not in components.NodeDebs", p.Name)
		}
	}
	if len(all) < 4 {
		t.Errorf("found only %d step packages: %v", len(all), all)
	}
}
