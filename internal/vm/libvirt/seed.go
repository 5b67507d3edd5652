package libvirt

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
	"gopkg.in/yaml.v3"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/vm"
)

// SeedLabel is the volume label cloud-init's NoCloud datasource looks for
// (cloud-init docs, reference/datasources/nocloud: "a vfat or iso9660
// filesystem … with a volume label of cidata or CIDATA").
const SeedLabel = "cidata"

// NoCloud seed file names (cloud-init NoCloud datasource).
const (
	SeedUserData      = "user-data"
	SeedMetaData      = "meta-data"
	SeedNetworkConfig = "network-config"
)

// cloudConfig is the part of #cloud-config khw writes (cloud-init module
// docs: users-groups, set-hostname, update-etc-hosts, write-files, ssh).
//
// SSH host keys (cloud-init module "SSH", cc_ssh,
// https://cloudinit.readthedocs.io/en/latest/reference/modules.html#ssh):
// ssh_deletekeys removes every /etc/ssh/ssh_host_*key* the image has;
// ssh_keys writes <type>_private / <type>_public to
// /etc/ssh/ssh_host_<type>_key(.pub) (the private one 0600), and "if no host
// keys are specified using ssh_keys, then keys will be generated" of the
// types in ssh_genkeytypes: khw gives ssh_keys and an empty ssh_genkeytypes,
// so nothing is generated whichever way a cloud-init version reads them.
// The module runs once per instance (frequency PER_INSTANCE), on the first
// boot with a new instance-id.
type cloudConfig struct {
	Hostname         string            `yaml:"hostname"`
	FQDN             string            `yaml:"fqdn"`
	PreferFQDN       bool              `yaml:"prefer_fqdn_over_hostname"`
	ManageEtcHosts   bool              `yaml:"manage_etc_hosts"`
	Users            []cloudUser       `yaml:"users"`
	SSHPwauth        bool              `yaml:"ssh_pwauth"`
	SSHDeleteKeys    bool              `yaml:"ssh_deletekeys"`
	SSHGenKeyTypes   []string          `yaml:"ssh_genkeytypes"`
	SSHKeys          map[string]string `yaml:"ssh_keys"`
	DisableRoot      bool              `yaml:"disable_root"`
	WriteFiles       []writeFile       `yaml:"write_files"`
	PackageUpdate    bool              `yaml:"package_update"`
	PackageUpgrade   bool              `yaml:"package_upgrade"`
	ResizeRootfs     bool              `yaml:"resize_rootfs"`
	PreserveHostname bool              `yaml:"preserve_hostname"`
	BootCmd          [][]string        `yaml:"bootcmd,omitempty"`
}

type cloudUser struct {
	Name              string   `yaml:"name"`
	UID               int      `yaml:"uid"`
	Gecos             string   `yaml:"gecos"`
	Shell             string   `yaml:"shell"`
	Sudo              string   `yaml:"sudo"`
	LockPasswd        bool     `yaml:"lock_passwd"`
	SSHAuthorizedKeys []string `yaml:"ssh_authorized_keys"`
}

type writeFile struct {
	Path        string `yaml:"path"`
	Content     string `yaml:"content"`
	Permissions string `yaml:"permissions"`
	Owner       string `yaml:"owner"`
}

// networkConfig is network-config version 2 (cloud-init docs,
// reference/network-config-format-v2), the netplan-like format every
// cloud-init renderer (netplan, networkd, eni) understands.
type networkConfig struct {
	Version   int                     `yaml:"version"`
	Ethernets map[string]ethernetConf `yaml:"ethernets"`
}

type ethernetConf struct {
	Match       map[string]string `yaml:"match"`
	SetName     string            `yaml:"set-name"`
	DHCP4       bool              `yaml:"dhcp4"`
	Addresses   []string          `yaml:"addresses"`
	Routes      []route           `yaml:"routes"`
	Nameservers nameservers       `yaml:"nameservers"`
}

type route struct {
	To  string `yaml:"to"`
	Via string `yaml:"via"`
}

type nameservers struct {
	Addresses []string `yaml:"addresses"`
}

// SSHDHostKeyDropIn is the sshd_config(5) drop-in (below the
// "Include /etc/ssh/sshd_config.d/*.conf" that Debian's and Ubuntu's
// sshd_config start with) naming the ed25519 key as the only HostKey: with
// a HostKey line sshd loads only the keys listed, so a key some package
// script might make later is never offered.
const SSHDHostKeyDropIn = "etc/ssh/sshd_config.d/khw-hostkey.conf"

const sshdHostKeyConf = "# khw: this node's SSH host key, generated on the jumpbox and pinned there\n" +
	"# before the first boot (<state>/ssh/hostkeys/<node>). Offer no other.\n" +
	"HostKey /etc/ssh/ssh_host_ed25519_key\n"

// resolvConfFallback is a bootcmd script (cloud-init module "Bootcmd": it
// runs on every boot, before the SSH module installs the host key khw waits
// for): when /etc/resolv.conf is a plain file naming no nameserver, it
// names GW, the resolver network-config gives the node. Some images apply
// network-config without anything that writes resolv.conf (Debian's ifupdown
// renderer without resolvconf leaves it empty); CoreDNS, which forwards to
// the kubelet's resolvConf, refuses to start on a file without a nameserver
// (coredns plugin/forward/setup.go: "no valid upstream addresses found").
// A symlink (systemd-resolved on Ubuntu) or a file that names one is left
// alone.
const resolvConfFallback = `f=/etc/resolv.conf; [ -L "$f" ] || grep -qs '^nameserver' "$f" || printf '# khw: the gateway, as network-config says\nnameserver %s\n' GW >"$f"`

// SeedIface is the name the node NIC gets (network-config set-name), the
// same on both arches and on every image.
const SeedIface = "eth0"

// SeedFiles returns the NoCloud files of node n of cluster c:
//
//   - user-data (#cloud-config): hostname and FQDN, user ubuntu (uid 1000,
//     shell bash, password locked, authorizedKey, sudo NOPASSWD), no
//     password SSH, /etc/hosts listing every node of the cluster as
//     "IP FQDN name" (cloud-init's own /etc/hosts management off), no
//     package update at boot, root file system grown to the disk; the SSH
//     host key hostKey as the node's only one (ssh_keys ed25519_private and
//     ed25519_public, ssh_deletekeys true, ssh_genkeytypes [], see
//     cloudConfig, and the sshd_config drop-in SSHDHostKeyDropIn naming only
//     that key), so the node presents exactly the key khw pinned before its
//     first boot. user-data thus holds a private key: keep it 0600;
//   - meta-data: instance-id khw-<cluster>-<node> (stable: a re-made seed
//     does not make cloud-init treat the node as a new instance and throw
//     away its SSH host keys) and local-hostname;
//   - network-config (v2): the NIC with MAC renamed eth0, the node's static
//     address with the prefix of network.cidr, default route and DNS via
//     network.gateway, no DHCP.
//
// Errors name the node and the field (bad IP, empty key, no host key, bad
// MAC).
func SeedFiles(c *config.Cluster, n config.Node, mac, authorizedKey string, hostKey *remote.HostKey) (map[string][]byte, error) {
	key := strings.TrimSpace(authorizedKey)
	if key == "" || strings.Contains(key, "\n") {
		return nil, fmt.Errorf("node %s: SSH public key for cloud-init must be one authorized_keys line (from remote.EnsureKey), got %d bytes", n.Name, len(authorizedKey))
	}
	if hostKey == nil || len(hostKey.Private) == 0 || hostKey.Public == nil {
		return nil, fmt.Errorf("node %s: no SSH host key for cloud-init; pass remote.EnsureHostKey's key (libvirt.Options.HostKey)", n.Name)
	}
	mac, err := ParseMAC(mac)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	prefix, err := vm.NodePrefix(c, n)
	if err != nil {
		return nil, err
	}

	var hosts strings.Builder
	hosts.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\n# khw: cluster nodes\n")
	for _, m := range c.Nodes {
		fmt.Fprintf(&hosts, "%s\t%s %s\n", m.IP, c.FQDN(m), m.Name)
	}
	uc := cloudConfig{
		Hostname:       n.Name,
		FQDN:           c.FQDN(n),
		ManageEtcHosts: false,
		Users: []cloudUser{{
			Name:              vm.NodeUser,
			UID:               1000,
			Gecos:             "khw",
			Shell:             "/bin/bash",
			Sudo:              "ALL=(ALL) NOPASSWD:ALL",
			LockPasswd:        true,
			SSHAuthorizedKeys: []string{key},
		}},
		DisableRoot:    true,
		ResizeRootfs:   true,
		SSHDeleteKeys:  true,
		SSHGenKeyTypes: []string{},
		SSHKeys: map[string]string{
			"ed25519_private": string(hostKey.Private),
			"ed25519_public":  hostKey.PublicLine(),
		},
		WriteFiles: []writeFile{
			{Path: "/" + SSHDHostKeyDropIn, Content: sshdHostKeyConf, Permissions: "0644", Owner: "root:root"},
			{Path: "/etc/hosts", Content: hosts.String(), Permissions: "0644", Owner: "root:root"},
			{Path: "/etc/systemd/system.conf.d/khw.conf", Permissions: "0644", Owner: "root:root",
				Content: "[Manager]\n# khw: keep power-off short (a stuck service would hold it 90 s).\nDefaultTimeoutStopSec=15s\n"},
		},
		BootCmd: [][]string{{"sh", "-c", strings.ReplaceAll(resolvConfFallback, "GW", c.Network.Gateway)}},
	}
	user, err := yaml.Marshal(uc)
	if err != nil {
		return nil, err
	}
	meta, err := yaml.Marshal(map[string]string{
		"instance-id":    "khw-" + c.Name + "-" + n.Name,
		"local-hostname": n.Name,
	})
	if err != nil {
		return nil, err
	}
	nc := networkConfig{Version: 2, Ethernets: map[string]ethernetConf{
		SeedIface: {
			Match:       map[string]string{"macaddress": mac},
			SetName:     SeedIface,
			Addresses:   []string{prefix},
			Routes:      []route{{To: "0.0.0.0/0", Via: c.Network.Gateway}},
			Nameservers: nameservers{Addresses: []string{c.Network.Gateway}},
		},
	}}
	netw, err := yaml.Marshal(nc)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		SeedUserData:      append([]byte("#cloud-config\n"), user...),
		SeedMetaData:      meta,
		SeedNetworkConfig: netw,
	}, nil
}

// SeedISO makes an ISO 9660 image (Rock Ridge, so names keep their case and
// dashes) with volume label SeedLabel holding files at its root, as the
// NoCloud datasource reads it. tmpDir is where the image and go-diskfs'
// workspace are built (os.TempDir() when empty); both are removed.
func SeedISO(files map[string][]byte, tmpDir string) ([]byte, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("seed ISO: no files")
	}
	dir, err := os.MkdirTemp(tmpDir, "khw-seed-")
	if err != nil {
		return nil, fmt.Errorf("seed ISO: temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	var size int64 = 1 << 20
	for _, b := range files {
		size += int64(len(b)) + 4096
	}
	size = (size + 2047) / 2048 * 2048
	path := filepath.Join(dir, "seed.iso")
	d, err := diskfs.Create(path, size, diskfs.SectorSizeDefault)
	if err != nil {
		return nil, fmt.Errorf("seed ISO: create %s: %w", path, err)
	}
	closed := false
	defer func() {
		if !closed {
			d.Close()
		}
	}()
	d.LogicalBlocksize = 2048
	// The workspace lives in dir, so that an error before Finalize (which
	// removes it) does not leave it behind.
	work := filepath.Join(dir, "workspace")
	if err := os.Mkdir(work, 0o700); err != nil {
		return nil, fmt.Errorf("seed ISO: workspace: %w", err)
	}
	fsys, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeISO9660, VolumeLabel: SeedLabel, WorkDir: work})
	if err != nil {
		return nil, fmt.Errorf("seed ISO: create file system: %w", err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.ContainsAny(name, "/\\") || name == "" {
			return nil, fmt.Errorf("seed ISO: file name %q must be a plain name", name)
		}
		f, err := fsys.OpenFile(name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return nil, fmt.Errorf("seed ISO: add %s: %w", name, err)
		}
		if _, err := io.Copy(f, bytes.NewReader(files[name])); err != nil {
			f.Close()
			return nil, fmt.Errorf("seed ISO: write %s: %w", name, err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("seed ISO: close %s: %w", name, err)
		}
	}
	iso, ok := fsys.(*iso9660.FileSystem)
	if !ok {
		return nil, fmt.Errorf("seed ISO: go-diskfs returned %T, not an ISO 9660 file system", fsys)
	}
	if err := iso.Finalize(iso9660.FinalizeOptions{RockRidge: true, VolumeIdentifier: SeedLabel}); err != nil {
		return nil, fmt.Errorf("seed ISO: finalize: %w", err)
	}
	closed = true
	if err := d.Close(); err != nil {
		return nil, fmt.Errorf("seed ISO: close: %w", err)
	}
	return os.ReadFile(path)
}

// ReadISO returns the files at the root of an ISO 9660 image and its volume
// label; used by tests and by `khw` diagnostics to show what a node's seed
// holds.
func ReadISO(image []byte, tmpDir string) (files map[string][]byte, label string, err error) {
	dir, err := os.MkdirTemp(tmpDir, "khw-seed-read-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "seed.iso")
	if err := os.WriteFile(path, image, 0o600); err != nil {
		return nil, "", err
	}
	d, err := diskfs.Open(path, diskfs.WithOpenMode(diskfs.ReadOnly), diskfs.WithSectorSize(2048))
	if err != nil {
		return nil, "", fmt.Errorf("open ISO: %w", err)
	}
	defer d.Close()
	fsys, err := d.GetFilesystem(0)
	if err != nil {
		return nil, "", fmt.Errorf("read ISO file system: %w", err)
	}
	entries, err := fsys.ReadDir(".")
	if err != nil {
		return nil, "", fmt.Errorf("list ISO root: %w", err)
	}
	files = map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		f, err := fsys.OpenFile(e.Name(), os.O_RDONLY)
		if err != nil {
			return nil, "", fmt.Errorf("open %s in ISO: %w", e.Name(), err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return nil, "", fmt.Errorf("read %s in ISO: %w", e.Name(), err)
		}
		files[e.Name()] = b
	}
	// go-diskfs pads the volume identifier with NULs, ECMA-119 with spaces.
	return files, strings.TrimRight(fsys.Label(), " \x00"), nil
}
