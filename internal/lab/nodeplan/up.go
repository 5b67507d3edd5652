package nodeplan

import (
	"context"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// Up is what a day-2 operation that runs khw up's steps again (khw pki
// renew, khw upgrade) takes from khw up. Package lab fills it (lab.Up):
// it owns the list of steps and the labs' progress, and it imports the
// operations' packages, which therefore cannot import it.
type Up struct {
	// Steps are khw up's steps on m for cluster c, in order (lab.Steps).
	Steps func(m *Machines, c *config.Cluster) []steps.Step
	// Record marks as done each lab whose step passed in rep
	// (lab.RecordRun), so that khw lab list tells it from a drifted one.
	Record func(d state.Dir, rep *steps.Report) error
	// RefuseReleaseChange fails when cluster.yaml names another Kubernetes
	// release than the built cluster runs (lab.RefuseReleaseChange).
	RefuseReleaseChange func(ctx context.Context, d state.Dir, c *config.Cluster, s *cluster.Session) error
}
