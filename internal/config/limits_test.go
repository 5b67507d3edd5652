package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fieldErr returns the FieldError of err on field, or fails.
func fieldErr(t *testing.T, err error, field string) *FieldError {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want a *ValidationError, got %v", err)
	}
	for _, fe := range ve.Errors {
		if fe.Field == field {
			return fe
		}
	}
	t.Fatalf("no error on %s in:\n%v", field, err)
	return nil
}

// A node called like a file of pki/ or kubeconfigs/ would write its cert,
// key or kubeconfig over that file: ca-key over the CA's private key,
// kubernetes-key over the apiserver's, w1-key over w1's key.
func TestNodeNamedLikeAStateFileIsRefused(t *testing.T) {
	for _, tc := range []struct{ name, file string }{
		{"ca-key", "pki/ca-key.pem"},
		{"kubernetes-key", "pki/kubernetes-key.pem"},
		{"service-account-key", "pki/service-account-key.pem"},
		{"w1-key", "pki/w1-key.pem"},
		{"ca", "pki/ca.pem"},
		{"kubernetes", "pki/kubernetes.pem"},
		{"service-account", "pki/service-account.pem"},
		{"admin", "kubeconfigs/admin.kubeconfig"},
		{"admin-cp", "kubeconfigs/admin-cp.kubeconfig"},
		{"kube-proxy", "kubeconfigs/kube-proxy.kubeconfig"},
		{"kube-controller-manager", "kubeconfigs/kube-controller-manager.kubeconfig"},
		{"kube-scheduler", "kubeconfigs/kube-scheduler.kubeconfig"},
		{"ca-config", "pki/ca-config.json"},
		{"admin-csr", "pki/admin-csr.json"},
		{"w3-bootstrap", "kubeconfigs/w3-bootstrap.kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w2")].Name = tc.name })
			_, err := c.Validate()
			fe := fieldErr(t, err, "nodes[5] ("+tc.name+").name")
			msg := fe.Error()
			for _, want := range []string{"collides with a file khw writes", tc.file, "rename the node, e.g. to w2"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q lacks %q", msg, want)
				}
			}
		})
	}
	for _, ok := range []string{"w4", "cake", "keyring", "w1-keys", "csr1", "bootstrap", "admins", "cas"} {
		c := mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w2")].Name = ok })
		if _, err := c.Validate(); err != nil {
			t.Errorf("node name %q refused: %v", ok, err)
		}
	}
}

// A reserved name on a node without a role made Validate panic (the fix
// took the first letter of the role); it is a normal error now, on both
// fields, with a free example name.
func TestReservedNameWithoutRoleIsAnError(t *testing.T) {
	for _, name := range []string{"admin", "ca-key", "W_1", strings.Repeat("a", 70)} {
		c := mutate(func(c *Cluster) {
			i := nodeIdx(c, "w1")
			c.Nodes[i].Name = name
			c.Nodes[i].Role = ""
		})
		_, err := c.Validate()
		fe := fieldErr(t, err, c.nodeRef(4)+".name")
		if !strings.Contains(fe.Fix, "w1") {
			t.Errorf("%q: fix %q does not suggest a free name (w1)", name, fe.Fix)
		}
		fieldErr(t, err, c.nodeRef(4)+".role")
		if strings.Contains(err.Error(), "a  node") {
			t.Errorf("%q: error speaks of an empty role: %v", name, err)
		}
	}
}

func TestNameLengths(t *testing.T) {
	long := func(n int) string { return "c" + strings.Repeat("x", n-1) }
	// Cluster names: MaxClusterNameLen.
	if err := ValidName(long(MaxClusterNameLen)); err != nil {
		t.Errorf("a %d-character cluster name is refused: %v", MaxClusterNameLen, err)
	}
	if err := ValidName(long(MaxClusterNameLen + 1)); err == nil || !strings.Contains(err.Error(), "1-20") {
		t.Errorf("a %d-character cluster name: %v", MaxClusterNameLen+1, err)
	}
	c := mutate(func(c *Cluster) { c.Name = long(MaxClusterNameLen + 1) })
	if _, err := c.Validate(); err == nil {
		t.Error("Validate accepts a 21-character cluster name")
	}

	// Node names: a DNS label of at most 63.
	c = mutate(func(c *Cluster) { c.Nodes[4].Name = "w" + strings.Repeat("1", MaxNodeNameLen) })
	_, err := c.Validate()
	if fe := fieldErr(t, err, "nodes[4].name"); !strings.Contains(fe.Problem, "not a valid host name") || !strings.Contains(fe.Fix, "1-63") {
		t.Errorf("64-character node name: %v", fe)
	}

	// nspawn: <cluster>-<node> is the machine name, at most 64.
	node43, node44 := "w"+strings.Repeat("1", 42), "w"+strings.Repeat("1", 43)
	for _, tc := range []struct {
		provider, node string
		ok             bool
	}{
		{ProviderNspawn, node43, true},
		{ProviderNspawn, node44, false},
		{ProviderLibvirt, node44, true},
	} {
		c := mutate(func(c *Cluster) {
			c.Name = long(MaxClusterNameLen)
			c.Provider = tc.provider
			c.Nodes[4].Name = tc.node
		})
		_, err := c.Validate()
		if tc.ok {
			if err != nil {
				t.Errorf("%s, node name of %d: %v", tc.provider, len(tc.node), err)
			}
			continue
		}
		fe := fieldErr(t, err, "nodes[4] ("+tc.node+").name")
		if !strings.Contains(fe.Problem, "65 characters long, over the 64") || !strings.Contains(fe.Fix, "at most 43") {
			t.Errorf("machine name too long: %v", fe)
		}
	}

	// DNS names: labels of at most 63, at most 253 in all, FQDNs too.
	label63 := strings.Repeat("d", 63)
	for _, tc := range []struct{ domain, field string }{
		{strings.Repeat("d", 64) + ".local", "network.domain"},
		{strings.Repeat(label63+".", 4) + "x", "network.domain"}, // 257
		// 250 characters, valid alone; w1.<domain> is 253, cp1.<domain> 254.
		{strings.Repeat(label63+".", 3) + strings.Repeat("e", 58), "nodes[1] (cp1).name"},
	} {
		c := mutate(func(c *Cluster) { c.Network.Domain = tc.domain })
		_, err := c.Validate()
		fieldErr(t, err, tc.field)
		if tc.field != "network.domain" {
			var ve *ValidationError
			errors.As(err, &ve)
			for _, fe := range ve.Errors {
				if strings.Contains(fe.Field, "(w1)") {
					t.Errorf("w1.<domain> is 253 characters, refused: %v", fe)
				}
			}
		}
	}
	c = mutate(func(c *Cluster) { c.Kubernetes.ClusterDomain = strings.Repeat("d", 64) + ".local" })
	_, err = c.Validate()
	fieldErr(t, err, "kubernetes.clusterDomain")

	// libvirt paths within PATH_MAX, the kernel command line within
	// COMMAND_LINE_SIZE.
	libvirt := func(l Libvirt) error {
		_, err := mutate(func(c *Cluster) { c.Provider = ProviderLibvirt; c.Libvirt = &l }).Validate()
		return err
	}
	path := func(n int) string { return "/" + strings.Repeat("p", n-1) }
	if err := libvirt(Libvirt{Image: path(4095), Kernel: path(4095), Cmdline: strings.Repeat("c", 2047)}); err != nil {
		t.Errorf("paths of 4095 bytes, a command line of 2047: %v", err)
	}
	err = libvirt(Libvirt{Image: path(4096), Kernel: path(4096), Initrd: path(4096), Cmdline: strings.Repeat("c", 2048)})
	for _, f := range []string{"libvirt.image", "libvirt.kernel", "libvirt.initrd", "libvirt.cmdline"} {
		fieldErr(t, err, f)
	}
}

// A bad value is repeated in the message only up to MaxEcho characters.
func TestBadValuesAreClipped(t *testing.T) {
	huge := strings.Repeat("v", 5000)
	c := mutate(func(c *Cluster) {
		c.Versions.Etcd = huge
		c.Nodes[4].Name = huge
		c.Network.CIDR = huge
		c.Kubernetes.ClusterCIDR = huge
		c.Provider = huge
		c.Libvirt = &Libvirt{URI: huge}
	})
	_, err := c.Validate()
	msg := err.Error()
	if len(msg) > 4000 {
		t.Errorf("message is %d bytes:\n%s", len(msg), msg)
	}
	if strings.Contains(msg, strings.Repeat("v", MaxEcho+1)) {
		t.Errorf("message repeats more than %d characters of a value:\n%s", MaxEcho, msg)
	}
	fe := fieldErr(t, err, "versions.etcd")
	if want := `"` + strings.Repeat("v", MaxEcho) + `…" (5000 characters)`; !strings.Contains(fe.Error(), want) {
		t.Errorf("clipped value: %s", fe.Error())
	}
	// The node's other fields are named by index only.
	fieldErr(t, err, "nodes[4].name")

	if got := quote("short"); got != `"short"` {
		t.Errorf("quote(short) = %s", got)
	}
	if got := quote(strings.Repeat("é", 101)); got != `"`+strings.Repeat("é", 100)+`…" (101 characters)` {
		t.Errorf("quote counts bytes, not characters: %s", got)
	}

	// Parser messages: an unknown key, a duplicate key.
	for _, doc := range []string{
		"name: khw\n" + huge + ": 1\n",
		"name: khw\nnodes: []\n" + huge + ": 1\n" + huge + ": 2\n",
		"\"" + huge + " " + huge + "\": 1\n",
	} {
		_, _, err := Parse([]byte(doc), "cluster.yaml")
		if err == nil || len(err.Error()) > 1000 {
			t.Errorf("parse error of a document with a 5000-character key is %d bytes: %.300v", len(err.Error()), err)
		}
	}
}

func TestLargeFilesAreRefused(t *testing.T) {
	good, err := Default("khw", ArchARM64, ProviderNspawn).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// A valid document padded with a comment to just over 1 MiB.
	big := append(append([]byte{}, good...), '#')
	big = append(big, []byte(strings.Repeat("x", MaxFileSize-len(big)))...)
	if _, _, err := Parse(big, "c.yaml"); err != nil {
		t.Fatalf("a document of exactly %d bytes is refused: %v", len(big), err)
	}
	big = append(big, 'x')
	if _, _, err := Parse(big, "c.yaml"); err == nil || !strings.Contains(err.Error(), "c.yaml is 1048577 bytes (1.0 MiB), over the 1048576-byte (1 MiB) limit") {
		t.Errorf("Parse of 1 MiB + 1: %v", err)
	}

	// Load refuses by size before reading: a sparse 64 GiB file would take
	// minutes and all memory to read.
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 30); err != nil {
		t.Skipf("no sparse file here: %v", err)
	}
	f.Close()
	if _, _, err := Load(path); err == nil || !strings.Contains(err.Error(), path+" is 68719476736 bytes (65536.0 MiB), over") {
		t.Errorf("Load of a 64 GiB file: %v", err)
	}
	// A device without a size is read up to the limit only.
	if _, _, err := Load("/dev/zero"); err == nil || !strings.Contains(err.Error(), "/dev/zero is at least 1048577 bytes") {
		t.Errorf("Load(/dev/zero): %v", err)
	}
}

// TestVersionsAreBoundedAndParsedStrictly: a versions.* value longer than
// MaxVersionLen, one whose number does not fit an int, or one with a '+'
// or an empty pre-release identifier is refused naming the field and the
// form to write; the longest numbers that fit and a dotted pre-release
// pass.
func TestVersionsAreBoundedAndParsedStrictly(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		set         func(c *Cluster)
		want        string
	}{
		{"minor past int", "versions.kubernetes", func(c *Cluster) { c.Versions.Kubernetes = "v1.99999999999999999999.0" },
			`its minor number "99999999999999999999" is too large`},
		{"patch past int", "versions.etcd", func(c *Cluster) { c.Versions.Etcd = "v3.6.9223372036854775808" },
			`its patch number "9223372036854775808" is too large`},
		{"pause major past int", "versions.pause", func(c *Cluster) { c.Versions.Pause = "99999999999999999999.10" },
			`its major number "99999999999999999999" is too large`},
		{"longer than 64 bytes", "versions.kubernetes", func(c *Cluster) { c.Versions.Kubernetes = "v1.37.0-" + strings.Repeat("a", 57) },
			"is 65 bytes, over the 64-byte limit of a version"},
		{"pause longer than 64 bytes", "versions.pause", func(c *Cluster) { c.Versions.Pause = "3." + strings.Repeat("1", 63) },
			"is 65 bytes, over the 64-byte limit of a version"},
		{"leading plus", "versions.kubernetes", func(c *Cluster) { c.Versions.Kubernetes = "v1.+37.0" }, "is not a version"},
		{"build metadata", "versions.runc", func(c *Cluster) { c.Versions.Runc = "v1.3.0+git" }, "is not a version"},
		{"empty pre-release identifier", "versions.kubernetes", func(c *Cluster) { c.Versions.Kubernetes = "v1.37.0-rc..1" }, "is not a version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := mutate(tc.set).Marshal()
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = Parse(data, "cluster.yaml")
			fe := fieldErr(t, err, tc.field)
			if msg := fe.Error(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, "(fix: write ") {
				t.Errorf("error %q lacks %q and the fix", msg, tc.want)
			}
		})
	}
	for _, ok := range []func(c *Cluster){
		func(c *Cluster) { c.Versions.Kubernetes = "v1.9223372036854775807.0" },
		func(c *Cluster) { c.Versions.Kubernetes = "v1.37.0-rc.1" },
		func(c *Cluster) { c.Versions.Etcd = "v3.6.0-alpha.0" },
		func(c *Cluster) { c.Versions.Pause = "3.10.1" },
		func(c *Cluster) { c.Versions.Kubernetes = "v1.37.0-" + strings.Repeat("a", 56) },
	} {
		c := mutate(ok)
		if _, err := c.Validate(); err != nil {
			t.Errorf("versions %+v: %v", c.Versions, err)
		}
	}
}

// TestNullNodeEntryIsRefused: yaml.v3 leaves a null entry of nodes out of
// the decoded list; Parse refuses it naming nodes[N] as written, its line
// and the fix, instead of returning a cluster one node short.
func TestNullNodeEntryIsRefused(t *testing.T) {
	base, err := Default("khw", ArchARM64, ProviderNspawn).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(base), "\n")
	at := slices.Index(lines, "nodes:")
	if at < 0 {
		t.Fatalf("no nodes: line in\n%s", base)
	}
	for _, tc := range []struct {
		name  string
		added []string // after the first entry (lb), nodes[1] onwards
	}{
		{"null", []string{"  - null"}},
		{"tilde", []string{"  - ~"}},
		{"bare dash", []string{"  -"}},
		{"alias of null", []string{"  - &gone null", "  - *gone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := slices.Concat(lines[:at+2], tc.added, lines[at+2:])
			c, _, err := Parse([]byte(strings.Join(doc, "\n")), "cluster.yaml")
			if c != nil {
				t.Fatalf("Parse took it: %d nodes", len(c.Nodes))
			}
			for i := range tc.added {
				fe := fieldErr(t, err, fmt.Sprintf("nodes[%d]", i+1))
				for _, want := range []string{fmt.Sprintf("is null (line %d), not a node", at+3+i), "remove the line, or write the node there"} {
					if !strings.Contains(fe.Error(), want) {
						t.Errorf("error %q lacks %q", fe.Error(), want)
					}
				}
			}
		})
	}
}
