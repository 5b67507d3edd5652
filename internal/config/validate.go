package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// FieldError is one problem with one field of cluster.yaml.
type FieldError struct {
	// Field is the YAML path, e.g. "nodes[4].podCIDR" or "kubernetes.serviceCIDR".
	Field string
	// Value is the offending value as written (may be empty). Error shows
	// at most MaxEcho characters of it (see quote).
	Value string
	// Problem says what is wrong.
	Problem string
	// Fix says what to write instead.
	Fix string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.Field)
	b.WriteString(": ")
	if e.Value != "" {
		b.WriteString(quote(e.Value))
		b.WriteString(": ")
	}
	b.WriteString(e.Problem)
	if e.Fix != "" {
		b.WriteString(" (fix: ")
		b.WriteString(e.Fix)
		b.WriteString(")")
	}
	return b.String()
}

// MaxEcho is how many characters of a bad value an error message repeats: a
// value pasted by mistake (a certificate, a whole file) would otherwise bury
// the message, and cluster.yaml may hold up to MaxFileSize bytes of it.
const MaxEcho = 100

// quote returns s Go-quoted (%q: control characters and invalid UTF-8
// escaped), cut to its first MaxEcho characters with an ellipsis and the
// full length when longer: "aaaa…" (5000 characters).
func quote(s string) string {
	n := 0
	for i := range s {
		if n == MaxEcho {
			return fmt.Sprintf("%q (%d characters)", s[:i]+"…", utf8.RuneCountInString(s))
		}
		n++
	}
	return fmt.Sprintf("%q", s)
}

// ValidationError collects every FieldError found in one document, so a user
// fixes them all in one pass.
type ValidationError struct {
	// Source is the file the cluster came from, if any.
	Source string
	Errors []*FieldError
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	src := e.Source
	if src == "" {
		src = "cluster.yaml"
	}
	fmt.Fprintf(&b, "%s is not valid (%d problem", src, len(e.Errors))
	if len(e.Errors) != 1 {
		b.WriteString("s")
	}
	b.WriteString("):")
	for _, fe := range e.Errors {
		b.WriteString("\n  - ")
		b.WriteString(fe.Error())
	}
	return b.String()
}

// Warning is a valid but questionable setting.
type Warning struct {
	Field   string
	Message string
}

func (w Warning) String() string { return w.Field + ": " + w.Message }

var (
	// A DNS-1123 label (RFC 1123), as Kubernetes requires for node names
	// (k8s.io/apimachinery/pkg/util/validation IsDNS1123Label).
	dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// A DNS-1123 subdomain, dot-separated labels.
	dnsSubdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// Cluster names: a DNS label starting with a letter, at most
	// MaxClusterNameLen characters (checked separately).
	clusterNameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	// kubernetes.clusterName: a word the shell takes as it is.
	kubeconfigNameRE = regexp.MustCompile(`^[A-Za-z0-9][-A-Za-z0-9_.]{0,62}$`)
	// vMAJOR.MINOR.PATCH with an optional pre-release (v1.37.0-rc.1).
	semverRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)
	// Image tags of the pause image: 3.10 or 3.10.1, no leading v.
	countryRE  = regexp.MustCompile(`^[A-Z]{2}$`)
	pauseTagRE = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))?$`)
)

// reservedPorts are the ports the apiserver must not share on a control plane.
var reservedPorts = map[int]string{
	22: "SSH", 2379: "etcd client", 2380: "etcd peer", 8404: "HAProxy stats", 10250: "kubelet",
	10256: "kube-proxy health", 10257: "kube-controller-manager", 10259: "kube-scheduler",
}

// MinKubernetesMinor is the oldest Kubernetes 1.x minor khw's templates
// support: the kubelet config sets failCgroupV1, which v1.31 introduced
// (KubeletConfiguration v1beta1).
const MinKubernetesMinor = 31

// MaxClusterNameLen is the longest cluster name, in characters (the name is
// ASCII: a DNS label starting with a letter). The cluster name is part of
// these names, each within its limit up to this length:
//   - the nspawn machine name <cluster>-<node> (systemd-nspawn -M), which
//     systemd accepts when machine_name_is_valid, i.e. hostname_is_valid: at
//     most HOST_NAME_MAX = 64 characters (systemd src/basic/hostname-util.c).
//     20 leaves a node name 43; Validate checks the sum for provider nspawn
//     (MaxMachineNameLen);
//   - the network namespace /run/netns/khw-<cluster> and its owner file
//     khw-<cluster>.owner, the state directory <state>/<cluster>, and the
//     libvirt network khw-<cluster>, domains khw-<cluster>-<node> and volumes
//     khw-<cluster>-<node>-seed.iso, which libvirt keeps as files
//     (/etc/libvirt/qemu/<domain>.xml): file names, at most NAME_MAX = 255
//     bytes (include/uapi/linux/limits.h);
//   - interface names, at most IFNAMSIZ-1 = 15 bytes
//     (include/uapi/linux/if.h): none holds the cluster name as is. The
//     libvirt bridge is khwbr-<8 hex digits of the name's sha256> (14
//     bytes), the nspawn bridge is khw0 inside the cluster's namespace, and
//     systemd-nspawn shortens vb-<machine> to a hash when it is longer.
const MaxClusterNameLen = 20

// MaxNodeNameLen is the longest node name: a node name is the host name and
// the Kubernetes Node name, a DNS-1123 label of at most 63 characters (RFC
// 1123 2.1; k8s.io/apimachinery/pkg/util/validation DNS1123LabelMaxLength),
// also within HOST_NAME_MAX = 64 of sethostname(2).
const MaxNodeNameLen = 63

// MaxMachineNameLen is the longest nspawn machine name <cluster>-<node>:
// HOST_NAME_MAX = 64, which systemd-nspawn -M checks (machine_name_is_valid).
const MaxMachineNameLen = 64

// maxDNSName is the longest DNS name (network.domain, kubernetes.clusterDomain
// and a node's FQDN <node>.<network.domain>): 253 characters (RFC 1035 2.3.4
// without the final dot; k8s.io/apimachinery/pkg/util/validation
// DNS1123SubdomainMaxLength), each label at most 63.
const maxDNSName = 253

// maxPath is Linux's PATH_MAX, 4096 bytes with the final NUL
// (include/uapi/linux/limits.h): the longest libvirt.image, kernel or initrd
// path is one byte shorter.
const maxPath = 4096

// maxCmdline is the kernel's COMMAND_LINE_SIZE on x86 and arm64, 2048 bytes
// with the final NUL (arch/x86/include/asm/setup.h,
// arch/arm64/include/uapi/asm/setup.h): the longest libvirt.cmdline is one
// byte shorter.
const maxCmdline = 2048

// ValidName reports whether name is a valid cluster name (see Cluster.Name
// and MaxClusterNameLen).
func ValidName(name string) error {
	if !clusterNameRE.MatchString(name) || len(name) > MaxClusterNameLen {
		return fmt.Errorf("%s is not a valid cluster name: use 1-%d lowercase letters, digits and '-', starting with a letter", quote(name), MaxClusterNameLen)
	}
	return nil
}

// validDNSName reports whether s is a DNS-1123 subdomain: lowercase labels of
// at most 63 characters separated by dots, at most maxDNSName in all.
func validDNSName(s string) bool {
	if len(s) > maxDNSName || !dnsSubdomainRE.MatchString(s) {
		return false
	}
	for l := range strings.SplitSeq(s, ".") {
		if len(l) > MaxNodeNameLen {
			return false
		}
	}
	return true
}

// nodeRef names nodes[i] in a field path: "nodes[4] (w1)", or "nodes[4]"
// when the name is empty, longer than MaxNodeNameLen or would need quoting
// (the name's own error shows it, clipped).
func (c *Cluster) nodeRef(i int) string {
	name := c.Nodes[i].Name
	if name == "" || len(name) > MaxNodeNameLen || strconv.Quote(name) != `"`+name+`"` {
		return fmt.Sprintf("nodes[%d]", i)
	}
	return fmt.Sprintf("nodes[%d] (%s)", i, name)
}

// exampleNodeName is a free name for a node of role in c, for a Fix: lb, cpN
// or wN with the smallest N no node has.
func (c *Cluster) exampleNodeName(role string) string {
	prefix := map[string]string{RoleLoadBalancer: "lb", RoleControlPlane: "cp"}[role]
	if prefix == "" {
		prefix = "w"
	}
	if _, taken := c.Node(prefix); role == RoleLoadBalancer && !taken {
		return prefix
	}
	for i := 1; ; i++ {
		if _, taken := c.Node(prefix + strconv.Itoa(i)); !taken {
			return prefix + strconv.Itoa(i)
		}
	}
}

// fmtDur prints a duration the way cluster.yaml writes it (8760h, 2s).
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "h0m0s") {
		return strings.TrimSuffix(s, "0m0s")
	}
	if strings.HasSuffix(s, "m0s") {
		return strings.TrimSuffix(s, "0s")
	}
	return s
}

type validator struct {
	errs  []*FieldError
	warns []Warning
}

func (v *validator) add(field, value, problem, fix string) {
	v.errs = append(v.errs, &FieldError{Field: field, Value: value, Problem: problem, Fix: fix})
}

func (v *validator) warn(field, msg string) {
	v.warns = append(v.warns, Warning{Field: field, Message: msg})
}

// oneOf reports an error unless value is one of allowed.
func (v *validator) oneOf(field, value string, allowed ...string) bool {
	for _, a := range allowed {
		if value == a {
			return true
		}
	}
	v.add(field, value, "unknown value", "use one of: "+strings.Join(allowed, ", "))
	return false
}

// prefix parses an IPv4 CIDR whose host bits are zero.
func (v *validator) prefix(field, value string) (netip.Prefix, bool) {
	if value == "" {
		v.add(field, value, "is empty", "give an IPv4 CIDR such as 10.32.0.0/24")
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(value)
	if err != nil {
		v.add(field, value, "is not a CIDR", "write it as ADDRESS/BITS, e.g. 10.32.0.0/24")
		return netip.Prefix{}, false
	}
	if !p.Addr().Is4() {
		v.add(field, value, "is not IPv4", "khw builds IPv4 clusters; use an IPv4 CIDR")
		return netip.Prefix{}, false
	}
	if p.Masked() != p {
		v.add(field, value, "has host bits set", "write the network address: "+p.Masked().String())
		return netip.Prefix{}, false
	}
	return p, true
}

func (v *validator) addr(field, value string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(value)
	if err != nil || !a.Is4() {
		v.add(field, value, "is not an IPv4 address", "write a dotted IPv4 address such as 192.168.122.11")
		return netip.Addr{}, false
	}
	return a, true
}

// lastAddr is the broadcast address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := 32 - p.Bits()
	u := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	if host == 32 {
		u = 0xffffffff
	} else {
		u |= (1 << host) - 1
	}
	return netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)})
}

// hostAddr reports whether a is a usable host address of p: inside it and
// neither its network nor its broadcast address.
func hostAddr(p netip.Prefix, a netip.Addr) bool {
	return p.Contains(a) && a != p.Masked().Addr() && a != lastAddr(p)
}

// Validate checks the whole cluster and returns every problem at once as a
// *ValidationError, plus warnings for settings that are valid but risky (an
// even number of control planes). It does not change c. Call SetDefaults
// first if the document may omit fields.
func (c *Cluster) Validate() ([]Warning, error) {
	v := &validator{}
	c.validate(v)
	if len(v.errs) > 0 {
		return v.warns, &ValidationError{Errors: v.errs}
	}
	return v.warns, nil
}

func (c *Cluster) validate(v *validator) {
	if c.APIVersion != APIVersion {
		v.add("apiVersion", c.APIVersion, "unsupported apiVersion", "set apiVersion: "+APIVersion)
	}
	if c.Kind != Kind {
		v.add("kind", c.Kind, "unsupported kind", "set kind: "+Kind)
	}
	if ValidName(c.Name) != nil {
		v.add("name", c.Name, "is not a valid cluster name",
			fmt.Sprintf("use 1-%d lowercase letters, digits and '-', starting with a letter (it becomes part of VM and network names)", MaxClusterNameLen))
	}
	v.oneOf("arch", c.Arch, ArchARM64, ArchAMD64)
	v.oneOf("provider", c.Provider, ProviderLibvirt, ProviderNspawn)

	// Networks.
	nodeNet, nodeNetOK := v.prefix("network.cidr", c.Network.CIDR)
	if nodeNetOK && nodeNet.Bits() > 29 {
		v.add("network.cidr", c.Network.CIDR, "is too small for a cluster", "use a /24 (or any prefix of /29 or larger)")
		nodeNetOK = false
	}
	gw, gwOK := v.addr("network.gateway", c.Network.Gateway)
	if gwOK && nodeNetOK && !hostAddr(nodeNet, gw) {
		v.add("network.gateway", c.Network.Gateway, "is not a host address of network.cidr "+c.Network.CIDR,
			"use the jumpbox's address inside "+c.Network.CIDR+", usually the first one ("+nodeNet.Addr().Next().String()+")")
		gwOK = false
	}
	if c.Network.Domain != "" && !validDNSName(c.Network.Domain) {
		v.add("network.domain", c.Network.Domain, "is not a DNS domain",
			"use lowercase labels of at most 63 characters separated by dots, at most 253 in all, e.g. kubernetes.local")
	}

	k := c.Kubernetes
	svc, svcOK := v.prefix("kubernetes.serviceCIDR", k.ServiceCIDR)
	if svcOK && svc.Bits() > 28 {
		// kube-apiserver needs room for the kubernetes Service (first IP), the
		// DNS Service and workloads; a /29 or smaller leaves almost nothing.
		v.add("kubernetes.serviceCIDR", k.ServiceCIDR,
			"is too small: its first IP "+svc.Addr().Next().String()+" is needed for the kubernetes Service and the range has almost no room left",
			"use a /24 such as 10.32.0.0/24 (at least /28)")
		svcOK = false
	}
	if svcOK && (svc.Addr().IsLoopback() || svc.Addr().IsMulticast() || svc.Addr().IsUnspecified() || svc.Addr().IsLinkLocalUnicast()) {
		v.add("kubernetes.serviceCIDR", k.ServiceCIDR,
			"its first IP "+svc.Addr().Next().String()+" is not usable as a Service IP (loopback, link-local, multicast or unspecified range)",
			"use a private range such as 10.32.0.0/24")
		svcOK = false
	}
	pods, podsOK := v.prefix("kubernetes.clusterCIDR", k.ClusterCIDR)
	if podsOK && pods.Bits() > 24 {
		v.add("kubernetes.clusterCIDR", k.ClusterCIDR, "is too small to hold one /24 per worker", "use a /16 such as 10.200.0.0/16")
		podsOK = false
	}
	type named struct {
		field string
		p     netip.Prefix
		ok    bool
	}
	nets := []named{{"network.cidr", nodeNet, nodeNetOK}, {"kubernetes.serviceCIDR", svc, svcOK}, {"kubernetes.clusterCIDR", pods, podsOK}}
	for i := 0; i < len(nets); i++ {
		for j := i + 1; j < len(nets); j++ {
			a, b := nets[i], nets[j]
			if a.ok && b.ok && a.p.Overlaps(b.p) {
				v.add(b.field, b.p.String(), "overlaps "+a.field+" "+a.p.String(),
					"node, service and pod networks must be disjoint; pick another range for "+b.field)
			}
		}
	}
	if dns, ok := v.addr("kubernetes.clusterDNS", k.ClusterDNS); ok && svcOK {
		switch {
		case !hostAddr(svc, dns):
			v.add("kubernetes.clusterDNS", k.ClusterDNS, "is not a usable address of kubernetes.serviceCIDR "+k.ServiceCIDR,
				"pick an address inside "+k.ServiceCIDR+", e.g. the tenth ("+nthAddr(svc, 10).String()+")")
		case dns == c.APIServerServiceIP():
			v.add("kubernetes.clusterDNS", k.ClusterDNS, "is the first address of the service CIDR, which belongs to the kubernetes Service",
				"use another address, e.g. "+nthAddr(svc, 10).String())
		}
	}
	if !validDNSName(k.ClusterDomain) {
		v.add("kubernetes.clusterDomain", k.ClusterDomain, "is not a DNS domain",
			"use lowercase labels of at most 63 characters separated by dots, at most 253 in all, e.g. cluster.local")
	}
	// The kubeconfig cluster name is pasted into the shell commands khw shows
	// (kubectl config set-cluster NAME), so it keeps to characters a shell
	// takes literally; 63 as a DNS label.
	if !kubeconfigNameRE.MatchString(k.ClusterName) {
		v.add("kubernetes.clusterName", k.ClusterName, "must be 1-63 letters, digits, '-', '_' or '.', starting with a letter or digit", "use e.g. kubernetes-the-hard-way")
	}
	if k.APIServerPort < 1 || k.APIServerPort > 65535 {
		v.add("kubernetes.apiServerPort", strconv.Itoa(k.APIServerPort), "is not a TCP port", "use 6443")
	} else if what, taken := reservedPorts[k.APIServerPort]; taken {
		v.add("kubernetes.apiServerPort", strconv.Itoa(k.APIServerPort), "is the "+what+" port on the nodes", "use 6443")
	}
	if lo, hi, err := ParsePortRange(k.NodePortRange); err != nil {
		v.add("kubernetes.nodePortRange", k.NodePortRange, err.Error(), "write FIRST-LAST, e.g. 30000-32767")
	} else if k.APIServerPort >= lo && k.APIServerPort <= hi {
		v.add("kubernetes.nodePortRange", k.NodePortRange, "contains the apiserver port "+strconv.Itoa(k.APIServerPort),
			"keep NodePorts away from the apiserver port, e.g. 30000-32767")
	}
	v.oneOf("kubernetes.cni", k.CNI, CNIBridge, CNIMyBridge)

	lb := c.LoadBalancer
	v.oneOf("loadBalancer.healthCheck", lb.HealthCheck, HealthCheckHTTPS, HealthCheckTCP)
	if lb.Interval < 100*time.Millisecond || lb.Interval > time.Minute {
		v.add("loadBalancer.interval", fmtDur(lb.Interval), "is out of range", "use a duration between 100ms and 1m, e.g. 2s")
	}
	if lb.Fall < 1 || lb.Fall > 100 {
		v.add("loadBalancer.fall", strconv.Itoa(lb.Fall), "is out of range", "use 1-100, e.g. 3")
	}
	if lb.Rise < 1 || lb.Rise > 100 {
		v.add("loadBalancer.rise", strconv.Itoa(lb.Rise), "is out of range", "use 1-100, e.g. 2")
	}

	c.validatePKI(v)
	c.validateVersions(v)
	c.validateNodes(v, nodeNet, nodeNetOK, gw, gwOK, pods, podsOK)
	c.validateLibvirt(v)
}

// libvirtNetworkRE is what libvirt accepts in a network name that khw
// passes on: no '/', no whitespace (virNetworkDefParseXML rejects '/').
var libvirtNetworkRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`)

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
	for _, f := range subj {
		if strings.IndexFunc(f.val, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 || len(f.val) > 64 {
			v.add(f.field, f.val, "has control characters or is longer than 64 characters (X.509 upper bound)", "use plain text on one line")
		}
	}
	if c := p.Subject.Country; c != "" && !countryRE.MatchString(c) {
		v.add("pki.subject.country", c, "is not a two-letter country code (X.509 C is ISO 3166 alpha-2)", "use e.g. US or KR")
	}
}

func (c *Cluster) validateVersions(v *validator) {
	check := func(field, val string) {
		if !semverRE.MatchString(val) {
			v.add(field, val, "is not a version", "write vMAJOR.MINOR.PATCH, e.g. "+semverExample(field))
		}
	}
	vs := c.Versions
	check("versions.kubernetes", vs.Kubernetes)
	check("versions.etcd", vs.Etcd)
	check("versions.containerd", vs.Containerd)
	check("versions.runc", vs.Runc)
	check("versions.cniPlugins", vs.CNIPlugins)
	check("versions.crictl", vs.Crictl)
	check("versions.coredns", vs.CoreDNS)
	if !pauseTagRE.MatchString(vs.Pause) {
		v.add("versions.pause", vs.Pause, "is not a pause image tag", "write MAJOR.MINOR[.PATCH] without a v, e.g. "+DefaultVersions.Pause)
	}
	if m := semverRE.FindStringSubmatch(vs.Kubernetes); m != nil {
		minor, _ := strconv.Atoi(m[2])
		switch {
		case m[1] != "1":
			v.add("versions.kubernetes", vs.Kubernetes, "is not a Kubernetes 1.x release", "use e.g. "+DefaultVersions.Kubernetes)
		case minor < MinKubernetesMinor:
			v.add("versions.kubernetes", vs.Kubernetes, fmt.Sprintf("is older than v1.%d, the oldest release khw's node files support", MinKubernetesMinor), "use e.g. "+DefaultVersions.Kubernetes)
		}
	}
	if semverRE.MatchString(vs.Containerd) && !strings.HasPrefix(vs.Containerd, "v2.") {
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

func (c *Cluster) validateNodes(v *validator, nodeNet netip.Prefix, nodeNetOK bool, gw netip.Addr, gwOK bool, pods netip.Prefix, podsOK bool) {
	if len(c.Nodes) == 0 {
		v.add("nodes", "", "is empty", "list the machines: one loadbalancer, an odd number of controlplanes, and workers (see `khw init`)")
		return
	}
	names := map[string]int{}
	ips := map[netip.Addr]int{}
	type podNet struct {
		idx int
		p   netip.Prefix
	}
	var podNets []podNet
	counts := map[string]int{}
	for i, n := range c.Nodes {
		f := func(s string) string { return c.nodeRef(i) + "." + s }
		if !dnsLabelRE.MatchString(n.Name) || len(n.Name) > MaxNodeNameLen {
			v.add(f("name"), n.Name, "is not a valid host name",
				fmt.Sprintf("use a DNS label: 1-%d lowercase letters, digits and '-', e.g. %s", MaxNodeNameLen, c.exampleNodeName(n.Role)))
		} else if why := ReservedNodeName(n.Name); why != "" {
			v.add(f("name"), n.Name, "collides with a file khw writes for the cluster (a node's cert, key and kubeconfig are named after the node): "+why,
				"rename the node, e.g. to "+c.exampleNodeName(n.Role)+"; taken are "+strings.Join(reservedBases, ", ")+" and names ending in -key, -csr or -bootstrap")
		} else if c.Provider == ProviderNspawn && ValidName(c.Name) == nil && len(c.Name)+1+len(n.Name) > MaxMachineNameLen {
			v.add(f("name"), n.Name, fmt.Sprintf("makes the nspawn machine name %s-%s %d characters long, over the %d systemd-nspawn allows (HOST_NAME_MAX)",
				c.Name, n.Name, len(c.Name)+1+len(n.Name), MaxMachineNameLen),
				fmt.Sprintf("shorten the node name to at most %d characters (or the cluster name)", MaxMachineNameLen-1-len(c.Name)))
		} else if validDNSName(c.Network.Domain) && len(n.Name)+1+len(c.Network.Domain) > maxDNSName {
			v.add(f("name"), n.Name, fmt.Sprintf("makes the FQDN %s.%s longer than %d characters (a DNS name, and a SAN of the node's certs)", n.Name, c.Network.Domain, maxDNSName),
				"shorten the node name or network.domain")
		} else if j, dup := names[n.Name]; dup {
			v.add(f("name"), n.Name, fmt.Sprintf("duplicates nodes[%d]", j), "give every node its own name")
		} else {
			names[n.Name] = i
		}
		roleOK := v.oneOf(f("role"), n.Role, RoleLoadBalancer, RoleControlPlane, RoleWorker)
		if roleOK {
			counts[n.Role]++
		}
		if a, ok := v.addr(f("ip"), n.IP); ok {
			switch {
			case nodeNetOK && !hostAddr(nodeNet, a):
				v.add(f("ip"), n.IP, "is outside network.cidr "+nodeNet.String()+" (or is its network/broadcast address)",
					"use a host address inside "+nodeNet.String()+", or change network.cidr")
			case gwOK && a == gw:
				v.add(f("ip"), n.IP, "is network.gateway, the jumpbox's own address", "give the node another address")
			default:
				if j, dup := ips[a]; dup {
					v.add(f("ip"), n.IP, "duplicates "+c.nodeRef(j), "give every node its own IP")
				} else {
					ips[a] = i
				}
			}
		}
		if n.Role == RoleWorker {
			if n.PodCIDR == "" {
				inside := "kubernetes.clusterCIDR"
				if podsOK {
					inside += " " + pods.String()
				}
				v.add(f("podCIDR"), "", "is missing: every worker needs its own pod subnet",
					"add podCIDR: a free /24 inside "+inside)
			} else if p, ok := v.prefix(f("podCIDR"), n.PodCIDR); ok {
				switch {
				case podsOK && !(pods.Contains(p.Addr()) && p.Bits() >= pods.Bits()):
					v.add(f("podCIDR"), n.PodCIDR, "is not inside kubernetes.clusterCIDR "+pods.String(),
						"use a /24 inside "+pods.String())
				case p.Bits() > 28:
					v.add(f("podCIDR"), n.PodCIDR, "is too small for the pods of a node", "use a /24")
				default:
					for _, o := range podNets {
						if o.p.Overlaps(p) {
							v.add(f("podCIDR"), n.PodCIDR, fmt.Sprintf("overlaps the podCIDR %s of %s", o.p, c.nodeRef(o.idx)),
								"give every worker its own, non-overlapping podCIDR")
							break
						}
					}
					podNets = append(podNets, podNet{i, p})
				}
			}
		} else if roleOK {
			// Only a known role: the role error already covers the rest.
			if n.PodCIDR != "" {
				v.add(f("podCIDR"), n.PodCIDR, "is set on a "+n.Role+" node, which runs no pods", "remove it (only workers have a podCIDR)")
			}
			if n.TLSBootstrap {
				v.add(f("tlsBootstrap"), "true", "is set on a "+n.Role+" node; only a worker's kubelet joins by TLS bootstrap", "remove it")
			}
			if n.KubeletCert != nil {
				v.add(f("kubeletCert"), "", "is set on a "+n.Role+" node, which runs no kubelet", "remove it")
			}
		}
		if n.TLSBootstrap && n.KubeletCert != nil {
			v.add(f("kubeletCert"), n.KubeletCert.Cert,
				"a TLS-bootstrap worker gets its kubelet cert from the cluster through a CSR, so it cannot also have a pre-issued cert",
				"remove kubeletCert, or set tlsBootstrap: false to install the pre-issued cert")
		}
		if n.KubeletCert != nil && (n.KubeletCert.Cert == "" || n.KubeletCert.Key == "") {
			v.add(f("kubeletCert"), "", "needs both cert and key", "give the paths of the PEM cert and its private key")
		} else if n.KubeletCert != nil {
			for _, x := range []struct{ field, path string }{{"kubeletCert.cert", n.KubeletCert.Cert}, {"kubeletCert.key", n.KubeletCert.Key}} {
				if st, err := os.Stat(x.path); err != nil || !st.Mode().IsRegular() {
					v.add(f(x.field), x.path, "is not a readable file", "give the path of the PEM file on this machine (absolute, or relative to where you run khw)")
				}
			}
		}
		if n.CPUs < 1 || n.CPUs > 64 {
			v.add(f("cpus"), strconv.Itoa(n.CPUs), "is out of range", "use 1-64")
		}
		if n.MemoryMiB < 256 || n.MemoryMiB > 1<<20 {
			v.add(f("memoryMiB"), strconv.Itoa(n.MemoryMiB), "is out of range", "use 512-1048576 (MiB); 2048 for control planes and workers")
		}
		if n.DiskGiB < 4 || n.DiskGiB > 1<<16 {
			v.add(f("diskGiB"), strconv.Itoa(n.DiskGiB), "is out of range", "use 4-65536 (GiB); 20 is comfortable")
		}
	}
	if got := counts[RoleLoadBalancer]; got != 1 {
		v.add("nodes", strconv.Itoa(got)+" loadbalancer nodes", "the cluster needs exactly one node with role loadbalancer (HAProxy in front of the apiservers)",
			"keep exactly one `role: loadbalancer` node")
	}
	switch cps := counts[RoleControlPlane]; {
	case cps == 0:
		v.add("nodes", "0 controlplane nodes", "the cluster needs at least one control plane", "add `role: controlplane` nodes (3 for HA)")
	case cps%2 == 0:
		q := cps/2 + 1
		v.warn("nodes", fmt.Sprintf("%d control planes: etcd quorum is %d of %d, so the cluster survives %d failure(s), no more than %d control planes would; use an odd number",
			cps, q, cps, cps-q, cps-1))
	}
	if counts[RoleWorker] == 0 {
		v.add("nodes", "0 worker nodes", "the cluster needs at least one worker", "add `role: worker` nodes with a podCIDR each")
	}
}
