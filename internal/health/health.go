// Package health reads the live health of a khw cluster from the jumpbox:
// the etcd members and their raft state (Etcd), each kube-apiserver's
// /readyz and the one behind the load balancer (APIServers), the
// leader-election Leases of kube-controller-manager and kube-scheduler
// (Leases), and the systemd units of each node (Units).
//
// Every function only reads, never changes the cluster, and bounds each
// network call with a short timeout so that one dead node shows up as a
// failed row instead of stalling the whole report. They are safe to call in
// parallel and are used both by `khw status` and by the bring-up steps
// (04-etcd, 05-control-plane, 06-lb) to check their outcome.
//
// The nodes may be reachable only through a dial function (provider nspawn:
// they live in the network namespace khw-<cluster>), so every connection
// goes through Target.Dialer, which also maps node names (lb, cp1,
// cp1.kubernetes.local) to their IPs from cluster.yaml: TLS then verifies the
// name, as on a node whose /etc/hosts names every other node.
package health

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
)

// Ports and timeouts. The ports are the upstream defaults (etcd's
// --listen-client-urls, kube-apiserver's --secure-port); cluster.yaml's
// kubernetes.apiServerPort overrides the apiserver one.
const (
	// EtcdClientPort is etcd's client port (https://<cp IP>:2379).
	EtcdClientPort = 2379
	// DefaultAPIServerPort is used when the cluster's apiServerPort is 0.
	DefaultAPIServerPort = 6443
	// EtcdEndpointTimeout bounds the connect + Status call of one etcd
	// endpoint, and separately the one MemberList call (on nspawn nodes;
	// Target.Slowdown lengthens it).
	EtcdEndpointTimeout = 2 * time.Second
	// HTTPTimeout bounds one HTTPS request to an apiserver (/readyz, a
	// Lease GET), connection and TLS handshake included (on nspawn nodes;
	// Target.Slowdown lengthens it).
	HTTPTimeout = 3 * time.Second
)

// PKI files read from Target.PKIDir (the layout of <state>/pki made by
// `khw pki`).
const (
	CAFile = "ca.pem"
	// ClientCertFile and ClientKeyFile are the apiserver client identity:
	// user admin, group system:masters.
	ClientCertFile = "admin.pem"
	ClientKeyFile  = "admin-key.pem"
	// EtcdCertFile and EtcdKeyFile are the etcd client identity: the
	// apiserver's `kubernetes` cert, the only cert etcd accepts
	// (--client-cert-allowed-hostname=kubernetes, its DNS SAN; see
	// templates/node/controlplane/etcd.service.tmpl).
	EtcdCertFile = "kubernetes.pem"
	EtcdKeyFile  = "kubernetes-key.pem"
)

// Target says how to reach the cluster.
type Target struct {
	// Cluster is the parsed cluster.yaml: node names, roles, IPs and the
	// apiserver port come from here.
	Cluster *config.Cluster
	// PKIDir is the state directory's pki/ (state.Dir.PKIDir()): ca.pem is
	// the trust anchor of every connection, admin.pem / admin-key.pem the
	// client cert for the apiservers, kubernetes.pem / kubernetes-key.pem the
	// client cert for etcd (which accepts no other).
	PKIDir string
	// Dial opens a TCP connection to "ip:port" inside the cluster network
	// (vm.Provider.Dialer()). Nil means a plain net.Dialer.
	Dial remote.DialFunc
	// Slowdown is how many times slower than nspawn nodes the nodes answer
	// (vm.Slowdown of the provider: 15 for TCG VMs); 0 and 1 mean nspawn
	// speed. Each network call's timeout grows with it, up to a limit (see
	// Scaled), so a healthy but emulated apiserver is not reported as down.
	Slowdown int
}

// Scaled returns d multiplied by t.Slowdown, at most limit and never less
// than d: the timeout of one call on t's nodes.
func (t Target) Scaled(d, limit time.Duration) time.Duration {
	if t.Slowdown <= 1 {
		return d
	}
	return max(d, min(d*time.Duration(t.Slowdown), limit))
}

// httpTimeout bounds one HTTPS request to an apiserver: HTTPTimeout, up to
// 4× on slow nodes.
func (t Target) httpTimeout() time.Duration { return t.Scaled(HTTPTimeout, 4*HTTPTimeout) }

// etcdTimeout bounds one etcd endpoint probe: EtcdEndpointTimeout, up to
// 4× on slow nodes.
func (t Target) etcdTimeout() time.Duration {
	return t.Scaled(EtcdEndpointTimeout, 4*EtcdEndpointTimeout)
}

// Resolve maps a host name used in the cluster (a node name such as "lb" or
// "cp1", or its FQDN "cp1.kubernetes.local", see config.Cluster.FQDN) to that
// node's IP from cluster.yaml. The match ignores case and a trailing dot.
// ok is false for any other host (IP literals included).
func (t Target) Resolve(host string) (netip.Addr, bool) {
	if t.Cluster == nil {
		return netip.Addr{}, false
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "" {
		return netip.Addr{}, false
	}
	for _, n := range t.Cluster.Nodes {
		if h == strings.ToLower(n.Name) || h == strings.ToLower(t.Cluster.FQDN(n)) {
			a := n.Addr()
			return a, a.IsValid()
		}
	}
	return netip.Addr{}, false
}

// Dialer returns a DialFunc that replaces a cluster node name in addr
// ("lb:6443", "cp1.kubernetes.local:2379") with the node's IP from
// cluster.yaml (see Resolve), then calls t.Dial (a net.Dialer when nil).
// Other hosts are passed through unchanged. So an HTTPS client for
// https://lb:6443 connects to the load balancer's IP and still verifies the
// server certificate against the name "lb", which is one of the apiserver
// certificate's SANs. An addr without a port is an error.
func (t Target) Dialer() remote.DialFunc {
	dial := t.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("dial %q: %w (want host:port)", addr, err)
		}
		if ip, ok := t.Resolve(host); ok {
			addr = net.JoinHostPort(ip.String(), port)
		}
		return dial(ctx, network, addr)
	}
}

// apiServerPort is the cluster's apiserver port, DefaultAPIServerPort if unset.
func (t Target) apiServerPort() int {
	if t.Cluster != nil && t.Cluster.Kubernetes.APIServerPort > 0 {
		return t.Cluster.Kubernetes.APIServerPort
	}
	return DefaultAPIServerPort
}

// apiServerURL is https://<name>:<port>.
func (t Target) apiServerURL(name string) string {
	return "https://" + net.JoinHostPort(name, strconv.Itoa(t.apiServerPort()))
}

// APIServerURL is node name's apiserver URL, "https://cp1:6443".
func (t Target) APIServerURL(name string) string { return t.apiServerURL(name) }

// ClientTLS returns a TLS client configuration for the apiservers: it
// trusts only t.PKIDir/ca.pem and presents admin.pem/admin-key.pem
// (O=system:masters) as the client certificate. Errors name the missing or
// unreadable file and the fix (khw pki); they never contain key material.
func (t Target) ClientTLS() (*tls.Config, error) {
	return t.clientTLS(ClientCertFile, ClientKeyFile, "admin")
}

// EtcdClientTLS is ClientTLS for etcd: the client certificate is
// kubernetes.pem/kubernetes-key.pem, the apiserver's own etcd client cert
// (--etcd-certfile), because etcd accepts only a cert with the DNS SAN
// `kubernetes`. Errors as ClientTLS.
func (t Target) EtcdClientTLS() (*tls.Config, error) {
	return t.clientTLS(EtcdCertFile, EtcdKeyFile, "etcd")
}

// clientTLS loads ca.pem and the pair certFile/keyFile from t.PKIDir; what
// names the pair in errors ("admin", "etcd").
func (t Target) clientTLS(certFile, keyFile, what string) (*tls.Config, error) {
	if t.PKIDir == "" {
		return nil, errors.New("health: Target.PKIDir is empty; set it to the state directory's pki/ (state.Dir.PKIDir())")
	}
	caPath := filepath.Join(t.PKIDir, CAFile)
	ca, err := os.ReadFile(caPath)
	if err != nil {
		return nil, fmt.Errorf("read the cluster CA: %w (fix: run `khw pki`)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no PEM certificate (fix: run `khw pki` to check and reissue it)", caPath)
	}
	certPath, keyPath := filepath.Join(t.PKIDir, certFile), filepath.Join(t.PKIDir, keyFile)
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		// The error of LoadX509KeyPair names files or PEM problems, never
		// key material.
		return nil, fmt.Errorf("load the %s client certificate %s / %s: %w (fix: run `khw pki`)", what, certPath, keyPath, err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// requireCluster checks the Target has a cluster.
func (t Target) requireCluster() error {
	if t.Cluster == nil {
		return errors.New("health: Target.Cluster is nil; load cluster.yaml first (state.Dir.Load)")
	}
	return nil
}

// nodeName maps a host name as the cluster reports it (a kube-controller-
// manager's hostname, possibly an FQDN) to the node name of cluster.yaml;
// other names are returned unchanged.
func (t Target) nodeName(host string) string {
	if t.Cluster == nil {
		return host
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	for _, n := range t.Cluster.Nodes {
		if h == strings.ToLower(n.Name) || h == strings.ToLower(t.Cluster.FQDN(n)) {
			return n.Name
		}
	}
	return host
}

// errText is err.Error() on one line, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}
