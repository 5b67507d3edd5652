package pki

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"strings"
	"time"
)

// Action is what Reconcile did with one cert.
type Action string

const (
	// Kept: the cert and key on disk match their Spec and were left untouched.
	Kept Action = "kept"
	// Created: there was no cert; a key and cert were generated.
	Created Action = "created"
	// Reissued: a cert existed but no longer matched (see the reasons); a new
	// key and cert replaced it.
	Reissued Action = "reissued"
	// Resigned: a new cert was signed for the key already on disk, which is
	// kept: the precious keys, the CA (certs it signed stay valid, since
	// they verify against the same key and subject) and the service-account
	// key (ServiceAccount tokens stay valid), and any cert renewed with
	// Renew without new keys.
	Resigned Action = "re-signed"
	// Imported: a pre-issued kubelet cert (nodes[].kubeletCert) was verified
	// and copied into the pki directory.
	Imported Action = "imported"
	// Stale: a cert in the pki directory that no Spec asks for any more (a
	// removed worker, or one that switched to TLS bootstrap). It is reported,
	// never deleted.
	Stale Action = "stale"
)

// ReasonCode classifies why a cert was (re)issued or flagged.
type ReasonCode string

const (
	ReasonMissing      ReasonCode = "missing"          // cert or key file does not exist
	ReasonUnreadable   ReasonCode = "unreadable"       // cert or key file does not parse
	ReasonKeyMismatch  ReasonCode = "key-mismatch"     // the key is not the cert's key (e.g. a crash between the two writes)
	ReasonSubject      ReasonCode = "subject"          // CN, O, OU, L, ST or C differs from the Spec
	ReasonSANs         ReasonCode = "sans"             // SAN set differs (e.g. a control plane was added)
	ReasonKeyAlgorithm ReasonCode = "key-algorithm"    // key algorithm or size differs from pki.keyAlgorithm/keySize
	ReasonUsage        ReasonCode = "usage"            // key usage, EKU or CA flag differs from the profile
	ReasonRenew        ReasonCode = "renew"            // expires within pki.renewBefore
	ReasonExpired      ReasonCode = "expired"          // NotAfter has passed
	ReasonNotYetValid  ReasonCode = "not-yet-valid"    // NotBefore lies in the future (clock skew)
	ReasonNotSignedBy  ReasonCode = "not-signed-by-ca" // not signed by the current CA (e.g. the CA was regenerated)
	ReasonNotCA        ReasonCode = "not-ca"           // ca.pem is not a usable CA cert
	ReasonNotInConfig  ReasonCode = "not-in-config"    // stale: no Spec for this cert
	ReasonRequested    ReasonCode = "requested"        // renewal asked for (Renew, khw pki renew)
)

// Reason is one cause of an action, e.g. {sans, "missing cp4, 192.168.122.14"}.
type Reason struct {
	Code   ReasonCode `json:"code"`
	Detail string     `json:"detail"`
}

func (r Reason) String() string {
	if r.Detail == "" {
		return string(r.Code)
	}
	return string(r.Code) + ": " + r.Detail
}

// CertStatus is the outcome for one cert.
type CertStatus struct {
	// Name is the Spec name (file base name).
	Name   string `json:"name"`
	Action Action `json:"action"`
	// Reasons say why it was created, reissued, re-signed or flagged. On a
	// kept or imported cert they are warnings about something khw left alone
	// on purpose: a CA whose subject differs from pki.subject, a
	// service-account key of another algorithm than pki.keyAlgorithm (both
	// keys are precious, see Reconcile), an imported cert near expiry. Empty
	// for a kept cert that matches its Spec.
	Reasons []Reason `json:"reasons,omitempty"`
	// Serial is the serial number of the cert now on disk, as colon-separated
	// hex (the form `openssl x509 -text` prints).
	Serial string `json:"serial,omitempty"`
	// NotAfter is the expiry of the cert now on disk.
	NotAfter time.Time `json:"notAfter,omitzero"`
	// Source is the pre-issued cert file for Imported.
	Source string `json:"source,omitempty"`
}

// Report is what one Reconcile did (or, with DryRun, would do).
type Report struct {
	Dir    string `json:"dir"`
	DryRun bool   `json:"dryRun,omitempty"`
	// Certs lists every Spec in Specs order, then stale certs. A cert that
	// failed (see the error Reconcile returned) is left out.
	Certs []CertStatus `json:"certs"`
	// Written lists every file whose content was written (or, with DryRun,
	// would be), relative to Dir, in plan order: ca-config.json, then per
	// cert in Certs order its CSR JSON, key and cert. The CA's files are
	// written first; the other certs' files concurrently, each cert's key
	// before its cert. Empty when nothing changed.
	Written []string `json:"written"`
	// ModeFixed lists the files whose content was right but whose mode was
	// not, and was set back (or, with DryRun, would be), e.g. a key found
	// 0644 and set to 0600. They are not in Written.
	ModeFixed []ModeFix `json:"modeFixed"`
}

// ModeFix is one file whose permission bits Reconcile corrected.
type ModeFix struct {
	// File is relative to Report.Dir; "." is Dir itself (a pki directory
	// found group- or world-readable is set back to 0700).
	File string `json:"file"`
	// Was and Now are octal permission bits, e.g. "0644" and "0600".
	Was string `json:"was"`
	Now string `json:"now"`
}

func (m ModeFix) String() string { return fmt.Sprintf("%s: mode %s set to %s", m.File, m.Was, m.Now) }

func octal(m fs.FileMode) string { return fmt.Sprintf("%04o", uint32(m.Perm())) }

// PreciousKeyError is returned by Reconcile, which then writes nothing, when
// a precious key is missing or unreadable while files that depend on it
// exist: ca-key.pem (ca.pem or any cert it signed is still there) or
// service-account-key.pem (service-account.pem is still there). Making a new
// key would silently break everything that trusts the old one, so khw asks
// for the backup or for explicit consent (AllowNewCA,
// AllowNewServiceAccountKey). It is also returned when ca-key.pem parses but
// signed none of the certs in the directory and is not the key of ca.pem: it
// belongs to another CA.
type PreciousKeyError struct {
	// File is the path of the key, e.g. /home/u/.khw/khw/pki/ca-key.pem.
	File string
	// Problem says what is wrong with it, e.g. "does not exist, but ca.pem
	// and the 8 certs it signed do".
	Problem string
	// Fix says how to recover: restore the key from a backup, or the flag
	// that makes a new key and what that breaks.
	Fix string
	// Option names the Reconcile option that permits a new key:
	// "AllowNewCA" or "AllowNewServiceAccountKey".
	Option string
}

func (e *PreciousKeyError) Error() string {
	return "pki: " + e.File + " " + e.Problem + " (fix: " + e.Fix + ")"
}

// Cert returns the status of the cert called name.
func (r *Report) Cert(name string) (CertStatus, bool) {
	for _, s := range r.Certs {
		if s.Name == name {
			return s, true
		}
	}
	return CertStatus{}, false
}

// Changed reports whether any file was (or would be) written or had its
// mode corrected.
func (r *Report) Changed() bool { return len(r.Written) > 0 || len(r.ModeFixed) > 0 }

// String renders one line per cert: "reissued  kubernetes  sans: missing cp4".
func (r *Report) String() string {
	var b strings.Builder
	for _, s := range r.Certs {
		b.WriteString(s.line())
		b.WriteByte('\n')
	}
	return b.String()
}

func (s CertStatus) line() string {
	l := fmt.Sprintf("%-8s %-24s", s.Action, s.Name)
	var rs []string
	for _, r := range s.Reasons {
		rs = append(rs, r.String())
	}
	if s.Source != "" {
		rs = append(rs, "from "+s.Source)
	}
	if len(rs) > 0 {
		l += " " + strings.Join(rs, "; ")
	}
	return strings.TrimRight(l, " ")
}

// formatSerial prints a serial as colon-separated lowercase hex bytes.
func formatSerial(n *big.Int) string {
	if n == nil {
		return ""
	}
	b := n.Bytes()
	if len(b) == 0 {
		b = []byte{0}
	}
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = fmt.Sprintf("%02x", x)
	}
	return strings.Join(parts, ":")
}

// Write writes r as khw pki prints it: indented JSON with asJSON; else
// each cert's line (String), each mode set back, each file written to
// written (nil: none, as without -vv), and how many files changed (would
// change, with DryRun) in Dir in took.
func (r *Report) Write(out io.Writer, asJSON bool, took time.Duration, written io.Writer) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprint(out, r.String())
	for _, m := range r.ModeFixed {
		fmt.Fprintf(out, "fixed mode %s\n", m)
	}
	if written != nil {
		for _, w := range r.Written {
			fmt.Fprintf(written, "  wrote %s\n", w)
		}
	}
	verb := "changed"
	if r.DryRun {
		verb = "would change"
	}
	fmt.Fprintf(out, "PKI in %s: %d files %s (%s)\n", r.Dir, len(r.Written), verb, took.Round(time.Millisecond))
	return nil
}
