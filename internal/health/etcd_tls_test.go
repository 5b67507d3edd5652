package health

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/khw-dev/khw/internal/render"
)

// fakeMember answers Status and MemberList as a one-member etcd would.
type fakeMember struct {
	pb.UnimplementedMaintenanceServer
	pb.UnimplementedClusterServer
}

func (fakeMember) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return &pb.StatusResponse{Header: &pb.ResponseHeader{MemberId: 1}, Leader: 1, RaftTerm: 2, RaftIndex: 9, Version: "3.7.3"}, nil
}

func (fakeMember) MemberList(context.Context, *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	return &pb.MemberListResponse{Members: []*pb.Member{{ID: 1, Name: "cp1", PeerURLs: []string{"https://192.168.122.11:2380"}}}}, nil
}

// TestEtcdAuthenticatesAsTheAPIServer serves cp1's etcd gRPC API with the
// TLS settings etcd itself builds from khw's rendered etcd.service
// (transport.TLSInfo.ServerConfig with --trusted-ca-file, --client-cert-auth
// and --client-cert-allowed-hostname, as etcdmain/config.go reads them), so
// a client cert other than the apiserver's is refused in the handshake, as
// on a real member. Etcd must get an answer from cp1.
func TestEtcdAuthenticatesAsTheAPIServer(t *testing.T) {
	f := newFakeCluster(t)
	files, err := render.Node(f.c, "cp1", render.NodeFacts{ResolvConf: render.ResolvConfPlain})
	if err != nil {
		t.Fatal(err)
	}
	var unit string
	for _, file := range files {
		if file.Path == "/etc/systemd/system/etcd.service" {
			unit = string(file.Data)
		}
	}
	info := transport.TLSInfo{
		CertFile: filepath.Join(f.d.PKIDir(), "kubernetes.pem"), KeyFile: filepath.Join(f.d.PKIDir(), "kubernetes-key.pem"),
		TrustedCAFile: filepath.Join(f.d.PKIDir(), "ca.pem"), Logger: zap.NewNop(),
		ClientCertAuth: strings.Contains(unit, "--client-cert-auth "),
	}
	if _, v, ok := strings.Cut(unit, "--client-cert-allowed-hostname="); ok {
		info.AllowedHostnames = strings.Split(strings.Fields(v)[0], ",")
	}
	srvTLS, err := info.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(srvTLS)))
	pb.RegisterMaintenanceServer(srv, fakeMember{})
	pb.RegisterClusterServer(srv, fakeMember{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	tg := f.target()
	tg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != "192.168.122.11:2379" {
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, lis.Addr().String())
	}
	rep, err := Etcd(context.Background(), tg)
	if err != nil {
		t.Fatalf("Etcd: %v (report %+v)", err, rep)
	}
	if e := rep.Endpoints[0]; !e.OK || e.Version != "3.7.3" || !e.IsLeader {
		t.Errorf("cp1: %+v", e)
	}
	if len(rep.Members) != 1 || rep.Members[0].Name != "cp1" {
		t.Errorf("members %+v (%s)", rep.Members, rep.MembersErr)
	}

	// The same member refuses the admin cert (the apiservers' client
	// identity), so the etcd client must not use it.
	adm, err := tg.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	adm.ServerName = "127.0.0.1"
	c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(adm)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := pb.NewMaintenanceClient(c).Status(context.Background(), &pb.StatusRequest{}); err == nil {
		t.Error("the member answered the admin cert: etcd's allowlist is not in force")
	}
}
