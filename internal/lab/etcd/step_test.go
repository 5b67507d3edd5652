package etcd

import (
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
)

// The leadership goes to a member already changed in the rolling order
// (cluster.yaml's), else to the one changed last; never to a member that
// is down or knows no leader.
func TestTransferee(t *testing.T) {
	c := config.Default("t", config.ArchAMD64, config.ProviderNspawn)
	ep := func(node string, ok bool, leader string) health.EtcdEndpoint {
		return health.EtcdEndpoint{Node: node, OK: ok, LeaderID: leader, IsLeader: ok && leader == node}
	}
	for _, tc := range []struct {
		leader string
		eps    []health.EtcdEndpoint
		want   string
	}{
		{"cp1", []health.EtcdEndpoint{ep("cp1", true, "cp1"), ep("cp2", true, "cp1"), ep("cp3", true, "cp1")}, "cp3"},
		{"cp2", []health.EtcdEndpoint{ep("cp1", true, "cp2"), ep("cp2", true, "cp2"), ep("cp3", true, "cp2")}, "cp1"},
		{"cp3", []health.EtcdEndpoint{ep("cp1", true, "cp3"), ep("cp2", true, "cp3"), ep("cp3", true, "cp3")}, "cp1"},
		{"cp1", []health.EtcdEndpoint{ep("cp1", true, "cp1"), ep("cp2", true, "cp1"), ep("cp3", false, "")}, "cp2"},
		{"cp1", []health.EtcdEndpoint{ep("cp1", true, "cp1"), ep("cp2", true, ""), ep("cp3", false, "")}, ""},
	} {
		n, _ := c.Node(tc.leader)
		me, best := transferee(c, &health.EtcdReport{Endpoints: tc.eps}, n)
		got := ""
		if best != nil {
			got = best.Node
		}
		if me == nil || me.Node != tc.leader || got != tc.want {
			t.Errorf("%s leads, members %+v: transferee %q, want %q", tc.leader, tc.eps, got, tc.want)
		}
	}
}
