// Package components is khw's component catalog: for each component its
// version, the official download URL per architecture, how a download is
// verified, what is inside an archive and where each file is installed on a
// node. The data lives in catalog.yaml (embedded); versions come from
// cluster.yaml's versions section.
package components

import (
	"bytes"
	_ "embed"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"text/template"

	"gopkg.in/yaml.v3"

	"github.com/khw-dev/khw/internal/config"
)

//go:embed catalog.yaml
var catalogYAML []byte

// Artifact formats.
const (
	FormatBinary = "binary" // a single executable file
	FormatTarGz  = "tar.gz" // a gzip-compressed tar archive
	FormatImage  = "image"  // a container image (OCI image layout tarball in a mirror)
	FormatDisk   = "disk"   // a VM disk image (qcow2)
)

// Checksum file formats.
const (
	// ChecksumHex: the checksum file holds only the hex digest (dl.k8s.io, crictl).
	ChecksumHex = "hex"
	// ChecksumSHA256Sum: lines "<hex>  <file name>" as sha256sum prints them
	// (etcd SHA256SUMS, containerd, runc, CNI plugins, Ubuntu).
	ChecksumSHA256Sum = "sha256sum"
)

// Roles that receive artifacts, beyond the node roles of config.
const (
	RoleJumpbox = "jumpbox"  // the host running khw
	RoleVMImage = "vm-image" // a base disk image for the libvirt provider
)

// Catalog is the parsed catalog.yaml.
type Catalog struct {
	Components []Component `yaml:"components"`
}

// Component is one upstream project at one version.
type Component struct {
	// Name, e.g. kubernetes, etcd, containerd.
	Name string `yaml:"name"`
	// VersionKey names the cluster.yaml versions field that sets the version
	// (e.g. cniPlugins); empty when the version is fixed here (Version).
	VersionKey string `yaml:"versionKey"`
	// Version is the fixed version of a component without a VersionKey.
	Version string `yaml:"version"`
	// Compatibility cites why this version goes with Kubernetes 1.37.
	Compatibility string     `yaml:"compatibility"`
	Artifacts     []Artifact `yaml:"artifacts"`
}

// Artifact is one downloadable file (or image) of a component.
type Artifact struct {
	Name string `yaml:"name"`
	// URL is the official download URL template (empty for images).
	URL string `yaml:"url"`
	// Image is the image reference template (images only).
	Image    string   `yaml:"image"`
	Checksum Checksum `yaml:"checksum"`
	// Format is binary, tar.gz, image or disk.
	Format string `yaml:"format"`
	// Roles are the node roles (config.Role*, or RoleJumpbox/RoleVMImage)
	// that receive the artifact.
	Roles []string `yaml:"roles"`
	// Files are what to install: for an archive, each member's Path; for a
	// binary, one entry with an empty Path.
	Files []File `yaml:"files"`
	// Fallback, when set, is where the artifact is fetched from when URL
	// cannot be had (a dated release directory that upstream deleted); see
	// Fetcher.
	Fallback *Fallback `yaml:"fallback"`
	// Archive, when set, is where upstream keeps URL's file once it moves it
	// away (a dated release directory moved to an archive host): the same
	// file, so only a pinned digest (Checksum.SHA256 or SHA256ByArch) vouches
	// for it; Fetcher tries it before Fallback. Only Archive.URL is read.
	Archive *Fallback `yaml:"archive"`
	// Redirects, when set, are the only hosts besides the requested URL's own
	// that a download of this artifact (URL, Archive, Fallback and their
	// checksum and signature files) may be redirected to; a redirect from
	// https to plain http is followed only to one of them, and only for a
	// pinned digest. Unset: any https host (the release CDNs of dl.k8s.io and
	// github.com), never plain http.
	Redirects []string `yaml:"redirects"`
	// MaxMiB bounds the download in MiB: a transfer that brings more is cut
	// off (a broken or hostile mirror cannot fill the disk). Set with room
	// (about 3× the release's size) so a patch release does not hit it.
	MaxMiB int64 `yaml:"maxMiB"`
}

// Checksum says how to verify a download.
type Checksum struct {
	// URL of the published checksum file (template).
	URL string `yaml:"url"`
	// Format is hex or sha256sum.
	Format string `yaml:"format"`
	// SHA256 pins the digest (hex), overriding the published file.
	SHA256 string `yaml:"sha256"`
	// SHA256ByArch pins the digest (hex) per arch (amd64, arm64), for a
	// URL whose file differs by arch; it wins over SHA256.
	SHA256ByArch map[string]string `yaml:"sha256ByArch"`
	// Signature, when set, is the checksum file's detached OpenPGP
	// signature: a checksum file that it does not verify is refused.
	Signature *Signature `yaml:"signature"`
}

// Signature locates a checksum file's detached OpenPGP signature (RFC 4880
// §11.4, binary or ASCII-armoured, e.g. Ubuntu's SHA256SUMS.gpg) and names
// the keys that may have made it: fingerprints (40 hex digits, spaces
// allowed) of primary keys in khw's embedded keyring (keys/*.asc).
type Signature struct {
	URL  string   `yaml:"url"`
	Keys []string `yaml:"keys"`
	// NotBefore (2006-01-02), when set, refuses a signature made before
	// that day: the date of the release the artifact pins, so that an
	// older list the same key signed cannot roll the file back.
	NotBefore string `yaml:"notBefore"`
}

// Fallback is an artifact's second source: a URL template and its checksum,
// as in Artifact. It names a file that may change under the same URL (e.g.
// Ubuntu's releases/noble/release/), so it pins no digest: the published
// checksum file (or a pinned mirror's manifest) vouches for what is there.
type Fallback struct {
	URL      string   `yaml:"url"`
	Checksum Checksum `yaml:"checksum"`
}

// File is one installed file.
type File struct {
	// Path inside the archive ("" for a binary artifact).
	Path string `yaml:"path"`
	// Target is the absolute path on the node.
	Target string `yaml:"target"`
	// Mode of the installed file.
	Mode fs.FileMode `yaml:"mode"`
}

// Load parses the embedded catalog. It fails only if catalog.yaml itself is
// broken, which the package tests catch.
func Load() (*Catalog, error) {
	dec := yaml.NewDecoder(bytes.NewReader(catalogYAML))
	dec.KnownFields(true)
	var c Catalog
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("catalog.yaml: %w", err)
	}
	return &c, nil
}

// Resolved is an artifact with every template filled in for one cluster and
// architecture.
type Resolved struct {
	Component string
	Version   string
	Arch      string
	Artifact  Artifact // Name, Format, Roles as in the catalog
	// URL is the official download URL ("" for images).
	URL string
	// Image is the image reference (images only), e.g. registry.k8s.io/pause:3.10.2.
	Image string
	// ChecksumURL and ChecksumFormat locate the published digest; SHA256 is a
	// pinned digest if the catalog has one.
	ChecksumURL    string
	ChecksumFormat string
	SHA256         string
	// Files with their archive paths filled in.
	Files []File
	// MaxSize is the catalog's bound of the download in bytes (Artifact.MaxMiB).
	MaxSize int64
	// FileName is the base name of the download (the last URL path element),
	// which a sha256sum-format checksum file lists.
	FileName string
	// Fallback is the resolved Artifact.Fallback (nil without one): the same
	// artifact with URL, checksum and FileName of the second source, and no
	// Fallback of its own.
	Fallback *Resolved
	// Archive is the resolved Artifact.Archive (nil without one): the same
	// artifact and pinned digest at the archive URL, with no checksum file,
	// Archive or Fallback of its own.
	Archive *Resolved
	// SignatureURL and SignatureKeys are the resolved Checksum.Signature
	// ("" and nil without one).
	SignatureURL       string
	SignatureKeys      []string
	SignatureNotBefore string
	// Redirects is Artifact.Redirects.
	Redirects []string
}

// VersionOf returns the version cluster.yaml sets for a versions key
// (the yaml field name, e.g. "cniPlugins"), and false for an unknown key.
func VersionOf(v config.Versions, key string) (string, bool) {
	rv := reflect.ValueOf(v)
	rt := rv.Type()
	for i := 0; i < rt.NumField(); i++ {
		tag := strings.Split(rt.Field(i).Tag.Get("yaml"), ",")[0]
		if tag == key {
			return rv.Field(i).String(), true
		}
	}
	return "", false
}

// Resolve fills in the catalog for cluster c and arch (amd64 or arm64):
// every artifact of every component, with versions from c.Versions.
func (cat *Catalog) Resolve(c *config.Cluster, arch string) ([]Resolved, error) {
	if arch != config.ArchAMD64 && arch != config.ArchARM64 {
		return nil, fmt.Errorf("arch %q: use amd64 or arm64", arch)
	}
	var out []Resolved
	for _, comp := range cat.Components {
		ver := comp.Version
		if comp.VersionKey != "" {
			v, ok := VersionOf(c.Versions, comp.VersionKey)
			if !ok {
				return nil, fmt.Errorf("catalog: component %s names versions.%s, which cluster.yaml does not have", comp.Name, comp.VersionKey)
			}
			ver = v
		}
		if ver == "" {
			return nil, fmt.Errorf("catalog: component %s has no version", comp.Name)
		}
		data := struct{ Version, V, Arch string }{ver, strings.TrimPrefix(ver, "v"), arch}
		expand := func(s string) (string, error) {
			if s == "" {
				return "", nil
			}
			t, err := template.New("").Option("missingkey=error").Parse(s)
			if err != nil {
				return "", fmt.Errorf("catalog: %s: %w", comp.Name, err)
			}
			var b strings.Builder
			if err := t.Execute(&b, data); err != nil {
				return "", fmt.Errorf("catalog: %s: %w", comp.Name, err)
			}
			return b.String(), nil
		}
		for _, a := range comp.Artifacts {
			r := Resolved{Component: comp.Name, Version: ver, Arch: arch, Artifact: a,
				ChecksumFormat: a.Checksum.Format, SHA256: a.Checksum.SHA256, MaxSize: a.MaxMiB << 20}
			var err error
			if r.URL, err = expand(a.URL); err != nil {
				return nil, err
			}
			if r.Image, err = expand(a.Image); err != nil {
				return nil, err
			}
			if r.ChecksumURL, err = expand(a.Checksum.URL); err != nil {
				return nil, err
			}
			if v, ok := a.Checksum.SHA256ByArch[arch]; ok {
				r.SHA256 = v
			}
			r.Redirects = a.Redirects
			if sig := a.Checksum.Signature; sig != nil {
				if r.SignatureURL, err = expand(sig.URL); err != nil {
					return nil, err
				}
				r.SignatureKeys, r.SignatureNotBefore = sig.Keys, sig.NotBefore
			}
			if r.URL != "" {
				r.FileName = r.URL[strings.LastIndex(r.URL, "/")+1:]
			}
			for _, f := range a.Files {
				p, err := expand(f.Path)
				if err != nil {
					return nil, err
				}
				r.Files = append(r.Files, File{Path: p, Target: f.Target, Mode: f.Mode})
			}
			if fb := a.Fallback; fb != nil {
				s := r
				s.SHA256, s.ChecksumFormat = fb.Checksum.SHA256, fb.Checksum.Format
				if v, ok := fb.Checksum.SHA256ByArch[arch]; ok {
					s.SHA256 = v
				}
				if s.URL, err = expand(fb.URL); err != nil {
					return nil, err
				}
				if s.ChecksumURL, err = expand(fb.Checksum.URL); err != nil {
					return nil, err
				}
				s.SignatureURL, s.SignatureKeys, s.SignatureNotBefore = "", nil, ""
				if sig := fb.Checksum.Signature; sig != nil {
					if s.SignatureURL, err = expand(sig.URL); err != nil {
						return nil, err
					}
					s.SignatureKeys, s.SignatureNotBefore = sig.Keys, sig.NotBefore
				}
				s.FileName = s.URL[strings.LastIndex(s.URL, "/")+1:]
				r.Fallback = &s
			}
			if ar := a.Archive; ar != nil {
				if r.SHA256 == "" {
					return nil, fmt.Errorf("catalog: %s: archive %s needs a pinned sha256: the archive host publishes no checksum file of its own", a.Name, ar.URL)
				}
				s := r
				s.Fallback, s.ChecksumURL, s.SignatureURL, s.SignatureKeys, s.SignatureNotBefore = nil, "", "", nil, ""
				if s.URL, err = expand(ar.URL); err != nil {
					return nil, err
				}
				s.FileName = s.URL[strings.LastIndex(s.URL, "/")+1:]
				r.Archive = &s
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// ForRole filters resolved artifacts to those a role receives.
func ForRole(rs []Resolved, role string) []Resolved {
	var out []Resolved
	for _, r := range rs {
		for _, ro := range r.Artifact.Roles {
			if ro == role {
				out = append(out, r)
				break
			}
		}
	}
	return out
}
