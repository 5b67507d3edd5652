package certrenew

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	certsv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/lab/workers"
	"github.com/khw-dev/khw/internal/pki"
	"github.com/khw-dev/khw/internal/steps"
	tb "github.com/khw-dev/khw/internal/tlsbootstrap"
)

// Judge is lab 14's rules on what Observe read, at now:
//   - each cert of Renewed was reissued since the start (a serial other
//     than the recorded one) and is not within pki.renewBefore of its end;
//   - every node copy is the pki directory's, and every service that reads
//     a copy only at start (Files' Restart) started after the copy was
//     written: it runs with the new cert;
//   - every server presents the renewed cert: each kube-apiserver and
//     etcd the kubernetes cert, each static worker's kubelet its own;
//   - each TLS-bootstrap worker's kubelet serves a cert other than the
//     one it served at the start, signed by the CA, naming the node, and
//     no kubelet-serving CSR waits for approval;
//   - the cluster works: every apiserver ready, every Node Ready.
func Judge(c *config.Cluster, start Start, o Observed, now time.Time) []grade.Finding {
	var out []grade.Finding
	add := func(node string, kind grade.Kind, subject, what, why, evidence, fix string) {
		out = append(out, grade.Finding{Lab: labid.CertRenewal, Node: node, Kind: kind, Subject: subject, What: what, Why: why, Evidence: evidence, Fix: fix})
	}
	specs := map[string]pki.Spec{}
	for _, s := range pki.Specs(c) {
		specs[s.Name] = s
	}
	renewed := map[string]bool{}
	for _, name := range Renewed(c) {
		cert := o.PKI[name]
		switch {
		case cert == nil:
			continue
		case serial(cert) == start.Certs[name]:
			add("jumpbox", grade.Wrong, name+".pem", name+".pem in the pki directory is the cert from before the lab (serial "+serial(cert)+")",
				"a renewal is a new cert: a new serial, valid from now", "serial "+serial(cert)+", expires "+cert.NotAfter.UTC().Format(time.RFC3339),
				"cd \"$KHW_STATE_DIR/$KHW_CLUSTER/pki\" && "+strings.ReplaceAll(specs[name].RenewRecipe(false), "\n", " && "))
			continue
		case o.Invalid[name] != "":
			add("jumpbox", grade.Wrong, name+".pem", name+".pem was renewed, but it is not the cert khw issues for "+name+": "+o.Invalid[name],
				"a renewal keeps the identity: the subject, the SANs and the usages of the CSR JSON beside it, signed by ca.pem",
				"khw pki --dry-run: "+o.Invalid[name], "cd \"$KHW_STATE_DIR/$KHW_CLUSTER/pki\" && "+strings.ReplaceAll(specs[name].RenewRecipe(false), "\n", " && "))
			continue
		case cert.NotAfter.Sub(now) < c.PKI.RenewBefore:
			add("jumpbox", grade.Wrong, name+".pem", name+".pem was renewed but expires within pki.renewBefore",
				"khw up would reissue it again at once: sign it with ca-config.json's profile, whose expiry is pki.certValidity",
				"expires "+cert.NotAfter.UTC().Format(time.RFC3339), "sign it again with -config=ca-config.json -profile="+string(specs[name].Profile))
		}
		renewed[name] = true
	}
	for _, f := range o.Files {
		cert := o.PKI[f.Cert]
		switch {
		case !renewed[f.Cert]:
		case f.Err != "":
			add(f.Node, grade.Wrong, f.Path, f.Path+" cannot be read", "", f.Err, "copy "+f.Cert+".pem to "+f.Node+" as "+f.Path)
		case f.Serial != serial(cert):
			fix := "scp " + f.Cert + ".pem " + f.Node + ": then sudo install -m 0644 " + f.Cert + ".pem " + f.Path + " on " + f.Node
			if f.Path == KubeletKubeconfig {
				fix = "write kubeconfigs/" + f.Cert + ".kubeconfig again with the renewed " + f.Cert + ".pem (kubectl config set-credentials … --embed-certs=true), then copy it to " + f.Node + " as " + f.Path + " (0600)"
			}
			add(f.Node, grade.Wrong, f.Path, f.Path+" does not hold the renewed "+f.Cert+".pem (serial "+f.Serial+", the pki directory's is "+serial(cert)+")",
				"each node reads its own copy: a cert renewed on the jumpbox only changes nothing on the node", "serial "+f.Serial, fix)
		case f.Restart && !f.Started.IsZero() && f.Started.Before(f.MTime):
			add(f.Node, grade.Wrong, f.Unit, f.Unit+" runs with the cert it read when it started, before "+f.Path+" was renewed",
				unitWhy(f.Unit), fmt.Sprintf("%s started %s, %s written %s", f.Unit, f.Started.UTC().Format(time.TimeOnly), f.Path, f.MTime.UTC().Format(time.TimeOnly)),
				"sudo systemctl restart "+f.Unit+" on "+f.Node+" (one node at a time: wait until it is healthy before the next)")
		}
	}
	renewedServing := map[string]bool{} // TLS-bootstrap nodes serving a new, valid cert
	pool := x509.NewCertPool()
	if o.CA != nil {
		pool.AddCert(o.CA)
	}
	for _, sv := range o.Served {
		n, _ := c.Node(sv.Node)
		where := fmt.Sprintf("%s:%d", n.IP, sv.Port)
		if sv.Cert == nil {
			add(sv.Node, grade.NotRunning, sv.What, sv.What+" on "+sv.Node+" presents no certificate", "", sv.Err, "sudo journalctl -u "+unitOf(sv.What)+" -n 30 --no-pager on "+sv.Node)
			continue
		}
		got := serial(sv.Cert)
		switch {
		case n.TLSBootstrap && sv.What == "kubelet":
			if got == start.Serving[sv.Node] {
				add(sv.Node, grade.Wrong, "kubelet serving cert", "the kubelet on "+sv.Node+" still serves the cert it had before the lab (serial "+got+")",
					"its serving cert comes from a kubelet-serving CSR, which nothing approves on its own: a new one waits until someone checks and approves it",
					"serial "+got+", expires "+sv.Cert.NotAfter.UTC().Format(time.RFC3339),
					"on "+sv.Node+": sudo rm /var/lib/kubelet/pki/kubelet-server-current.pem && sudo systemctl restart kubelet; then check its CSR (kubectl get csr) and kubectl certificate approve it")
				continue
			}
			_, err := sv.Cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			// The apiserver dials the node's InternalIP (--kubelet-preferred-address-types) and
			// verifies the IP SAN; the name is what lab 10's check of the CSR asks for too.
			hasIP := slices.ContainsFunc(sv.Cert.IPAddresses, func(ip net.IP) bool { return ip.String() == n.IP })
			if err != nil || !slices.Contains(sv.Cert.DNSNames, sv.Node) || !hasIP {
				add(sv.Node, grade.Wrong, "kubelet serving cert", "the kubelet on "+sv.Node+" serves a cert that is not the cluster CA's serving cert for "+sv.Node+" ("+n.IP+")",
					"the apiserver verifies the kubelet's serving cert against the CA (--kubelet-certificate-authority): logs and exec to its pods fail",
					fmt.Sprintf("serial %s, DNS names %v, IPs %v, verify: %v", got, sv.Cert.DNSNames, sv.Cert.IPAddresses, err), "remove it, restart the kubelet and approve its new CSR after checking it")
				continue
			}
			renewedServing[sv.Node] = true
		default:
			name := "kubernetes"
			if sv.What == "kubelet" {
				name = sv.Node
			}
			if want, ok := o.PKI[name]; ok && renewed[name] && got != serial(want) {
				add(sv.Node, grade.Wrong, sv.What, fmt.Sprintf("%s on %s (%s) serves the cert with serial %s, not the renewed %s.pem", sv.What, sv.Node, where, got, name),
					unitWhy(unitOf(sv.What)), "serial "+got+", expires "+sv.Cert.NotAfter.UTC().Format(time.RFC3339),
					"put the renewed "+name+".pem on "+sv.Node+" and sudo systemctl restart "+unitOf(sv.What))
			}
		}
	}
	// A pending serving CSR matters while its node serves no new cert:
	// it is the one to check and approve. Once a new cert is served, a
	// CSR still pending is one the kubelet gave up on (it asks again every
	// 15 minutes), harmless until the controller-manager removes it.
	for _, p := range o.Pending {
		node := strings.TrimPrefix(p[strings.LastIndex(p, " ")+1:], "system:node:")
		if renewedServing[node] {
			continue
		}
		add(node, grade.Wrong, "csr", "a kubelet serving CSR waits for approval: "+p,
			"until it is approved, the kubelet keeps its old serving cert, and serves none once that expires",
			p, "check it as in lab 10 (kubectl get csr NAME -o jsonpath='{.spec.request}' | base64 -d | openssl req -noout -text: the node's own name and IP only), then kubectl certificate approve NAME")
	}
	for _, p := range o.Problems {
		add("", grade.NotRunning, "", p, "a renewal is done one node at a time so that the cluster keeps serving", p, "khw status; the journal of what the problem names")
	}
	return out
}

// unitOf is the unit of a server Observe asks.
func unitOf(what string) string {
	switch what {
	case "kubelet":
		return "kubelet.service"
	case "etcd":
		return "etcd.service"
	}
	return "kube-apiserver.service"
}

// unitWhy says why a service must be restarted to use a renewed cert.
func unitWhy(unit string) string {
	switch unit {
	case "kube-apiserver.service":
		return "kube-apiserver reloads its serving cert when the file changes and reads its etcd and kubelet client cert for each new connection; one still old has not been copied"
	case "kubelet.service":
		return "the kubelet reloads its serving cert (tlsCertFile, ReloadKubeletServerCertificateFile since v1.31) but reads its kubeconfig's client cert only at start"
	case "etcd.service":
		return "etcd reads its certs again for each new TLS connection (etcd-io/etcd#7829): one that is still old has not been copied"
	}
	return ""
}

// pendingServing lists the kubelet-serving CSRs that are neither approved
// nor denied ("csr-abc from system:node:w3").
func pendingServing(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, csr := range list.Items {
		if csr.Spec.SignerName != tb.ServingSigner || decided(csr) {
			continue
		}
		out = append(out, csr.Name+" from "+csr.Spec.Username)
	}
	return out, nil
}

func decided(csr certsv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certsv1.CertificateApproved || c.Type == certsv1.CertificateDenied || c.Type == certsv1.CertificateFailed {
			return true
		}
	}
	return false
}

// healthProblems: every apiserver ready (directly and through the load
// balancer) and every worker's Node Ready, as posted by its running
// kubelet (workers.NodesReady: a Ready from before a restart does not
// count).
func healthProblems(ctx context.Context, s *cluster.Session) []string {
	var out []string
	for _, r := range health.APIServers(ctx, s.Target(), s.AdminKubeconfig()) {
		if !r.OK {
			why := r.Err
			if len(r.Failed) > 0 {
				why = strings.Join(r.Failed, "; ")
			}
			out = append(out, "the apiserver through "+r.Target+" is not ready: "+why)
		}
	}
	var names []string
	for _, n := range s.Config.Workers() {
		names = append(names, n.Name)
	}
	diffs, err := workers.NodesReady(ctx, nodeplan.New(s), steps.NewEnv(s.Config, s.Dir), names)
	if err != nil {
		return append(out, "the Nodes cannot be read: "+err.Error())
	}
	for _, d := range diffs {
		out = append(out, d.What)
	}
	return out
}

// parseCertsPEM returns the CERTIFICATE blocks of b, in order.
func parseCertsPEM(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out, nil
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
}
