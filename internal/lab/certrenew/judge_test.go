package certrenew

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/grade"
)

// testPKI signs certs with serials of the test's choosing.
type testPKI struct {
	t   *testing.T
	ca  *x509.Certificate
	key *ecdsa.PrivateKey
}

func newTestPKI(t *testing.T) *testPKI {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Kubernetes"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour * 3650)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return &testPKI{t: t, ca: ca, key: key}
}

func (p *testPKI) leaf(serial int64, cn string, dns []string, validFor time.Duration, ips ...string) *x509.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var ipa []net.IP
	for _, ip := range ips {
		ipa = append(ipa, net.ParseIP(ip))
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: dns, IPAddresses: ipa,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(validFor)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

// renewedCluster is the default cluster after a correct lab 14: serials
// 10, 21, 22 before; 110, 121, 122 after; w3 served 30, now 130.
func renewedCluster(t *testing.T) (*config.Cluster, Start, Observed) {
	c := config.Default("t", config.ArchAMD64, config.ProviderNspawn)
	p := newTestPKI(t)
	year := 365 * 24 * time.Hour
	kube := p.leaf(110, "kubernetes", []string{"kubernetes"}, year)
	w1, w2 := p.leaf(121, "system:node:w1", []string{"w1"}, year), p.leaf(122, "system:node:w2", []string{"w2"}, year)
	start := Start{At: time.Now().Add(-10 * time.Minute), Certs: map[string]string{"kubernetes": "0A", "w1": "15", "w2": "16"}, Serving: map[string]string{"w3": "1E"}}
	o := Observed{CA: p.ca, PKI: map[string]*x509.Certificate{"kubernetes": kube, "w1": w1, "w2": w2}}
	written := time.Now().Add(-5 * time.Minute)
	for _, f := range Files(c) {
		o.Files = append(o.Files, Seen{NodeFile: f, Serial: serial(o.PKI[f.Cert]), MTime: written, Started: written.Add(time.Minute)})
	}
	for _, n := range c.ControlPlanes() {
		o.Served = append(o.Served, Served{Node: n.Name, Port: 6443, What: "kube-apiserver", Cert: kube}, Served{Node: n.Name, Port: 2379, What: "etcd", Cert: kube})
	}
	o.Served = append(o.Served, Served{Node: "w1", Port: KubeletPort, What: "kubelet", Cert: w1}, Served{Node: "w2", Port: KubeletPort, What: "kubelet", Cert: w2},
		Served{Node: "w3", Port: KubeletPort, What: "kubelet", Cert: p.leaf(130, "system:node:w3", []string{"w3"}, year, "192.168.122.23")})
	return c, start, o
}

// served is o's observation of what on node.
func served(o *Observed, node, what string) *Served {
	for i := range o.Served {
		if o.Served[i].Node == node && o.Served[i].What == what {
			return &o.Served[i]
		}
	}
	panic("no " + what + " on " + node)
}

func TestJudgeRenewedClusterPasses(t *testing.T) {
	c, start, o := renewedCluster(t)
	if fs := Judge(c, start, o, time.Now()); len(fs) > 0 {
		t.Errorf("a renewed cluster has findings:\n%v", fs)
	}
	// Services that read the copied files again by themselves need no
	// restart: etcd, and kube-apiserver for its serving and client cert.
	for i := range o.Files {
		if o.Files[i].Unit != "kubelet.service" {
			o.Files[i].Started = o.Files[i].MTime.Add(-time.Hour)
		}
	}
	// A serving CSR the kubelet gave up on, once a new cert is served.
	o.Pending = []string{"csr-old from system:node:w3"}
	if fs := Judge(c, start, o, time.Now()); len(fs) > 0 {
		t.Errorf("etcd and kube-apiserver not restarted, an old pending CSR: findings\n%v", fs)
	}
}

// Each way a renewal can be left undone is found, with its evidence.
func TestJudgeFindsEachMistake(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(c *config.Cluster, s *Start, o *Observed)
		want   string
	}{
		{"not renewed on the jumpbox", func(c *config.Cluster, s *Start, o *Observed) { s.Certs["kubernetes"] = serial(o.PKI["kubernetes"]) },
			"kubernetes.pem in the pki directory is the cert from before the lab"},
		{"old copy on cp2", func(c *config.Cluster, s *Start, o *Observed) {
			for i := range o.Files {
				if o.Files[i].Node == "cp2" && o.Files[i].Path == "/etc/etcd/kubernetes.pem" {
					o.Files[i].Serial = "0A"
				}
			}
		}, "/etc/etcd/kubernetes.pem does not hold the renewed kubernetes.pem"},
		{"w1 kubeconfig not rewritten", func(c *config.Cluster, s *Start, o *Observed) {
			for i := range o.Files {
				if o.Files[i].Node == "w1" && o.Files[i].Path == KubeletKubeconfig {
					o.Files[i].Serial = "15"
				}
			}
		}, "write kubeconfigs/w1.kubeconfig again"},
		{"kubelet not restarted after its kubeconfig", func(c *config.Cluster, s *Start, o *Observed) {
			for i := range o.Files {
				if o.Files[i].Node == "w2" && o.Files[i].Path == KubeletKubeconfig {
					o.Files[i].Started = o.Files[i].MTime.Add(-time.Hour)
				}
			}
		}, "kubelet.service runs with the cert it read when it started"},
		{"kubelet serves its old cert", func(c *config.Cluster, s *Start, o *Observed) {
			p := newTestPKI(t)
			served(o, "w1", "kubelet").Cert = p.leaf(21, "system:node:w1", []string{"w1"}, time.Hour)
		}, "kubelet on w1"},
		{"w3 serving not renewed", func(c *config.Cluster, s *Start, o *Observed) {
			s.Serving["w3"] = serial(served(o, "w3", "kubelet").Cert)
		},
			"still serves the cert it had before the lab"},
		{"w3 serving from another CA", func(c *config.Cluster, s *Start, o *Observed) {
			served(o, "w3", "kubelet").Cert = newTestPKI(t).leaf(131, "system:node:w3", []string{"w3"}, time.Hour)
		}, "not the cluster CA's serving cert for w3"},
		{"pending CSR, no new serving cert", func(c *config.Cluster, s *Start, o *Observed) {
			s.Serving["w3"] = serial(served(o, "w3", "kubelet").Cert)
			o.Pending = []string{"csr-x from system:node:w3"}
		}, "a kubelet serving CSR waits for approval: csr-x"},
		{"w3 serving cert without its IP", func(c *config.Cluster, s *Start, o *Observed) {
			served(o, "w3", "kubelet").Cert = newTestPKI(t).leaf(131, "system:node:w3", []string{"w3"}, time.Hour)
		}, "not the cluster CA's serving cert for w3"},
		{"renewed with the wrong SANs", func(c *config.Cluster, s *Start, o *Observed) {
			o.Invalid = map[string]string{"w1": "sans: missing 192.168.122.21"}
		},
			"w1.pem was renewed, but it is not the cert khw issues for w1: sans: missing 192.168.122.21"},
		{"renewed too short", func(c *config.Cluster, s *Start, o *Observed) {
			o.PKI["w2"] = newTestPKI(t).leaf(122, "system:node:w2", []string{"w2"}, time.Hour)
		}, "w2.pem was renewed but expires within pki.renewBefore"},
		{"node not ready", func(c *config.Cluster, s *Start, o *Observed) {
			o.Problems = []string{"Node w2 is not Ready: KubeletNotReady"}
		},
			"Node w2 is not Ready"},
		{"etcd presents nothing", func(c *config.Cluster, s *Start, o *Observed) {
			sv := served(o, "cp1", "etcd")
			sv.Cert, sv.Err = nil, "connection refused"
		},
			"etcd on cp1 presents no certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, start, o := renewedCluster(t)
			tc.break_(c, &start, &o)
			fs := Judge(c, start, o, time.Now())
			var all []string
			found := false
			for _, f := range fs {
				all = append(all, f.String())
				if f.Mistake() && strings.Contains(f.What+" "+f.Fix, tc.want) {
					found = true
				}
				if f.Lab != "14-cert-renewal" || f.Kind == grade.Variant {
					t.Errorf("finding %v: want a mistake of lab 14", f)
				}
			}
			if !found {
				t.Errorf("want a finding saying %q, got:\n%s", tc.want, strings.Join(all, "\n"))
			}
		})
	}
}

func TestRenewedNamesFollowTheConfig(t *testing.T) {
	c := config.Default("t", config.ArchAMD64, config.ProviderNspawn)
	if got := strings.Join(Renewed(c), " "); got != "kubernetes w1 w2" {
		t.Errorf("Renewed = %q, want kubernetes w1 w2", got)
	}
	c.Nodes[len(c.Nodes)-2].KubeletCert = &config.CertRef{Cert: "/x.pem", Key: "/x-key.pem"}
	if got := strings.Join(Renewed(c), " "); got != "kubernetes w1" {
		t.Errorf("with w2's cert imported: Renewed = %q, want kubernetes w1", got)
	}
}

// ServedCert reads the cert a server presents even when the server
// refuses the client (etcd requires a client cert this dial does not
// send), over TLS 1.2 and 1.3.
func TestServedCertFromAServerThatRefusesTheClient(t *testing.T) {
	p := newTestPKI(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(77), Subject: pkix.Name{CommonName: "etcd"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
			Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
			ClientAuth:   tls.RequireAndVerifyClientCert, MinVersion: v, MaxVersion: v,
		})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		host, port, _ := net.SplitHostPort(ln.Addr().String())
		pn, _ := strconv.Atoi(port)
		var d net.Dialer
		got, err := ServedCert(context.Background(), d.DialContext, host, pn)
		ln.Close()
		if err != nil || got.SerialNumber.Int64() != 77 {
			t.Errorf("TLS %x: ServedCert = %v, %v; want the cert with serial 77", v, got, err)
		}
	}
}
