// Package certrenew is lab 14-cert-renewal: certificates renewed while the
// cluster serves. The static certs khw issued (the apiserver's and etcd's
// kubernetes cert, the kubelet certs of w1 and w2) are reissued for their
// keys, put on the nodes and the services that read them restarted one
// node at a time; the TLS-bootstrap worker (w3) gets a new serving cert
// through a CSR that must be approved again. The operation is khw pki
// renew (Renewal, renew.go); this package also records the lab's start,
// lists the by-hand commands, observes what the nodes hold and serve, and
// judges it.
//
// Text: labs/14-cert-renewal.md.
package certrenew

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/pki"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/state"
)

// KubeletPort is the kubelet's HTTPS port, where it serves its serving
// cert (kubelet-config.yaml's port, upstream's default).
const KubeletPort = 10250

// Renewed are the certs lab 14 renews by name: the apiserver's and etcd's
// kubernetes cert and each worker's kubelet cert that khw issues (not a
// TLS-bootstrap worker's, not one imported with nodes[].kubeletCert).
func Renewed(c *config.Cluster) []string {
	out := []string{"kubernetes"}
	for _, n := range c.Workers() {
		if !n.TLSBootstrap && n.KubeletCert == nil {
			out = append(out, n.Name)
		}
	}
	return out
}

// Start is what lab 14 recorded when it began: each renewed cert's serial
// in the pki directory, and the serial each TLS-bootstrap worker's kubelet
// served, so the check can tell a renewed cert from the one before.
type Start struct {
	At time.Time `json:"at"`
	// Certs maps a cert name of Renewed to its serial then (hex).
	Certs map[string]string `json:"certs"`
	// Serving maps a TLS-bootstrap worker to the serial of the cert its
	// kubelet served on KubeletPort then.
	Serving map[string]string `json:"serving"`
}

// StartPath is <state>/labs/14-cert-renewal-start.json.
func StartPath(d state.Dir) string {
	return labcheck.StartPath(d, labid.CertRenewal)
}

// LoadStart reads the start record; ok is false when there is none.
func LoadStart(d state.Dir) (s Start, ok bool, err error) {
	ok, err = labcheck.LoadStart(d, labid.CertRenewal, &s)
	return s, ok, err
}

// Begin records the start (unless again and one exists: a try after an
// unfinished one keeps the first record). Errors: a cert of Renewed is
// missing in the pki directory, or a TLS-bootstrap worker's kubelet serves
// no cert (lab 14 starts from a built cluster).
func Begin(ctx context.Context, s *cluster.Session, again bool) (Start, error) {
	if st, ok, err := LoadStart(s.Dir); err != nil || (ok && again) {
		return st, err
	}
	st := Start{At: time.Now().UTC(), Certs: map[string]string{}, Serving: map[string]string{}}
	for _, name := range Renewed(s.Config) {
		cert, err := readPKICert(s.Dir, name)
		if err != nil {
			return Start{}, fmt.Errorf("%w: lab 14 starts from a built cluster (khw up)", err)
		}
		st.Certs[name] = serial(cert)
	}
	for _, n := range s.Config.Workers() {
		if !n.TLSBootstrap {
			continue
		}
		cert, err := ServedCert(ctx, s.Target().Dialer(), n.IP, KubeletPort)
		if err != nil {
			return Start{}, fmt.Errorf("the kubelet on %s serves no cert (%v): lab 14 starts from a built cluster (khw up)", n.Name, err)
		}
		st.Serving[n.Name] = serial(cert)
	}
	return st, labcheck.SaveStart(s.Dir, labid.CertRenewal, st)
}

// readPKICert reads <pki>/<name>.pem.
func readPKICert(d state.Dir, name string) (*x509.Certificate, error) {
	p := filepath.Join(d.PKIDir(), name+".pem")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return parseCert(b, p)
}

// KubeletKubeconfig is a static worker's kubelet kubeconfig.
const KubeletKubeconfig = "/var/lib/kubelet/kubeconfig"

// nodeCert is the cert of a node file: a PEM file's first certificate, or
// a kubeconfig's client cert (client-certificate-data of its current
// context's user). Only certificates are kept; a kubeconfig's key is
// never read into a finding.
func nodeCert(b []byte, where string) (*x509.Certificate, error) {
	if !strings.HasSuffix(where, "kubeconfig") {
		return parseCert(b, where)
	}
	cfg, err := clientcmd.Load(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	user := ""
	if ctx, ok := cfg.Contexts[cfg.CurrentContext]; ok {
		user = ctx.AuthInfo
	}
	ai, ok := cfg.AuthInfos[user]
	if !ok || len(ai.ClientCertificateData) == 0 {
		return nil, fmt.Errorf("%s has no client-certificate-data for its current context's user %q", where, user)
	}
	return parseCert(ai.ClientCertificateData, where)
}

func parseCert(b []byte, where string) (*x509.Certificate, error) {
	certs, err := parseCertsPEM(b)
	if err != nil || len(certs) == 0 {
		return nil, fmt.Errorf("%s holds no certificate: %v", where, err)
	}
	return certs[0], nil
}

// serial is a cert's serial as hex, as openssl x509 -serial prints it.
func serial(c *x509.Certificate) string { return fmt.Sprintf("%X", c.SerialNumber) }

// ServedCert is the certificate a TLS server at ip:port presents, read in
// a handshake through dial. The handshake is not required to succeed (a
// server that asks for a client cert may refuse this one): the cert is
// taken as it arrives, before any verification. Errors: no connection,
// or no certificate arrived.
func ServedCert(ctx context.Context, dial remote.DialFunc, ip string, port int) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := dial(ctx, "tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var got *x509.Certificate
	tc := tls.Client(conn, &tls.Config{
		InsecureSkipVerify: true, // the cert is only read here; Judge verifies it against the CA
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) > 0 {
				got, _ = x509.ParseCertificate(raw[0])
			}
			return nil
		},
	})
	if d, ok := ctx.Deadline(); ok {
		_ = tc.SetDeadline(d)
	}
	herr := tc.HandshakeContext(ctx)
	if got == nil {
		if herr == nil {
			herr = errors.New("the server sent no certificate")
		}
		return nil, herr
	}
	return got, nil
}

// NodeFile is one copy of a renewed cert on a node and the service that
// reads it.
type NodeFile struct {
	Node, Path, Cert string
	// Unit reads Path at start; Restart says whether it must be restarted
	// to use a new file (false: it reads the file again by itself).
	Unit    string
	Restart bool
}

// Files lists where each renewed cert lives on the nodes (render.Inputs'
// paths) and which service reads it.
func Files(c *config.Cluster) []NodeFile {
	var out []NodeFile
	for _, n := range c.ControlPlanes() {
		out = append(out,
			// etcd reads its certs again for each new TLS connection
			// (etcd-io/etcd#7829); a restart is upstream's advice, not a
			// need.
			NodeFile{Node: n.Name, Path: "/etc/etcd/kubernetes.pem", Cert: "kubernetes", Unit: "etcd.service"},
			// The apiserver reloads its serving cert when the file
			// changes, and reads its etcd and kubelet client cert (the
			// same file) for each new connection (etcd's
			// transport.TLSInfo GetClientCertificate; ReloadTLSFiles).
			NodeFile{Node: n.Name, Path: "/var/lib/kubernetes/kubernetes.pem", Cert: "kubernetes", Unit: "kube-apiserver.service"})
	}
	for _, name := range Renewed(c)[1:] {
		out = append(out,
			// The kubelet reloads its serving cert (tlsCertFile) when the
			// file changes (ReloadKubeletServerCertificateFile, v1.31);
			// its client cert is the same cert, embedded in its kubeconfig
			// (lab 03), which it reads only at start.
			NodeFile{Node: name, Path: "/var/lib/kubelet/kubelet.pem", Cert: name, Unit: "kubelet.service"},
			NodeFile{Node: name, Path: KubeletKubeconfig, Cert: name, Unit: "kubelet.service", Restart: true})
	}
	return out
}

// Seen is one observation of a node: a file's cert and mtime and its
// service's start, or a cert served on a port.
type Seen struct {
	NodeFile
	Serial  string
	MTime   time.Time
	Started time.Time
	Err     string
}

// Served is the cert a server presented.
type Served struct {
	Node string
	Port int
	// What names the server ("kube-apiserver", "etcd", "kubelet").
	What string
	Cert *x509.Certificate
	Err  string
}

// Observed is what lab 14's check read.
type Observed struct {
	CA *x509.Certificate
	// PKI maps each renewed cert name to the pki directory's copy now.
	PKI    map[string]*x509.Certificate
	Files  []Seen
	Served []Served
	// Pending are the kubelet-serving CSRs still waiting for approval
	// ("csr-abc from system:node:w3").
	Pending []string
	// Invalid maps a renewed cert name to why khw's own check of the pki
	// directory would not keep it (wrong subject, SANs, usages, not
	// signed by the CA …), as pki.Reconcile's dry run says.
	Invalid map[string]string
	// Problems are other health problems (an apiserver not ready, a Node
	// not Ready), each a sentence.
	Problems []string
}

// Observe reads the pki directory, each node's copies and their services
// (over SSH), the cert each server presents, and the pending serving
// CSRs.
func Observe(ctx context.Context, s *cluster.Session) (Observed, error) {
	c := s.Config
	o := Observed{PKI: map[string]*x509.Certificate{}}
	var err error
	if o.CA, err = readPKICert(s.Dir, pki.CAName); err != nil {
		return o, err
	}
	for _, name := range Renewed(c) {
		if o.PKI[name], err = readPKICert(s.Dir, name); err != nil {
			return o, err
		}
	}
	// A renewal by hand must make what khw would keep: the dry run of its
	// own reconcile says, for each cert, what it would change and why.
	o.Invalid = map[string]string{}
	if rep, err := pki.Reconcile(c, s.Dir.PKIDir(), time.Now(), pki.DryRun()); err != nil {
		o.Problems = append(o.Problems, "the pki directory: "+err.Error())
	} else {
		for _, name := range Renewed(c) {
			if st, ok := rep.Cert(name); ok && st.Action != pki.Kept {
				var why []string
				for _, r := range st.Reasons {
					why = append(why, r.String())
				}
				o.Invalid[name] = strings.Join(why, "; ")
			}
		}
	}
	files := Files(c)
	byNode := map[string][]int{}
	for i, f := range files {
		byNode[f.Node] = append(byNode[f.Node], i)
	}
	o.Files = make([]Seen, len(files))
	for node, idx := range byNode {
		n, _ := c.Node(node)
		cl, err := s.Pool.Get(ctx, nodeplan.RemoteNode(n))
		if err != nil {
			return o, err
		}
		var paths, units []string
		for _, i := range idx {
			paths = append(paths, files[i].Path)
			units = append(units, files[i].Unit)
		}
		st, err := nodeplan.Probe(ctx, cl, paths, units)
		if err != nil {
			return o, fmt.Errorf("%s: %w", node, err)
		}
		for _, i := range idx {
			f := files[i]
			seen := Seen{NodeFile: f, MTime: st.Files[f.Path].MTime, Started: st.Units[f.Unit].Started}
			out, _, err := cl.Run(ctx, "cat "+f.Path, remote.RunOptions{Sudo: true})
			if err != nil {
				seen.Err = err.Error()
			} else if cert, err := nodeCert(out, node+":"+f.Path); err != nil {
				seen.Err = err.Error()
			} else {
				seen.Serial = serial(cert)
			}
			o.Files[i] = seen
		}
	}
	dial := s.Target().Dialer()
	serve := func(n config.Node, port int, what string) {
		cert, err := ServedCert(ctx, dial, n.IP, port)
		sv := Served{Node: n.Name, Port: port, What: what, Cert: cert}
		if err != nil {
			sv.Err = err.Error()
		}
		o.Served = append(o.Served, sv)
	}
	for _, n := range c.ControlPlanes() {
		serve(n, c.Kubernetes.APIServerPort, "kube-apiserver")
		serve(n, 2379, "etcd")
	}
	for _, n := range c.Workers() {
		serve(n, KubeletPort, "kubelet")
	}
	cs, err := s.Clientset()
	if err != nil {
		return o, err
	}
	if o.Pending, err = pendingServing(ctx, cs); err != nil {
		o.Problems = append(o.Problems, "the CSRs cannot be listed: "+err.Error())
	}
	o.Problems = append(o.Problems, healthProblems(ctx, s)...)
	return o, nil
}

// Grade is lab 14's check: Observe, then Judge against the start record.
func Grade(ctx context.Context, s *cluster.Session) ([]grade.Finding, error) {
	start, ok, err := LoadStart(s.Dir)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("lab %s has not begun: khw lab 14 (or khw lab 14 --by-hand) records the certificates as they are before the renewal, which the check compares with", labid.CertRenewal)
	}
	o, err := Observe(ctx, s)
	if err != nil {
		return nil, err
	}
	return Judge(s.Config, start, o, time.Now()), nil
}
