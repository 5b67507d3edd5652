package pki

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

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
	// Profile is the cfssl profile of ca-config.json whose key usages and
	// EKUs the cert has exactly ("kubernetes", "client", "signing"; "ca" for
	// a CA cert), "" when none has.
	Profile Profile `json:"profile,omitempty"`
	// Recipe is the cfssl command that makes such a cert from the pki
	// directory (see Spec.Recipe); set by Inspect when Profile is known.
	Recipe string `json:"recipe,omitempty"`
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

// CertNameError is Inspect's error for a name that is not a cert of the pki
// directory: not a plain name (a path, "..", a key or CSR JSON file), or no
// <name>.pem there. A caller with the cluster can add why a node has no cert
// (IsBootstrapNode).
type CertNameError struct {
	// Dir is the pki directory, Name the name as given.
	Dir, Name string
	// Problem says what is wrong, e.g. "names a private key file, not a cert".
	Problem string
	// Have lists the certs Dir holds (names without .pem), sorted; empty when
	// it holds none.
	Have []string
}

func (e *CertNameError) Error() string {
	fix := "run `khw pki` to issue the certs"
	if len(e.Have) > 0 {
		fix = "use one of: " + strings.Join(e.Have, ", ") + "; or run `khw pki` to issue the missing certs"
	}
	return fmt.Sprintf("pki: %q %s (fix: %s)", e.Name, e.Problem, fix)
}

// Inspect reads <dir>/<name>.pem (name may also be given as "name.pem") and
// describes it as of now, with the cfssl Recipe that makes such a cert.
//
// name must be a plain cert name: one with '/' or '\', "..", a leading ".",
// or ending in -key or -csr (a key or CSR JSON file), and one with no
// <name>.pem in dir, is a *CertNameError listing the certs dir holds. A file
// that is not one PEM certificate is an error naming it and saying what it
// holds.
func Inspect(dir, name string) (*CertInfo, error) {
	base := strings.TrimSuffix(name, ".pem")
	nameErr := func(problem string) error {
		have := certNames(dir)
		if have == nil {
			have = []string{}
		}
		return &CertNameError{Dir: dir, Name: name, Problem: problem, Have: have}
	}
	switch {
	case base == "":
		return nil, nameErr("is not a cert name")
	case strings.ContainsAny(base, `/\`) || strings.Contains(base, ".."):
		return nil, nameErr("is a path, not a cert name: give the name of a cert in " + dir)
	case strings.HasPrefix(base, "."):
		return nil, nameErr("is not a cert name (it starts with a dot)")
	case strings.HasSuffix(base, "-key"):
		return nil, nameErr(fmt.Sprintf("names a private key file, not a cert: inspect %s instead", strings.TrimSuffix(base, "-key")))
	case strings.HasSuffix(base, "-csr") || strings.HasSuffix(base, "-csr.json"):
		return nil, nameErr(fmt.Sprintf("names a CSR JSON file, not a cert: inspect %s instead",
			strings.TrimSuffix(strings.TrimSuffix(base, ".json"), "-csr")))
	case strings.HasSuffix(base, ".json"):
		return nil, nameErr("names a JSON file, not a cert")
	}
	path := filepath.Join(dir, certFile(base))
	b, err := readPEMFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nameErr("has no cert: " + path + " does not exist")
	}
	if err != nil {
		return nil, fmt.Errorf("pki: %s %v (fix: make it readable, or run `khw pki` to reissue it)", path, err)
	}
	cert, err := parseCertPEM(b)
	if err != nil {
		return nil, fmt.Errorf("pki: %s is not one PEM certificate: it %v (fix: run `khw pki` to reissue it)", path, err)
	}
	info := InspectCert(cert, time.Now())
	info.Name, info.Path = base, path
	if info.Profile != "" {
		info.Recipe = recipe(base, info.Profile)
	}
	return info, nil
}

// profileOf finds the cfssl profile whose key usages and EKUs the cert has
// exactly (ProfileCA for a CA), or "" when none does.
func profileOf(cert *x509.Certificate) Profile {
	if cert.IsCA {
		return ProfileCA
	}
	algo := "ecdsa"
	if _, ok := cert.PublicKey.(*rsa.PublicKey); ok {
		algo = "rsa"
	}
	for _, p := range []Profile{ProfileKubernetes, ProfileClient, ProfileSigning} {
		if usageDiff(cert, p, algo) == "" {
			return p
		}
	}
	return ""
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
		KeyAlgorithm:       KeyDesc(cert.PublicKey),
		SignatureAlgorithm: cert.SignatureAlgorithm.String(),
		NotBefore:          cert.NotBefore.UTC(),
		NotAfter:           cert.NotAfter.UTC(),
		DaysLeft:           int(math.Floor(cert.NotAfter.Sub(now).Hours() / 24)),
		Expired:            !now.Before(cert.NotAfter),
		Profile:            profileOf(cert),
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
	switch {
	case ci.Recipe != "":
		row("Recipe", ci.Recipe)
	case ci.Profile != "":
		row("Recipe", recipe("<name>", ci.Profile))
	default:
		row("Recipe", "none: its key usages and EKUs match no profile of "+CAConfigFile+" (kubernetes, client, signing)")
	}
	if note := recipeNote(ci.Profile); note != "" {
		fmt.Fprintf(&b, "  %-13s %s\n", "", note)
	}
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

// recipeNote warns where a recipe would replace a precious key: cfssljson
// -bare writes <name>-key.pem next to the cert.
func recipeNote(p Profile) string {
	switch p {
	case ProfileCA:
		return "(makes a NEW CA key: run it in a scratch directory; in the pki directory it replaces ca-key.pem " +
			"and every cert must be reissued. `cfssl gencert -initca -ca-key=ca-key.pem ca-csr.json` re-signs from the existing key)"
	case ProfileSigning:
		return "(makes a NEW key: run it in a scratch directory; in the pki directory it replaces the " +
			"service-account key and invalidates every ServiceAccount token)"
	}
	return ""
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ", ")
}

// CertNames lists the certificates in dir, sorted: NAME for each NAME.pem,
// keys (NAME-key.pem) left out. An unreadable dir has none.
func CertNames(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasSuffix(n, ".pem") && !strings.HasSuffix(n, "-key.pem") {
			out = append(out, strings.TrimSuffix(n, ".pem"))
		}
	}
	sort.Strings(out)
	return out
}

// WriteInfos writes infos as khw pki inspect prints them: indented JSON
// with asJSON (one object when single, the cert named on the command
// line, else an array), else each one's Text, a blank line between.
func WriteInfos(w io.Writer, infos []*CertInfo, asJSON, single bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if single {
			return enc.Encode(infos[0])
		}
		return enc.Encode(infos)
	}
	for i, info := range infos {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprint(w, info.Text())
	}
	return nil
}
