package config

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

func (c *Cluster) validateLibvirt(v *validator) {
	l := c.Libvirt
	if l == nil {
		return
	}
	if c.Provider == ProviderNspawn {
		v.warn("libvirt", "is ignored: provider is "+c.Provider)
	}
	if l.URI != "" && !strings.HasPrefix(l.URI, "qemu:///") && !strings.HasPrefix(l.URI, "qemu+") {
		v.add("libvirt.uri", l.URI, "is not a QEMU driver URI", "use qemu:///system (the default) or a qemu+unix/qemu+ssh/qemu+tls URI")
	}
	if l.DomainType != "" {
		v.oneOf("libvirt.domainType", l.DomainType, DomainTypeKVM, DomainTypeQEMU)
	}
	for _, f := range []struct{ field, val string }{
		{"libvirt.image", l.Image}, {"libvirt.kernel", l.Kernel}, {"libvirt.initrd", l.Initrd},
	} {
		switch {
		case f.val != "" && !strings.HasPrefix(f.val, "/"):
			v.add(f.field, f.val, "is not an absolute path", "write the full path of the file, e.g. /var/lib/khw/"+strings.TrimPrefix(f.field, "libvirt."))
		case len(f.val) >= maxPath:
			v.add(f.field, f.val, fmt.Sprintf("is %d bytes long, no path is that long (PATH_MAX %d)", len(f.val), maxPath), "write the full path of the file")
		}
	}
	if len(l.Cmdline) >= maxCmdline {
		v.add("libvirt.cmdline", l.Cmdline, fmt.Sprintf("is %d bytes long, over the kernel's command line limit (COMMAND_LINE_SIZE %d)", len(l.Cmdline), maxCmdline),
			"keep only the parameters the image needs, e.g. root=/dev/vda1 console=ttyS0")
	}
	if l.Kernel != "" && l.Image == "" {
		v.add("libvirt.kernel", l.Kernel, "is set without libvirt.image", "set libvirt.image to the disk image whose root file system that kernel boots, or remove kernel")
	}
	if l.Initrd != "" && l.Kernel == "" {
		v.add("libvirt.initrd", l.Initrd, "is set without libvirt.kernel", "set libvirt.kernel too, or remove initrd")
	}
	if l.Cmdline != "" && l.Kernel == "" {
		v.add("libvirt.cmdline", l.Cmdline, "is set without libvirt.kernel", "set libvirt.kernel too, or remove cmdline")
	}
	if l.Network != "" && !libvirtNetworkRE.MatchString(l.Network) {
		v.add("libvirt.network", l.Network, "is not a libvirt network name", "use the name `virsh net-list --all` shows, e.g. default")
	}
}

// nthAddr returns the n-th address after the network address of p.
func nthAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr()
	for i := 0; i < n; i++ {
		a = a.Next()
	}
	return a
}

// ParsePortRange parses "FIRST-LAST" with 1 <= FIRST <= LAST <= 65535.
func ParsePortRange(s string) (first, last int, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, errors.New("is not a port range")
	}
	first, err1 := strconv.Atoi(strings.TrimSpace(a))
	last, err2 := strconv.Atoi(strings.TrimSpace(b))
	if err1 != nil || err2 != nil {
		return 0, 0, errors.New("is not a port range")
	}
	if first < 1 || last > 65535 || first > last {
		return 0, 0, errors.New("must satisfy 1 <= FIRST <= LAST <= 65535")
	}
	return first, last, nil
}

func (c *Cluster) validatePKI(v *validator) {
	p := c.PKI
	switch p.KeyAlgorithm {
	case "ecdsa":
		if p.KeySize != 256 && p.KeySize != 384 && p.KeySize != 521 {
			v.add("pki.keySize", strconv.Itoa(p.KeySize), "is not an ECDSA curve size", "use 256 (P-256), 384 or 521")
		}
	case "rsa":
		if p.KeySize != 2048 && p.KeySize != 3072 && p.KeySize != 4096 {
			v.add("pki.keySize", strconv.Itoa(p.KeySize), "is not a supported RSA key size", "use 2048, 3072 or 4096")
		}
	default:
		v.add("pki.keyAlgorithm", p.KeyAlgorithm, "unknown value", "use one of: ecdsa, rsa")
	}
	if p.CAValidity < time.Hour {
		v.add("pki.caValidity", fmtDur(p.CAValidity), "is too short", "use at least 1h, e.g. 87600h (10 years)")
	}
	if p.CertValidity < time.Hour {
		v.add("pki.certValidity", fmtDur(p.CertValidity), "is too short", "use at least 1h, e.g. 8760h (1 year)")
	} else if p.CertValidity > p.CAValidity && p.CAValidity >= time.Hour {
		v.add("pki.certValidity", fmtDur(p.CertValidity), "is longer than pki.caValidity "+fmtDur(p.CAValidity)+" (a cert cannot outlive its CA)",
			"make certValidity at most caValidity")
	}
	if p.RenewBefore < 0 || (p.CertValidity >= time.Hour && p.RenewBefore >= p.CertValidity) {
		v.add("pki.renewBefore", fmtDur(p.RenewBefore), "must be >= 0 and shorter than pki.certValidity "+fmtDur(p.CertValidity)+", or every run would reissue every cert",
			"use about a tenth of certValidity, e.g. "+fmtDur((p.CertValidity/10).Truncate(time.Hour)))
	}
	subj := []struct{ field, val string }{
		{"pki.subject.country", p.Subject.Country}, {"pki.subject.state", p.Subject.State},
		{"pki.subject.locality", p.Subject.Locality}, {"pki.subject.organizationalUnit", p.Subject.OrganizationalUnit},
	}
	countryBad := false
	for _, f := range subj {
		if problem, fix := dnValueProblem(f.val); problem != "" {
			v.add(f.field, f.val, problem, fix)
			countryBad = countryBad || f.field == "pki.subject.country"
		} else if utf8.RuneCountInString(f.val) > 64 {
			v.add(f.field, f.val, "is longer than 64 characters (X.509 upper bound)", "use at most 64 characters")
		}
	}
	if c := p.Subject.Country; c != "" && !countryBad && !countryRE.MatchString(c) {
		v.add("pki.subject.country", c, "is not a two-letter country code (X.509 C is ISO 3166 alpha-2)", "use e.g. US or KR")
	}
}

// dnSpecials are the characters that have a meaning in a distinguished
// name: RFC 4514 section 2.4 escapes " + , ; < > \ (and # at the start)
// in a DN's text form, its grammar (section 3) lets = be escaped too, and
// openssl-req(1) "-subj arg" reads / as the start of the next RDN and + as
// another attribute of the same RDN. khw writes subjects both ways
// (certificate text, the `openssl req -subj` of a by-hand renewal), so a
// subject field holds none of them.
const dnSpecials = `/+=,;<>"\#`

// dnValueProblem says what is wrong with s as the value of a subject
// attribute, and the fix; "" when nothing is: a character of dnSpecials,
// a control character (C0, DEL, C1: a subject is one line of text, and
// openssl or a terminal would act on it), or a space at either end (RFC
// 4514 escapes it, openssl keeps it: the same subject would read
// differently).
func dnValueProblem(s string) (problem, fix string) {
	if i := strings.IndexFunc(s, isControlOrFormat); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return fmt.Sprintf("has control or format characters, the first %U (a subject is one line of plain text; a format character such as a right-to-left override makes it read differently from what it is)", r), "remove them"
	}
	var found []string
	for _, c := range dnSpecials {
		if strings.ContainsRune(s, c) {
			found = append(found, fmt.Sprintf("%q", string(c)))
		}
	}
	if len(found) > 0 {
		meaning := "RFC 4514 section 2.4 escapes them in a DN's text form"
		switch {
		case strings.ContainsRune(s, '+'):
			meaning = "openssl req -subj reads + as another attribute of the same RDN, so a second O could follow"
		case strings.ContainsRune(s, '/'):
			meaning = "openssl req -subj reads / as the start of the next RDN"
		}
		suggest := strings.Join(strings.Fields(strings.Map(func(r rune) rune {
			if strings.ContainsRune(dnSpecials, r) {
				return ' '
			}
			return r
		}, s)), " ")
		return fmt.Sprintf("has %s, which have a meaning in a distinguished name (%s)", strings.Join(found, " "), meaning),
			fmt.Sprintf("write it without %s, e.g. %q; khw pki then reissues the certificates whose subject carries it", strings.Join(strings.Split(dnSpecials, ""), " "), suggest)
	}
	if strings.TrimSpace(s) != s {
		return "starts or ends with a space, which a distinguished name's text form escapes (RFC 4514 section 2.4) and openssl keeps", "remove the space"
	}
	return "", ""
}

// isControlOrFormat reports C0, DEL and C1 controls and Unicode format
// characters (category Cf: bidirectional overrides, zero-width spaces).
func isControlOrFormat(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }

// MaxVersionLen is the longest value a versions.* field may have, in
// bytes: every release tag khw knows is under 20, and a version ends up in
// download URLs and file names.
const MaxVersionLen = 64

// versionShape is the form of a versions.* field: re, and which of its
// groups hold the major, minor and patch numbers.
type versionShape struct {
	re     *regexp.Regexp
	groups [3]int
}

var (
	semverShape = versionShape{semverRE, [3]int{1, 2, 3}}
	pauseShape  = versionShape{pauseTagRE, [3]int{1, 2, 4}}
)

// versionParts parses val as shape says: its major, minor and patch
// numbers (an absent patch is 0). problem is "" when val has that shape,
// is at most MaxVersionLen bytes and each number fits an int; else it
// says what is wrong.
func versionParts(val string, shape versionShape) (parts [3]int, problem string) {
	if len(val) > MaxVersionLen {
		return parts, fmt.Sprintf("is %d bytes, over the %d-byte limit of a version", len(val), MaxVersionLen)
	}
	m := shape.re.FindStringSubmatch(val)
	if m == nil {
		return parts, "is not a version"
	}
	for i, name := range [3]string{"major", "minor", "patch"} {
		g := m[shape.groups[i]]
		if g == "" {
			continue
		}
		n, err := strconv.Atoi(g)
		if err != nil {
			return parts, fmt.Sprintf("its %s number %s is too large (a version's numbers fit an int)", name, quote(g))
		}
		parts[i] = n
	}
	return parts, ""
}

func (c *Cluster) validateVersions(v *validator) {
	check := func(field, val string) bool {
		if _, problem := versionParts(val, semverShape); problem != "" {
			v.add(field, val, problem, "write vMAJOR.MINOR.PATCH, e.g. "+semverExample(field))
			return false
		}
		return true
	}
	vs := c.Versions
	k8sOK := check("versions.kubernetes", vs.Kubernetes)
	check("versions.etcd", vs.Etcd)
	containerdOK := check("versions.containerd", vs.Containerd)
	check("versions.runc", vs.Runc)
	check("versions.cniPlugins", vs.CNIPlugins)
	check("versions.crictl", vs.Crictl)
	check("versions.coredns", vs.CoreDNS)
	if _, problem := versionParts(vs.Pause, pauseShape); problem != "" {
		if problem == "is not a version" {
			problem = "is not a pause image tag"
		}
		v.add("versions.pause", vs.Pause, problem, "write MAJOR.MINOR[.PATCH] without a v, e.g. "+DefaultVersions.Pause)
	}
	if k8sOK {
		parts, _ := versionParts(vs.Kubernetes, semverShape)
		switch {
		case parts[0] != 1:
			v.add("versions.kubernetes", vs.Kubernetes, "is not a Kubernetes 1.x release", "use e.g. "+DefaultVersions.Kubernetes)
		case parts[1] < MinKubernetesMinor:
			v.add("versions.kubernetes", vs.Kubernetes, fmt.Sprintf("is older than v1.%d, the oldest release khw's node files support", MinKubernetesMinor), "use e.g. "+DefaultVersions.Kubernetes)
		}
	}
	if containerdOK && !strings.HasPrefix(vs.Containerd, "v2.") {
		v.add("versions.containerd", vs.Containerd, "khw configures containerd 2.x (config version 3)", "use e.g. "+DefaultVersions.Containerd)
	}
}

func semverExample(field string) string {
	switch field {
	case "versions.etcd":
		return DefaultVersions.Etcd
	case "versions.containerd":
		return DefaultVersions.Containerd
	case "versions.runc":
		return DefaultVersions.Runc
	case "versions.cniPlugins":
		return DefaultVersions.CNIPlugins
	case "versions.crictl":
		return DefaultVersions.Crictl
	case "versions.coredns":
		return DefaultVersions.CoreDNS
	}
	return DefaultVersions.Kubernetes
}
