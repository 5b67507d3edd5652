package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	cfconfig "github.com/cloudflare/cfssl/config"
	"github.com/cloudflare/cfssl/csr"
	cferr "github.com/cloudflare/cfssl/errors"
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
const CAConfigFile = config.CAConfigBase + ".json"

// File names of one cert in the pki directory. The names and suffixes come
// from config (CertCA …, KeySuffix, CSRSuffix), which refuses node names
// that would make one cert's file another's.
func certFile(name string) string { return name + ".pem" }
func keyFile(name string) string  { return name + config.KeySuffix + ".pem" }
func csrFile(name string) string  { return name + config.CSRSuffix + ".json" }

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
		return nil, fmt.Errorf("pki: cfssl rejected the %s khw generated: %w (this is a bug in khw)", CAConfigFile, plainErr(err))
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

// csrDocFor is <name>-csr.json for s in cfssl's CSR JSON schema
// (csr.CertificateRequest): CN, key {algo, size}, names [{C, ST, L, O, OU}],
// hosts, and for the CA its validity and path length 0.
func csrDocFor(c *config.Cluster, s Spec) csrDoc {
	p := c.PKI
	d := csrDoc{
		CN:    s.CN,
		Key:   csrKey{Algo: p.KeyAlgorithm, Size: p.KeySize},
		Names: []csrName{{C: s.C, ST: s.ST, L: s.L, O: s.O, OU: s.OU}},
		Hosts: s.Hosts,
	}
	if d.Hosts == nil {
		d.Hosts = []string{}
	}
	if s.Profile == ProfileCA {
		d.CA = &csrCA{Expiry: hours(p.CAValidity), PathLenZero: true}
	}
	return d
}

// withSubject makes d name subject n instead of the Spec's: a CA kept or
// re-signed with its old subject is described as it is. A field with several
// values becomes several names entries, in order, which cfssl encodes back
// into the same subject.
func (d csrDoc) withSubject(n pkix.Name) csrDoc {
	d.CN = n.CommonName
	fields := [][]string{n.Country, n.Province, n.Locality, n.Organization, n.OrganizationalUnit}
	rows := 1
	for _, f := range fields {
		rows = max(rows, len(f))
	}
	at := func(f []string, i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	d.Names = make([]csrName, rows)
	for i := range d.Names {
		d.Names[i] = csrName{C: at(n.Country, i), ST: at(n.Province, i), L: at(n.Locality, i),
			O: at(n.Organization, i), OU: at(n.OrganizationalUnit, i)}
	}
	return d
}

// withKey makes d's key section describe pub (a kept or re-signed key may be
// of another algorithm than pki.keyAlgorithm asks for now).
func (d csrDoc) withKey(pub crypto.PublicKey) csrDoc {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		d.Key = csrKey{Algo: "ecdsa", Size: k.Curve.Params().BitSize}
	case *rsa.PublicKey:
		d.Key = csrKey{Algo: "rsa", Size: k.N.BitLen()}
	}
	return d
}

// describing returns the CSR JSON of a cert that stays on disk (kept or
// re-signed from its key): the Spec's, with subject and key as the cert has
// them, so the file describes the cert it sits next to.
func (d csrDoc) describing(cert *x509.Certificate) csrDoc {
	return d.withSubject(cert.Subject).withKey(cert.PublicKey)
}

func (d csrDoc) json() []byte {
	b, _ := json.MarshalIndent(d, "", "  ")
	return append(b, '\n')
}

// csrJSON renders the Spec's <name>-csr.json (see csrDocFor).
func csrJSON(c *config.Cluster, s Spec) []byte { return csrDocFor(c, s).json() }

// parseCSRJSON reads a CSR JSON back the way `cfssl gencert` does.
func parseCSRJSON(name string, b []byte) (*csr.CertificateRequest, error) {
	req := csr.New()
	if err := json.Unmarshal(b, req); err != nil {
		return nil, fmt.Errorf("pki: %s as khw generated it does not parse as cfssl CSR JSON: %w (this is a bug in khw)", csrFile(name), err)
	}
	return req, nil
}

// newCA self-signs a CA cert for req the way `cfssl gencert -initca` does
// (initca's CA policy: CA:true, cert sign + CRL sign), valid from
// now-backdate to now+validity. With key nil it generates a key as req.key
// asks; otherwise it re-signs with key, as `cfssl gencert -initca
// -ca-key=ca-key.pem` does: certs signed by the old CA cert still verify
// against the new one when req names the same subject. It returns the cert
// and key PEM (keyPEM unchanged when given).
func newCA(req *csr.CertificateRequest, key crypto.Signer, keyPEM []byte, now time.Time, validity time.Duration) (certPEM, outKeyPEM []byte, err error) {
	var csrPEM []byte
	if key == nil {
		if csrPEM, keyPEM, err = csr.ParseRequest(req); err != nil {
			return nil, nil, fmt.Errorf("pki: %s: cfssl could not generate the CA key and CSR: %w", keyFile(CAName), plainErr(err))
		}
		if key, err = helpers.ParsePrivateKeyPEM(keyPEM); err != nil {
			return nil, nil, fmt.Errorf("pki: %s: the key cfssl generated does not parse: %w", keyFile(CAName), plainErr(err))
		}
	} else if csrPEM, err = csr.Generate(key, req); err != nil {
		return nil, nil, fmt.Errorf("pki: %s: cfssl could not make a CSR from %s: %w", certFile(CAName), keyFile(CAName), plainErr(err))
	}
	policy := initca.CAPolicy()
	policy.Default.Expiry = validity
	policy.Default.ExpiryString = hours(validity)
	if req.CA != nil {
		policy.Default.CAConstraint.MaxPathLenZero = req.CA.PathLenZero
	}
	s, err := local.NewSigner(key, nil, signer.DefaultSigAlgo(key), policy)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: cfssl cannot sign with this key: %w", keyFile(CAName), plainErr(err))
	}
	nb, na := validityWindow(now, validity, time.Time{})
	certPEM, err = s.Sign(signer.SignRequest{Request: string(csrPEM), NotBefore: nb, NotAfter: na})
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: cfssl could not self-sign the CA cert: %w", certFile(CAName), plainErr(err))
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
		return nil, fmt.Errorf("pki: %s: cfssl cannot sign with it and %s: %w", certFile(CAName), keyFile(CAName), plainErr(err))
	}
	return &issuer{s: s, ca: ca, validity: validity}, nil
}

// issue generates a key and CSR for req (csr.ParseRequest, as `cfssl gencert`
// does) and signs it with profile, SANs = req.hosts. It returns cert and key
// PEM.
func (is *issuer) issue(name string, req *csr.CertificateRequest, profile Profile, now time.Time) (certPEM, keyPEM []byte, err error) {
	csrPEM, keyPEM, err := csr.ParseRequest(req)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: cfssl could not generate a key and CSR from %s: %w", keyFile(name), csrFile(name), plainErr(err))
	}
	certPEM, err = is.sign(name, req, csrPEM, profile, now)
	return certPEM, keyPEM, err
}

// resign signs a new cert for an existing key (the service-account key,
// whose tokens must stay valid): a CSR from key and req, then as issue.
func (is *issuer) resign(name string, req *csr.CertificateRequest, key crypto.Signer, profile Profile, now time.Time) ([]byte, error) {
	csrPEM, err := csr.Generate(key, req)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: cfssl could not make a CSR from %s: %w", certFile(name), keyFile(name), plainErr(err))
	}
	return is.sign(name, req, csrPEM, profile, now)
}

func (is *issuer) sign(name string, req *csr.CertificateRequest, csrPEM []byte, profile Profile, now time.Time) ([]byte, error) {
	nb, na := validityWindow(now, is.validity, is.ca.NotAfter)
	certPEM, err := is.s.Sign(signer.SignRequest{
		Hosts:     req.Hosts,
		Request:   string(csrPEM),
		Profile:   string(profile),
		NotBefore: nb,
		NotAfter:  na,
	})
	if err != nil {
		return nil, fmt.Errorf("pki: %s: cfssl could not sign it with profile %s of %s: %w", certFile(name), profile, CAConfigFile, plainErr(err))
	}
	return certPEM, nil
}

// cfsslError is a cfssl error (whose Error() is a JSON object such as
// {"code":1002,"message":"Failed to decode certificate"}) as a sentence.
type cfsslError struct{ err *cferr.Error }

func (e *cfsslError) Error() string {
	m := strings.TrimSuffix(strings.TrimSpace(e.err.Message), ".")
	if m == "" {
		m = fmt.Sprintf("cfssl error %d", e.err.ErrorCode)
	}
	if r := []rune(m); len(r) > 1 && unicode.IsUpper(r[0]) && !unicode.IsUpper(r[1]) {
		r[0] = unicode.ToLower(r[0])
		m = string(r)
	}
	return m
}

func (e *cfsslError) Unwrap() error { return e.err }

// plainErr turns a cfssl error into a plain sentence (errors.As still finds
// the *cferr.Error); any other error is returned as is.
func plainErr(err error) error {
	var ce *cferr.Error
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	if ce == err {
		return &cfsslError{ce}
	}
	// Wrapped by someone else: keep their words, replace the JSON.
	return errors.New(strings.Replace(err.Error(), ce.Error(), (&cfsslError{ce}).Error(), 1))
}

// InputFile is one cfssl input file of the PKI directory: its base name
// and content.
type InputFile struct {
	Name string
	Data []byte
}

// InputFiles returns what cfssl's command-line tools need to issue the
// certs of c by hand, in the order to write them: ca-config.json, then
// <name>-csr.json of each Spec (the CA first). They are the files
// Reconcile writes beside the certs of a fresh PKI.
func InputFiles(c *config.Cluster) []InputFile {
	out := []InputFile{{CAConfigFile, caConfigJSON(c)}}
	for _, s := range Specs(c) {
		out = append(out, InputFile{csrFile(s.Name), csrJSON(c, s)})
	}
	return out
}
