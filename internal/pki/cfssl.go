package pki

import (
	"crypto"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"time"

	cfconfig "github.com/cloudflare/cfssl/config"
	"github.com/cloudflare/cfssl/csr"
	"github.com/cloudflare/cfssl/helpers"
	"github.com/cloudflare/cfssl/initca"
	cflog "github.com/cloudflare/cfssl/log"
	"github.com/cloudflare/cfssl/signer"
	"github.com/cloudflare/cfssl/signer/local"

	"github.com/khw-dev/khw/internal/config"
)

func init() {
	// cfssl logs every key it generates and every cert it signs at level
	// Info through the standard logger (stderr). khw reports what it did
	// itself and cfssl returns every error, so only cfssl's critical messages
	// remain.
	cflog.Level = cflog.LevelCritical
}

// backdate is how far before "now" a cert's NotBefore lies, so a node whose
// clock lags a little still accepts a fresh cert (cfssl's default backdate).
const backdate = 5 * time.Minute

// CAConfigFile is the cfssl signing config in the pki directory.
const CAConfigFile = "ca-config.json"

// File names of one cert in the pki directory.
func certFile(name string) string { return name + ".pem" }
func keyFile(name string) string  { return name + "-key.pem" }
func csrFile(name string) string  { return name + "-csr.json" }

// usages returns the cfssl usage names (ca-config.json "usages") of a profile
// for a key algorithm: digital signature everywhere, key encipherment only
// for RSA TLS certs (RSA key transport; an ECDSA key cannot encipher), server
// auth only for certs that serve, client auth only for clients.
func usages(p Profile, algo string) []string {
	sig := []string{"digital signature"}
	if algo == "rsa" {
		sig = append(sig, "key encipherment")
	}
	switch p {
	case ProfileCA:
		return []string{"cert sign", "crl sign"}
	case ProfileKubernetes:
		return append(sig, "server auth", "client auth")
	case ProfileClient:
		return append(sig, "client auth")
	default: // ProfileSigning
		return []string{"digital signature"}
	}
}

// expectedUsage translates usages through cfssl's own tables, so what khw
// checks is what cfssl issues.
func expectedUsage(p Profile, algo string) (x509.KeyUsage, []x509.ExtKeyUsage) {
	ku, eku, _ := (&cfconfig.SigningProfile{Usage: usages(p, algo)}).Usages()
	return ku, eku
}

// hours formats d as cfssl expects it ("8760h"); cfssl parses it with
// time.ParseDuration.
func hours(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return d.String()
}

type cfProfile struct {
	Usages []string `json:"usages,omitempty"`
	Expiry string   `json:"expiry"`
}

type cfConfig struct {
	Signing struct {
		Default  cfProfile            `json:"default"`
		Profiles map[string]cfProfile `json:"profiles"`
	} `json:"signing"`
}

// caConfigJSON renders ca-config.json: a default with only an expiry (so a
// gencert without -profile fails instead of issuing a cert with the wrong
// usages) and the profiles kubernetes, client and signing, each valid for
// pki.certValidity.
func caConfigJSON(c *config.Cluster) []byte {
	var cfg cfConfig
	exp := hours(c.PKI.CertValidity)
	cfg.Signing.Default = cfProfile{Expiry: exp}
	cfg.Signing.Profiles = map[string]cfProfile{}
	for _, p := range []Profile{ProfileKubernetes, ProfileClient, ProfileSigning} {
		cfg.Signing.Profiles[string(p)] = cfProfile{Usages: usages(p, c.PKI.KeyAlgorithm), Expiry: exp}
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return append(b, '\n')
}

// loadPolicy parses ca-config.json with cfssl, so the signer uses exactly the
// file a student would pass as -config.
func loadPolicy(b []byte) (*cfconfig.Signing, error) {
	cfg, err := cfconfig.LoadConfig(b)
	if err != nil {
		return nil, fmt.Errorf("pki: cfssl rejected the generated %s: %w", CAConfigFile, err)
	}
	return cfg.Signing, nil
}

type csrName struct {
	C  string `json:"C,omitempty"`
	ST string `json:"ST,omitempty"`
	L  string `json:"L,omitempty"`
	O  string `json:"O,omitempty"`
	OU string `json:"OU,omitempty"`
}

type csrKey struct {
	Algo string `json:"algo"`
	Size int    `json:"size"`
}

type csrCA struct {
	Expiry      string `json:"expiry"`
	PathLenZero bool   `json:"pathlenzero"`
}

type csrDoc struct {
	CN    string    `json:"CN"`
	Key   csrKey    `json:"key"`
	Names []csrName `json:"names"`
	Hosts []string  `json:"hosts"`
	CA    *csrCA    `json:"ca,omitempty"`
}

// csrJSON renders <name>-csr.json in cfssl's CSR JSON schema
// (csr.CertificateRequest): CN, key {algo, size}, names [{C, ST, L, O, OU}],
// hosts, and for the CA its validity and path length 0.
func csrJSON(c *config.Cluster, s Spec) []byte {
	p := c.PKI
	d := csrDoc{
		CN:    s.CN,
		Key:   csrKey{Algo: p.KeyAlgorithm, Size: p.KeySize},
		Names: []csrName{{C: p.Subject.Country, ST: p.Subject.State, L: p.Subject.Locality, O: s.O, OU: s.OU}},
		Hosts: s.Hosts,
	}
	if d.Hosts == nil {
		d.Hosts = []string{}
	}
	if s.Profile == ProfileCA {
		d.CA = &csrCA{Expiry: hours(p.CAValidity), PathLenZero: true}
	}
	b, _ := json.MarshalIndent(d, "", "  ")
	return append(b, '\n')
}

// parseCSRJSON reads a CSR JSON back the way `cfssl gencert` does.
func parseCSRJSON(name string, b []byte) (*csr.CertificateRequest, error) {
	req := csr.New()
	if err := json.Unmarshal(b, req); err != nil {
		return nil, fmt.Errorf("pki: %s: %w", csrFile(name), err)
	}
	return req, nil
}

// newCA self-signs a CA cert for req the way `cfssl gencert -initca` does
// (initca's CA policy: CA:true, cert sign + CRL sign), valid from
// now-backdate to now+validity. With key nil it generates a key as req.key
// asks; otherwise it re-signs with key (renewal: certs signed by the old CA
// cert still verify against the new one). It returns the cert and key PEM.
func newCA(req *csr.CertificateRequest, key crypto.Signer, keyPEM []byte, now time.Time, validity time.Duration) (certPEM, outKeyPEM []byte, err error) {
	var csrPEM []byte
	if key == nil {
		if csrPEM, keyPEM, err = csr.ParseRequest(req); err != nil {
			return nil, nil, fmt.Errorf("pki: generate CA key and CSR: %w", err)
		}
		if key, err = helpers.ParsePrivateKeyPEM(keyPEM); err != nil {
			return nil, nil, fmt.Errorf("pki: parse new CA key: %w", err)
		}
	} else if csrPEM, err = csr.Generate(key, req); err != nil {
		return nil, nil, fmt.Errorf("pki: CA CSR: %w", err)
	}
	policy := initca.CAPolicy()
	policy.Default.Expiry = validity
	policy.Default.ExpiryString = hours(validity)
	if req.CA != nil {
		policy.Default.CAConstraint.MaxPathLenZero = req.CA.PathLenZero
	}
	s, err := local.NewSigner(key, nil, signer.DefaultSigAlgo(key), policy)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: CA signer: %w", err)
	}
	nb, na := validityWindow(now, validity, time.Time{})
	certPEM, err = s.Sign(signer.SignRequest{Request: string(csrPEM), NotBefore: nb, NotAfter: na})
	if err != nil {
		return nil, nil, fmt.Errorf("pki: self-sign CA: %w", err)
	}
	return certPEM, keyPEM, nil
}

// validityWindow is [now-backdate, now+validity], the end capped at the CA's
// NotAfter (capAt, zero for none): a cert must not outlive its issuer.
func validityWindow(now time.Time, validity time.Duration, capAt time.Time) (time.Time, time.Time) {
	nb := now.Add(-backdate).UTC().Truncate(time.Second)
	na := now.Add(validity).UTC().Truncate(time.Second)
	if !capAt.IsZero() && na.After(capAt) {
		na = capAt
	}
	return nb, na
}

// issuer signs leaf certs with the CA through cfssl's local signer and the
// profiles of ca-config.json.
type issuer struct {
	s        *local.Signer
	ca       *x509.Certificate
	validity time.Duration
}

func newIssuer(ca *x509.Certificate, key crypto.Signer, policy *cfconfig.Signing, validity time.Duration) (*issuer, error) {
	s, err := local.NewSigner(key, ca, signer.DefaultSigAlgo(key), policy)
	if err != nil {
		return nil, fmt.Errorf("pki: cfssl signer from %s: %w", certFile(CAName), err)
	}
	return &issuer{s: s, ca: ca, validity: validity}, nil
}

// issue generates a key and CSR for req (csr.ParseRequest, as `cfssl gencert`
// does) and signs it with profile, SANs = req.hosts. It returns cert and key
// PEM.
func (is *issuer) issue(name string, req *csr.CertificateRequest, profile Profile, now time.Time) (certPEM, keyPEM []byte, err error) {
	csrPEM, keyPEM, err := csr.ParseRequest(req)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: generate key and CSR: %w", name, err)
	}
	nb, na := validityWindow(now, is.validity, is.ca.NotAfter)
	certPEM, err = is.s.Sign(signer.SignRequest{
		Hosts:     req.Hosts,
		Request:   string(csrPEM),
		Profile:   string(profile),
		NotBefore: nb,
		NotAfter:  na,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: sign with profile %s: %w", name, profile, err)
	}
	return certPEM, keyPEM, nil
}
