package etcd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// tryoutPrefix is where the stored-data tryout writes its key; the key
// lives on a 5-minute lease, so a check that is cut short leaves nothing
// behind for long.
const tryoutPrefix = "/khw/lab-check/"

// storedData tries what lab 04 exists to make work: a key written to the
// etcd cluster can be read back through every member (a linearizable
// read: the member must reach the leader, which must hold a quorum; etcd
// API guarantees, https://etcd.io/docs/v3.7/learning/api_guarantees/).
// A member that cannot serve it is named with the likely cause read from
// the cluster itself: the member list and each member's Status.
func storedData(e *labcheck.Env) ([]labcheck.Mistake, error) {
	if e.Live == nil {
		return nil, nil
	}
	t := e.Live.Target
	ctx, cancel := context.WithTimeout(e.Ctx, t.Scaled(15*time.Second, time.Minute))
	defer cancel()
	rep, _ := health.Etcd(ctx, t) // the causes; nil only when the PKI cannot be read
	cli, err := t.EtcdClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	b := make([]byte, 6)
	rand.Read(b)
	key, value := tryoutPrefix+hex.EncodeToString(b), "written by khw lab check at "+e.Now.UTC().Format(time.RFC3339)
	lease, err := cli.Grant(ctx, 300)
	if err == nil {
		_, err = cli.Put(ctx, key, value, clientv3.WithLease(lease.ID))
	}
	if err != nil {
		return []labcheck.Mistake{{Lab: labid.Etcd, Kind: grade.Breaks, Subject: "etcd write",
			What:     "nothing can be stored in etcd: a write through the members failed (" + labcheck.OneLine(err) + "); the apiservers cannot store anything either",
			Evidence: clusterEvidence(rep), Fix: clusterFix(e.Cluster, rep)}}, nil
	}
	defer func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		cli.Revoke(rctx, lease.ID)
	}()
	var out []labcheck.Mistake
	for _, n := range e.Cluster.ControlPlanes() {
		var got string
		var err error
		if ep := endpointOf(rep, n); ep != nil && !ep.OK {
			// It did not answer its Status just now: a read would only wait
			// for its deadline.
			err = fmt.Errorf("it does not answer (%s)", ep.Err)
		} else {
			// Each member gets its own time: one that does not answer must
			// not use up the others'.
			rctx, rcancel := context.WithTimeout(e.Ctx, t.Scaled(5*time.Second, 20*time.Second))
			got, err = readThrough(rctx, t, n, key)
			rcancel()
		}
		if err == nil && got == value {
			continue
		}
		what := fmt.Sprintf("a key just stored in etcd cannot be read back through the member on %s", n.Name)
		if err != nil {
			what += ": " + labcheck.OneLine(err)
		} else {
			what += fmt.Sprintf(": it answers %q instead (a member of another etcd cluster)", got)
		}
		cause, fix := memberCause(e.Cluster, rep, n)
		out = append(out, labcheck.Mistake{Lab: labid.Etcd, Node: n.Name, Kind: grade.Breaks, Subject: "etcd read " + n.Name,
			What: what + "; an apiserver that uses this member sees other data or none", Evidence: cause, Fix: fix})
	}
	return out, nil
}

// readThrough reads key through n's member alone (linearizable).
func readThrough(ctx context.Context, t health.Target, n config.Node, key string) (string, error) {
	cli, err := t.EtcdMemberClient(n)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("the key is not there (a member of another etcd cluster, or one that lost its data)")
	}
	return string(resp.Kvs[0].Value), nil
}

// endpointOf is n's row of the etcd report, nil when there is none.
func endpointOf(rep *health.EtcdReport, n config.Node) *health.EtcdEndpoint {
	if rep == nil {
		return nil
	}
	for i := range rep.Endpoints {
		if rep.Endpoints[i].Node == n.Name {
			return &rep.Endpoints[i]
		}
	}
	return nil
}

// memberCause says, from the etcd report, why n's member likely cannot
// serve a read, and the fix.
func memberCause(c *config.Cluster, rep *health.EtcdReport, n config.Node) (evidence, fix string) {
	if rep == nil {
		return "the etcd members could not be asked", "khw status (ETCD) shows each member"
	}
	ep := endpointOf(rep, n)
	member := false
	for _, m := range rep.Members {
		if m.Name == n.Name {
			member = true
		}
	}
	switch {
	case ep == nil || !ep.OK && ep.Err != "":
		err := "no answer"
		if ep != nil {
			err = ep.Err
		}
		return fmt.Sprintf("the member on %s does not answer its Status at https://%s:%d: %s", n.Name, n.IP, health.EtcdClientPort, err),
			fmt.Sprintf("on %s: systemctl status etcd and journalctl -u etcd; --listen-client-urls must include https://%s:%d", n.Name, n.IP, health.EtcdClientPort)
	case !member && len(rep.Members) > 0:
		return fmt.Sprintf("%s is not in the member list (%s): its etcd started a cluster of its own", n.Name, memberNames(rep)),
			fmt.Sprintf("on %s: stop etcd, remove its data directory, and start it with --initial-cluster listing every member and --initial-cluster-state new together with the others (lab 04)", n.Name)
	case ep.LeaderID == "":
		return fmt.Sprintf("the member on %s knows no leader (raft term %d): %d of %d members healthy, a quorum needs %d", n.Name, ep.RaftTerm, rep.Healthy, rep.Size, rep.QuorumSize),
			"start the stopped members until a quorum runs: khw status (ETCD) shows which"
	}
	return clusterEvidence(rep), clusterFix(c, rep)
}

// clusterEvidence summarises the etcd report in one line.
func clusterEvidence(rep *health.EtcdReport) string {
	if rep == nil {
		return "the etcd members could not be asked"
	}
	leader := rep.Leader
	if leader == "" {
		leader = "none"
	}
	return fmt.Sprintf("members: %s; leader: %s; %d of %d healthy (a quorum needs %d)", memberNames(rep), leader, rep.Healthy, rep.Size, rep.QuorumSize)
}

// clusterFix is the first thing to look at when the cluster as a whole
// cannot serve.
func clusterFix(c *config.Cluster, rep *health.EtcdReport) string {
	if rep != nil && !rep.Quorum {
		return fmt.Sprintf("bring back a quorum: %d of the %d members must run and reach each other on port 2380 (khw status shows which run)", rep.QuorumSize, rep.Size)
	}
	return "khw status (ETCD) and journalctl -u etcd on each control plane; khw lab check 04 reads the members' flags"
}

func memberNames(rep *health.EtcdReport) string {
	var names []string
	for _, m := range rep.Members {
		names = append(names, m.Name)
	}
	if len(names) == 0 {
		return "none listed"
	}
	return strings.Join(names, ", ")
}
