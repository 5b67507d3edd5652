package lab

import (
	"context"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/lab/upgrade"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// Up is khw up as the day-2 operations (khw pki renew, khw upgrade) run
// parts of it again: its steps (Steps), a run of them recorded in the
// labs' progress (RecordRun), and RefuseReleaseChange.
func Up() nodeplan.Up {
	return nodeplan.Up{
		Steps:               Steps,
		Record:              func(d state.Dir, rep *steps.Report) error { return RecordRun(d, rep, false) },
		RefuseReleaseChange: RefuseReleaseChange,
	}
}

// RefuseReleaseChange is upgrade.RefuseReleaseChange once the cluster's
// control plane was built (khw lab list's progress has
// labid.ControlPlane): a cluster never built is not judged, and not asked
// for its versions either (khw up's own steps say what is missing).
func RefuseReleaseChange(ctx context.Context, d state.Dir, c *config.Cluster, s *cluster.Session) error {
	if prog, err := LoadProgress(d); err != nil || prog[labid.ControlPlane].IsZero() {
		return nil
	}
	return upgrade.RefuseReleaseChange(ctx, d, c, s)
}
