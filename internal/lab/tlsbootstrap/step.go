// Package tlsbootstrap is lab 10-tls-bootstrap: the step that runs w3's
// kubelet and kube-proxy and joins it with a bootstrap token: its client
// CSR approved by the controller-manager, its serving CSR by khw after
// checking requestor and SANs, the token deleted (step.go), and its
// grading (grade.go: the token Secret, the bootstrap RBAC, stuck or
// unapproved CSRs, and the worker checks of lab 07 on the bootstrapped
// node).
//
// Text: labs/10-tls-bootstrap.md. Template:
// templates/manifests/tls-bootstrap-rbac.yaml.tmpl; tokens and the CSR
// rules are internal/tlsbootstrap.
package tlsbootstrap

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/kube"
	"github.com/khw-dev/khw/internal/kubeconfig"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/lab/workers"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/steps"
	tb "github.com/khw-dev/khw/internal/tlsbootstrap"
	"github.com/khw-dev/khw/internal/vm"
	certsv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Node paths of the kubelet's TLS bootstrap (kubelet --cert-dir).
const (
	kubeletCertDir     = "/var/lib/kubelet/pki"
	kubeletClientCert  = kubeletCertDir + "/kubelet-client-current.pem"
	kubeletServingCert = kubeletCertDir + "/kubelet-server-current.pem"
	// ServingCertLink is where the kubelet keeps its current serving cert
	// (a link to the dated file it rotated last).
	ServingCertLink     = kubeletServingCert
	bootstrapKubeconfig = "/var/lib/kubelet/bootstrap-kubeconfig"
	tlsBootstrapRBAC    = "tls-bootstrap-rbac.yaml"
	// BootstrapTokenTTL is how long a bootstrap token khw creates is valid;
	// khw deletes it as soon as the node has its certificates.
	BootstrapTokenTTL = time.Hour
)

// tokenDescription marks the bootstrap token Secrets khw makes for node.
func tokenDescription(node string) string { return "khw: TLS bootstrap of " + node }

// Step is lab 10-tls-bootstrap: the worker(s) with
// tlsBootstrap: true (w3) join without a certificate from khw. The
// apiserver accepts bootstrap tokens; three RBAC bindings let the token's
// group create node CSRs and have them approved; khw creates a token Secret
// (expiring), gives the node only ca.pem and a bootstrap kubeconfig holding
// the token, and starts its kubelet (07-workers already prepared its host
// and container runtime). The kubelet asks for its client cert
// (signer kube-apiserver-client-kubelet: the controller-manager approves and
// signs it) and then for its serving cert (signer kubelet-serving: nothing
// upstream approves it; khw does, only after checking that the requestor is
// system:node:<node> and the SANs are exactly the node's name and IP). Then
// the token is deleted. See
// https://kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/.
type Step struct {
	m     *nodeplan.Machines
	inner *nodeplan.ComponentStep
}

// NewStep returns the 10-tls-bootstrap step.
func NewStep(m *nodeplan.Machines, c *config.Cluster) steps.Step {
	spec := workers.WorkerSpec(m, c, labid.TLSBootstrap, "Join w3 by TLS bootstrap",
		func(n config.Node) bool { return n.TLSBootstrap },
		func(in render.Input) bool { return in.Path != bootstrapKubeconfig })
	// The host and container runtime are 07-workers'; this step adds the
	// kubelet and kube-proxy.
	spec.KeepFile = func(_ config.Node, p string) bool { return workers.KubeletSide(p) }
	spec.UnitsFor = func(n config.Node) []nodeplan.WantUnit {
		var out []nodeplan.WantUnit
		for _, u := range workers.WorkerUnits(n) {
			if u.Name != "containerd.service" {
				out = append(out, u)
			}
		}
		return out
	}
	spec.Packages, spec.Extras = nil, nil
	for _, n := range c.Workers() {
		if n.TLSBootstrap {
			spec.Title = "Join " + n.Name + " by TLS bootstrap"
			break
		}
	}
	return &Step{m: m, inner: &nodeplan.ComponentStep{M: m, Spec: spec, Wait: nodeplan.WorkerWait}}
}

// ID returns "10-tls-bootstrap".
func (s *Step) ID() string { return s.inner.Spec.ID }

// Title returns "Join w3 by TLS bootstrap".
func (s *Step) Title() string { return s.inner.Spec.Title }

// References returns the worker files of the TLS-bootstrap nodes (the
// bootstrap kubeconfig, which holds a token and is removed after the join,
// is not one).
func (s *Step) References(ctx context.Context, env *steps.Env) ([]steps.Reference, error) {
	return s.inner.References(ctx, env)
}

func bootstrapNodes(c *config.Cluster) []config.Node {
	var out []config.Node
	for _, n := range c.Workers() {
		if n.TLSBootstrap {
			out = append(out, n)
		}
	}
	return out
}

// readNodeCert reads the first certificate of path on the node (only the
// certificate: kubelet-client-current.pem also holds the key, which never
// leaves the node). A missing file is (nil, nil).
func readNodeCert(ctx context.Context, cl *remote.Client, path string) (*x509.Certificate, error) {
	out, _, err := cl.Run(ctx, "[ -e "+path+" ] || exit 0; sed -n '/-BEGIN CERTIFICATE-/,/-END CERTIFICATE-/p' "+path, remote.RunOptions{Sudo: true})
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(out)
	if b == nil {
		return nil, nil
	}
	return x509.ParseCertificate(b.Bytes)
}

// certDiffs checks node n's kubelet client and serving certs.
func (s *Step) certDiffs(ctx context.Context, env *steps.Env, n config.Node) (client, serving []steps.Diff, err error) {
	cl, err := s.m.Pool.Get(ctx, nodeplan.RemoteNode(n))
	if err != nil {
		return nil, nil, err
	}
	ca, err := loadCA(env)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	c, err := readNodeCert(ctx, cl, kubeletClientCert)
	if err != nil {
		return nil, nil, err
	}
	user := "system:node:" + n.Name
	switch {
	case c == nil:
		client = append(client, steps.Diff{Node: n.Name, What: "the kubelet has no client certificate yet (" + kubeletClientCert + ")", Fix: "bootstrap token + bootstrap kubeconfig, start the kubelet, let its client CSR be approved"})
	case c.Subject.CommonName != user || !slices.Equal(c.Subject.Organization, []string{"system:nodes"}):
		client = append(client, steps.Diff{Node: n.Name, What: fmt.Sprintf("the kubelet's client certificate is CN=%s O=%v, want CN=%s O=[system:nodes]", c.Subject.CommonName, c.Subject.Organization, user), Fix: "remove " + kubeletCertDir + " and bootstrap again"})
	case verifyWith(c, ca) != nil:
		client = append(client, steps.Diff{Node: n.Name, What: "the kubelet's client certificate is not signed by the cluster CA", Fix: "remove " + kubeletCertDir + " and bootstrap again"})
	case now.After(c.NotAfter):
		client = append(client, steps.Diff{Node: n.Name, What: "the kubelet's client certificate expired " + c.NotAfter.Format(time.RFC3339), Fix: "remove " + kubeletCertDir + " and bootstrap again"})
	}
	sc, err := readNodeCert(ctx, cl, kubeletServingCert)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case sc == nil:
		serving = append(serving, steps.Diff{Node: n.Name, What: "the kubelet has no serving certificate yet (its kubelet-serving CSR is not approved)", Fix: "check and approve the serving CSR"})
	case verifyWith(sc, ca) != nil:
		serving = append(serving, steps.Diff{Node: n.Name, What: "the kubelet's serving certificate is not signed by the cluster CA", Fix: "remove it and restart the kubelet"})
	case !slices.Contains(sc.DNSNames, n.Name):
		serving = append(serving, steps.Diff{Node: n.Name, What: fmt.Sprintf("the kubelet's serving certificate names %v, not %s", sc.DNSNames, n.Name), Fix: "remove it and restart the kubelet"})
	}
	return client, serving, nil
}

func verifyWith(c, ca *x509.Certificate) error {
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	_, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

func loadCA(env *steps.Env) (*x509.Certificate, error) {
	data, err := os.ReadFile(filepath.Join(env.State.PKIDir(), "ca.pem"))
	if err != nil {
		return nil, fmt.Errorf("the cluster CA: %w (run khw up --from 02)", err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, fmt.Errorf("%s holds no PEM certificate", filepath.Join(env.State.PKIDir(), "ca.pem"))
	}
	return x509.ParseCertificate(b.Bytes)
}

func (s *Step) clientset(env *steps.Env) (kubernetes.Interface, error) {
	cfg, err := s.m.RestConfig(env, "")
	if err != nil {
		return nil, err
	}
	return kube.Clientset(cfg)
}

// Check: the bootstrap RBAC applied; the node's files, units, kernel
// settings and images as a worker's; its kubelet holding a client cert
// CN=system:node:<node>, O=system:nodes and a serving cert, both from the
// cluster CA; the Node Ready; no bootstrap token of khw's left once done.
func (s *Step) Check(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
	nodes := bootstrapNodes(env.Cluster)
	if len(nodes) == 0 {
		return nil, nil
	}
	diffs, err := nodeplan.ManifestDiffs(ctx, s.m, env, "", tlsBootstrapRBAC)
	if err != nil {
		return nil, err
	}
	wants, err := s.m.ComponentWants(ctx, env, s.inner.Spec, false)
	if err != nil {
		return nil, err
	}
	nd, err := nodeplan.CheckNodes(ctx, s.m, wants)
	if err != nil {
		return nil, err
	}
	diffs = append(diffs, nd...)
	cs, err := s.clientset(env)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range nodes {
		client, serving, err := s.certDiffs(ctx, env, n)
		if err != nil {
			return nil, steps.OnNode(n.Name, err)
		}
		diffs = append(diffs, client...)
		diffs = append(diffs, serving...)
		names = append(names, n.Name)
		if len(client) == 0 && len(serving) == 0 {
			left, err := tb.Find(ctx, cs, tokenDescription(n.Name))
			if err != nil {
				return nil, err
			}
			for _, t := range left {
				diffs = append(diffs, steps.Diff{Node: n.Name, What: "bootstrap token " + string(t.Data[tb.KeyTokenID]) + " still exists though " + n.Name + " has its certificates", Fix: "delete Secret kube-system/" + t.Name})
			}
		}
	}
	if len(nd) == 0 {
		ready, err := workers.NodesReady(ctx, s.m, env, names)
		if err != nil {
			return nil, err
		}
		diffs = append(diffs, ready...)
	}
	return diffs, nil
}

// Render writes the files the step's commands copy (steps.Renderer).
func (s *Step) Render(ctx context.Context, env *steps.Env) error {
	return s.m.RenderState(ctx, env)
}

// Apply: the RBAC; per node without a client cert a fresh token and
// bootstrap kubeconfig; the worker files and units; then it watches the
// node's CSRs (showing each as it appears), approves the serving CSR after
// checking it and waits for both certs; the tokens are deleted however that
// ends (done, failed, timed out, interrupted); then it waits for the Node
// Ready.
func (s *Step) Apply(ctx context.Context, env *steps.Env, diffs []steps.Diff) error {
	since := time.Now().Add(-5 * time.Second) // CSRs of this join only (clock skew allowed)
	if err := s.m.RenderState(ctx, env); err != nil {
		return err
	}
	if err := nodeplan.ApplyManifest(ctx, s.m, env, "", tlsBootstrapRBAC, s.ID()); err != nil {
		return err
	}
	cs, err := s.clientset(env)
	if err != nil {
		return err
	}
	nodes := bootstrapNodes(env.Cluster)
	if err := s.join(ctx, env, cs, nodes, since, s.sshJoinOps(env, diffs)); err != nil {
		return err
	}
	for _, n := range nodes {
		// The kubelet has its own certs now; the bootstrap kubeconfig only
		// holds a dead token (kubeadm removes its copy too).
		if cl, err := s.m.Pool.Get(ctx, nodeplan.RemoteNode(n)); err == nil {
			if _, _, err := cl.Run(ctx, "rm -f "+bootstrapKubeconfig, remote.RunOptions{Sudo: true}); err != nil {
				return steps.OnNode(n.Name, err)
			}
		}
	}
	if err := nodeplan.WaitHealthy(ctx, env, func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
		var names []string
		for _, n := range nodes {
			names = append(names, n.Name)
		}
		return workers.NodesReady(ctx, s.m, env, names)
	}, nodeplan.WorkerWait*vm.Slowdown(s.m.Provider)); err != nil {
		return err
	}
	// kube-proxy started with the kubelet, before its Node existed; where
	// the join took longer than the 30 s it waits for the Node's IPs, it
	// exits once they appear (and systemd starts it again). Started now, it
	// finds them.
	for _, n := range nodes {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return steps.OnNode(n.Name, err)
		}
		again, err := nodeplan.RestartIfStartedBefore(ctx, s.m, n, "kube-proxy.service", node.CreationTimestamp.Time, nodeplan.WorkerWait*vm.Slowdown(s.m.Provider))
		if err != nil {
			return steps.OnNode(n.Name, err)
		}
		if again {
			fmt.Fprintf(env.NodeLog(n.Name), "%s %s: restarted kube-proxy.service, which started before the Node %s existed (it reads the Node's IPs at its start)\n", time.Now().Format(time.RFC3339), s.ID(), n.Name)
		}
	}
	return nil
}

// joinOps are the node side of a join: Apply's reach the nodes over SSH
// (sshJoinOps); tests pass their own.
type joinOps struct {
	// needToken: the node's kubelet has no valid client cert yet.
	needToken func(ctx context.Context, n config.Node) (bool, error)
	// install puts a bootstrap kubeconfig holding tok on the node.
	install func(ctx context.Context, n config.Node, tok tb.Token) error
	// setup installs the worker files and units and starts them.
	setup func(ctx context.Context) error
	// missing lists what the node's kubelet still lacks (its client and
	// serving certs), empty once it has both.
	missing func(ctx context.Context, n config.Node) ([]string, error)
	// wait bounds the wait for each node's certs.
	wait time.Duration
}

func (s *Step) sshJoinOps(env *steps.Env, diffs []steps.Diff) joinOps {
	return joinOps{
		needToken: func(ctx context.Context, n config.Node) (bool, error) {
			client, _, err := s.certDiffs(ctx, env, n)
			return len(client) > 0, err
		},
		install: func(ctx context.Context, n config.Node, tok tb.Token) error { return s.installToken(ctx, env, n, tok) },
		// Files, units, kernel settings, images (the inner spec has no
		// health check: the Node can only be Ready after the CSRs).
		setup: func(ctx context.Context) error { return s.inner.Apply(ctx, env, diffs) },
		missing: func(ctx context.Context, n config.Node) ([]string, error) {
			client, serving, err := s.certDiffs(ctx, env, n)
			var what []string
			for _, d := range append(client, serving...) {
				what = append(what, d.What)
			}
			return what, err
		},
		wait: nodeplan.WorkerWait * vm.Slowdown(s.m.Provider),
	}
}

// join gives each of nodes without a client cert a fresh bootstrap token
// (valid BootstrapTokenTTL), runs the worker setup, and waits until every
// node's kubelet holds both certs (watchCSRs). The token Secrets are deleted
// on every way out, the bootstrap not finishing and ctx being cancelled
// included (tb.WithTokens): a token left valid would let whoever read it
// from the node or the state directory ask for node certificates for up to
// an hour.
func (s *Step) join(ctx context.Context, env *steps.Env, cs kubernetes.Interface, nodes []config.Node, since time.Time, ops joinOps) error {
	notef := func(format string, args ...any) { env.Notef("TLS bootstrap: "+format, args...) }
	var descs []string
	for _, n := range nodes {
		descs = append(descs, tokenDescription(n.Name))
	}
	return tb.WithTokens(ctx, cs, BootstrapTokenTTL, descs, notef, func(ctx context.Context, toks *tb.Tokens) error {
		for _, n := range nodes {
			need, err := ops.needToken(ctx, n)
			if err != nil {
				return steps.OnNode(n.Name, err)
			}
			if !need {
				continue
			}
			tok, exp, err := toks.Create(ctx, tokenDescription(n.Name))
			if err != nil {
				return steps.OnNode(n.Name, err)
			}
			env.Notef("%s: bootstrap token %s created (user %s, group %s, expires %s)", n.Name, tok, tok.User(), tb.BootstrappersGroup, exp.UTC().Format(time.RFC3339))
			if err := ops.install(ctx, n, tok); err != nil {
				return steps.OnNode(n.Name, err)
			}
		}
		if err := ops.setup(ctx); err != nil {
			return err
		}
		return nodeplan.FirstErr(steps.Parallel(len(nodes), func(i int) error {
			return steps.OnNode(nodes[i].Name, s.watchCSRs(ctx, env, cs, nodes[i], since, ops))
		}))
	})
}

// installToken writes <state>/kubeconfigs/<n>-bootstrap.kubeconfig with tok
// and installs it on node n, restarting a running kubelet so it reads it.
func (s *Step) installToken(ctx context.Context, env *steps.Env, n config.Node, tok tb.Token) error {
	fr, err := kubeconfig.WriteBootstrap(env.Cluster, env.State.PKIDir(), env.State.KubeconfigDir(), n.Name, tok.ID, tok.Secret)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(fr.Path)
	if err != nil {
		return err
	}
	cl, err := s.m.Pool.Get(ctx, nodeplan.RemoteNode(n))
	if err != nil {
		return err
	}
	if _, err := cl.Install(ctx, remote.File{Path: bootstrapKubeconfig, Data: data, Mode: 0o600}); err != nil {
		return err
	}
	if _, _, err := cl.Run(ctx, "if systemctl is-active --quiet kubelet.service; then systemctl restart kubelet.service; fi", remote.RunOptions{Sudo: true}); err != nil {
		return err
	}
	fmt.Fprintf(env.NodeLog(n.Name), "%s %s: installed %s with bootstrap token %s\n", time.Now().Format(time.RFC3339), s.ID(), bootstrapKubeconfig, tok)
	return nil
}

// watchCSRs follows node n's CSRs until its kubelet holds a client and a
// serving cert: it shows each CSR when it appears and when its state
// changes, and approves the serving CSR if CheckServingCSR accepts it (a
// refused one is an error naming the reasons).
func (s *Step) watchCSRs(ctx context.Context, env *steps.Env, cs kubernetes.Interface, n config.Node, since time.Time, ops joinOps) error {
	wait := ops.wait
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	expect := tb.ServingExpect{Node: n.Name, DNSNames: []string{n.Name}, IPs: []string{n.IP}}
	seen := map[string]string{}
	for {
		list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range list.Items {
				csr := &list.Items[i]
				st, issued := tb.State(csr)
				// A serving CSR the kubelet sent before this run (it
				// rotates its serving cert on its own, or khw pki renew
				// made it ask) still waits: it is judged like a new one,
				// but one that fails the checks is left alone.
				old := csr.CreationTimestamp.Time.Before(since)
				pendingServing := csr.Spec.SignerName == tb.ServingSigner && st == "Pending" && csr.Spec.Username == "system:node:"+n.Name
				if !csrOfNode(csr, n.Name) || (old && !pendingServing) {
					continue
				}
				show := st
				if issued {
					show += ", Issued"
				}
				if seen[csr.Name] != show {
					seen[csr.Name] = show
					env.Notef("%s: CSR %s  signer %s  requestor %s  %s", n.Name, csr.Name, csr.Spec.SignerName, csr.Spec.Username, show)
				}
				if csr.Spec.SignerName == tb.ServingSigner && st == "Pending" {
					if why := tb.CheckServingCSR(csr, expect); len(why) > 0 {
						if old {
							continue
						}
						return fmt.Errorf("serving CSR %s of %s is not approved: %s", csr.Name, n.Name, strings.Join(why, "; "))
					}
					if err := tb.Approve(ctx, cs, csr, expect); err != nil {
						return err
					}
					env.Notef("%s: CSR %s approved by khw: requestor system:node:%s, SANs exactly %v %v", n.Name, csr.Name, n.Name, expect.DNSNames, expect.IPs)
				}
			}
		}
		missing, cerr := ops.missing(ctx, n)
		if cerr == nil && len(missing) == 0 {
			// One last look, so the final state of each CSR is shown.
			if list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{}); err == nil {
				for i := range list.Items {
					csr := &list.Items[i]
					if !csrOfNode(csr, n.Name) || csr.CreationTimestamp.Time.Before(since) {
						continue
					}
					st, issued := tb.State(csr)
					if issued {
						st += ", Issued"
					}
					if seen[csr.Name] != st {
						env.Notef("%s: CSR %s  signer %s  requestor %s  %s", n.Name, csr.Name, csr.Spec.SignerName, csr.Spec.Username, st)
					}
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return fmt.Errorf("TLS bootstrap of %s: %w", n.Name, parent.Err())
			}
			why := strings.Join(missing, "; ")
			if cerr != nil {
				why = cerr.Error()
			}
			return fmt.Errorf("TLS bootstrap of %s did not finish within %v: %s (read journalctl -u kubelet on %s; kubectl get csr)", n.Name, wait, why, n.Name)
		case <-time.After(time.Second):
		}
	}
}

// csrOfNode reports whether csr is node's: its client CSR (requested with a
// bootstrap token, subject CN=system:node:<node>) or its serving CSR
// (requested by system:node:<node>).
func csrOfNode(csr *certsv1.CertificateSigningRequest, node string) bool {
	user := "system:node:" + node
	if csr.Spec.Username == user {
		return true
	}
	if !strings.HasPrefix(csr.Spec.Username, tb.BootstrapUserPrefix) {
		return false
	}
	b, _ := pem.Decode(csr.Spec.Request)
	if b == nil {
		return false
	}
	req, err := x509.ParseCertificateRequest(b.Bytes)
	return err == nil && req.Subject.CommonName == user
}

// Commands: the token, the RBAC, the bootstrap kubeconfig, the worker
// setup, and the CSRs to watch and approve.
func (s *Step) Commands(env *steps.Env, diffs []steps.Diff) []steps.Command {
	var cmds []steps.Command
	kubectl := "kubectl --kubeconfig " + steps.Quote(nodeplan.AdminKubeconfig(env))
	for _, n := range bootstrapNodes(env.Cluster) {
		boot := filepath.Join(env.State.KubeconfigDir(), n.Name+"-bootstrap.kubeconfig")
		cmds = append(cmds,
			steps.Command{Why: "who may bootstrap: create node CSRs, and have client CSRs approved automatically",
				Shell: kubectl + " apply --server-side -f " + steps.Quote(filepath.Join(env.State.ManifestsDir(), tlsBootstrapRBAC))},
			steps.Command{Why: "a bootstrap token: a Secret in kube-system (id [a-z0-9]{6}, secret [a-z0-9]{16}, an expiration)",
				Shell: "ID=$(openssl rand -hex 3); SECRET=$(openssl rand -hex 8)\n" +
					kubectl + " -n kube-system create secret generic bootstrap-token-$ID --type bootstrap.kubernetes.io/token \\\n" +
					"  --from-literal token-id=$ID --from-literal token-secret=$SECRET --from-literal usage-bootstrap-authentication=true \\\n" +
					"  --from-literal expiration=$(date -u -d +1hour +%Y-%m-%dT%H:%M:%SZ) --from-literal description='" + tokenDescription(n.Name) + "'"},
			steps.Command{Why: n.Name + " gets a kubeconfig holding only the token: lab 03's, with the token in place of its placeholder",
				Shell: "kubectl config set-credentials " + kubeconfig.BootstrapUser + " --token=$ID.$SECRET --kubeconfig " + steps.Quote(boot) + "\n" +
					"scp -F \"$KHW_SSH_CONFIG\" " + steps.Quote(boot) + " " + n.Name + ":\nssh -F \"$KHW_SSH_CONFIG\" " + n.Name + " 'sudo install -D -m 0600 " + filepath.Base(boot) + " " + bootstrapKubeconfig + " && rm -f " + filepath.Base(boot) + "'"},
		)
	}
	cmds = append(cmds, s.inner.Commands(env, diffs)...)
	for _, n := range bootstrapNodes(env.Cluster) {
		mine := `{range .items[?(@.spec.username=="system:node:` + n.Name + `")]}{.metadata.name}{"\n"}{end}`
		cmds = append(cmds,
			steps.Command{Why: "two CSRs appear: the client one is approved by the controller-manager; the serving one waits for you (wait for it: at most 2 minutes; kubectl get csr -w shows them live)",
				Shell: "CSR=\nfor i in $(seq 60); do CSR=$(" + kubectl + " get csr --field-selector spec.signerName=kubernetes.io/kubelet-serving --sort-by=.metadata.creationTimestamp -o jsonpath='" + mine + "' | tail -n 1); [ -n \"$CSR\" ] && break; sleep 2; done\n" +
					kubectl + " get csr"},
			steps.Command{Why: "check the serving CSR (requestor system:node:" + n.Name + ", SANs " + n.Name + " " + n.IP + ") before approving it",
				Shell: kubectl + " get csr $CSR -o jsonpath='{.spec.username}{\"\\n\"}'\n" +
					kubectl + " get csr $CSR -o jsonpath='{.spec.request}' | base64 -d | openssl req -noout -text\n" +
					kubectl + " certificate approve $CSR"},
			steps.Command{Why: n.Name + " registers itself and turns Ready (at most 3 minutes)",
				Shell: steps.WaitLoop(90, 2, kubectl+" wait --for=condition=Ready node/"+n.Name+" --timeout=2s") + "\n" +
					kubectl + " get node " + n.Name},
			steps.Command{Node: n.Name, Why: "the kubelet now holds its own certs", Shell: "sudo openssl x509 -noout -subject -in " + kubeletClientCert},
			steps.Command{Why: "the token has done its work: delete it (whoever holds it can get a client certificate for any node name)",
				Shell: kubectl + " -n kube-system delete secret bootstrap-token-$ID"},
		)
	}
	return cmds
}

// RenewServing makes the kubelet on each named TLS-bootstrap worker ask
// for a new serving cert now instead of at 70-90% of its life
// (rotateCertificates): it removes ServingCertLink and restarts the
// kubelet, printing each node's command to out. The kubelet then sends a
// kubelet-serving CSR that nothing approves on its own; this step's Apply
// approves it after CheckServingCSR. Errors: a name that is no
// TLS-bootstrap worker, or the node's command failed.
func RenewServing(ctx context.Context, pool *remote.Pool, c *config.Cluster, nodes []string, out io.Writer) error {
	cmd := "rm -f " + ServingCertLink + " && systemctl restart kubelet"
	for _, name := range nodes {
		n, ok := c.Node(name)
		if !ok || !n.TLSBootstrap {
			return fmt.Errorf("%s is not a worker that joins by TLS bootstrap", name)
		}
		fmt.Fprintf(out, "  %s: sudo sh -c '%s'\n", n.Name, cmd)
		cl, err := pool.Get(ctx, nodeplan.RemoteNode(n))
		if err != nil {
			return steps.OnNode(n.Name, err)
		}
		if _, _, err := cl.Run(ctx, cmd, remote.RunOptions{Sudo: true}); err != nil {
			return steps.OnNode(n.Name, err)
		}
	}
	return nil
}
