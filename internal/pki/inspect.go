package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cloudflare/cfssl/helpers"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
)

// CertInfo describes one cert in words. It marshals to JSON as is.
type CertInfo struct {
	// Name is the file base name (kubernetes for kubernetes.pem), or "" when
	// the cert did not come from a pki directory.
	Name string `json:"name,omitempty"`
	// Path is the file the cert was read from, if any.
	Path string `json:"path,omitempty"`
	// Subject and Issuer are RFC 2253 distinguished names.
	Subject string `json:"subject"`
	Issuer  string `json:"issuer"`
	// CommonName and Organization are the two subject fields Kubernetes
	// reads (user and groups).
	CommonName   string   `json:"commonName"`
	Organization []string `json:"organization,omitempty"`
	// Serial is colon-separated hex, as `openssl x509 -text` prints it.
	Serial string `json:"serial"`
	// DNSNames and IPAddresses are the SANs.
	DNSNames    []string `json:"dnsNames,omitempty"`
	IPAddresses []string `json:"ipAddresses,omitempty"`
	IsCA        bool     `json:"isCA"`
	// KeyUsage and ExtKeyUsage in words ("digital signature", "server auth").
	KeyUsage    []string `json:"keyUsage"`
	ExtKeyUsage []string `json:"extKeyUsage"`
	// KeyAlgorithm is "ECDSA P-256", "RSA 2048" …; SignatureAlgorithm is the
	// issuer's signature ("ECDSA-SHA256").
	KeyAlgorithm       string    `json:"keyAlgorithm"`
	SignatureAlgorithm string    `json:"signatureAlgorithm"`
	NotBefore          time.Time `json:"notBefore"`
	NotAfter           time.Time `json:"notAfter"`
	// DaysLeft is whole days from the inspection time to NotAfter, negative
	// once expired.
	DaysLeft int  `json:"daysLeft"`
	Expired  bool `json:"expired"`
	// Purpose says what the cert is for.
	Purpose string `json:"purpose"`
	// Identity is what the apiserver makes of the cert as a client cert; nil
	// when it has no CN (the x509 authenticator then ignores it).
	Identity *Identity `json:"identity,omitempty"`
}

// Identity is the user the apiserver derives from a client cert with
// k8s.io/apiserver/pkg/authentication/request/x509 CommonNameUserConversion
// (user = CN, groups = O; the apiserver adds system:authenticated), and what
// that user may do.
type Identity struct {
	User   string   `json:"user"`
	Groups []string `json:"groups"`
	// Access lists, in sentences, what the identity may do and which
	// authorizer or built-in binding grants it.
	Access []string `json:"access"`
}

// Inspect reads <dir>/<name>.pem (name may also be given as "name.pem") and
// describes it as of now. A missing file is an error that lists the certs
// dir does hold.
func Inspect(dir, name string) (*CertInfo, error) {
	name = strings.TrimSuffix(name, ".pem")
	path := filepath.Join(dir, certFile(name))
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("pki: %s does not exist (fix: use one of: %s; or run the 02-pki step to issue the certs)",
				path, strings.Join(listCerts(dir), ", "))
		}
		return nil, fmt.Errorf("pki: %w", err)
	}
	cert, err := helpers.ParseCertificatePEM(b)
	if err != nil {
		return nil, fmt.Errorf("pki: %s is not one PEM certificate: %v (fix: re-run the 02-pki step to reissue it)", path, err)
	}
	info := InspectCert(cert, time.Now())
	info.Name, info.Path = name, path
	return info, nil
}

// listCerts returns the cert names (without .pem) in dir, sorted.
func listCerts(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if base, ok := strings.CutSuffix(e.Name(), ".pem"); ok && !strings.HasSuffix(base, "-key") && !strings.HasPrefix(base, ".") {
			out = append(out, base)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return []string{"(none)"}
	}
	return out
}

// InspectCert describes cert as of now. It works on any cert, e.g. one a
// student made by hand or a kubelet's bootstrapped cert, and explains its
// identity with the same rules as khw's own cert table.
func InspectCert(cert *x509.Certificate, now time.Time) *CertInfo {
	info := &CertInfo{
		Subject:            cert.Subject.String(),
		Issuer:             cert.Issuer.String(),
		CommonName:         cert.Subject.CommonName,
		Organization:       cert.Subject.Organization,
		Serial:             formatSerial(cert.SerialNumber),
		DNSNames:           cert.DNSNames,
		IsCA:               cert.BasicConstraintsValid && cert.IsCA,
		KeyUsage:           kuNames(cert.KeyUsage),
		ExtKeyUsage:        ekuNames(cert.ExtKeyUsage),
		KeyAlgorithm:       keyDesc(cert.PublicKey),
		SignatureAlgorithm: cert.SignatureAlgorithm.String(),
		NotBefore:          cert.NotBefore.UTC(),
		NotAfter:           cert.NotAfter.UTC(),
		DaysLeft:           int(math.Floor(cert.NotAfter.Sub(now).Hours() / 24)),
		Expired:            !now.Before(cert.NotAfter),
	}
	for _, ip := range cert.IPAddresses {
		info.IPAddresses = append(info.IPAddresses, canonHost(ip.String()))
	}
	server, client := hasEKU(cert, x509.ExtKeyUsageServerAuth), hasEKU(cert, x509.ExtKeyUsageClientAuth)
	purpose, access := describe(cert.Subject.CommonName, cert.Subject.Organization, info.IsCA, server, client)
	info.Purpose = purpose
	// The apiserver's own conversion, so user and groups are what it derives.
	resp, ok, err := x509request.CommonNameUserConversion.User([]*x509.Certificate{cert})
	switch {
	case err != nil:
		info.Identity = &Identity{Access: []string{"the apiserver rejects it as a client cert: " + err.Error()}}
	case info.IsCA:
		info.Identity = &Identity{Groups: []string{}, Access: access}
	case ok:
		groups := resp.User.GetGroups()
		if groups == nil {
			groups = []string{}
		}
		info.Identity = &Identity{User: resp.User.GetName(), Groups: groups, Access: access}
	}
	return info
}

// Text renders the description for a terminal: one field per line, the
// identity and what it may do last.
func (ci *CertInfo) Text() string {
	var b strings.Builder
	title := ci.Name
	if title == "" {
		title = ci.CommonName
	}
	if ci.Path != "" {
		title += " (" + ci.Path + ")"
	}
	b.WriteString(title + "\n")
	row := func(k, v string) { fmt.Fprintf(&b, "  %-13s %s\n", k+":", v) }
	row("Subject", ci.Subject)
	row("Issuer", ci.Issuer)
	row("Serial", ci.Serial)
	row("Key", ci.KeyAlgorithm+" (signed "+ci.SignatureAlgorithm+")")
	left := fmt.Sprintf("%d days left", ci.DaysLeft)
	if ci.Expired {
		left = fmt.Sprintf("EXPIRED %d days ago", -ci.DaysLeft)
	}
	row("Validity", ci.NotBefore.Format(time.RFC3339)+" to "+ci.NotAfter.Format(time.RFC3339)+" ("+left+")")
	ca := "no"
	if ci.IsCA {
		ca = "yes (CA:true)"
	}
	row("CA", ca)
	row("Key usage", orNone(ci.KeyUsage))
	row("Ext. usage", orNone(ci.ExtKeyUsage))
	row("SANs (DNS)", orNone(ci.DNSNames))
	row("SANs (IP)", orNone(ci.IPAddresses))
	row("Purpose", ci.Purpose)
	if id := ci.Identity; id != nil {
		if id.User != "" {
			row("Identity", fmt.Sprintf("user %q, groups [%s] (+ system:authenticated)", id.User, strings.Join(id.Groups, ", ")))
		} else {
			row("Identity", "none")
		}
		for i, a := range id.Access {
			label := ""
			if i == 0 {
				label = "May do:"
			}
			fmt.Fprintf(&b, "  %-13s - %s\n", label, a)
		}
	} else {
		row("Identity", "none: no CN, the apiserver's x509 authenticator ignores it")
	}
	return b.String()
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ", ")
}
