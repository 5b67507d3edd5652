package config

import (
	"fmt"
	"net/netip"
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
	// vMAJOR.MINOR.PATCH with an optional pre-release of dot-separated
	// identifiers (v1.37.0-rc.1), as semver 2.0.0 writes one; no build
	// metadata (+...).
	semverRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)
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
