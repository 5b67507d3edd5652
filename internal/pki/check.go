package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
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
	certErr, keyErr error // wraps fs.ErrNotExist when the file is missing
}

// loadPair reads and parses <name>.pem and <name>-key.pem in dir. Errors are
// recorded in the pair, not returned: a broken file is a reason to reissue.
func loadPair(dir, name string) pair {
	var p pair
	p.certPEM, p.certErr = os.ReadFile(filepath.Join(dir, certFile(name)))
	if p.certErr == nil {
		p.cert, p.certErr = helpers.ParseCertificatePEM(p.certPEM)
	}
	p.keyPEM, p.keyErr = os.ReadFile(filepath.Join(dir, keyFile(name)))
	if p.keyErr == nil {
		p.key, p.keyErr = helpers.ParsePrivateKeyPEM(p.keyPEM)
	}
	return p
}

// fileReason turns a read/parse error of file into a reason.
func fileReason(file string, err error) Reason {
	if errors.Is(err, fs.ErrNotExist) {
		return Reason{ReasonMissing, file + " does not exist"}
	}
	return Reason{ReasonUnreadable, fmt.Sprintf("%s: %v", file, err)}
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

// keyDesc names a public key: "ECDSA P-256", "RSA 2048", "Ed25519".
func keyDesc(pub crypto.PublicKey) string {
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

// wantKeyDesc names the key pki.keyAlgorithm/keySize asks for, as keyDesc.
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

// checkLeaf compares a cert/key pair on disk with its Spec and returns why
// it must be reissued (nil: keep it). ca is the current CA; caNew says it was
// regenerated in this run.
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
		d := "issuer " + p.cert.Issuer.String()
		if caNew {
			d = "the CA was regenerated"
		}
		rs = append(rs, Reason{ReasonNotSignedBy, d})
	}
	rs = append(rs, timeReasons(p.cert, now, c.PKI.RenewBefore)...)
	if got := p.cert.Subject; got.CommonName != s.CN || !slices.Equal(got.Organization, nonEmpty(s.O)) {
		rs = append(rs, Reason{ReasonSubject, fmt.Sprintf("has CN=%s O=%s, want CN=%s O=%s",
			got.CommonName, strings.Join(got.Organization, "+"), s.CN, s.O)})
	}
	if missing, extra := sanDiff(s.Hosts, certSANs(p.cert)); len(missing)+len(extra) > 0 {
		rs = append(rs, Reason{ReasonSANs, describeSANDiff(missing, extra)})
	}
	if got, want := keyDesc(p.cert.PublicKey), wantKeyDesc(c.PKI); got != want {
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
