package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cloudflare/cfssl/helpers"

	"github.com/khw-dev/khw/internal/config"
)

// pair is a cert and its key as found on disk.
type pair struct {
	certPEM, keyPEM []byte
	cert            *x509.Certificate
	key             crypto.Signer
	// certErr and keyErr wrap fs.ErrNotExist when the file is missing;
	// otherwise their text is a predicate about the file ("is empty",
	// "holds a private key, not a certificate").
	certErr, keyErr error
}

// loadPair reads and parses <name>.pem and <name>-key.pem in dir. Errors are
// recorded in the pair, not returned: a broken file is a reason to reissue.
func loadPair(dir, name string) pair {
	var p pair
	p.certPEM, p.cert, p.certErr = readCertFile(filepath.Join(dir, certFile(name)))
	p.keyPEM, p.key, p.keyErr = readKeyFile(filepath.Join(dir, keyFile(name)))
	return p
}

// readCertFile reads and parses one PEM cert. The error wraps
// fs.ErrNotExist for a missing file and is otherwise a plain predicate about
// the file (see parseCertPEM).
func readCertFile(path string) ([]byte, *x509.Certificate, error) {
	b, err := readPEMFile(path)
	if err != nil {
		return nil, nil, err
	}
	cert, err := parseCertPEM(b)
	return b, cert, err
}

// readKeyFile is readCertFile for a PEM private key.
func readKeyFile(path string) ([]byte, crypto.Signer, error) {
	b, err := readPEMFile(path)
	if err != nil {
		return nil, nil, err
	}
	key, err := parseKeyPEM(b)
	return b, key, err
}

func readPEMFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return b, err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return nil, fmt.Errorf("cannot be read: %w", err)
}

// parseCertPEM parses b as exactly one PEM certificate (as cfssl does). Its
// error says in words what the file holds instead, e.g. "holds a private key
// (EC PRIVATE KEY), not a certificate"; never cfssl's JSON error.
func parseCertPEM(b []byte) (*x509.Certificate, error) {
	cert, err := helpers.ParseCertificatePEM(b)
	if err == nil {
		return cert, nil
	}
	return nil, errors.New(diagnosePEM(b, false, err))
}

// parseKeyPEM parses b as a PEM private key (PKCS#1, PKCS#8 or SEC 1, as
// cfssl does), with errors as parseCertPEM. The key itself never appears in
// an error.
func parseKeyPEM(b []byte) (crypto.Signer, error) {
	key, err := helpers.ParsePrivateKeyPEM(b)
	if err == nil {
		return key, nil
	}
	return nil, errors.New(diagnosePEM(b, true, err))
}

// diagnosePEM says why b is not one PEM certificate (or, with wantKey, not
// a PEM private key); err is what cfssl said.
func diagnosePEM(b []byte, wantKey bool, err error) string {
	what := "certificate"
	if wantKey {
		what = "private key"
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "is empty"
	}
	block, rest := pem.Decode(b)
	for block != nil && wantKey && block.Type == "EC PARAMETERS" {
		block, rest = pem.Decode(rest)
	}
	if block == nil {
		return "holds no PEM block (a PEM file starts with -----BEGIN …-----)"
	}
	isKey := strings.HasSuffix(block.Type, "PRIVATE KEY")
	switch {
	case !wantKey && isKey:
		return fmt.Sprintf("holds a private key (%s), not a certificate", block.Type)
	case wantKey && strings.Contains(block.Type, "CERTIFICATE"):
		return fmt.Sprintf("holds a %s, not a private key", strings.ToLower(block.Type))
	case wantKey && (block.Type == "ENCRYPTED PRIVATE KEY" || strings.Contains(block.Headers["Proc-Type"], "ENCRYPTED")):
		return "holds an encrypted private key; khw needs it unencrypted (e.g. openssl pkey -in KEY -out KEY.pem)"
	case !wantKey && block.Type == "CERTIFICATE":
		if _, perr := x509.ParseCertificate(block.Bytes); perr != nil {
			return "holds a CERTIFICATE block that does not parse: " + perr.Error()
		}
		if len(bytes.TrimSpace(rest)) > 0 {
			return "holds more than one PEM block; it must hold exactly one certificate"
		}
	}
	return fmt.Sprintf("holds a PEM block of type %s that is not a valid %s (%v)", block.Type, what, plainErr(err))
}

// fileReason turns a read/parse error of file into a reason.
func fileReason(file string, err error) Reason {
	if errors.Is(err, fs.ErrNotExist) {
		return Reason{ReasonMissing, file + " does not exist"}
	}
	return Reason{ReasonUnreadable, file + " " + fileProblem(err)}
}

// fileProblem is a read/parse error of a file as a predicate: "does not
// exist", "is empty", "holds no PEM block …".
func fileProblem(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "does not exist"
	}
	return err.Error()
}

// exists reports whether path exists; an error other than "not exist"
// counts as existing, so a file khw cannot even stat is never taken for
// absent.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// sameKey reports whether pub is the public half of key.
func sameKey(key crypto.Signer, pub crypto.PublicKey) bool {
	k, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(pub)
}

// signedBy reports whether cert was signed by ca: issuer name and signature.
func signedBy(cert, ca *x509.Certificate) bool {
	return bytes.Equal(cert.RawIssuer, ca.RawSubject) && cert.CheckSignatureFrom(ca) == nil
}

// signedWithKey reports whether cert's signature verifies with pub, whatever
// cert names as its issuer and whatever cert pub is in (if any).
func signedWithKey(cert *x509.Certificate, pub crypto.PublicKey) bool {
	parent := &x509.Certificate{PublicKey: pub}
	switch pub.(type) {
	case *ecdsa.PublicKey:
		parent.PublicKeyAlgorithm = x509.ECDSA
	case *rsa.PublicKey:
		parent.PublicKeyAlgorithm = x509.RSA
	case ed25519.PublicKey:
		parent.PublicKeyAlgorithm = x509.Ed25519
	default:
		return false
	}
	return cert.CheckSignatureFrom(parent) == nil
}

// notSignedDetail explains why cert does not chain to ca. newKey says the
// CA key was replaced in this run.
func notSignedDetail(cert, ca *x509.Certificate, newKey bool) string {
	sigOK := signedWithKey(cert, ca.PublicKey)
	nameOK := bytes.Equal(cert.RawIssuer, ca.RawSubject)
	switch {
	case newKey && !sigOK:
		return "signed by the previous CA key; a new CA (new ca-key.pem) was made in this run"
	case sigOK:
		return fmt.Sprintf("the signature verifies with the CA key, but its issuer %q is not the subject %q of the current %s "+
			"(the CA cert was re-made with another subject), so clients cannot chain it", cert.Issuer.String(), ca.Subject.String(), certFile(CAName))
	case nameOK:
		return fmt.Sprintf("signature does not verify with the current %s (the CA key changed)", certFile(CAName))
	default:
		return fmt.Sprintf("issued by %q, another CA than the current %s (%q)", cert.Issuer.String(), certFile(CAName), ca.Subject.String())
	}
}

// KeyDesc names a public key: "ECDSA P-256", "RSA 2048", "Ed25519".
func KeyDesc(pub crypto.PublicKey) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA %d", k.N.BitLen())
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return fmt.Sprintf("%T", pub)
}

// wantKeyDesc names the key pki.keyAlgorithm/keySize asks for, as KeyDesc.
func wantKeyDesc(p config.PKI) string {
	if p.KeyAlgorithm == "rsa" {
		return fmt.Sprintf("RSA %d", p.KeySize)
	}
	return fmt.Sprintf("ECDSA P-%d", p.KeySize)
}

// certSANs lists a cert's SANs: DNS names, then IPs (canonical form), then
// e-mail addresses and URIs.
func certSANs(cert *x509.Certificate) []string {
	out := slices.Clone(cert.DNSNames)
	for _, ip := range cert.IPAddresses {
		out = append(out, canonHost(ip.String()))
	}
	out = append(out, cert.EmailAddresses...)
	for _, u := range cert.URIs {
		out = append(out, u.String())
	}
	return out
}

// canonHost writes IPs canonically (an IPv4 address never in IPv6 form).
func canonHost(h string) string {
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	return h
}

// sanDiff returns the wanted SANs the cert lacks (in want order) and the
// cert's SANs nobody wants.
func sanDiff(want, have []string) (missing, extra []string) {
	w := map[string]bool{}
	for _, h := range want {
		w[canonHost(h)] = true
	}
	hv := map[string]bool{}
	for _, h := range have {
		hv[canonHost(h)] = true
	}
	for _, h := range want {
		if !hv[canonHost(h)] {
			missing = append(missing, h)
		}
	}
	for _, h := range have {
		if !w[canonHost(h)] {
			extra = append(extra, h)
		}
	}
	return missing, extra
}

func describeSANDiff(missing, extra []string) string {
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, "missing "+strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		parts = append(parts, "unexpected "+strings.Join(extra, ", "))
	}
	return strings.Join(parts, "; ")
}

// timeReasons checks a cert's validity window at now.
func timeReasons(cert *x509.Certificate, now time.Time, renewBefore time.Duration) []Reason {
	switch left := cert.NotAfter.Sub(now); {
	case left <= 0:
		return []Reason{{ReasonExpired, "expired " + cert.NotAfter.UTC().Format(time.RFC3339)}}
	case now.Before(cert.NotBefore):
		return []Reason{{ReasonNotYetValid, "valid only from " + cert.NotBefore.UTC().Format(time.RFC3339) + " (clock skew?)"}}
	case left < renewBefore:
		return []Reason{{ReasonRenew, fmt.Sprintf("expires %s, within pki.renewBefore %s",
			cert.NotAfter.UTC().Format(time.RFC3339), hours(renewBefore))}}
	}
	return nil
}

// subjectDiff compares a cert's whole subject (CN, O, OU, L, ST, C) with its
// Spec and describes the difference, e.g. "subject differs: L=Portland, want
// L=Berlin" ("" when equal). Only CN and O carry identity, but the others
// are what the CSR JSON says, and the CSR JSON must describe the cert.
func subjectDiff(got pkix.Name, s Spec) string {
	var have, want []string
	for _, f := range []struct {
		attr string
		got  []string
		want string
	}{
		{"CN", nonEmpty(got.CommonName), s.CN},
		{"O", got.Organization, s.O},
		{"OU", got.OrganizationalUnit, s.OU},
		{"L", got.Locality, s.L},
		{"ST", got.Province, s.ST},
		{"C", got.Country, s.C},
	} {
		if slices.Equal(f.got, nonEmpty(f.want)) {
			continue
		}
		have = append(have, f.attr+"="+orNoneJoin(f.got))
		want = append(want, f.attr+"="+orNoneJoin(nonEmpty(f.want)))
	}
	if len(have) == 0 {
		return ""
	}
	return "subject differs: " + strings.Join(have, " ") + ", want " + strings.Join(want, " ")
}

func orNoneJoin(v []string) string {
	if len(v) == 0 {
		return "(none)"
	}
	return strings.Join(v, "+")
}

// checkLeaf compares a cert/key pair on disk with its Spec and returns why
// it must be reissued (nil: keep it). ca is the current CA; caNew says its
// key was replaced in this run.
func checkLeaf(c *config.Cluster, s Spec, p pair, ca *x509.Certificate, caNew bool, now time.Time) []Reason {
	if p.cert == nil {
		return []Reason{fileReason(certFile(s.Name), p.certErr)}
	}
	var rs []Reason
	switch {
	case p.key == nil:
		rs = append(rs, fileReason(keyFile(s.Name), p.keyErr))
	case !sameKey(p.key, p.cert.PublicKey):
		rs = append(rs, Reason{ReasonKeyMismatch, keyFile(s.Name) + " is not the key of " + certFile(s.Name)})
	}
	if !signedBy(p.cert, ca) {
		rs = append(rs, Reason{ReasonNotSignedBy, notSignedDetail(p.cert, ca, caNew)})
	}
	rs = append(rs, timeReasons(p.cert, now, c.PKI.RenewBefore)...)
	if d := subjectDiff(p.cert.Subject, s); d != "" {
		rs = append(rs, Reason{ReasonSubject, d})
	}
	if missing, extra := sanDiff(s.Hosts, certSANs(p.cert)); len(missing)+len(extra) > 0 {
		rs = append(rs, Reason{ReasonSANs, describeSANDiff(missing, extra)})
	}
	if got, want := KeyDesc(p.cert.PublicKey), wantKeyDesc(c.PKI); got != want {
		rs = append(rs, Reason{ReasonKeyAlgorithm, fmt.Sprintf("key is %s, want %s", got, want)})
	}
	if d := usageDiff(p.cert, s.Profile, c.PKI.KeyAlgorithm); d != "" {
		rs = append(rs, Reason{ReasonUsage, d})
	}
	return rs
}

// usageDiff describes how a cert's key usage, EKUs and CA flag differ from
// what profile issues ("" when they match).
func usageDiff(cert *x509.Certificate, p Profile, algo string) string {
	ku, eku := expectedUsage(p, algo)
	isCA := p == ProfileCA
	gotEKU, wantEKU := ekuNames(cert.ExtKeyUsage), ekuNames(eku)
	slices.Sort(gotEKU)
	slices.Sort(wantEKU)
	if cert.KeyUsage == ku && slices.Equal(gotEKU, wantEKU) && cert.IsCA == isCA && len(cert.UnknownExtKeyUsage) == 0 {
		return ""
	}
	return fmt.Sprintf("has %s, want %s (profile %s)", usageWords(cert.KeyUsage, cert.ExtKeyUsage, cert.IsCA),
		usageWords(ku, eku, isCA), p)
}

func usageWords(ku x509.KeyUsage, eku []x509.ExtKeyUsage, isCA bool) string {
	s := "key usage [" + strings.Join(kuNames(ku), ", ") + "], EKU [" + strings.Join(ekuNames(eku), ", ") + "]"
	if isCA {
		s += ", CA:true"
	}
	return s
}

var kuWords = []struct {
	bit  x509.KeyUsage
	name string
}{
	{x509.KeyUsageDigitalSignature, "digital signature"},
	{x509.KeyUsageContentCommitment, "content commitment"},
	{x509.KeyUsageKeyEncipherment, "key encipherment"},
	{x509.KeyUsageDataEncipherment, "data encipherment"},
	{x509.KeyUsageKeyAgreement, "key agreement"},
	{x509.KeyUsageCertSign, "cert sign"},
	{x509.KeyUsageCRLSign, "crl sign"},
	{x509.KeyUsageEncipherOnly, "encipher only"},
	{x509.KeyUsageDecipherOnly, "decipher only"},
}

// kuNames lists the key usage bits in words (cfssl's names).
func kuNames(ku x509.KeyUsage) []string {
	out := []string{}
	for _, w := range kuWords {
		if ku&w.bit != 0 {
			out = append(out, w.name)
		}
	}
	return out
}

var ekuWords = map[x509.ExtKeyUsage]string{
	x509.ExtKeyUsageAny:             "any",
	x509.ExtKeyUsageServerAuth:      "server auth",
	x509.ExtKeyUsageClientAuth:      "client auth",
	x509.ExtKeyUsageCodeSigning:     "code signing",
	x509.ExtKeyUsageEmailProtection: "email protection",
	x509.ExtKeyUsageTimeStamping:    "timestamping",
	x509.ExtKeyUsageOCSPSigning:     "ocsp signing",
}

// ekuNames lists EKUs in words (cfssl's names).
func ekuNames(eku []x509.ExtKeyUsage) []string {
	out := []string{}
	for _, e := range eku {
		if n, ok := ekuWords[e]; ok {
			out = append(out, n)
		} else {
			out = append(out, fmt.Sprintf("eku(%d)", e))
		}
	}
	return out
}

// hasEKU reports whether a cert may be used for want: listed, "any", or no
// EKU extension at all (RFC 5280: unrestricted), as crypto/x509 decides.
func hasEKU(cert *x509.Certificate, want x509.ExtKeyUsage) bool {
	if len(cert.ExtKeyUsage) == 0 && len(cert.UnknownExtKeyUsage) == 0 {
		return true
	}
	return slices.Contains(cert.ExtKeyUsage, want) || slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageAny)
}
