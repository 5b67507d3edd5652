// Package etcd is lab 04-etcd: the step that runs etcd on the control
// planes, started together, and checks every member and one leader with
// the etcd v3 client (step.go), and its grading (grade.go: --name in
// --initial-cluster, the same list on every member, client and peer TLS,
// the allowlists).
//
// Text: labs/04-etcd.md. Template: templates/node/controlplane/etcd.service.tmpl.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/steps"
)

// NewStep returns lab 04-etcd: on every control plane the etcd
// binaries, its certs in /etc/etcd and etcd.service; all members started
// together (--no-block: a member of a new cluster waits for the others
// before it reports ready); then, through the etcd v3 client from the
// jumpbox, every member listed with its name and peer URL, every endpoint
// answering, one leader.
func NewStep(m *nodeplan.Machines) steps.Step {
	spec := &nodeplan.ComponentSpec{
		ID: labid.Etcd, Title: "Bootstrap the etcd cluster",
		Role:     config.RoleControlPlane,
		Binaries: []string{"etcd"},
		Rendered: []string{"/etc/systemd/system/etcd.service"},
		Inputs:   nodeplan.InputUnder("/etc/etcd/"),
		Units: []nodeplan.WantUnit{{Name: "etcd.service", Together: true, Deps: []string{
			"/usr/local/bin/etcd", "/etc/systemd/system/etcd.service",
			"/etc/etcd/ca.pem", "/etc/etcd/kubernetes.pem", "/etc/etcd/kubernetes-key.pem"}}},
	}
	s := &nodeplan.ComponentStep{M: m, Spec: spec, Wait: nodeplan.EtcdWait, Rolling: true}
	s.Health = func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
		rep, err := health.Etcd(ctx, m.Target(env))
		if rep == nil {
			return nil, err
		}
		return etcdDiffs(env.Cluster, rep), nil
	}
	s.ExtraCommands = func(env *steps.Env) []steps.Command { return CheckCommands(env.Cluster) }
	s.BeforeNode = func(ctx context.Context, env *steps.Env, n config.Node) error {
		to, err := HandOffLeader(ctx, m.Target(env), n)
		if to != "" {
			env.Notef("%s: led etcd; leadership handed to %s first (etcdctl move-leader)", n.Name, to)
		}
		return err
	}
	return s
}

// HandOffLeader moves etcd's leadership away from the member on node n
// when n leads, to a healthy follower (one changed before n in a rolling
// change, else the one changed last), as `etcdctl move-leader` does, and
// returns that follower's node ("" when n did not lead). A leader that
// stops gracefully hands over too (etcd's Stop calls
// TryTransferLeadershipOnShutdown), but then while it is already shutting
// down and to a peer it picks; handed over first, the move is a step of
// its own, done while the member serves, and the leadership moves at most
// twice in a rolling change (etcdctl move-leader, etcd-io/etcd
// etcdctl/README.md; the MoveLeader RPC must reach the leader). Errors: no
// member answered, no healthy follower to take over though n has peers,
// or the transfer failed (not when n no longer leads by then).
func HandOffLeader(ctx context.Context, t health.Target, n config.Node) (string, error) {
	rep, err := health.Etcd(ctx, t)
	if err != nil {
		return "", err
	}
	me, best := transferee(t.Cluster, rep, n)
	if me == nil || !me.OK || !me.IsLeader || len(rep.Endpoints) < 2 {
		return "", nil // not the leader, or alone: nobody to hand over to
	}
	if best == nil {
		return "", fmt.Errorf("%s leads etcd and no other member is healthy to take over", n.Name)
	}
	id, err := strconv.ParseUint(best.MemberID, 16, 64)
	if err != nil {
		return "", fmt.Errorf("member ID %q of %s: %w", best.MemberID, best.Node, err)
	}
	cli, err := t.EtcdMemberClient(n)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, t.Scaled(10*time.Second, time.Minute))
	defer cancel()
	if _, err := cli.MoveLeader(cctx, id); err != nil {
		if errors.Is(err, rpctypes.ErrGRPCNotLeader) || errors.Is(err, rpctypes.ErrNotLeader) {
			return "", nil // the leadership moved meanwhile: nothing left to hand over
		}
		return "", fmt.Errorf("move the etcd leadership from %s to %s: %w", n.Name, best.Node, err)
	}
	return best.Node, nil
}

// EtcdctlTLS are the flags etcdctl needs on a control plane: the cluster
// CA, and the one client certificate etcd accepts
// (--client-cert-allowed-hostname=kubernetes in etcd.service).
const EtcdctlTLS = " --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem"

// CheckCommands are the commands, on c's first control plane, that wait
// until every etcd member answers (at most 60 s) and then show the members
// and which one leads. Nil without a control plane.
func CheckCommands(c *config.Cluster) []steps.Command {
	cp := c.ControlPlanes()
	if len(cp) == 0 {
		return nil
	}
	all := "sudo etcdctl --endpoints=" + etcdEndpoints(c) + EtcdctlTLS
	return []steps.Command{
		{Node: cp[0].Name, Why: "wait until every member answers (a new cluster needs a few seconds to elect its first leader; at most 60 s)",
			Shell: steps.WaitLoop(60, 1, all+" endpoint health")},
		{Node: cp[0].Name, Why: "every member listed, and which one leads (IS LEADER, RAFT TERM)",
			Shell: "sudo etcdctl --endpoints=https://127.0.0.1:2379" + EtcdctlTLS + " member list -w table\n" +
				all + " endpoint status -w table"}}
}

func etcdEndpoints(c *config.Cluster) string {
	var eps []string
	for _, n := range c.ControlPlanes() {
		eps = append(eps, "https://"+n.IP+":2379")
	}
	return strings.Join(eps, ",")
}

// etcdDiffs names every way the etcd cluster differs from cluster.yaml:
// a member missing or with another peer URL, an unexpected member, an
// endpoint not answering, no leader.
func etcdDiffs(c *config.Cluster, rep *health.EtcdReport) []steps.Diff {
	var diffs []steps.Diff
	byName := map[string]health.EtcdMember{}
	for _, mb := range rep.Members {
		byName[mb.Name] = mb
	}
	want := map[string]bool{}
	if rep.MembersErr == "" {
		for _, n := range c.ControlPlanes() {
			want[n.Name] = true
			mb, ok := byName[n.Name]
			peer := "https://" + n.IP + ":2380"
			switch {
			case !ok:
				diffs = append(diffs, steps.Diff{Node: n.Name, What: "etcd member " + n.Name + " is not in the member list", Fix: "start etcd on " + n.Name + " with --initial-cluster naming it"})
			case len(mb.PeerURLs) != 1 || mb.PeerURLs[0] != peer:
				diffs = append(diffs, steps.Diff{Node: n.Name, What: fmt.Sprintf("etcd member %s has peer URLs %v, want [%s]", n.Name, mb.PeerURLs, peer), Fix: "remove the member and its data dir, then start it again"})
			}
		}
		for _, mb := range rep.Members {
			if !want[mb.Name] {
				diffs = append(diffs, steps.Diff{What: fmt.Sprintf("etcd member %q (%s) is not a control plane of cluster.yaml", mb.Name, mb.ID), Fix: "etcdctl member remove " + mb.ID})
			}
		}
	} else {
		diffs = append(diffs, steps.Diff{What: "no etcd member lists the members: " + rep.MembersErr, Fix: "start etcd on every control plane"})
	}
	for _, ep := range rep.Endpoints {
		if !ep.OK {
			diffs = append(diffs, steps.Diff{Node: ep.Node, What: "etcd at " + ep.Endpoint + " does not answer: " + ep.Err, Fix: "restart etcd.service and read its journal"})
		}
	}
	if rep.Leader == "" {
		diffs = append(diffs, steps.Diff{What: fmt.Sprintf("etcd has no leader (%d of %d members healthy, quorum needs %d)", rep.Healthy, rep.Size, rep.QuorumSize), Fix: "start the members that are down"})
	}
	return diffs
}

// transferee finds node n's member in rep (nil when it did not answer)
// and the healthy follower that should take over its leadership (nil when
// none). In a rolling change the nodes go in cluster.yaml order: a member
// before n is already done, and of those after it the last is changed
// last, so the leadership moves as few times as it can.
func transferee(c *config.Cluster, rep *health.EtcdReport, n config.Node) (me, best *health.EtcdEndpoint) {
	order := map[string]int{}
	for i, cp := range c.ControlPlanes() {
		order[cp.Name] = i
	}
	rank := func(e *health.EtcdEndpoint) int {
		if i := order[e.Node]; i < order[n.Name] {
			return -i
		}
		return -1000 + order[e.Node]
	}
	for i := range rep.Endpoints {
		e := &rep.Endpoints[i]
		switch {
		case e.Node == n.Name:
			me = e
		case e.OK && e.LeaderID != "" && (best == nil || rank(e) > rank(best)):
			best = e
		}
	}
	return me, best
}
