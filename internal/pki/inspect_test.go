package pki

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudflare/cfssl/helpers"
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
		{"kubernetes", "kubernetes", []string{"Kubernetes"}, "apiserver's client identity to kubelets, needs the apiserver-to-kubelet ClusterRole (nodes/proxy, nodes/stats, nodes/log, nodes/spec, nodes/metrics)", "--tls-cert-file", []string{"digital signature"}, []string{"server auth", "client auth"}},
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
