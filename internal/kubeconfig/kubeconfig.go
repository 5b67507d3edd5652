package kubeconfig

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
)

// CAFile is the cluster CA cert inside the PKI directory, embedded as
// certificate-authority-data in every kubeconfig.
const CAFile = config.CertCA + ".pem"

// Bootstrap token format: "<id>.<secret>", id [a-z0-9]{6}, secret
// [a-z0-9]{16} (k8s.io/cluster-bootstrap token/api BootstrapTokenIDPattern and
// BootstrapTokenPattern).
var (
	tokenIDRE     = regexp.MustCompile(`^[a-z0-9]{6}$`)
	tokenSecretRE = regexp.MustCompile(`^[a-z0-9]{16}$`)
	tokenRE       = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
)

// Action says what Reconcile or WriteBootstrap did to one file.
type Action string

const (
	// Created: the file did not exist.
	Created Action = "created"
	// Updated: the file was rewritten (or only its mode tightened); Reason
	// says why.
	Updated Action = "updated"
	// Kept: the file already says what it should; nothing was written.
	Kept Action = "kept"
)

// FileResult is the outcome for one kubeconfig. It never holds key material
// or a token.
type FileResult struct {
	// File is the base name, e.g. "w1.kubeconfig".
	File string
	// Path is the full path written or checked.
	Path   string
	Action Action
	// Reason says why, e.g. "new file", "client cert changed", "server
	// changed (https://lb:6443 → https://lb:7443)", "unchanged".
	Reason string
}

func (f FileResult) String() string {
	return fmt.Sprintf("%-7s %s: %s", f.Action, f.File, f.Reason)
}

// Report lists the outcome for every file, in Specs order.
type Report struct {
	// Dir is the output directory.
	Dir   string
	Files []FileResult
}

// Changed reports whether any file was created or updated.
func (r *Report) Changed() bool {
	for _, f := range r.Files {
		if f.Action != Kept {
			return true
		}
	}
	return false
}

// Lookup returns the result for file (a base name).
func (r *Report) Lookup(file string) (FileResult, bool) {
	for _, f := range r.Files {
		if f.File == file {
			return f, true
		}
	}
	return FileResult{}, false
}

// String is one line per file. It contains no secret.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kubeconfigs in %s:", r.Dir)
	for _, f := range r.Files {
		b.WriteString("\n  ")
		b.WriteString(f.String())
	}
	return b.String()
}

// Reconcile writes every kubeconfig of Specs(c) into outDir (created 0700 if
// missing), each 0600 and atomic, with the CA, client cert and key embedded
// from the PEM files in pkiDir: ca.pem, and <name>.pem / <name>-key.pem for
// admin, each worker without tlsBootstrap (w1, w2; or the worker's
// nodes[].kubeletCert paths), kube-proxy, kube-controller-manager and
// kube-scheduler.
//
// Before writing anything it checks every input and returns all problems at
// once: a missing file is named with its fix (`run khw pki first`); a client
// cert whose CN is not the file's user, that is not signed by ca.pem, or whose
// key does not match, is an error too (fix: reissue it with khw pki).
//
// Existing files are compared semantically: the file is loaded with clientcmd
// and re-serialised; if that equals the desired kubeconfig nothing is written
// (only a mode other than 0600 is fixed), so a re-run with unchanged certs
// writes nothing. Otherwise the Reason names what changed ("server changed",
// "CA changed", "client cert changed", …).
//
// A TLS-bootstrap worker's <node>-bootstrap.kubeconfig gets
// BootstrapTokenPlaceholder as its token, unless it already holds a
// well-formed bootstrap token (written by WriteBootstrap), which is kept.
func Reconcile(c *config.Cluster, pkiDir, outDir string) (*Report, error) {
	return reconcile(c, pkiDir, outDir, false)
}

// Plan is Reconcile without writing: the Report says what Reconcile would
// create or update and why (Action and Reason as Reconcile's), and nothing
// is written or chmod-ed; outDir need not exist. Errors are Reconcile's.
func Plan(c *config.Cluster, pkiDir, outDir string) (*Report, error) {
	return reconcile(c, pkiDir, outDir, true)
}

func reconcile(c *config.Cluster, pkiDir, outDir string, dryRun bool) (*Report, error) {
	if err := checkCluster(c); err != nil {
		return nil, err
	}
	ca, caPEM, err := loadCA(pkiDir)
	if err != nil {
		return nil, err
	}
	specs := Specs(c)
	seen := map[string]string{}
	for _, s := range specs {
		if prev, dup := seen[s.File]; dup {
			return nil, fmt.Errorf("kubeconfigs: %s would be written for both %s and %s (fix: rename the node whose name clashes with a component name in cluster.yaml)", s.File, prev, s.User)
		}
		seen[s.File] = s.User
	}
	auths := make([]*clientcmdapi.AuthInfo, len(specs))
	var errs []error
	for i, s := range specs {
		if s.Bootstrap {
			continue
		}
		fix := "run `khw pki` first; it issues every client cert"
		if s.External {
			fix = fmt.Sprintf("check kubeletCert of node %s in cluster.yaml: it must name the PEM cert (CN %s) and its key", s.Node, s.User)
		}
		certPEM, keyPEM, err := loadClientPair(pkiDir, s, ca, fix)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		auths[i] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("kubeconfigs: cannot read their inputs, nothing written:\n%w", errors.Join(errs...))
	}
	if !dryRun {
		if err := fsutil.EnsureDir(outDir); err != nil {
			return nil, err
		}
	}
	rep := &Report{Dir: outDir}
	for i, s := range specs {
		path := filepath.Join(outDir, s.File)
		auth := auths[i]
		note := ""
		if s.Bootstrap {
			tok := existingToken(path)
			if tok == "" {
				tok = BootstrapTokenPlaceholder
				note = "placeholder token until the bring-up creates a bootstrap token"
			} else {
				note = "holds a bootstrap token"
			}
			auth = &clientcmdapi.AuthInfo{Token: tok}
		}
		fr, err := reconcileFile(path, s.File, build(c.Kubernetes.ClusterName, s.Server, caPEM, s.User, auth), dryRun)
		if err != nil {
			return rep, err
		}
		if note != "" && fr.Action == Kept {
			fr.Reason += " (" + note + ")"
		}
		rep.Files = append(rep.Files, fr)
	}
	return rep, nil
}

// WriteBootstrap writes <node>-bootstrap.kubeconfig for the TLS-bootstrap
// worker node with the bootstrap token "<tokenID>.<tokenSecret>": user
// kubelet-bootstrap with only a token (no client cert), server
// c.APIServerURL(), the CA from pkiDir/ca.pem. tokenID must match [a-z0-9]{6}
// and tokenSecret [a-z0-9]{16} (the Secret bootstrap-token-<id> in
// kube-system that the bring-up creates holds the same two values; see
// https://kubernetes.io/docs/reference/access-authn-authz/bootstrap-tokens/).
// The file is 0600 and atomic; an unchanged file is Kept. Errors and the
// result never contain tokenSecret.
func WriteBootstrap(c *config.Cluster, pkiDir, outDir, node, tokenID, tokenSecret string) (FileResult, error) {
	if err := checkCluster(c); err != nil {
		return FileResult{}, err
	}
	n, ok := c.Node(node)
	if !ok {
		return FileResult{}, fmt.Errorf("bootstrap kubeconfig: no node %q in cluster.yaml (fix: name a worker with tlsBootstrap: true)", node)
	}
	if n.Role != config.RoleWorker || !n.TLSBootstrap {
		return FileResult{}, fmt.Errorf("bootstrap kubeconfig: node %s is not a worker with tlsBootstrap: true, so its kubelet gets a cert from khw instead (fix: set tlsBootstrap: true on it in cluster.yaml, or use the TLS-bootstrap worker)", node)
	}
	if !tokenIDRE.MatchString(tokenID) {
		return FileResult{}, fmt.Errorf("bootstrap kubeconfig for %s: token id %q is not 6 characters of [a-z0-9] (fix: use the token-id of the bootstrap-token Secret)", node, tokenID)
	}
	if !tokenSecretRE.MatchString(tokenSecret) {
		return FileResult{}, fmt.Errorf("bootstrap kubeconfig for %s: token secret (not shown) is not 16 characters of [a-z0-9] (fix: use the token-secret of the bootstrap-token Secret)", node)
	}
	_, caPEM, err := loadCA(pkiDir)
	if err != nil {
		return FileResult{}, err
	}
	if err := fsutil.EnsureDir(outDir); err != nil {
		return FileResult{}, err
	}
	file := BootstrapFile(node)
	auth := &clientcmdapi.AuthInfo{Token: tokenID + "." + tokenSecret}
	return reconcileFile(filepath.Join(outDir, file), file, build(c.Kubernetes.ClusterName, c.APIServerURL(), caPEM, BootstrapUser, auth), false)
}

// checkCluster rejects a cluster the kubeconfigs cannot be made for.
func checkCluster(c *config.Cluster) error {
	if c == nil {
		return errors.New("kubeconfigs: no cluster given")
	}
	if c.Kubernetes.ClusterName == "" {
		return errors.New("kubeconfigs: kubernetes.clusterName is empty (fix: set it in cluster.yaml, e.g. kubernetes-the-hard-way)")
	}
	if _, ok := c.LB(); !ok {
		return errors.New("kubeconfigs: cluster.yaml has no loadbalancer node, but workers and the jumpbox reach the apiservers through it (fix: add a node with role: loadbalancer)")
	}
	if c.Kubernetes.APIServerPort <= 0 || c.Kubernetes.APIServerPort > 65535 {
		return fmt.Errorf("kubeconfigs: kubernetes.apiServerPort %d is not a TCP port (fix: use 6443)", c.Kubernetes.APIServerPort)
	}
	return nil
}

// build is the desired kubeconfig: one cluster, one user, context "default".
func build(clusterName, server string, caPEM []byte, user string, auth *clientcmdapi.AuthInfo) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = auth
	cfg.Contexts[ContextName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	cfg.CurrentContext = ContextName
	return cfg
}

// reconcileFile writes want to path unless the file already loads to the
// same kubeconfig.
func reconcileFile(path, file string, want *clientcmdapi.Config, dryRun bool) (FileResult, error) {
	fr := FileResult{File: file, Path: path}
	if err := clientcmd.Validate(*want); err != nil {
		return fr, fmt.Errorf("kubeconfig %s: the generated config is invalid: %w", path, err)
	}
	wantBytes, err := clientcmd.Write(*want)
	if err != nil {
		return fr, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if dryRun {
			fr.Action, fr.Reason = Created, "new file"
			return fr, nil
		}
		if _, err := fsutil.WriteIfChanged(path, wantBytes, fsutil.SecretMode); err != nil {
			return fr, err
		}
		fr.Action, fr.Reason = Created, "new file"
		return fr, nil
	case err != nil:
		return fr, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	reason := "existing file does not load as a kubeconfig"
	if loaded, lerr := clientcmd.Load(old); lerr == nil {
		canon, werr := clientcmd.Write(*loaded)
		if werr == nil && bytes.Equal(canon, wantBytes) {
			st, err := os.Stat(path)
			if err != nil {
				return fr, fmt.Errorf("kubeconfig %s: %w", path, err)
			}
			if m := st.Mode().Perm(); m != fsutil.SecretMode {
				if dryRun {
					fr.Action, fr.Reason = Updated, fmt.Sprintf("mode is %04o, want %04o", m, fsutil.SecretMode)
					return fr, nil
				}
				if err := os.Chmod(path, fsutil.SecretMode); err != nil {
					return fr, fmt.Errorf("kubeconfig %s: tighten mode %04o: %w", path, m, err)
				}
				fr.Action, fr.Reason = Updated, fmt.Sprintf("mode was %04o, now %04o", m, fsutil.SecretMode)
				return fr, nil
			}
			fr.Action, fr.Reason = Kept, "unchanged"
			return fr, nil
		}
		reason = describeDiff(loaded, want)
	}
	if dryRun {
		fr.Action, fr.Reason = Updated, reason
		return fr, nil
	}
	if _, err := fsutil.WriteIfChanged(path, wantBytes, fsutil.SecretMode); err != nil {
		return fr, err
	}
	fr.Action, fr.Reason = Updated, reason
	return fr, nil
}

// describeDiff names what differs between an existing kubeconfig and the
// desired one (which has exactly one cluster, user and context). It never
// prints certificate, key or token content.
func describeDiff(old, want *clientcmdapi.Config) string {
	var rs []string
	wantCtx := want.Contexts[want.CurrentContext]
	wc, wu := want.Clusters[wantCtx.Cluster], want.AuthInfos[wantCtx.AuthInfo]

	oc := old.Clusters[wantCtx.Cluster]
	if oc == nil {
		if only, name := single(old.Clusters); only != nil {
			rs = append(rs, fmt.Sprintf("cluster name changed (%s → %s)", name, wantCtx.Cluster))
			oc = only
		} else {
			rs = append(rs, "cluster "+wantCtx.Cluster+" missing")
		}
	}
	if oc != nil {
		if oc.Server != wc.Server {
			rs = append(rs, fmt.Sprintf("server changed (%s → %s)", orNone(oc.Server), wc.Server))
		}
		if !bytes.Equal(oc.CertificateAuthorityData, wc.CertificateAuthorityData) {
			rs = append(rs, "CA changed")
		}
	}
	ou := old.AuthInfos[wantCtx.AuthInfo]
	if ou == nil {
		if only, name := single(old.AuthInfos); only != nil {
			rs = append(rs, fmt.Sprintf("user changed (%s → %s)", name, wantCtx.AuthInfo))
			ou = only
		} else {
			rs = append(rs, "user "+wantCtx.AuthInfo+" missing")
		}
	}
	if ou != nil {
		if !bytes.Equal(ou.ClientCertificateData, wu.ClientCertificateData) {
			rs = append(rs, "client cert changed")
		}
		if !bytes.Equal(ou.ClientKeyData, wu.ClientKeyData) {
			rs = append(rs, "client key changed")
		}
		if ou.Token != wu.Token {
			rs = append(rs, "token changed")
		}
	}
	if oc := old.Contexts[want.CurrentContext]; oc == nil || oc.Cluster != wantCtx.Cluster || oc.AuthInfo != wantCtx.AuthInfo {
		rs = append(rs, "context "+want.CurrentContext+" changed")
	}
	if old.CurrentContext != want.CurrentContext {
		rs = append(rs, fmt.Sprintf("current-context changed (%s → %s)", orNone(old.CurrentContext), want.CurrentContext))
	}
	if len(rs) == 0 {
		rs = append(rs, "other settings differ (extra entries or fields khw does not write)")
	}
	return strings.Join(rs, ", ")
}

func single[T any](m map[string]*T) (*T, string) {
	if len(m) != 1 {
		return nil, ""
	}
	for k, v := range m {
		return v, k
	}
	return nil, ""
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// existingToken returns the well-formed bootstrap token of an existing
// bootstrap kubeconfig, or "".
func existingToken(path string) string {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return ""
	}
	if ai := cfg.AuthInfos[BootstrapUser]; ai != nil && tokenRE.MatchString(ai.Token) {
		return ai.Token
	}
	return ""
}

func missing(path, what, fix string) error {
	return fmt.Errorf("%s is missing: it is %s (fix: %s)", path, what, fix)
}

// loadCA reads and parses pkiDir/ca.pem.
func loadCA(pkiDir string) (*x509.Certificate, []byte, error) {
	path := filepath.Join(pkiDir, CAFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, missing(path, "the cluster CA cert every kubeconfig embeds", "run `khw pki` first")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	ca, err := parseCert(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v (fix: run `khw pki` to recreate the CA)", path, err)
	}
	if !ca.IsCA {
		return nil, nil, fmt.Errorf("%s is not a CA cert (basicConstraints CA:FALSE) (fix: run `khw pki` to recreate the CA)", path)
	}
	return ca, data, nil
}

// loadClientPair reads a spec's client cert and key and checks that they
// belong together, that the cert's CN is the spec's user and that ca signed
// it. The returned PEM is embedded as is.
func loadClientPair(pkiDir string, s Spec, ca *x509.Certificate, fix string) ([]byte, []byte, error) {
	certPath, keyPath := s.CertFile, s.KeyFile
	if !s.External {
		certPath, keyPath = filepath.Join(pkiDir, s.CertFile), filepath.Join(pkiDir, s.KeyFile)
	}
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, missing(certPath, "the client cert of "+s.File+" (CN "+s.User+")", fix)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", certPath, err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, missing(keyPath, "the private key of "+s.File+" (CN "+s.User+")", fix)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", keyPath, err)
	}
	leaf, err := parseCert(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v (fix: %s)", certPath, err, fix)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, nil, fmt.Errorf("%s and %s are not a cert and its key: %v (fix: reissue both with `khw pki`)", certPath, keyPath, err)
	}
	if leaf.Subject.CommonName != s.User {
		return nil, nil, fmt.Errorf("%s has CN %q, but %s authenticates as %q (the apiserver takes the user name from the CN) (fix: reissue it with `khw pki`)",
			certPath, leaf.Subject.CommonName, s.File, s.User)
	}
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		return nil, nil, fmt.Errorf("%s is not signed by %s (was the CA recreated?): %v (fix: reissue it with `khw pki`)",
			certPath, filepath.Join(pkiDir, CAFile), err)
	}
	return certPEM, keyPEM, nil
}

// parseCert parses the first CERTIFICATE block of a PEM file.
func parseCert(data []byte) (*x509.Certificate, error) {
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, errors.New("holds no PEM CERTIFICATE block")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}
