package etcd

import (
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
)

// A member that cannot serve a read is explained from the etcd report: no
// answer, not in the member list, no leader; else the cluster summary.
func TestMemberCause(t *testing.T) {
	c := config.Default("t", config.ArchAMD64, config.ProviderNspawn)
	cp3, _ := c.Node("cp3")
	members := []health.EtcdMember{{Name: "cp1"}, {Name: "cp2"}, {Name: "cp3"}}
	ok := func(n string) health.EtcdEndpoint {
		return health.EtcdEndpoint{Node: n, OK: true, LeaderID: "a", RaftTerm: 4}
	}
	for _, tc := range []struct {
		name     string
		rep      *health.EtcdReport
		evidence string
		fix      string
	}{
		{"not answering", &health.EtcdReport{Members: members, Endpoints: []health.EtcdEndpoint{ok("cp1"), ok("cp2"), {Node: "cp3", Err: "connection refused"}}, Size: 3, QuorumSize: 2, Healthy: 2, Quorum: true},
			"does not answer its Status at https://192.168.122.13:2379: connection refused", "--listen-client-urls must include https://192.168.122.13:2379"},
		{"not a member", &health.EtcdReport{Members: members[:2], Endpoints: []health.EtcdEndpoint{ok("cp1"), ok("cp2"), ok("cp3")}, Size: 2, QuorumSize: 2, Healthy: 3, Quorum: true},
			"cp3 is not in the member list (cp1, cp2)", "remove its data directory"},
		{"no leader", &health.EtcdReport{Members: members, Endpoints: []health.EtcdEndpoint{{Node: "cp1", OK: true}, {Node: "cp2", Err: "refused"}, {Node: "cp3", OK: true, RaftTerm: 9}}, Size: 3, QuorumSize: 2, Healthy: 0},
			"knows no leader (raft term 9): 0 of 3 members healthy, a quorum needs 2", "until a quorum runs"},
		{"no report", nil, "could not be asked", "khw status"},
	} {
		ev, fix := memberCause(c, tc.rep, cp3)
		if !strings.Contains(ev, tc.evidence) || !strings.Contains(fix, tc.fix) {
			t.Errorf("%s: evidence %q, fix %q; want ~%q, ~%q", tc.name, ev, fix, tc.evidence, tc.fix)
		}
	}
}
