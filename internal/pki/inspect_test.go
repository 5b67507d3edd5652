package pki

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudflare/cfssl/csr"
	"github.com/cloudflare/cfssl/helpers"
	"github.com/cloudflare/cfssl/initca"
)

func TestInspect(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	reconcile(t, c, dir, time.Now())

	for _, tc := range []struct {
		name    string
		user    string
		groups  []string
		access  string // substring of one Access line
		purpose string
		ku, eku []string
	}{
		{"ca", "", []string{}, "not a client identity", "cluster root CA", []string{"cert sign", "crl sign"}, []string{}},
		{"admin", "admin", []string{"system:masters"}, "system:masters → cluster-admin (bound by the built-in ClusterRoleBinding cluster-admin)", "kubectl", []string{"digital signature"}, []string{"client auth"}},
		{"w1", "system:node:w1", []string{"system:nodes"}, "system:node:w1 in system:nodes → Node authorizer + NodeRestriction: only its own node's objects", "serving cert on :10250", []string{"digital signature"}, []string{"server auth", "client auth"}},
		{"kube-controller-manager", "system:kube-controller-manager", []string{"system:kube-controller-manager"}, "system:kube-controller-manager → ClusterRole system:kube-controller-manager", "kube-controller-manager", []string{"digital signature"}, []string{"client auth"}},
		{"kube-scheduler", "system:kube-scheduler", []string{"system:kube-scheduler"}, "ClusterRoles system:kube-scheduler and system:volume-scheduler", "kube-scheduler", []string{"digital signature"}, []string{"client auth"}},
		{"kube-proxy", "system:kube-proxy", []string{"system:node-proxier"}, "system:kube-proxy → ClusterRole system:node-proxier", "kube-proxy", []string{"digital signature"}, []string{"client auth"}},
		{"kubernetes", "kubernetes", []string{"Kubernetes"}, "apiserver's client identity to kubelets, needs the apiserver-to-kubelet ClusterRole (nodes/proxy, nodes/stats, nodes/log, nodes/spec, nodes/metrics, nodes/pods, nodes/healthz, nodes/configz)", "--tls-cert-file", []string{"digital signature"}, []string{"server auth", "client auth"}},
		{"service-account", "service-accounts", []string{"Kubernetes"}, "not a client identity", "signs ServiceAccount JWTs", []string{"digital signature"}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := Inspect(dir, tc.name)
			if err != nil {
				t.Fatal(err)
			}
			id := info.Identity
			if id == nil {
				t.Fatal("no identity")
			}
			if id.User != tc.user || !slices.Equal(id.Groups, tc.groups) {
				t.Errorf("identity = %q %q, want %q %q", id.User, id.Groups, tc.user, tc.groups)
			}
			if !slices.ContainsFunc(id.Access, func(a string) bool { return strings.Contains(a, tc.access) }) {
				t.Errorf("access %q lacks %q", id.Access, tc.access)
			}
			if !strings.Contains(info.Purpose, tc.purpose) {
				t.Errorf("purpose %q lacks %q", info.Purpose, tc.purpose)
			}
			if !slices.Equal(info.KeyUsage, tc.ku) || !slices.Equal(info.ExtKeyUsage, tc.eku) {
				t.Errorf("usages %q %q, want %q %q", info.KeyUsage, info.ExtKeyUsage, tc.ku, tc.eku)
			}
			if info.KeyAlgorithm != "ECDSA P-256" || info.Expired {
				t.Errorf("key %q expired %v", info.KeyAlgorithm, info.Expired)
			}
			wantDays := 364
			if tc.name == "ca" {
				wantDays = 3649
			}
			if info.DaysLeft != wantDays {
				t.Errorf("days left %d, want %d", info.DaysLeft, wantDays)
			}
			cert := readCert(t, dir, tc.name)
			if info.Serial != formatSerial(cert.SerialNumber) || info.Issuer != readCert(t, dir, "ca").Subject.String() {
				t.Errorf("serial %s issuer %s", info.Serial, info.Issuer)
			}
			text := info.Text()
			for _, want := range []string{"Subject:", "Issuer:", "Serial:", "Validity:", "days left", "May do:", tc.access} {
				if !strings.Contains(text, want) {
					t.Errorf("Text() lacks %q:\n%s", want, text)
				}
			}
			b, err := json.Marshal(info)
			if err != nil {
				t.Fatal(err)
			}
			var back CertInfo
			if err := json.Unmarshal(b, &back); err != nil || back.Identity == nil || back.Identity.User != tc.user || back.Serial != info.Serial {
				t.Errorf("JSON round trip: %v %s", err, b)
			}
		})
	}

	info, _ := Inspect(dir, "kubernetes.pem")
	if got := append(slices.Clone(info.IPAddresses), info.DNSNames...); !slices.Equal(got, kubernetesSANs) {
		t.Errorf("kubernetes SANs %q", got)
	}
	if _, err := Inspect(dir, "w3"); err == nil || !strings.Contains(err.Error(), "admin, ca, kube-controller-manager") {
		t.Errorf("missing cert error should list the certs: %v", err)
	}
}

// A hand-made kubelet cert without O=system:nodes is explained, not just
// described.
func TestInspectExplainsMistakes(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now)
	for _, tc := range []struct {
		cn, o, profile, want string
	}{
		{"system:node:w1", "", "kubernetes", "O lacks system:nodes"},
		{"w1", "system:nodes", "kubernetes", "without a CN of the form system:node:<name>"},
		{"alice", "developers", "client", `no built-in binding names user "alice" and groups developers`},
	} {
		certPEM, _ := handIssue(t, dir, tc.cn, tc.o, []string{}, tc.profile, now.Add(-time.Minute), now.Add(time.Hour))
		cert, err := helpers.ParseCertificatePEM(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		info := InspectCert(cert, now)
		if info.Identity == nil || !slices.ContainsFunc(info.Identity.Access, func(a string) bool { return strings.Contains(a, tc.want) }) {
			t.Errorf("CN=%s O=%s: access %v lacks %q", tc.cn, tc.o, info.Identity, tc.want)
		}
	}
	expired := InspectCert(readCert(t, dir, "admin"), now.Add(400*24*time.Hour))
	if !expired.Expired || expired.DaysLeft >= 0 || !strings.Contains(expired.Text(), "EXPIRED") {
		t.Errorf("expired cert: %+v", expired)
	}
}

// The recipe of every cert names the profile that makes exactly its key
// usages and EKUs: running cfssl's own signer with the recipe's -profile and
// ca-config.json (or initca for -initca) on the recipe's CSR JSON gives the
// same usages as khw's cert.
func TestRecipeReproducesUsages(t *testing.T) {
	for _, algo := range []struct {
		name string
		size int
	}{{"ecdsa", 256}, {"rsa", 2048}} {
		t.Run(algo.name, func(t *testing.T) {
			c := defaultCluster(t)
			c.PKI.KeyAlgorithm, c.PKI.KeySize = algo.name, algo.size
			dir := t.TempDir()
			now := time.Now().Truncate(time.Second)
			reconcile(t, c, dir, now)
			for _, s := range Specs(c) {
				rec := s.Recipe()
				khw := readCert(t, dir, s.Name)
				var req csr.CertificateRequest
				if err := json.Unmarshal(readFile(t, filepath.Join(dir, s.Name+"-csr.json")), &req); err != nil {
					t.Fatal(err)
				}
				var certPEM []byte
				if s.Name == "ca" {
					if rec != "cfssl gencert -initca ca-csr.json | cfssljson -bare ca" {
						t.Errorf("ca recipe %q", rec)
					}
					var err error
					if certPEM, _, _, err = initca.New(&req); err != nil {
						t.Fatal(err)
					}
				} else {
					prefix := "cfssl gencert -ca=ca.pem -ca-key=ca-key.pem -config=ca-config.json -profile="
					suffix := " " + s.Name + "-csr.json | cfssljson -bare " + s.Name
					profile, ok := strings.CutPrefix(rec, prefix)
					if profile, ok = strings.CutSuffix(profile, suffix); !ok || strings.Contains(profile, " ") {
						t.Fatalf("%s recipe %q is not %q<profile>%q", s.Name, rec, prefix, suffix)
					}
					certPEM, _ = handIssueReq(t, dir, &req, profile, now.Add(-time.Minute), now.Add(time.Hour))
				}
				cert, err := helpers.ParseCertificatePEM(certPEM)
				if err != nil {
					t.Fatal(err)
				}
				if cert.KeyUsage != khw.KeyUsage || !slices.Equal(ekuNames(cert.ExtKeyUsage), ekuNames(khw.ExtKeyUsage)) ||
					cert.IsCA != khw.IsCA || cert.MaxPathLenZero != khw.MaxPathLenZero {
					t.Errorf("%s: the recipe %q makes %s, khw made %s", s.Name, rec,
						usageWords(cert.KeyUsage, cert.ExtKeyUsage, cert.IsCA), usageWords(khw.KeyUsage, khw.ExtKeyUsage, khw.IsCA))
				}
				// Inspect finds the same recipe from the cert alone.
				info, err := Inspect(dir, s.Name)
				if err != nil {
					t.Fatal(err)
				}
				if info.Profile != s.Profile || info.Recipe != rec || !strings.Contains(info.Text(), "  Recipe:       "+rec+"\n") {
					t.Errorf("%s: Inspect profile %q recipe %q, want %q %q; Text:\n%s", s.Name, info.Profile, info.Recipe, s.Profile, rec, info.Text())
				}
			}
		})
	}
}

func TestInspectRejectsNonCertNames(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	reconcile(t, c, dir, time.Now())
	writeFile(t, filepath.Join(t.TempDir(), "x.pem"), "")
	for _, tc := range []struct{ name, problem string }{
		{"", "is not a cert name"},
		{"../pki/admin", "is a path"},
		{"/etc/ssl/certs/ca-certificates", "is a path"},
		{"sub/admin.pem", "is a path"},
		{"..", "is a path"},
		{"admin-key", "names a private key file, not a cert: inspect admin instead"},
		{"admin-key.pem", "names a private key file"},
		{"ca-key", "names a private key file"},
		{"admin-csr", "names a CSR JSON file, not a cert: inspect admin instead"},
		{"admin-csr.json", "names a CSR JSON file"},
		{"ca-config.json", "names a JSON file"},
		{".hidden", "starts with a dot"},
		{"w3", "has no cert: " + filepath.Join(dir, "w3.pem") + " does not exist"},
		{"ca-config", "has no cert"},
	} {
		info, err := Inspect(dir, tc.name)
		var ne *CertNameError
		if !errors.As(err, &ne) || info != nil {
			t.Errorf("Inspect(%q) = %v, %v; want a *CertNameError", tc.name, info, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(ne.Problem, tc.problem) || ne.Name != tc.name ||
			!slices.Equal(ne.Have, []string{"admin", "ca", "kube-controller-manager", "kube-proxy", "kube-scheduler", "kubernetes", "service-account", "w1", "w2"}) ||
			!strings.Contains(msg, "use one of: admin, ca, kube-controller-manager") || !strings.Contains(msg, "`khw pki`") || strings.Contains(msg, "02-pki") {
			t.Errorf("Inspect(%q): %v (problem %q)", tc.name, err, ne.Problem)
		}
	}
	// An empty directory: nothing to list, the fix is to issue the certs.
	_, err := Inspect(t.TempDir(), "admin")
	var ne *CertNameError
	if !errors.As(err, &ne) || len(ne.Have) != 0 || !strings.Contains(err.Error(), "run `khw pki` to issue the certs") {
		t.Errorf("empty dir: %v", err)
	}
	// A file that is not a cert: its words, not cfssl's JSON.
	writeFile(t, filepath.Join(dir, "broken.pem"), "hello\n")
	if _, err := Inspect(dir, "broken"); err == nil || strings.Contains(err.Error(), `{"code"`) || strings.Contains(err.Error(), "02-pki") ||
		!strings.Contains(err.Error(), "holds no PEM block") || !strings.Contains(err.Error(), "`khw pki`") {
		t.Errorf("broken cert: %v", err)
	}
}

func TestIsBootstrapNode(t *testing.T) {
	c := defaultCluster(t)
	for name, want := range map[string]bool{"w3": true, "w1": false, "w2": false, "cp1": false, "lb": false, "nope": false, "": false} {
		if got := IsBootstrapNode(c, name); got != want {
			t.Errorf("IsBootstrapNode(%q) = %v, want %v", name, got, want)
		}
	}
	c.Nodes[4].TLSBootstrap = true // w1
	if !IsBootstrapNode(c, "w1") {
		t.Error("w1 with tlsBootstrap: true")
	}
}
