package smoke

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/smoketest"
	"github.com/khw-dev/khw/internal/state"
)

// RunOptions is what khw smoke asked for and where it prints.
type RunOptions struct {
	// Keep leaves the namespace smoketest.Namespace and what is in it.
	Keep bool
	// Wait is how long each smoke pod may take to become Ready; unless
	// WaitSet (given on the command line) it is scaled for a slow provider
	// (Runner).
	Wait    time.Duration
	WaitSet bool
	// JSON writes the report as JSON at the end instead of each check as
	// it finishes and a summary.
	JSON bool
	// Out gets the checks or the JSON; ErrOut a namespace that could not
	// be deleted.
	Out, ErrOut io.Writer
}

// Run is khw smoke on cluster c (state d), under the caller's lock: every
// smoke check of package smoketest run through the load balancer as
// admin, printed as o says. Ctrl-C and SIGTERM stop it. Errors: the
// admin kubeconfig's, the checks that failed (smoketest.Report.Err), an
// interruption (the checks cut short say nothing about the cluster).
func Run(parent context.Context, c *config.Cluster, d state.Dir, o RunOptions) error {
	s, err := cluster.Open(c, d, cluster.ProviderOnly, nil)
	if err != nil {
		return err
	}
	cfg, err := s.AdminRESTConfig()
	if err != nil {
		return err
	}
	r, scaled, err := Runner(c, d, cfg, s.Provider, o.Wait)
	if err != nil {
		return err
	}
	wait := o.Wait
	if !o.WaitSet {
		wait = scaled
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := smoketest.Options{Keep: o.Keep, Wait: wait}
	if !o.JSON {
		opts.Progress = func(ch smoketest.Check) { smoketest.WriteCheck(o.Out, ch) }
	}
	rep := r.Run(ctx, opts)
	if o.JSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		smoketest.WriteSummary(o.Out, rep)
	}
	if rep.CleanupErr != "" {
		fmt.Fprintf(o.ErrOut, "Warning: %s\n", rep.CleanupErr)
	}
	if err := ctx.Err(); err != nil {
		// Interrupted: the checks cut short say nothing about the cluster.
		return fmt.Errorf("cluster %s: smoke checks interrupted: %w", c.Name, err)
	}
	return rep.Err(c.Name)
}
