package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm"
)

// Env is what khw break and khw heal work with: the open cluster, the
// prober that samples it and the actuator that breaks and heals it. The
// caller closes S.
type Env struct {
	S      *cluster.Session
	Prober *Prober
	Act    NodeActuator
}

// Open prepares a drill on session s: a Prober over s's health target and
// admin kubeconfig (HAProxy's stats page reached through an SSH tunnel to
// the load balancer) and a NodeActuator over s's pool and provider.
// Errors: the prober's (Prober.Init: no admin kubeconfig, no PKI).
func Open(s *cluster.Session) (*Env, error) {
	c := s.Config
	e := &Env{S: s, Prober: &Prober{Cluster: c, Target: s.Target(), AdminKubeconfig: s.AdminKubeconfig(), Workers: c.Workers()}}
	if lb, ok := c.LB(); ok {
		e.Prober.LBDial = s.DialFrom(lb)
	}
	if err := e.Prober.Init(); err != nil {
		return nil, err
	}
	e.Act = NodeActuator{Cluster: c, Pool: s.Pool, Provider: s.Provider}
	return e, nil
}

// Preflight reads the cluster's health and the facts Plan needs (the etcd
// leader, the Lease holders). problems lists, one line each, why a drill
// now would measure the wrong thing: a node not running, etcd without a
// leader or with unhealthy members, an apiserver not ready, a Lease not
// held, a Node not Ready or under pressure (KubeNodeProblems).
func (e *Env) Preflight(ctx context.Context) (live Live, problems []string) {
	target, admin := e.Prober.Target, e.Prober.AdminKubeconfig
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	st, err := e.S.Provider.Status(cctx)
	if err != nil {
		problems = append(problems, "provider: "+err.Error())
	}
	for _, n := range st {
		if n.State != vm.StateRunning {
			problems = append(problems, fmt.Sprintf("node %s is %s (khw power on %s)", n.Name, n.State, n.Name))
		}
	}
	if len(problems) > 0 {
		return live, problems
	}
	rep, err := health.Etcd(cctx, target)
	switch {
	case err != nil:
		problems = append(problems, "etcd: "+err.Error())
	case rep.Leader == "" || rep.Healthy < rep.Size:
		problems = append(problems, fmt.Sprintf("etcd: %d of %d members healthy, leader %q", rep.Healthy, rep.Size, rep.Leader))
	}
	if rep != nil {
		live.EtcdLeader = rep.Leader
	}
	for _, r := range health.APIServers(cctx, target, admin) {
		if !r.OK {
			why := r.Err
			if why == "" {
				why = strings.Join(r.Failed, ", ")
			}
			problems = append(problems, fmt.Sprintf("apiserver %s not ready: %s", r.Target, why))
		}
	}
	ls, err := health.Leases(cctx, target, admin)
	if err != nil {
		problems = append(problems, "leases: "+err.Error())
	}
	for _, l := range ls {
		live.LeaseHolders = append(live.LeaseHolders, l.HolderNode)
		if !l.Found || !l.Fresh {
			problems = append(problems, fmt.Sprintf("the %s Lease is not held (no leader)", l.Name))
		}
	}
	nodes, err := health.KubeNodes(cctx, target, admin)
	if err != nil {
		problems = append(problems, "nodes: "+err.Error())
	}
	problems = append(problems, KubeNodeProblems(nodes)...)
	return live, problems
}

// KubeNodeProblems lists the Nodes a drill should not start with: not
// Ready, or under memory/disk/PID pressure or without pod network (a
// kubelet under pressure evicts the drill's workload pods, and the report
// would blame the drill).
func KubeNodeProblems(nodes []health.KubeNode) []string {
	var out []string
	for _, n := range nodes {
		if n.Ready != "True" || len(n.Problems) > 0 {
			p := fmt.Sprintf("Node %s is %s", n.Name, n.Summary())
			if n.Message != "" {
				p += ": " + n.Message
			}
			out = append(out, p)
		}
	}
	return out
}

// NewRecord is the record of a drill about to start on cluster c: its ID,
// plan, probe workload port and the facts its verdict is judged against
// (the load balancer's check timing, the lease duration the control planes
// were rendered with, the sampling period every).
func NewRecord(c *config.Cluster, spec Spec, actions []Action, port int, every time.Duration, now time.Time) *Record {
	lbName := ""
	if lb, ok := c.LB(); ok {
		lbName = lb.Name
	}
	rec := &Record{
		ID: NewID(now, spec, actions), Cluster: c.Name, Spec: spec, Actions: actions,
		LB: lbName, NodePort: port,
		Facts: Facts{
			ControlPlanes: len(c.ControlPlanes()), LBInter: c.LoadBalancer.Interval, LBFall: c.LoadBalancer.Fall,
			LeaseDuration: LeaseDuration(c), NodeMonitorGracePeriod: 50 * time.Second,
			Every: every,
		},
	}
	for _, n := range c.ControlPlanes() {
		rec.ControlPlanes = append(rec.ControlPlanes, n.Name)
	}
	return rec
}

// LeaseDuration is the leader-election lease duration the control planes
// were rendered with: upstream's 15 s, or render.LeaderElectionFor's on
// emulated control planes.
func LeaseDuration(c *config.Cluster) time.Duration {
	if le := render.LeaderElectionFor(c); le != nil {
		if d, err := time.ParseDuration(le.LeaseDuration); err == nil {
			return d
		}
	}
	return 15 * time.Second
}

// ReadyToRoll is the start of an operation that changes nodes one at a
// time while the cluster serves (khw pki renew, khw upgrade): the
// cluster must pass Preflight, and the probe workload is made ready for
// the prober (PrepareWorkload). It prints what it checks to out; fix says
// how to mend an unhealthy cluster, in the error that lists its problems.
func (e *Env) ReadyToRoll(ctx context.Context, out io.Writer, fix string) error {
	name := e.S.Config.Name
	fmt.Fprintf(out, "Checking that cluster %s is healthy…\n", name)
	if _, problems := e.Preflight(ctx); len(problems) > 0 {
		return fmt.Errorf("cluster %s is not healthy, so its nodes cannot change one at a time while it serves:\n  - %s\nfix it first (%s)", name, strings.Join(problems, "\n  - "), fix)
	}
	return e.PrepareWorkload(ctx, out)
}

// OpenCluster opens cluster c (state d) for a drill: the session and its
// Env. Close env.S when done.
func OpenCluster(c *config.Cluster, d state.Dir) (*Env, error) {
	s, err := cluster.Open(c, d, cluster.ReadWrite, nil)
	if err != nil {
		return nil, err
	}
	env, err := Open(s)
	if err != nil {
		s.Close()
		return nil, err
	}
	return env, nil
}

// HealActive heals the active drill of store as khw heal does, printing to
// out: nothing when no drill is active (it may have ended meanwhile); only
// a note when the khw break that started it is still watching and already
// saw it healed; otherwise the heal, then the report's summary when this
// process wrote it (when the break is still watching, it writes it).
// Errors: the drill record cannot be read, the heal or the report failed.
func (e *Env) HealActive(ctx context.Context, store Store, out io.Writer) error {
	rec, err := store.Active()
	if errors.Is(err, ErrNoActive) {
		fmt.Fprintf(out, "Nothing to heal: the drill in cluster %s ended meanwhile.\n", e.S.Config.Name)
		return nil
	}
	if err != nil {
		return err
	}
	e.Prober.NodePort = rec.NodePort
	if rec.HealedAt != nil && rec.WatcherPID != 0 && ProcessAlive(rec.WatcherPID) {
		fmt.Fprintf(out, "Drill %s was healed at %s; khw (pid %d) is recording the recovery and writes the report.\n", rec.ID, rec.HealedAt.Local().Format("15:04:05"), rec.WatcherPID)
		return nil
	}
	fmt.Fprintf(out, "Healing drill %s (%s)\n", rec.ID, rec.Spec.CommandLine())
	r := &Runner{Store: store, Prober: e.Prober, Act: e.Act, Out: out}
	rep, watching, err := r.Heal(ctx, rec)
	if err != nil {
		return err
	}
	if watching {
		fmt.Fprintf(out, "Healed. The khw break that started the drill (pid %d) is watching and writes the report.\n", rec.WatcherPID)
		return nil
	}
	return WriteSummary(out, store, rep)
}
