package pki

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"log"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	cfconfig "github.com/cloudflare/cfssl/config"
	"github.com/cloudflare/cfssl/csr"
)

func TestCSRJSONAndCAConfig(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	reconcile(t, c, dir, time.Now())
	for name, w := range wantDefault {
		var req csr.CertificateRequest
		if err := json.Unmarshal(readFile(t, filepath.Join(dir, name+"-csr.json")), &req); err != nil {
			t.Fatalf("%s-csr.json: %v", name, err)
		}
		if req.CN != w.cn || len(req.Names) != 1 || req.Names[0].O != w.o[0] {
			t.Errorf("%s-csr.json: CN %q names %+v, want CN %q O %q", name, req.CN, req.Names, w.cn, w.o[0])
		}
		n := req.Names[0]
		if n.C != "US" || n.ST != "Oregon" || n.L != "Portland" || n.OU == "" {
			t.Errorf("%s-csr.json: names %+v lack pki.subject", name, n)
		}
		if got, want := sortedCopy(req.Hosts), sortedCopy(append(slices.Clone(w.dns), w.ips...)); !slices.Equal(got, want) {
			t.Errorf("%s-csr.json: hosts %q, want %q", name, got, want)
		}
		if req.KeyRequest == nil || req.KeyRequest.A != "ecdsa" || req.KeyRequest.S != 256 {
			t.Errorf("%s-csr.json: key %+v, want ecdsa 256", name, req.KeyRequest)
		}
		if (req.CA != nil) != w.ca {
			t.Errorf("%s-csr.json: ca section %+v", name, req.CA)
		}
	}
	if got := readFile(t, filepath.Join(dir, "kubernetes-csr.json")); !bytes.Contains(got, []byte(`"kubernetes.default.svc.cluster.local"`)) {
		t.Errorf("kubernetes-csr.json:\n%s", got)
	}

	cfg, err := cfconfig.LoadFile(filepath.Join(dir, "ca-config.json"))
	if err != nil {
		t.Fatalf("cfssl cannot load ca-config.json: %v", err)
	}
	for name, want := range map[string][]x509.ExtKeyUsage{
		"kubernetes": {x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		"client":     {x509.ExtKeyUsageClientAuth},
		"signing":    nil,
	} {
		p := cfg.Signing.Profiles[name]
		if p == nil {
			t.Fatalf("ca-config.json has no %s profile", name)
		}
		if p.Expiry != c.PKI.CertValidity {
			t.Errorf("profile %s expiry %s, want pki.certValidity %s", name, p.Expiry, c.PKI.CertValidity)
		}
		ku, eku, unknown := p.Usages()
		if ku != x509.KeyUsageDigitalSignature || !slices.Equal(eku, want) || len(unknown) != 0 {
			t.Errorf("profile %s usages %v → %v %v %v", name, p.Usage, ku, eku, unknown)
		}
	}
}

// The files are enough to issue a cert by hand with cfssl's gencert path,
// and the result is what khw itself would keep.
func TestStudentCanIssueByHand(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	reconcile(t, c, dir, now)
	var req csr.CertificateRequest
	if err := json.Unmarshal(readFile(t, filepath.Join(dir, "w2-csr.json")), &req); err != nil {
		t.Fatal(err)
	}
	cert, key := handIssueReq(t, dir, &req, "kubernetes", now.Add(-time.Minute), now.Add(c.PKI.CertValidity))
	writePair(t, dir, "w2", cert, key)
	r := reconcile(t, c, dir, now)
	if s := status(t, r, "w2"); s.Action != Kept {
		t.Errorf("hand-made w2 from w2-csr.json: %s %v, want kept", s.Action, s.Reasons)
	}
}

func TestCfsslDoesNotLog(t *testing.T) {
	var buf bytes.Buffer
	log.SetOutput(&buf)
	defer log.SetOutput(os.Stderr)
	c := defaultCluster(t)
	reconcile(t, c, t.TempDir(), time.Now())
	if buf.Len() != 0 {
		t.Errorf("cfssl logged:\n%s", buf.String())
	}
}
