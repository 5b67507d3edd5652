package health

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
)

// Cert is one certificate as it is on a node (not the jumpbox's copy):
// the first certificate of a PEM file, or a kubeconfig's client
// certificate (client-certificate-data).
type Cert struct {
	// File is the path on the node.
	File string `json:"file"`
	// Subject is the part of the certificate's subject Kubernetes reads:
	// the CN (the user name) and the Os (its groups), "CN=…,O=…";
	// NotAfter the end of its validity.
	Subject  string    `json:"subject,omitempty"`
	NotAfter time.Time `json:"notAfter,omitzero"`
	// CA is true for a CA certificate (basic constraints CA:TRUE).
	CA bool `json:"ca,omitempty"`
	// Err is why the file held no readable certificate.
	Err string `json:"error,omitempty"`
}

// DaysLeft is how many whole days of validity c has left at now
// (negative once it has expired).
func (c Cert) DaysLeft(now time.Time) int {
	return int(math.Floor(c.NotAfter.Sub(now).Hours() / 24))
}

// certDirs are where khw puts certificates and kubeconfigs on the nodes
// (and where the kubelet keeps the ones it rotates, /var/lib/kubelet/pki).
var certDirs = []string{"/etc/etcd", "/etc/kubernetes", "/var/lib/kubernetes", "/var/lib/kubelet", "/var/lib/kubelet/pki", "/var/lib/kube-proxy"}

// certsCommand prints, for every certificate file and kubeconfig in dirs
// (certDirs), a line "==> PATH" and then only its certificates (the
// CERTIFICATE blocks of a PEM file; a kubeconfig's client-certificate-data
// decoded): private keys never leave the node. The kubelet's dated
// rotated files are left out: kubelet-client-current.pem and
// kubelet-server-current.pem point to the one in use.
func certsCommand(dirs []string) string {
	var pems, kubeconfigs []string
	for _, d := range dirs {
		pems = append(pems, d+"/*.pem", d+"/*.crt")
		kubeconfigs = append(kubeconfigs, d+"/*kubeconfig")
	}
	return `for f in ` + strings.Join(pems, " ") + `; do
  [ -f "$f" ] || continue
  case "$f" in */kubelet-client-2*|*/kubelet-server-2*) continue;; esac
  grep -q -- '-----BEGIN CERTIFICATE-----' "$f" || continue
  echo "==> $f"; sed -n '/-----BEGIN CERTIFICATE-----/,/-----END CERTIFICATE-----/p' "$f"
done
for f in ` + strings.Join(kubeconfigs, " ") + `; do
  [ -f "$f" ] || continue
  d=$(sed -n 's/^ *client-certificate-data: *//p' "$f" | head -n 1)
  [ -n "$d" ] || continue
  echo "==> $f"; echo "$d"
done`
}

// Certs asks each named node (nil: every node of c) over SSH, through
// sudo (the files are root's), for its certificates (certsCommand), all
// nodes in parallel through pool, and returns them by node. A node without any is left out; err joins one error per node that
// did not answer. A node's certificates come in the order of certDirs,
// each directory's certificate files (sorted) before its kubeconfigs. A
// node name not in cluster.yaml is an error and nothing is asked.
func Certs(ctx context.Context, pool *remote.Pool, c *config.Cluster, nodes []string) (map[string][]Cert, error) {
	if nodes == nil {
		for _, n := range c.Nodes {
			nodes = append(nodes, n.Name)
		}
	}
	var targets []remote.Node
	for _, name := range nodes {
		n, ok := c.Node(name)
		if !ok {
			return nil, fmt.Errorf("node %q is not in cluster %s", name, c.Name)
		}
		targets = append(targets, remote.Node{Name: n.Name, Addr: n.IP})
	}
	out := map[string][]Cert{}
	var mu sync.Mutex
	cmd := certsCommand(certDirs)
	err := pool.ForEach(ctx, targets, 0, func(ctx context.Context, cl *remote.Client) error {
		stdout, _, err := cl.Run(ctx, cmd, remote.RunOptions{Sudo: true})
		if err != nil {
			return err
		}
		if certs := parseCerts(string(stdout)); len(certs) > 0 {
			mu.Lock()
			out[cl.Node.Name] = certs
			mu.Unlock()
		}
		return nil
	})
	return out, err
}

// parseCerts reads certsCommand's output: one Cert per "==> PATH" part,
// from its first certificate (PEM, or base64 of PEM for a kubeconfig).
func parseCerts(out string) []Cert {
	var certs []Cert
	parts := strings.Split("\n"+out, "\n==> ")
	for _, part := range parts[1:] {
		path, body, _ := strings.Cut(part, "\n")
		c := Cert{File: strings.TrimSpace(path)}
		data := []byte(body)
		if !strings.Contains(body, "-----BEGIN") {
			dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(body))
			if err != nil {
				c.Err = "client-certificate-data is not base64: " + err.Error()
				certs = append(certs, c)
				continue
			}
			data = dec
		}
		block, _ := pem.Decode(data)
		if block == nil || block.Type != "CERTIFICATE" {
			c.Err = "no PEM certificate"
			certs = append(certs, c)
			continue
		}
		x, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			c.Err = err.Error()
		} else {
			c.Subject, c.NotAfter, c.CA = shortSubject(x.Subject), x.NotAfter.UTC(), x.IsCA
		}
		certs = append(certs, c)
	}
	return certs
}

// shortSubject is "CN=<common name>" followed by ",O=<organization>" for
// each organization: the user and groups the apiserver's x509
// authenticator takes from a client certificate
// (https://kubernetes.io/docs/reference/access-authn-authz/authentication/#x509-client-certificates).
func shortSubject(n pkix.Name) string {
	s := "CN=" + n.CommonName
	for _, o := range n.Organization {
		s += ",O=" + o
	}
	return s
}
