package kubeconfig

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/khw-dev/khw/internal/config"
)

// ---- expectations written out from cluster-facts.md, not from Specs ----

type want struct {
	user      string
	server    string
	certName  string // PEM pair in pkiDir; "" for token auth
	bootstrap bool
}

var wantDefault = map[string]want{
	"admin.kubeconfig":                   {"admin", "https://lb:6443", "admin", false},
	"admin-cp.kubeconfig":                {"admin", "https://127.0.0.1:6443", "admin", false},
	"w1.kubeconfig":                      {"system:node:w1", "https://lb:6443", "w1", false},
	"w2.kubeconfig":                      {"system:node:w2", "https://lb:6443", "w2", false},
	"kube-proxy.kubeconfig":              {"system:kube-proxy", "https://lb:6443", "kube-proxy", false},
	"kube-controller-manager.kubeconfig": {"system:kube-controller-manager", "https://127.0.0.1:6443", "kube-controller-manager", false},
	"kube-scheduler.kubeconfig":          {"system:kube-scheduler", "https://127.0.0.1:6443", "kube-scheduler", false},
	"w3-bootstrap.kubeconfig":            {"kubelet-bootstrap", "https://lb:6443", "", true},
}

// The bootstrap-token format of the apiserver's authenticator, written out
// independently of the package's regexps.
var bootstrapTokenFormat = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)

// checkFile loads one written kubeconfig and checks it against w.
func checkFile(t *testing.T, path string, w want, c *config.Cluster, pkiDir string) *clientcmdapi.Config {
	t.Helper()
	name := filepath.Base(path)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %04o, want 0600", name, st.Mode().Perm())
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatalf("%s: clientcmd cannot load it: %v", name, err)
	}
	if err := clientcmd.Validate(*cfg); err != nil {
		t.Errorf("%s: clientcmd.Validate: %v", name, err)
	}
	if cfg.CurrentContext != "default" || len(cfg.Contexts) != 1 || len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 1 {
		t.Fatalf("%s: want exactly one cluster/user/context and current-context default, got %d/%d/%d %q",
			name, len(cfg.Clusters), len(cfg.AuthInfos), len(cfg.Contexts), cfg.CurrentContext)
	}
	ctx := cfg.Contexts["default"]
	if ctx.Cluster != c.Kubernetes.ClusterName || ctx.AuthInfo != w.user {
		t.Errorf("%s: context = cluster %q user %q, want %q %q", name, ctx.Cluster, ctx.AuthInfo, c.Kubernetes.ClusterName, w.user)
	}
	cl := cfg.Clusters[c.Kubernetes.ClusterName]
	if cl == nil {
		t.Fatalf("%s: no cluster %q", name, c.Kubernetes.ClusterName)
	}
	if cl.Server != w.server {
		t.Errorf("%s: server = %s, want %s", name, cl.Server, w.server)
	}
	if cl.CertificateAuthority != "" || !bytes.Equal(cl.CertificateAuthorityData, read(t, filepath.Join(pkiDir, "ca.pem"))) {
		t.Errorf("%s: embedded CA is not ca.pem", name)
	}
	ai := cfg.AuthInfos[w.user]
	if ai == nil {
		t.Fatalf("%s: no user %q", name, w.user)
	}
	if ai.ClientCertificate != "" || ai.ClientKey != "" || ai.TokenFile != "" {
		t.Errorf("%s: refers to files instead of embedding", name)
	}
	if w.bootstrap {
		if len(ai.ClientCertificateData) != 0 || len(ai.ClientKeyData) != 0 || ai.Token == "" || ai.Exec != nil || ai.AuthProvider != nil || ai.Username != "" {
			t.Errorf("%s: bootstrap file must have token auth only", name)
		}
		return cfg
	}
	if ai.Token != "" {
		t.Errorf("%s: cert-based file has a token", name)
	}
	certPEM, keyPEM := ai.ClientCertificateData, ai.ClientKeyData
	if !bytes.Equal(certPEM, read(t, filepath.Join(pkiDir, w.certName+".pem"))) || !bytes.Equal(keyPEM, read(t, filepath.Join(pkiDir, w.certName+"-key.pem"))) {
		t.Errorf("%s: embedded cert/key are not %s.pem / %s-key.pem", name, w.certName, w.certName)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("%s: embedded cert and key do not match: %v", name, err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	if leaf.Subject.CommonName != w.user {
		t.Errorf("%s: client cert CN = %q, want %q", name, leaf.Subject.CommonName, w.user)
	}
	// client-go can build a working rest.Config from it.
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatalf("%s: client-go rest config: %v", name, err)
	}
	if rc.Host != w.server || len(rc.TLSClientConfig.CAData) == 0 || len(rc.TLSClientConfig.CertData) == 0 {
		t.Errorf("%s: rest config host %q, TLS data missing", name, rc.Host)
	}
	return cfg
}

func TestReconcileDefault(t *testing.T) {
	pkiDir, _ := newPKI(t)
	out := filepath.Join(t.TempDir(), "kubeconfigs")
	c := defaultCluster()
	rep, err := Reconcile(c, pkiDir, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Files) != len(wantDefault) || !rep.Changed() {
		t.Fatalf("report: %v", rep)
	}
	for _, fr := range rep.Files {
		if fr.Action != Created || fr.Reason != "new file" || fr.Path != filepath.Join(out, fr.File) {
			t.Errorf("%s: %s %q", fr.File, fr.Action, fr.Reason)
		}
	}
	for file, w := range wantDefault {
		cfg := checkFile(t, filepath.Join(out, file), w, c, pkiDir)
		if w.bootstrap {
			tok := cfg.AuthInfos[w.user].Token
			if tok != BootstrapTokenPlaceholder || bootstrapTokenFormat.MatchString(tok) {
				t.Errorf("%s: token %q must be the placeholder and not a well-formed bootstrap token", file, tok)
			}
		}
	}
	// Nothing else in the directory (no temp files), directory 0700.
	ents, _ := os.ReadDir(out)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	var wantNames []string
	for f := range wantDefault {
		wantNames = append(wantNames, f)
	}
	sort.Strings(wantNames)
	if !reflect.DeepEqual(got, wantNames) {
		t.Errorf("directory holds %v", got)
	}
	if st, _ := os.Stat(out); st.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %04o", st.Mode().Perm())
	}
}

type snapshot map[string]struct {
	data  []byte
	mtime time.Time
}

// age sets every file's mtime one hour back and returns the snapshot.
func age(t *testing.T, dir string) snapshot {
	t.Helper()
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	s := snapshot{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		s[e.Name()] = struct {
			data  []byte
			mtime time.Time
		}{read(t, p), old}
	}
	return s
}

// untouched reports the files whose bytes or mtime changed since s.
func (s snapshot) touched(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for name, v := range s {
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(read(t, p), v.data) || !st.ModTime().Equal(v.mtime) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func actions(rep *Report) map[string]Action {
	m := map[string]Action{}
	for _, f := range rep.Files {
		m[f.File] = f.Action
	}
	return m
}

func TestRerunWritesNothing(t *testing.T) {
	pkiDir, _ := newPKI(t)
	out := t.TempDir()
	c := defaultCluster()
	if _, err := Reconcile(c, pkiDir, out); err != nil {
		t.Fatal(err)
	}
	snap := age(t, out)
	if plan, err := Plan(c, pkiDir, out); err != nil || plan.Changed() {
		t.Errorf("Plan after a run: %v, %v", plan, err)
	}
	rep, err := Reconcile(c, pkiDir, out)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Changed() {
		t.Errorf("second run changed something:\n%v", rep)
	}
	for _, f := range rep.Files {
		if f.Action != Kept || !strings.HasPrefix(f.Reason, "unchanged") {
			t.Errorf("%s: %s %q", f.File, f.Action, f.Reason)
		}
	}
	if got := snap.touched(t, out); len(got) != 0 {
		t.Errorf("files touched on re-run: %v", got)
	}
}

func TestChangedInputsRewriteOnlyAffectedFiles(t *testing.T) {
	c := defaultCluster()
	tests := []struct {
		name    string
		change  func(t *testing.T, pkiDir string, ca *testCA, c *config.Cluster)
		updated []string
		reason  string
	}{
		{"w1 cert reissued", func(t *testing.T, dir string, ca *testCA, _ *config.Cluster) {
			writePair(t, dir, ca, "w1", "system:node:w1", "system:nodes")
		}, []string{"w1.kubeconfig"}, "client cert changed, client key changed"},
		{"admin cert reissued", func(t *testing.T, dir string, ca *testCA, _ *config.Cluster) {
			writePair(t, dir, ca, "admin", "admin", "system:masters")
		}, []string{"admin-cp.kubeconfig", "admin.kubeconfig"}, "client cert changed"},
		{"apiserver port changed", func(t *testing.T, _ string, _ *testCA, c *config.Cluster) {
			c.Kubernetes.APIServerPort = 7443
		}, []string{"admin-cp.kubeconfig", "admin.kubeconfig", "kube-controller-manager.kubeconfig", "kube-proxy.kubeconfig",
			"kube-scheduler.kubeconfig", "w1.kubeconfig", "w2.kubeconfig", "w3-bootstrap.kubeconfig"}, "server changed (https://"},
		{"cluster name changed", func(t *testing.T, _ string, _ *testCA, c *config.Cluster) {
			c.Kubernetes.ClusterName = "khw-lab"
		}, []string{"admin-cp.kubeconfig", "admin.kubeconfig", "kube-controller-manager.kubeconfig", "kube-proxy.kubeconfig",
			"kube-scheduler.kubeconfig", "w1.kubeconfig", "w2.kubeconfig", "w3-bootstrap.kubeconfig"}, "cluster name changed (kubernetes-the-hard-way → khw-lab)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkiDir, ca := newPKI(t)
			out := t.TempDir()
			cc := *c
			if _, err := Reconcile(&cc, pkiDir, out); err != nil {
				t.Fatal(err)
			}
			snap := age(t, out)
			tt.change(t, pkiDir, ca, &cc)
			plan, err := Plan(&cc, pkiDir, out)
			if err != nil {
				t.Fatal(err)
			}
			if got := snap.touched(t, out); len(got) != 0 {
				t.Errorf("Plan wrote %v", got)
			}
			rep, err := Reconcile(&cc, pkiDir, out)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(plan.Files, rep.Files) {
				t.Errorf("Plan predicted\n%v\nReconcile did\n%v", plan, rep)
			}
			if got := snap.touched(t, out); !reflect.DeepEqual(got, tt.updated) {
				t.Errorf("rewritten %v, want %v", got, tt.updated)
			}
			for _, f := range rep.Files {
				shouldUpdate := false
				for _, u := range tt.updated {
					shouldUpdate = shouldUpdate || u == f.File
				}
				switch {
				case shouldUpdate && (f.Action != Updated || !strings.Contains(f.Reason, tt.reason)):
					t.Errorf("%s: %s %q, want updated with %q", f.File, f.Action, f.Reason, tt.reason)
				case !shouldUpdate && f.Action != Kept:
					t.Errorf("%s: %s %q, want kept", f.File, f.Action, f.Reason)
				}
			}
			for file, w := range wantDefault {
				w.server = strings.Replace(w.server, ":6443", ":"+itoa(cc.Kubernetes.APIServerPort), 1)
				checkFile(t, filepath.Join(out, file), w, &cc, pkiDir)
			}
		})
	}
}

func itoa(i int) string { return big.NewInt(int64(i)).String() }

func TestNewCARewritesEverything(t *testing.T) {
	pkiDir, _ := newPKI(t)
	out := t.TempDir()
	c := defaultCluster()
	if _, err := Reconcile(c, pkiDir, out); err != nil {
		t.Fatal(err)
	}
	// A new CA with the old certs: refused, nothing written.
	ca2 := newCA(t)
	writeFile(t, filepath.Join(pkiDir, "ca.pem"), ca2.pem, 0o644)
	snap := age(t, out)
	_, err := Reconcile(c, pkiDir, out)
	if err == nil || !strings.Contains(err.Error(), "is not signed by") || !strings.Contains(err.Error(), "khw pki") {
		t.Fatalf("certs of an old CA: %v", err)
	}
	if got := snap.touched(t, out); len(got) != 0 {
		t.Errorf("files written despite the error: %v", got)
	}
	// Reissue everything under the new CA: every file changes, bootstrap too.
	for _, id := range identities {
		writePair(t, pkiDir, ca2, id.name, id.cn, id.org)
	}
	rep, err := Reconcile(c, pkiDir, out)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Files {
		if f.Action != Updated || !strings.Contains(f.Reason, "CA changed") {
			t.Errorf("%s: %s %q", f.File, f.Action, f.Reason)
		}
	}
}

func TestBadInputs(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(t *testing.T, dir string, ca *testCA)
		want   []string
	}{
		{"missing ca.pem", func(t *testing.T, dir string, _ *testCA) { os.Remove(filepath.Join(dir, "ca.pem")) },
			[]string{"ca.pem is missing", "run `khw pki` first"}},
		{"missing kube-proxy.pem", func(t *testing.T, dir string, _ *testCA) { os.Remove(filepath.Join(dir, "kube-proxy.pem")) },
			[]string{"kube-proxy.pem is missing", "kube-proxy.kubeconfig", "run `khw pki` first"}},
		{"missing w2-key.pem", func(t *testing.T, dir string, _ *testCA) { os.Remove(filepath.Join(dir, "w2-key.pem")) },
			[]string{"w2-key.pem is missing", "private key", "run `khw pki` first"}},
		{"two missing at once", func(t *testing.T, dir string, _ *testCA) {
			os.Remove(filepath.Join(dir, "admin.pem"))
			os.Remove(filepath.Join(dir, "kube-scheduler-key.pem"))
		}, []string{"admin.pem is missing", "kube-scheduler-key.pem is missing"}},
		{"wrong CN", func(t *testing.T, dir string, ca *testCA) {
			writePair(t, dir, ca, "w1", "system:node:w2", "system:nodes")
		},
			[]string{"w1.pem has CN \"system:node:w2\"", "\"system:node:w1\"", "khw pki"}},
		{"key of another cert", func(t *testing.T, dir string, _ *testCA) {
			writeFile(t, filepath.Join(dir, "w1-key.pem"), read(t, filepath.Join(dir, "w2-key.pem")), 0o600)
		}, []string{"w1.pem and", "w1-key.pem are not a cert and its key"}},
		{"signed by another CA", func(t *testing.T, dir string, _ *testCA) {
			writePair(t, dir, newCA(t), "kube-proxy", "system:kube-proxy", "system:node-proxier")
		}, []string{"kube-proxy.pem is not signed by", "ca.pem"}},
		{"ca.pem not PEM", func(t *testing.T, dir string, _ *testCA) {
			writeFile(t, filepath.Join(dir, "ca.pem"), []byte("hello"), 0o644)
		},
			[]string{"ca.pem: holds no PEM CERTIFICATE block"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkiDir, ca := newPKI(t)
			tt.break_(t, pkiDir, ca)
			out := filepath.Join(t.TempDir(), "kubeconfigs")
			_, err := Reconcile(defaultCluster(), pkiDir, out)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Error("error shows key material")
			}
			if _, serr := os.Stat(out); !os.IsNotExist(serr) {
				t.Error("nothing may be written when an input is bad")
			}
		})
	}
}

func TestSemanticComparison(t *testing.T) {
	pkiDir, _ := newPKI(t)
	out := t.TempDir()
	c := defaultCluster()
	if _, err := Reconcile(c, pkiDir, out); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, "admin.kubeconfig")
	// Same kubeconfig, written as JSON: different bytes, same meaning.
	js, err := yaml.YAMLToJSON(read(t, path))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, js, 0o600)
	rep, err := Reconcile(c, pkiDir, out)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := rep.Lookup("admin.kubeconfig"); f.Action != Kept {
		t.Errorf("equivalent JSON kubeconfig: %v", f)
	}
	if !bytes.Equal(read(t, path), js) {
		t.Error("an equivalent file must not be rewritten")
	}

	// Hand-edited server and an extra user: rewritten, reasons named.
	cfg, _ := clientcmd.LoadFromFile(path)
	cfg.Clusters[c.Kubernetes.ClusterName].Server = "https://192.168.122.11:6443"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	rep, _ = Reconcile(c, pkiDir, out)
	if f, _ := rep.Lookup("admin.kubeconfig"); f.Action != Updated || f.Reason != "server changed (https://192.168.122.11:6443 → https://lb:6443)" {
		t.Errorf("edited server: %v", f)
	}
	cfg, _ = clientcmd.LoadFromFile(path)
	cfg.AuthInfos["someone"] = &clientcmdapi.AuthInfo{Token: "x"}
	clientcmd.WriteToFile(*cfg, path)
	rep, _ = Reconcile(c, pkiDir, out)
	if f, _ := rep.Lookup("admin.kubeconfig"); f.Action != Updated || !strings.Contains(f.Reason, "other settings differ") {
		t.Errorf("extra user: %v", f)
	}
	// Garbage is replaced.
	writeFile(t, path, []byte("{not a kubeconfig"), 0o600)
	rep, _ = Reconcile(c, pkiDir, out)
	if f, _ := rep.Lookup("admin.kubeconfig"); f.Action != Updated || !strings.Contains(f.Reason, "does not load") {
		t.Errorf("garbage: %v", f)
	}
	checkFile(t, path, wantDefault["admin.kubeconfig"], c, pkiDir)
}

func TestModeTightened(t *testing.T) {
	pkiDir, _ := newPKI(t)
	out := t.TempDir()
	c := defaultCluster()
	if _, err := Reconcile(c, pkiDir, out); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, "kube-proxy.kubeconfig")
	before := read(t, path)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Reconcile(c, pkiDir, out)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := rep.Lookup("kube-proxy.kubeconfig"); f.Action != Updated || f.Reason != "mode was 0644, now 0600" {
		t.Errorf("%v", f)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 || !bytes.Equal(before, read(t, path)) {
		t.Errorf("mode %04o, content changed: %v", st.Mode().Perm(), !bytes.Equal(before, read(t, path)))
	}
}

func TestKubeletCertOverride(t *testing.T) {
	pkiDir, ca := newPKI(t)
	ext := t.TempDir()
	certPEM, keyPEM := ca.issue(t, "system:node:w2", "system:nodes")
	writeFile(t, filepath.Join(ext, "hand.pem"), certPEM, 0o644)
	writeFile(t, filepath.Join(ext, "hand-key.pem"), keyPEM, 0o600)
	c := defaultCluster()
	for i := range c.Nodes {
		if c.Nodes[i].Name == "w2" {
			c.Nodes[i].KubeletCert = &config.CertRef{Cert: filepath.Join(ext, "hand.pem"), Key: filepath.Join(ext, "hand-key.pem")}
		}
	}
	out := t.TempDir()
	if _, err := Reconcile(c, pkiDir, out); err != nil {
		t.Fatal(err)
	}
	cfg, _ := clientcmd.LoadFromFile(filepath.Join(out, "w2.kubeconfig"))
	if ai := cfg.AuthInfos["system:node:w2"]; !bytes.Equal(ai.ClientCertificateData, certPEM) || !bytes.Equal(ai.ClientKeyData, keyPEM) {
		t.Error("w2.kubeconfig must embed the kubeletCert pair, not pki/w2.pem")
	}
	os.Remove(filepath.Join(ext, "hand-key.pem"))
	_, err := Reconcile(c, pkiDir, out)
	if err == nil || !strings.Contains(err.Error(), "hand-key.pem is missing") || !strings.Contains(err.Error(), "kubeletCert of node w2") {
		t.Errorf("missing kubeletCert key: %v", err)
	}
}

func TestClusterChecks(t *testing.T) {
	pkiDir, _ := newPKI(t)
	noLB := defaultCluster()
	noLB.Nodes = noLB.Nodes[1:]
	noName := defaultCluster()
	noName.Kubernetes.ClusterName = ""
	clash := defaultCluster()
	for i := range clash.Nodes {
		if clash.Nodes[i].Name == "w2" {
			clash.Nodes[i].Name = "kube-proxy"
		}
	}
	for name, c := range map[string]*config.Cluster{"no lb": noLB, "no cluster name": noName, "nil": nil, "name clash": clash} {
		if _, err := Reconcile(c, pkiDir, t.TempDir()); err == nil || !strings.Contains(err.Error(), "fix") && name != "nil" {
			t.Errorf("%s: %v", name, err)
		}
	}
}
