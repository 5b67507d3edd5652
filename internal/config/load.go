package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/khw-dev/khw/internal/fsutil"
)

// FileName is the name of the desired-state file inside a cluster's state dir.
const FileName = "cluster.yaml"

// MaxFileSize is the largest cluster.yaml khw reads: 1 MiB. khw init writes
// about 3 KiB for the default cluster; the limit keeps a wrong path (a disk
// image, a log) or a hostile file from being read into memory and parsed.
const MaxFileSize = 1 << 20

// tooLarge is the error for a file of size bytes (or more) over MaxFileSize.
func tooLarge(source string, size int64, atLeast bool) error {
	more := ""
	if atLeast {
		more = "at least "
	}
	return fmt.Errorf("%s is %s%d bytes (%.1f MiB), over the %d-byte (1 MiB) limit of a cluster.yaml; nothing was read (fix: point khw at the cluster's own cluster.yaml, which `khw init` writes in a few KiB)",
		source, more, size, float64(size)/(1<<20), MaxFileSize)
}

// Parse decodes one cluster.yaml document strictly (unknown fields and extra
// documents are errors), fills unset fields with defaults and validates it.
// source names the file in error messages. The returned error is a
// *ValidationError for semantic problems, or a plain error naming the line for
// YAML syntax and schema problems. data longer than MaxFileSize is refused
// before parsing. Error messages repeat at most MaxEcho characters of a bad
// value or key.
func Parse(data []byte, source string) (*Cluster, []Warning, error) {
	if source == "" {
		source = FileName
	}
	if len(data) > MaxFileSize {
		return nil, nil, tooLarge(source, int64(len(data)), false)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil, fmt.Errorf("%s is empty (fix: run `khw init` to write a complete one)", source)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Cluster
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("%s is empty (fix: run `khw init` to write a complete one)", source)
		}
		return nil, nil, explainYAML(source, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, nil, fmt.Errorf("%s holds more than one YAML document (fix: keep a single document, remove the extra `---`)", source)
	} else if !errors.Is(err, io.EOF) {
		return nil, nil, explainYAML(source, err)
	}
	if err := nullNodes(data, source); err != nil {
		return nil, nil, err
	}
	c.SetDefaults()
	warns, err := c.Validate()
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			ve.Source = source
		}
		return nil, warns, err
	}
	return &c, warns, nil
}

// nullNodes finds the entries of the top-level nodes list that are YAML
// null ("- null", "- ~", a bare "-"): yaml.v3 leaves them out of the
// decoded list without a word, so a node the user meant to write would
// be missing. data must be YAML that decoded already. The error is a
// *ValidationError with one FieldError per null entry, "nodes[N]" counted
// in the file as written; the other checks do not run, since their
// indices would skip the null entries.
func nullNodes(data []byte, source string) error {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	top := doc.Content[0]
	ve := &ValidationError{Source: source}
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "nodes" || top.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for j, item := range top.Content[i+1].Content {
			n := item
			if n.Kind == yaml.AliasNode && n.Alias != nil {
				n = n.Alias
			}
			if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
				ve.Errors = append(ve.Errors, &FieldError{Field: fmt.Sprintf("nodes[%d]", j),
					Problem: fmt.Sprintf("is null (line %d), not a node: an empty list entry would be left out without a word", item.Line),
					Fix:     "remove the line, or write the node there, as the others are, e.g. {name: w4, role: worker, ip: 192.168.122.24, podCIDR: 10.200.3.0/24}"})
			}
		}
	}
	if len(ve.Errors) > 0 {
		return ve
	}
	return nil
}

// Load reads and parses path; see Parse. A file larger than MaxFileSize is
// refused by its size before any of it is read; one that is not a regular
// file (a FIFO, a device) is read up to MaxFileSize+1 bytes only.
func Load(path string) (*Cluster, []Warning, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("%s does not exist (fix: run `khw init` first, or point --state-dir/--cluster at an existing cluster)", path)
		}
		return nil, nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, nil, err
	} else if st.Mode().IsRegular() && st.Size() > MaxFileSize {
		return nil, nil, tooLarge(path, st.Size(), false)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, nil, tooLarge(path, int64(len(data)), true)
	}
	return Parse(data, path)
}

var (
	unknownFieldRE  = regexp.MustCompile(`(?s)line (\d+): field (.+) not found in type config\.(\w+)$`)
	notMapping      = regexp.MustCompile(`(?s)cannot unmarshal (.*) into config\.Cluster$`)
	cannotUnmarshal = regexp.MustCompile(`line (\d+): cannot unmarshal !!(\w+) ` + "`" + `([^` + "`" + `]*)` + "`" + ` into (\S+)`)
)

var typeSection = map[string]string{
	"Cluster": "the top level", "Network": "network", "Kubernetes": "kubernetes", "LoadBalancer": "loadBalancer",
	"PKI": "pki", "Subject": "pki.subject", "Versions": "versions", "Node": "a nodes entry", "CertRef": "a kubeletCert",
}

// explainYAML turns yaml.v3's errors into ones that name the line, the field
// and the fix.
func explainYAML(source string, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%s: %s (fix: check the YAML syntax at that line; indentation uses spaces)", source, clip(strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	var lines []string
	for _, msg := range te.Errors {
		switch {
		case unknownFieldRE.MatchString(msg):
			m := unknownFieldRE.FindStringSubmatch(msg)
			where := typeSection[m[3]]
			if where == "" {
				where = m[3]
			}
			lines = append(lines, fmt.Sprintf("line %s: unknown field %s in %s (fix: remove it or correct its spelling; `khw init` writes the known fields, docs/cluster-yaml.md lists every one)", m[1], quote(m[2]), where))
		case notMapping.MatchString(msg):
			lines = append(lines, "the document must be a mapping of fields (apiVersion, kind, name, nodes …), not "+clip(notMapping.FindStringSubmatch(msg)[1])+" (fix: start from `khw init`)")
		case cannotUnmarshal.MatchString(msg):
			m := cannotUnmarshal.FindStringSubmatch(msg)
			lines = append(lines, fmt.Sprintf("line %s: %q is a YAML %s but this field needs %s (fix: write a value of that type, e.g. durations as 720h, counts as plain integers)", m[1], m[3], m[2], goTypeWord(m[4])))
		default:
			// yaml.v3 repeats keys and anchors in some messages
			// ("mapping key ... already defined").
			lines = append(lines, clip(msg))
		}
	}
	return fmt.Errorf("%s does not match the cluster.yaml schema:\n  - %s", source, strings.Join(lines, "\n  - "))
}

// clip shortens a message from the YAML parser, which may repeat a key or an
// anchor of any length, to 2*MaxEcho characters with an ellipsis.
func clip(msg string) string {
	n := 0
	for i := range msg {
		if n == 2*MaxEcho {
			return msg[:i] + "… (cut)"
		}
		n++
	}
	return msg
}

func goTypeWord(t string) string {
	switch {
	case t == "time.Duration":
		return "a duration (e.g. 720h, 2s)"
	case t == "int":
		return "an integer"
	case t == "bool":
		return "true or false"
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	default:
		return "a mapping (" + strings.TrimPrefix(t, "config.") + ")"
	}
}

// fieldComments are written above keys by Marshal so cluster.yaml teaches.
var fieldComments = map[string]string{
	"name":                     "Cluster name: state dir, network namespace khw-<name>, nspawn machines <name>-<node>, VM names khw-<name>-<node>.",
	"arch":                     "CPU architecture of the nodes: arm64 or amd64.",
	"provider":                 "What makes the machines: libvirt (VMs: KVM, or TCG emulation ~15× slower) or nspawn (systemd-nspawn containers).",
	"network":                  "The node network. The host (jumpbox) is the gateway.",
	"kubernetes.serviceCIDR":   "--service-cluster-ip-range; its first IP is the `kubernetes` Service and a SAN of the apiserver cert.",
	"kubernetes.clusterCIDR":   "Pod address space; each worker's podCIDR is a /24 inside it.",
	"kubernetes.clusterDNS":    "ClusterIP of the kube-dns Service (CoreDNS); kubelet's clusterDNS.",
	"kubernetes.cni":           "Pod network plugin: bridge (standard plugins) or mybridge (the seed's bash teaching plugin).",
	"loadBalancer":             "HAProxy health checks of the apiservers: a dead backend is dropped after about interval + (fall - 1) x interval/4 (fastinter).",
	"loadBalancer.healthCheck": "https = GET /readyz (catches a hung apiserver); tcp = connect only.",
	"pki":                      "Certificates (cfssl). ecdsa 256 = P-256; rsa 2048 also works.",
	"pki.renewBefore":          "`khw pki` reissues a cert that expires within this window.",
	"pki.subject":              "Informational subject fields; Kubernetes reads only CN (user) and O (groups).",
	"versions":                 "Component versions; the artifact catalog maps them to downloads.",
	"libvirt":                  "libvirt provider settings (all optional): uri, image (+ kernel/initrd/cmdline for direct kernel boot), network, domainType kvm|qemu.",
	"nodes":                    "The machines: exactly one loadbalancer, an odd number of controlplanes, workers with a podCIDR.\ntlsBootstrap: true = the worker joins with a bootstrap token and gets its kubelet cert through a CSR.",
}

// Marshal encodes c as YAML with a short comment above the main keys.
func (c *Cluster) Marshal() ([]byte, error) {
	var root yaml.Node
	if err := root.Encode(c); err != nil {
		return nil, err
	}
	annotate(&root, "")
	var buf bytes.Buffer
	buf.WriteString("# khw cluster: the desired state. Edit it, then `khw config validate` checks it.\n")
	buf.WriteString("# The comments say what the main fields do; unknown fields are errors; a field left out (or 0) takes its default.\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	if c.Provider == ProviderLibvirt && c.Libvirt == nil {
		buf.WriteString(libvirtExample)
	}
	return buf.Bytes(), nil
}

// libvirtExample ends a libvirt cluster.yaml that has no libvirt section:
// the section's fields, commented out, with their defaults.
const libvirtExample = `# The libvirt provider's settings; every one is optional (remove the # to set one):
#libvirt:
#  uri: qemu:///system      # the libvirtd to use
#  image: /abs/base.qcow2   # default: the catalog's Ubuntu 24.04 cloud image for arch (from the mirror if set)
#  network: default         # an existing libvirt network; default: the one on network.cidr, else khw-<name>
#  domainType: kvm          # kvm, or qemu (TCG, ~15x slower, for hosts without KVM); default: probe KVM
`

func annotate(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if cm, ok := fieldComments[p]; ok {
				k.HeadComment = cm
			}
			annotate(val, p)
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			annotate(item, path+"[]")
		}
	case yaml.ScalarNode:
		// time.Duration encodes as 8760h0m0s; write 8760h, which parses back
		// to the same value.
		if strings.HasSuffix(n.Value, "h0m0s") {
			n.Value = strings.TrimSuffix(n.Value, "0m0s")
		}
	case yaml.DocumentNode:
		for _, item := range n.Content {
			annotate(item, path)
		}
	}
	if strings.HasPrefix(path, "nodes[]") && n.Kind == yaml.MappingNode {
		n.Style = yaml.FlowStyle
	}
}

// Save validates c and writes it atomically to path (mode 0600). Nothing is
// written when validation fails.
func (c *Cluster) Save(path string) ([]Warning, error) {
	warns, err := c.Validate()
	if err != nil {
		return warns, err
	}
	data, err := c.Marshal()
	if err != nil {
		return warns, err
	}
	return warns, fsutil.WriteFileAtomic(path, data, fsutil.SecretMode)
}
