package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudflare/cfssl/csr"
	"github.com/cloudflare/cfssl/helpers"

	"github.com/khw-dev/khw/internal/config"
)

// kubernetesSANs is cluster-facts.md's list for the default cluster, written
// out by hand.
var kubernetesSANs = []string{
	"10.32.0.1", "127.0.0.1", "192.168.122.11", "192.168.122.12", "192.168.122.13", "192.168.122.10",
	"cp1", "cp2", "cp3", "lb",
	"cp1.kubernetes.local", "cp2.kubernetes.local", "cp3.kubernetes.local", "lb.kubernetes.local",
	"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
}

// wantCert is what one cert of the default cluster must contain, stated
// independently of the package's own tables.
type wantCert struct {
	cn     string
	o      []string
	dns    []string
	ips    []string
	server bool // EKU server auth
	client bool // EKU client auth
	ca     bool
	signer bool // digital signature only, no EKU
}

var wantDefault = map[string]wantCert{
	"ca":                      {cn: "Kubernetes", o: []string{"Kubernetes"}, ca: true},
	"admin":                   {cn: "admin", o: []string{"system:masters"}, client: true},
	"w1":                      {cn: "system:node:w1", o: []string{"system:nodes"}, dns: []string{"w1", "w1.kubernetes.local"}, ips: []string{"192.168.122.21"}, server: true, client: true},
	"w2":                      {cn: "system:node:w2", o: []string{"system:nodes"}, dns: []string{"w2", "w2.kubernetes.local"}, ips: []string{"192.168.122.22"}, server: true, client: true},
	"kube-controller-manager": {cn: "system:kube-controller-manager", o: []string{"system:kube-controller-manager"}, client: true},
	"kube-scheduler":          {cn: "system:kube-scheduler", o: []string{"system:kube-scheduler"}, client: true},
	"kube-proxy":              {cn: "system:kube-proxy", o: []string{"system:node-proxier"}, client: true},
	"kubernetes":              {cn: "kubernetes", o: []string{"Kubernetes"}, dns: kubernetesSANs[6:], ips: kubernetesSANs[:6], server: true, client: true},
	"service-account":         {cn: "service-accounts", o: []string{"Kubernetes"}, signer: true},
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// checkCerts verifies every cert of dir field by field against wantDefault
// and chain-verifies it against ca.pem with the EKU it is used for.
//
// now is when the leaves were issued, caNow when the CA was.
func checkCerts(t *testing.T, c *config.Cluster, dir string, now, caNow time.Time) {
	t.Helper()
	ca := readCert(t, dir, "ca")
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	rsaKeys := c.PKI.KeyAlgorithm == "rsa"
	for name, w := range wantDefault {
		t.Run(name, func(t *testing.T) {
			cert := readCert(t, dir, name)
			if cert.Subject.CommonName != w.cn {
				t.Errorf("CN = %q, want %q", cert.Subject.CommonName, w.cn)
			}
			if !slices.Equal(cert.Subject.Organization, w.o) {
				t.Errorf("O = %q, want %q", cert.Subject.Organization, w.o)
			}
			if got, want := sortedCopy(cert.DNSNames), sortedCopy(w.dns); !slices.Equal(got, want) {
				t.Errorf("DNS SANs = %q, want %q", got, want)
			}
			var ips []string
			for _, ip := range cert.IPAddresses {
				ips = append(ips, ip.String())
			}
			if got, want := sortedCopy(ips), sortedCopy(w.ips); !slices.Equal(got, want) {
				t.Errorf("IP SANs = %q, want %q", got, want)
			}
			if len(cert.EmailAddresses)+len(cert.URIs) != 0 {
				t.Errorf("unexpected e-mail/URI SANs %v %v", cert.EmailAddresses, cert.URIs)
			}

			// Key usage and EKU.
			var wantKU x509.KeyUsage
			var wantEKU []x509.ExtKeyUsage
			switch {
			case w.ca:
				wantKU = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
			case w.signer:
				wantKU = x509.KeyUsageDigitalSignature
			default:
				wantKU = x509.KeyUsageDigitalSignature
				if rsaKeys {
					wantKU |= x509.KeyUsageKeyEncipherment
				}
				if w.server {
					wantEKU = append(wantEKU, x509.ExtKeyUsageServerAuth)
				}
				if w.client {
					wantEKU = append(wantEKU, x509.ExtKeyUsageClientAuth)
				}
			}
			if cert.KeyUsage != wantKU {
				t.Errorf("KeyUsage = %v, want %v", kuNames(cert.KeyUsage), kuNames(wantKU))
			}
			gotEKU := slices.Clone(cert.ExtKeyUsage)
			slices.Sort(gotEKU)
			slices.Sort(wantEKU)
			if !slices.Equal(gotEKU, wantEKU) {
				t.Errorf("ExtKeyUsage = %v, want %v", ekuNames(gotEKU), ekuNames(wantEKU))
			}
			if cert.IsCA != w.ca || !cert.BasicConstraintsValid {
				t.Errorf("IsCA = %v (constraints valid %v), want %v", cert.IsCA, cert.BasicConstraintsValid, w.ca)
			}
			if w.ca && (cert.MaxPathLen != 0 || !cert.MaxPathLenZero) {
				t.Errorf("CA path length = %d (zero %v), want 0", cert.MaxPathLen, cert.MaxPathLenZero)
			}

			// Key type and size.
			switch k := cert.PublicKey.(type) {
			case *ecdsa.PublicKey:
				if rsaKeys || k.Curve != elliptic.P256() {
					t.Errorf("key is ECDSA %s, want %s %d", k.Curve.Params().Name, c.PKI.KeyAlgorithm, c.PKI.KeySize)
				}
			case *rsa.PublicKey:
				if !rsaKeys || k.N.BitLen() != c.PKI.KeySize {
					t.Errorf("key is RSA %d, want %s %d", k.N.BitLen(), c.PKI.KeyAlgorithm, c.PKI.KeySize)
				}
			default:
				t.Errorf("key type %T", cert.PublicKey)
			}
			key, err := helpers.ParsePrivateKeyPEM(readFile(t, filepath.Join(dir, name+"-key.pem")))
			if err != nil {
				t.Fatal(err)
			}
			if !key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(cert.PublicKey) {
				t.Error("key file does not belong to the cert")
			}

			// Validity ≈ configured.
			validity, now := c.PKI.CertValidity, now
			if w.ca {
				validity, now = c.PKI.CAValidity, caNow
			}
			if d := cert.NotAfter.Sub(now.Add(validity)); d < -time.Second || d > time.Second {
				t.Errorf("NotAfter = %s, want now+%s (off by %s)", cert.NotAfter, validity, d)
			}
			if d := now.Sub(cert.NotBefore); d < 4*time.Minute || d > 6*time.Minute {
				t.Errorf("NotBefore = %s, want about 5m before now (%s)", cert.NotBefore, d)
			}

			// Chain to the CA with the EKU the cert is used for.
			verify := func(eku x509.ExtKeyUsage, host string) error {
				_, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{eku}, DNSName: host})
				return err
			}
			switch {
			case w.ca:
				if err := cert.CheckSignatureFrom(cert); err != nil {
					t.Errorf("CA is not self-signed: %v", err)
				}
			case w.signer:
				if err := verify(x509.ExtKeyUsageAny, ""); err != nil {
					t.Errorf("does not chain to the CA: %v", err)
				}
			default:
				if w.client {
					if err := verify(x509.ExtKeyUsageClientAuth, ""); err != nil {
						t.Errorf("not a valid client cert: %v", err)
					}
				}
				if w.server {
					for _, h := range append(slices.Clone(w.dns), w.ips...) {
						if err := verify(x509.ExtKeyUsageServerAuth, h); err != nil {
							t.Errorf("not a valid server cert for %s: %v", h, err)
						}
					}
				} else if err := verify(x509.ExtKeyUsageServerAuth, ""); err == nil {
					t.Error("a client-only cert verifies as a server cert")
				}
			}
		})
	}
}

func TestReconcileFresh(t *testing.T) {
	c := defaultCluster(t)
	dir := filepath.Join(t.TempDir(), "pki")
	now := time.Now().Truncate(time.Second)
	r := reconcile(t, c, dir, now)

	for _, n := range allNames {
		if s := status(t, r, n); s.Action != Created || !slices.Equal(codes(s.Reasons), []ReasonCode{ReasonMissing}) {
			t.Errorf("%s: %s %v, want created (missing)", n, s.Action, s.Reasons)
		}
	}
	if len(r.Certs) != len(allNames) {
		t.Errorf("report has %d certs, want %d:\n%s", len(r.Certs), len(allNames), r)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode = %v (%v), want 0700", st.Mode().Perm(), err)
	}
	for _, n := range allNames {
		for file, mode := range map[string]os.FileMode{n + "-key.pem": 0o600, n + ".pem": 0o644, n + "-csr.json": 0o644} {
			st, err := os.Stat(filepath.Join(dir, file))
			if err != nil {
				t.Errorf("%s: %v", file, err)
			} else if st.Mode().Perm() != mode {
				t.Errorf("%s mode = %v, want %v", file, st.Mode().Perm(), mode)
			}
		}
	}
	for _, n := range []string{"w3.pem", "w3-key.pem", "w3-csr.json"} {
		if _, err := os.Stat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists, but w3 joins by TLS bootstrap and must get no cert from khw", n)
		}
	}
	// Serial in the report is the one on disk.
	if got, want := status(t, r, "kubernetes").Serial, formatSerial(readCert(t, dir, "kubernetes").SerialNumber); got != want {
		t.Errorf("report serial %s, cert serial %s", got, want)
	}
	checkCerts(t, c, dir, now, now)
}

func TestReconcileRSA(t *testing.T) {
	c := defaultCluster(t)
	c.PKI.KeyAlgorithm, c.PKI.KeySize = "rsa", 2048
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	reconcile(t, c, dir, now)
	checkCerts(t, c, dir, now, now)

	// Back to ECDSA: every ordinary leaf is reissued for its key; the RSA CA
	// stays (it signs ECDSA certs just as well), and so does the RSA
	// service-account key (a new one would invalidate every ServiceAccount
	// token), with a warning.
	c.PKI.KeyAlgorithm, c.PKI.KeySize = "ecdsa", 256
	saKey := readFile(t, filepath.Join(dir, "service-account-key.pem"))
	r := reconcile(t, c, dir, now)
	ordinary := slices.DeleteFunc(slices.Clone(leafNames), func(n string) bool { return n == "service-account" })
	assertOnly(t, r, Reissued, ReasonKeyAlgorithm, ordinary...)
	if d := status(t, r, "admin").Reasons; !strings.Contains(d[0].String(), "key is RSA 2048, want ECDSA P-256") {
		t.Errorf("reason %v does not name both keys", d)
	}
	if _, ok := readCert(t, dir, "ca").PublicKey.(*rsa.PublicKey); !ok {
		t.Error("the CA was replaced")
	}
	for _, n := range ordinary {
		if _, ok := readCert(t, dir, n).PublicKey.(*ecdsa.PublicKey); !ok {
			t.Errorf("%s is not ECDSA after the switch", n)
		}
	}
	sa := status(t, r, "service-account")
	if len(sa.Reasons) != 1 || sa.Reasons[0].Code != ReasonKeyAlgorithm || !strings.Contains(sa.Reasons[0].Detail, "the key is kept") {
		t.Errorf("service-account: %s %v, want kept with a key-algorithm warning", sa.Action, sa.Reasons)
	}
	if !bytes.Equal(saKey, readFile(t, filepath.Join(dir, "service-account-key.pem"))) {
		t.Error("the service-account key was replaced without AllowNewServiceAccountKey")
	}
	if again := reconcile(t, c, dir, now); again.Changed() {
		t.Errorf("the kept RSA service-account key makes every run write %v", again.Written)
	}

	// Asked for: a new ECDSA service-account key.
	r = reconcile(t, c, dir, now, AllowNewServiceAccountKey())
	if s := status(t, r, "service-account"); s.Action != Reissued || !slices.Equal(codes(s.Reasons), []ReasonCode{ReasonKeyAlgorithm}) {
		t.Errorf("service-account with AllowNewServiceAccountKey: %s %v, want reissued (key-algorithm)", s.Action, s.Reasons)
	}
	if _, ok := readCert(t, dir, "service-account").PublicKey.(*ecdsa.PublicKey); !ok {
		t.Error("service-account is not ECDSA after AllowNewServiceAccountKey")
	}
}

func TestReconcileIsIdempotent(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	first := reconcile(t, c, dir, now)
	before := snapshot(t, dir)
	time.Sleep(20 * time.Millisecond) // a rewrite would show in mtimes

	second := reconcile(t, c, dir, now.Add(time.Hour))
	if second.Changed() || len(second.Written) != 0 {
		t.Errorf("second run wrote %v", second.Written)
	}
	for _, n := range allNames {
		s1, s2 := status(t, first, n), status(t, second, n)
		if s2.Action != Kept || len(s2.Reasons) != 0 {
			t.Errorf("%s: %s %v, want kept", n, s2.Action, s2.Reasons)
		}
		if s1.Serial != s2.Serial || s2.Serial == "" {
			t.Errorf("%s: serial %s became %s", n, s1.Serial, s2.Serial)
		}
	}
	after := snapshot(t, dir)
	if len(after) != len(before) {
		t.Errorf("file count %d → %d", len(before), len(after))
	}
	for name, b := range before {
		a := after[name]
		if a.data != b.data || !a.mtime.Equal(b.mtime) || a.mode != b.mode {
			t.Errorf("%s changed (mtime %s → %s)", name, b.mtime, a.mtime)
		}
	}
}

func TestAddControlPlaneReissuesOnlyKubernetes(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now)
	oldSerial := readCert(t, dir, "kubernetes").SerialNumber

	c.Nodes = append(c.Nodes, config.Node{Name: "cp4", Role: config.RoleControlPlane, IP: "192.168.122.14"})
	c.SetDefaults()
	if _, err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r := reconcile(t, c, dir, now)
	assertOnly(t, r, Reissued, ReasonSANs, "kubernetes")
	k := status(t, r, "kubernetes")
	if len(k.Reasons) != 1 || k.Reasons[0].Detail != "missing 192.168.122.14, cp4, cp4.kubernetes.local" {
		t.Errorf("reasons = %v, want only sans: missing 192.168.122.14, cp4, cp4.kubernetes.local", k.Reasons)
	}
	wantWritten := []string{"kubernetes-csr.json", "kubernetes-key.pem", "kubernetes.pem"}
	if !slices.Equal(r.Written, wantWritten) {
		t.Errorf("written = %v, want %v", r.Written, wantWritten)
	}
	cert := readCert(t, dir, "kubernetes")
	if cert.SerialNumber.Cmp(oldSerial) == 0 {
		t.Error("serial unchanged")
	}
	for _, h := range []string{"cp4", "cp4.kubernetes.local", "192.168.122.14", "lb", "10.32.0.1"} {
		if err := cert.VerifyHostname(h); err != nil {
			t.Errorf("new cert: %v", err)
		}
	}
	if n := len(cert.DNSNames) + len(cert.IPAddresses); n != 21 {
		t.Errorf("%d SANs, want 21 (18 + cp4's IP, name and FQDN)", n)
	}
}

func TestRenewWindowAndExpiry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(c *config.Cluster) time.Duration
		code  ReasonCode
	}{
		{"within renewBefore", func(c *config.Cluster) time.Duration { return c.PKI.CertValidity - c.PKI.RenewBefore + time.Hour }, ReasonRenew},
		{"expired", func(c *config.Cluster) time.Duration { return c.PKI.CertValidity + time.Hour }, ReasonExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultCluster(t)
			dir := t.TempDir()
			now := time.Now().Truncate(time.Second)
			reconcile(t, c, dir, now)
			caBefore := readFile(t, filepath.Join(dir, "ca.pem"))
			saKey := readFile(t, filepath.Join(dir, "service-account-key.pem"))
			later := now.Add(tc.after(c))
			r := reconcile(t, c, dir, later)
			if s := status(t, r, "ca"); s.Action != Kept {
				t.Errorf("ca: %s %v, want kept", s.Action, s.Reasons)
			}
			for _, n := range leafNames {
				if s := status(t, r, n); n != "service-account" && s.Action != Reissued {
					t.Errorf("%s: %s, want reissued", n, s.Action)
				}
				if got := codes(status(t, r, n).Reasons); !slices.Equal(got, []ReasonCode{tc.code}) {
					t.Errorf("%s reasons = %v, want only %s", n, got, tc.code)
				}
			}
			// The service-account cert is re-signed for its own key, so the
			// ServiceAccount tokens it signed stay valid.
			if s := status(t, r, "service-account"); s.Action != Resigned {
				t.Errorf("service-account: %s, want re-signed", s.Action)
			}
			if !bytes.Equal(saKey, readFile(t, filepath.Join(dir, "service-account-key.pem"))) {
				t.Error("service-account key replaced on renewal")
			}
			if !bytes.Equal(caBefore, readFile(t, filepath.Join(dir, "ca.pem"))) {
				t.Error("the CA (valid 10 years) was touched")
			}
			checkCerts(t, c, dir, later, now) // leaves fresh again, relative to later
		})
	}
}

func TestDeletedKeyIsReissued(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now)
	old := readCert(t, dir, "admin").SerialNumber
	if err := os.Remove(filepath.Join(dir, "admin-key.pem")); err != nil {
		t.Fatal(err)
	}
	r := reconcile(t, c, dir, now)
	assertOnly(t, r, Reissued, ReasonMissing, "admin")
	if d := status(t, r, "admin").Reasons[0].Detail; d != "admin-key.pem does not exist" {
		t.Errorf("detail %q", d)
	}
	if readCert(t, dir, "admin").SerialNumber.Cmp(old) == 0 {
		t.Error("admin cert not reissued")
	}
	checkCerts(t, c, dir, now, now)
}

// A crash between writing a new key and its cert leaves the new key next to
// the old cert; the next run must notice and repair it.
func TestHalfWrittenPairIsRepaired(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now)
	_, newKey, err := csr.ParseRequest(&csr.CertificateRequest{CN: "x", KeyRequest: csr.NewKeyRequest()})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kube-proxy-key.pem"), newKey, 0o600); err != nil {
		t.Fatal(err)
	}
	r := reconcile(t, c, dir, now)
	assertOnly(t, r, Reissued, ReasonKeyMismatch, "kube-proxy")
	checkCerts(t, c, dir, now, now)
}

// The seed blog gives kube-scheduler O=system:node-proxier; a directory made
// that way is repaired.
func TestWrongSubjectAndUsageAreReissued(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	reconcile(t, c, dir, now)
	nb, na := now.Add(-time.Minute), now.Add(c.PKI.CertValidity)
	cert, key := handIssue(t, dir, "system:kube-scheduler", "system:node-proxier", []string{}, "client", nb, na)
	writePair(t, dir, "kube-scheduler", cert, key)
	// The guide's single profile: the apiserver cert as client-only.
	cert, key = handIssue(t, dir, "kubernetes", "Kubernetes", kubernetesSANs, "client", nb, na)
	writePair(t, dir, "kubernetes", cert, key)

	r := reconcile(t, c, dir, now)
	for name, want := range map[string]ReasonCode{"kube-scheduler": ReasonSubject, "kubernetes": ReasonUsage} {
		s := status(t, r, name)
		if s.Action != Reissued || !slices.Equal(codes(s.Reasons), []ReasonCode{want}) {
			t.Errorf("%s: %s %v, want reissued (%s)", name, s.Action, s.Reasons, want)
		}
	}
	if d := status(t, r, "kube-scheduler").Reasons[0].Detail; !strings.Contains(d, "O=system:node-proxier") || !strings.Contains(d, "O=system:kube-scheduler") {
		t.Errorf("subject detail %q names neither the bad nor the good O", d)
	}
	if d := status(t, r, "kubernetes").Reasons[0].Detail; !strings.Contains(d, "want key usage [digital signature], EKU [server auth, client auth]") {
		t.Errorf("usage detail %q", d)
	}
	checkCerts(t, c, dir, now, now)
}

func writePair(t testing.TB, dir, name string, cert, key []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name+"-key.pem"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), cert, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFileModesAreRestored(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now)
	if err := os.Chmod(filepath.Join(dir, "admin-key.pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := reconcile(t, c, dir, now)
	if s := status(t, r, "admin"); s.Action != Kept {
		t.Errorf("admin %s, want kept (only its mode was wrong)", s.Action)
	}
	for path, want := range map[string]os.FileMode{filepath.Join(dir, "admin-key.pem"): 0o600, dir: 0o700} {
		if st, _ := os.Stat(path); st.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", path, st.Mode().Perm(), want)
		}
	}
}

func TestStaleCertsAreReportedNotDeleted(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now)

	c.Nodes = slices.DeleteFunc(c.Nodes, func(n config.Node) bool { return n.Name == "w2" })
	for i := range c.Nodes {
		if c.Nodes[i].Name == "w1" {
			c.Nodes[i].TLSBootstrap = true
		}
	}
	r := reconcile(t, c, dir, now)
	for name, detail := range map[string]string{"w1": "node w1 joins by TLS bootstrap", "w2": "node w2 is not in cluster.yaml"} {
		s := status(t, r, name)
		if s.Action != Stale || len(s.Reasons) != 1 || !strings.HasPrefix(s.Reasons[0].Detail, detail) {
			t.Errorf("%s: %s %v, want stale: %s", name, s.Action, s.Reasons, detail)
		}
		for _, f := range []string{name + ".pem", name + "-key.pem"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("stale %s was removed: %v", f, err)
			}
		}
	}
	if r.Changed() {
		t.Errorf("wrote %v for a config that only dropped certs", r.Written)
	}
}

func TestDryRun(t *testing.T) {
	c := defaultCluster(t)
	dir := filepath.Join(t.TempDir(), "pki")
	now := time.Now()
	r := reconcile(t, c, dir, now, DryRun())
	if !r.DryRun || status(t, r, "kubernetes").Action != Created || len(r.Written) != 1+3*len(allNames) {
		t.Errorf("dry run on nothing: %+v", r)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dry run created %s", dir)
	}
	reconcile(t, c, dir, now)
	before := snapshot(t, dir)
	c.Nodes = append(c.Nodes, config.Node{Name: "cp4", Role: config.RoleControlPlane, IP: "192.168.122.14"})
	c.SetDefaults()
	r = reconcile(t, c, dir, now, DryRun())
	assertOnly(t, r, Reissued, ReasonSANs, "kubernetes")
	after := snapshot(t, dir)
	for name, b := range before {
		if a := after[name]; a.data != b.data || !a.mtime.Equal(b.mtime) {
			t.Errorf("dry run changed %s", name)
		}
	}
}

func TestReportJSON(t *testing.T) {
	c := defaultCluster(t)
	var logBuf bytes.Buffer
	r := reconcile(t, c, t.TempDir(), time.Now(), WithLog(&logBuf))
	if !strings.Contains(logBuf.String(), "pki: created  kubernetes") || strings.Contains(logBuf.String(), "PRIVATE KEY") {
		t.Errorf("log:\n%s", logBuf.String())
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Certs) != len(r.Certs) || back.Certs[0].Action != Created || back.Certs[0].Reasons[0].Code != ReasonMissing {
		t.Errorf("JSON round trip lost data: %s", b)
	}
}

func TestInvalidConfigIsRejected(t *testing.T) {
	c := defaultCluster(t)
	c.PKI.KeySize = 1024
	dir := filepath.Join(t.TempDir(), "pki")
	_, err := Reconcile(c, dir, time.Now())
	var ve *config.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "pki.keySize") {
		t.Fatalf("err = %v, want a ValidationError naming pki.keySize", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Error("an invalid config still created the pki directory")
	}
}

// config.Validate rejects a worker named like a component cert; checkNames
// is Reconcile's own guard should it ever let one through. Either way
// nothing is written.
func TestWorkerNamedLikeAComponentCert(t *testing.T) {
	for _, name := range []string{"kubernetes", "admin", "ca", "ca-key", "kubernetes-key", "service-account-key"} {
		c := defaultCluster(t)
		c.Nodes[4].Name = name // w1
		dir := filepath.Join(t.TempDir(), "pki")
		rep, err := Reconcile(c, dir, time.Now())
		if err == nil || rep != nil || !strings.Contains(err.Error(), "nodes[4]") || !strings.Contains(err.Error(), name) {
			t.Errorf("worker %q: report %v, err = %v, want an error naming nodes[4] and no report", name, rep, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("worker %q: the rejected config created %s", name, dir)
		}
		var fe *config.FieldError
		if err := checkNames(c, Specs(c)); !errors.As(err, &fe) || fe.Field != "nodes[4].name" || fe.Value != name {
			t.Errorf("worker %q: checkNames = %v, want a FieldError on nodes[4].name", name, err)
		}
	}
}
