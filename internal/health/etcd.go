package health

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/khw-dev/khw/internal/config"
)

// EtcdReport is what Etcd found. The JSON names are those of `khw status -o json`.
type EtcdReport struct {
	// Members is the membership as one member sees it (MemberList,
	// serializable so that it is answered even without quorum), sorted by
	// name. Empty when no member answered.
	Members []EtcdMember `json:"members"`
	// MembersErr is why no member could list the members, "" otherwise.
	MembersErr string `json:"membersErr,omitempty"`
	// Endpoints holds one row per control-plane node of cluster.yaml, in
	// file order.
	Endpoints []EtcdEndpoint `json:"endpoints"`
	// Leader is the name of the member the answering endpoints name as
	// leader (the one seen at the highest raft term), "" when none has a
	// leader: then the cluster has no quorum (or is still electing).
	Leader string `json:"leader"`
	// RaftTerm is the highest raft term any endpoint reported. Each
	// election increments it: a jump means leaders were lost.
	RaftTerm uint64 `json:"raftTerm"`
	// Healthy counts the endpoints that answered, know a leader and report
	// no errors (alarms such as NOSPACE).
	Healthy int `json:"healthy"`
	// Size is the number of voting members the cluster should have: the
	// member list's length when known, else the number of control planes.
	Size int `json:"size"`
	// QuorumSize is Size/2+1, the number of members that must agree on
	// every write and linearizable read.
	QuorumSize int `json:"quorumSize"`
	// Quorum is Healthy >= QuorumSize: the cluster can serve writes.
	Quorum bool `json:"quorum"`
}

// EtcdMember is one member of the member list.
type EtcdMember struct {
	// ID is the member ID in hex, as etcdctl prints it (8e9e05c52164694d).
	ID string `json:"id"`
	// Name is --name (cp1 …); "" for a member that was added but has not
	// started yet.
	Name string `json:"name"`
	// PeerURLs (--initial-advertise-peer-urls, :2380) and ClientURLs
	// (--advertise-client-urls, :2379).
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
	// IsLearner marks a non-voting member.
	IsLearner bool `json:"isLearner,omitempty"`
}

// EtcdEndpoint is the Status of one member's client endpoint.
type EtcdEndpoint struct {
	// Node is the control-plane node name (cp1); Endpoint the URL asked
	// (https://192.168.122.11:2379).
	Node     string `json:"node"`
	Endpoint string `json:"endpoint"`
	// OK is true when the member answered Status; Err is why not (refused,
	// timeout, TLS), or the alarms it reported.
	OK  bool   `json:"ok"`
	Err string `json:"error,omitempty"`
	// MemberID is the ID of the answering member (hex).
	MemberID string `json:"memberID,omitempty"`
	// ClusterID is the ID of the cluster the member belongs to (hex): the
	// same on every member of one cluster; a member restored from a
	// snapshot with another --initial-cluster-token, or left on its old
	// data, has another.
	ClusterID string `json:"clusterID,omitempty"`
	// Revision is the member's current etcd revision (the store's, the
	// same on members that are in step).
	Revision int64 `json:"revision,omitempty"`
	// LeaderID is the member this one follows as leader (hex), "" when it
	// knows no leader (no quorum, or an election is running).
	LeaderID string `json:"leaderID,omitempty"`
	// IsLeader is true when this member is the leader.
	IsLeader bool `json:"isLeader"`
	// RaftTerm is the member's current raft term; RaftIndex the index of its
	// last raft log entry (members that keep up have close indexes).
	RaftTerm  uint64 `json:"raftTerm,omitempty"`
	RaftIndex uint64 `json:"raftIndex,omitempty"`
	// Version is the etcd server version (3.6.5).
	Version string `json:"version,omitempty"`
	// DBSizeBytes is the size of the backend database file in bytes.
	DBSizeBytes int64 `json:"dbSizeBytes,omitempty"`
	// Errors are the member's own reported errors (alarms), also joined
	// into Err.
	Errors []string `json:"errors,omitempty"`
	// Latency is the time of the Status call, TLS connection setup
	// included (JSON: nanoseconds).
	Latency time.Duration `json:"latencyNs"`
}

// Etcd asks every control-plane member of t.Cluster for its Status at
// https://<cp IP>:2379, all in parallel, each bounded by
// EtcdEndpointTimeout (longer on slow nodes, Target.Slowdown), and the member list once (from any member that
// answers). It authenticates with t.PKIDir's kubernetes.pem, the only
// client cert etcd accepts (EtcdClientTLS), and verifies the server
// certificate (the same cert, whose SANs hold every control-plane IP).
//
// It returns a non-nil report whenever the PKI files could be loaded; err is
// non-nil when they could not, when the cluster has no control plane, or
// when no member answered at all (the report then names each endpoint's
// failure). A cluster without quorum is not an error: see Quorum.
//
// Quorum follows etcd's raft rule: a cluster of n voting members needs
// n/2+1 of them (https://etcd.io/docs/v3.7/faq/#what-is-failure-tolerance).
func Etcd(ctx context.Context, t Target) (*EtcdReport, error) {
	if err := t.requireCluster(); err != nil {
		return nil, err
	}
	cps := t.Cluster.ControlPlanes()
	if len(cps) == 0 {
		return nil, fmt.Errorf("cluster %s has no node with role %s: no etcd member to ask", t.Cluster.Name, config.RoleControlPlane)
	}
	cli, err := t.EtcdClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	dial := t.Dialer()
	endpoints := make([]string, len(cps))
	for i, n := range cps {
		endpoints[i] = "https://" + net.JoinHostPort(n.IP, strconv.Itoa(EtcdClientPort))
	}

	rep := &EtcdReport{Endpoints: make([]EtcdEndpoint, len(cps))}
	var wg sync.WaitGroup
	for i, n := range cps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep.Endpoints[i] = etcdStatus(ctx, cli, dial, n.Name, endpoints[i], t.etcdTimeout())
		}()
	}
	wg.Wait()

	answered := 0
	for _, e := range rep.Endpoints {
		if e.OK {
			answered++
		}
	}
	if answered > 0 {
		mctx, cancel := context.WithTimeout(ctx, t.etcdTimeout())
		ml, err := cli.MemberList(mctx, clientv3.WithSerializable())
		cancel()
		if err != nil {
			rep.MembersErr = "member list: " + errText(err)
		} else {
			for _, m := range ml.Members {
				rep.Members = append(rep.Members, EtcdMember{
					ID: hexID(m.ID), Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner,
				})
			}
			sort.Slice(rep.Members, func(i, j int) bool { return rep.Members[i].Name < rep.Members[j].Name })
		}
	}
	summarizeEtcd(rep, len(cps))
	if answered == 0 {
		return rep, fmt.Errorf("etcd: no member answered on %v (is etcd running on the control planes? `khw status` shows the etcd unit; the first endpoint said: %s)", endpoints, rep.Endpoints[0].Err)
	}
	return rep, nil
}

// EtcdClient returns an etcd v3 client for every control-plane member of
// t.Cluster (https://<cp IP>:2379, in cluster.yaml order), authenticating
// with t.PKIDir's kubernetes.pem / kubernetes-key.pem (EtcdClientTLS) and
// verifying the members' serving certificate against ca.pem, every
// connection opened through t.Dialer. The client makes one retry round over
// the endpoints, so a dead member fails fast. It does not connect until the first request; bound each
// request with a context deadline. Close it when done.
//
// Errors: no cluster, no control plane, or the PKI files cannot be loaded
// (the message names the file and the fix).
func (t Target) EtcdClient() (*clientv3.Client, error) {
	if err := t.requireCluster(); err != nil {
		return nil, err
	}
	cps := t.Cluster.ControlPlanes()
	if len(cps) == 0 {
		return nil, fmt.Errorf("cluster %s has no node with role %s: no etcd member to ask", t.Cluster.Name, config.RoleControlPlane)
	}
	return t.etcdClient(cps...)
}

// EtcdMemberClient is EtcdClient bound to the one member on control plane
// n: a request it answers was served by that member (a linearizable read
// still goes through the leader's quorum).
func (t Target) EtcdMemberClient(n config.Node) (*clientv3.Client, error) {
	if err := t.requireCluster(); err != nil {
		return nil, err
	}
	return t.etcdClient(n)
}

func (t Target) etcdClient(nodes ...config.Node) (*clientv3.Client, error) {
	tlsCfg, err := t.EtcdClientTLS()
	if err != nil {
		return nil, err
	}
	dial := t.Dialer()
	endpoints := make([]string, len(nodes))
	for i, n := range nodes {
		endpoints[i] = "https://" + net.JoinHostPort(n.IP, strconv.Itoa(EtcdClientPort))
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints,
		TLS:       tlsCfg,
		Logger:    zap.NewNop(),
		// No retries beyond one round over the endpoints: a dead member
		// must fail fast, not be retried until the deadline.
		MaxUnaryRetries: 1,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", endpoints, err)
	}
	return cli, nil
}

// etcdStatus probes one endpoint: a plain TCP connect first (so a stopped
// member reads "connection refused" rather than a bare deadline), then the
// Status RPC over TLS.
func etcdStatus(ctx context.Context, cli *clientv3.Client, dial func(context.Context, string, string) (net.Conn, error), node, endpoint string, timeout time.Duration) EtcdEndpoint {
	e := EtcdEndpoint{Node: node, Endpoint: endpoint}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hostPort := endpoint[len("https://"):]
	conn, err := dial(ctx, "tcp", hostPort)
	if err != nil {
		e.Err = "connect: " + errText(err)
		return e
	}
	conn.Close()
	start := time.Now()
	st, err := cli.Status(ctx, endpoint)
	e.Latency = time.Since(start)
	if err != nil {
		e.Err = "status: " + errText(err)
		return e
	}
	e.OK = true
	if st.Header != nil {
		e.MemberID = hexID(st.Header.MemberId)
		e.ClusterID = hexID(st.Header.ClusterId)
		e.Revision = st.Header.Revision
		e.IsLeader = st.Leader != 0 && st.Leader == st.Header.MemberId
	}
	if st.Leader != 0 {
		e.LeaderID = hexID(st.Leader)
	}
	e.RaftTerm, e.RaftIndex = st.RaftTerm, st.RaftIndex
	e.Version, e.DBSizeBytes = st.Version, st.DbSize
	e.Errors = st.Errors
	if len(st.Errors) > 0 {
		e.Err = fmt.Sprintf("member reports errors: %v", st.Errors)
	}
	return e
}

// summarizeEtcd fills Leader, RaftTerm, Healthy, Size, QuorumSize and
// Quorum from Members and Endpoints. controlPlanes is the number of
// control-plane nodes in cluster.yaml, used as Size when the member list is
// unknown.
func summarizeEtcd(rep *EtcdReport, controlPlanes int) {
	rep.Leader, rep.RaftTerm, rep.Healthy = "", 0, 0
	var leaderID string
	var leaderTerm uint64
	for _, e := range rep.Endpoints {
		if !e.OK {
			continue
		}
		rep.RaftTerm = max(rep.RaftTerm, e.RaftTerm)
		if e.LeaderID != "" && (leaderID == "" || e.RaftTerm > leaderTerm) {
			leaderID, leaderTerm = e.LeaderID, e.RaftTerm
		}
		if e.LeaderID != "" && len(e.Errors) == 0 {
			rep.Healthy++
		}
	}
	if leaderID != "" {
		rep.Leader = leaderID // fallback: the ID when no name is known
		found := false
		for _, m := range rep.Members {
			if m.ID == leaderID && m.Name != "" {
				rep.Leader, found = m.Name, true
				break
			}
		}
		if !found {
			for _, e := range rep.Endpoints {
				if e.MemberID == leaderID {
					rep.Leader = e.Node
					break
				}
			}
		}
	}
	rep.Size = controlPlanes
	if len(rep.Members) > 0 {
		voters := 0
		for _, m := range rep.Members {
			if !m.IsLearner {
				voters++
			}
		}
		rep.Size = voters
	}
	rep.QuorumSize = rep.Size/2 + 1
	rep.Quorum = rep.Size > 0 && rep.Healthy >= rep.QuorumSize
}

// hexID formats a member ID as etcdctl does.
func hexID(id uint64) string { return strconv.FormatUint(id, 16) }
