package upgrade

import (
	"context"
	"fmt"
	"io"
	"time"

	k8sversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// RefuseDuring fails while an upgrade is under way in d
// (InProgressError): the commands that run khw up's steps (up, lab, pki
// renew) would restart each control plane's components together, out of
// the skew policy's order. Errors: also the record's, when it cannot be
// read.
func RefuseDuring(d state.Dir) error {
	rec, err := LoadRecord(d)
	if err != nil || rec == nil {
		return err
	}
	return InProgressError(rec)
}

// RefuseReleaseChange fails when cluster.yaml names another Kubernetes
// release than the built cluster runs and no upgrade is under way, before
// khw up, a step lab run by khw, or khw pki renew runs khw up's steps
// (versions.kubernetes edited by hand, or an upgrade by hand half done): a
// newer one would be installed node by node without the upgrade's order,
// waits and drains (PolicyURL); an older one is a downgrade, which the
// policy does not support, unless khw upgrade --abandon went back
// (AbandonedPath). It compares every apiserver's /version and every
// Node's kubelet. A cluster whose apiservers do not answer within seconds
// is not judged (khw up's own steps say why); lab.RefuseReleaseChange
// does not ask one whose control plane was never built.
func RefuseReleaseChange(ctx context.Context, d state.Dir, c *config.Cluster, s *cluster.Session) error {
	want, err := k8sversion.ParseSemantic(c.Versions.Kubernetes)
	if err != nil {
		return nil
	}
	ab, err := LoadAbandoned(d)
	if err != nil {
		return err
	}
	// going back is the abandoned upgrade's way back: from its To (or
	// less) to its From, which cluster.yaml names again.
	goingBack := func(got *k8sversion.Version) bool {
		if ab == nil || ab.From != c.Versions.Kubernetes {
			return false
		}
		to, err := k8sversion.ParseSemantic(ab.To)
		return err == nil && !got.GreaterThan(to)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	env := steps.NewEnv(c, d)
	defer env.Close()
	running, err := Observe(ctx, nodeplan.New(s), env)
	if err != nil && len(running.APIServers) == 0 {
		return nil
	}
	check := func(what, node, v string) error {
		got, err := k8sversion.ParseSemantic(v)
		switch {
		case err != nil:
			return nil
		case want.GreaterThan(got):
			return fmt.Errorf("cluster.yaml says versions.kubernetes: %s, but the %s on %s runs v%s: khw up's steps would install %s node by node without an upgrade's order, waits and drains (%s). Upgrade with khw upgrade --to %s (--dry-run first), or set versions.kubernetes back to v%s",
				c.Versions.Kubernetes, what, node, got, c.Versions.Kubernetes, PolicyURL, c.Versions.Kubernetes, got)
		case got.GreaterThan(want) && !goingBack(got):
			return fmt.Errorf("cluster.yaml says versions.kubernetes: %s, but the %s on %s runs v%s already: khw up's steps would downgrade it, which the version-skew policy does not support (%s). Set versions.kubernetes to v%s once every component runs it (an upgrade by hand ends with that edit)",
				c.Versions.Kubernetes, what, node, got, PolicyURL, got)
		}
		return nil
	}
	for _, n := range c.ControlPlanes() {
		if err := check("kube-apiserver", n.Name, running.APIServers[n.Name]); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := check("kubelet", n.Name, running.Kubelets[n.Name]); err != nil {
			return err
		}
	}
	return nil
}

// Abandon ends the upgrade under way in d without finishing it, under the
// caller's lock: versions.kubernetes goes back to the record's From and
// the record becomes AbandonedPath's, so that khw up runs again and puts
// From's binaries back on the nodes that got To's (within one minor
// version, as the apiservers of an HA cluster may differ while an upgrade
// runs). It says what it did on out; with no upgrade under way, that
// there is nothing to abandon.
func Abandon(d state.Dir, out io.Writer) error {
	rec, err := LoadRecord(d)
	if err != nil {
		return err
	}
	if rec == nil {
		fmt.Fprintln(out, "No upgrade is under way: nothing to abandon.")
		return nil
	}
	if err := config.SetVersion(d.ConfigPath(), "kubernetes", rec.From); err != nil {
		return err
	}
	if err := SaveAbandoned(d, *rec); err != nil {
		return err
	}
	if err := ClearRecord(d); err != nil {
		return err
	}
	fmt.Fprintf(out, "Abandoned the upgrade from %s to %s: cluster.yaml says versions.kubernetes: %s again.\nkhw up puts %s back on the nodes that got %s (khw up --dry-run shows which), one node at a time while the cluster serves.\n", rec.From, rec.To, rec.From, rec.From, rec.To)
	return nil
}

// EndWithNodes ends an upgrade under way in d with the nodes khw down
// removed, saying so on out: the next khw up builds them at the version
// cluster.yaml (c) names. An abandoned upgrade's record goes too.
func EndWithNodes(d state.Dir, c *config.Cluster, out io.Writer) error {
	if rec, err := LoadRecord(d); err == nil && rec != nil {
		if err := ClearRecord(d); err != nil {
			return err
		}
		fmt.Fprintf(out, "removed %s (the upgrade to %s ended with the nodes; cluster.yaml says %s)\n", RecordPath(d), rec.To, c.Versions.Kubernetes)
	}
	return ClearAbandoned(d)
}
