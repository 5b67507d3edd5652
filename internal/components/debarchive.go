package components

import (
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
)

// DebArchive is a distribution's package archive that khw takes node
// packages from when the nodes reach no archive themselves (an offline
// mirror): the archive's official layout (https://wiki.debian.org/DebianRepository/Format),
// URL/dists/SUITE/Release, URL/dists/SUITE/COMPONENT/binary-ARCH/Packages.xz
// and URL/pool/... for the .deb files, which a mirror holds under
// MIRROR/HOST/PATH like every other download.
type DebArchive struct {
	// OS and Codename are the node's /etc/os-release ID and
	// VERSION_CODENAME ("debian" "bookworm", "ubuntu" "noble").
	OS, Codename string
	// Arches are the dpkg architectures (dpkg --print-architecture) this
	// URL serves.
	Arches []string
	// URL is the archive root, without a trailing slash.
	URL string
	// Suites are read in order; a package in a later suite (the updates
	// suite) replaces the one of the same name in an earlier suite.
	Suites []string
	// Components are the archive areas read in every suite.
	Components []string
	// Keyring is where the distribution's archive keyring is installed
	// (debian-archive-keyring, ubuntu-keyring), and Keys the fingerprints of
	// the primary keys whose InRelease signatures khw accepts when it
	// downloads the archive itself (VerifyInRelease); through a mirror the
	// manifest pin vouches for the files instead.
	Keyring string
	Keys    []string
}

// DebArchives are the archives of the node OSes khw supports: the Debian
// bookworm stand-in image (nspawn rootfs, the libvirt test image) and the
// Ubuntu 24.04 cloud image. Ubuntu serves amd64 from archive.ubuntu.com and
// every other architecture from ports.ubuntu.com
// (https://wiki.ubuntu.com/UbuntuDevelopment/PackageArchive#Ports).
//
// Keys: Debian's are the bookworm InRelease signers as gpgv reports them
// against debian-archive-keyring (Archive Automatic Signing Keys 12/bookworm
// and 13/trixie, Stable Release Key 12/bookworm); Ubuntu's is the Ubuntu
// Archive Automatic Signing Key (2018) of ubuntu-keyring
// (https://wiki.ubuntu.com/SecurityTeam/FAQ#GPG_Keys_used_by_Ubuntu),
// not checked on this machine, which reaches no Ubuntu archive.
var DebArchives = []DebArchive{
	{OS: "debian", Codename: "bookworm", Arches: []string{"amd64", "arm64"}, URL: "https://deb.debian.org/debian",
		Suites: []string{"bookworm", "bookworm-updates"}, Components: []string{"main"},
		Keyring: "/usr/share/keyrings/debian-archive-keyring.gpg", Keys: debianKeys},
	{OS: "ubuntu", Codename: "noble", Arches: []string{"amd64"}, URL: "http://archive.ubuntu.com/ubuntu",
		Suites: []string{"noble", "noble-updates"}, Components: []string{"main"},
		Keyring: "/usr/share/keyrings/ubuntu-archive-keyring.gpg", Keys: ubuntuKeys},
	{OS: "ubuntu", Codename: "noble", Arches: []string{"arm64"}, URL: "http://ports.ubuntu.com/ubuntu-ports",
		Suites: []string{"noble", "noble-updates"}, Components: []string{"main"},
		Keyring: "/usr/share/keyrings/ubuntu-archive-keyring.gpg", Keys: ubuntuKeys},
}

var (
	debianKeys = []string{"B8B80B5B623EAB6AD8775C45B7C5D7D6350947F8", "B8E5F13176D2A7A75220028078DBA3BC47EF2265", "4D64FEC119C2029067D6E791F8D2585B8783D481"}
	ubuntuKeys = []string{"F6ECB3762474EDA9D21B7022871920D1991BC93C"}
)

// NodeDebs are every distribution package a khw step may install on a
// node (the steps' wanted packages: haproxy on the load balancer, iptables and
// jq on the workers, iproute2 for the pod routes): what a mirror must hold,
// with the dependencies the node image lacks, for offline installs.
var NodeDebs = []string{"haproxy", "iproute2", "iptables", "jq"}

// FindDebArchive returns the archive for a node's OS (os-release ID and
// VERSION_CODENAME) and dpkg architecture. Error: none is known, naming
// the OS and arch and the ones khw knows.
func FindDebArchive(osID, codename, arch string) (DebArchive, error) {
	var known []string
	for _, a := range DebArchives {
		if a.OS == osID && a.Codename == codename && slices.Contains(a.Arches, arch) {
			return a, nil
		}
		for _, ar := range a.Arches {
			known = append(known, a.OS+" "+a.Codename+" "+ar)
		}
	}
	return DebArchive{}, fmt.Errorf("khw knows no package archive for %s %s %s (os-release ID, VERSION_CODENAME, dpkg architecture); it knows %s "+
		"(fix: use a node image of one of those, or install the packages on the node yourself)", osID, codename, arch, strings.Join(known, ", "))
}

// String is "debian bookworm" style, for messages.
func (a DebArchive) String() string { return a.OS + " " + a.Codename }

// ReleaseURL is the URL of a suite's Release file.
func (a DebArchive) ReleaseURL(suite string) string { return a.URL + "/dists/" + suite + "/Release" }

// IndexPath is the path of a component's package index for arch relative
// to the suite's directory, as the Release file lists it ("main/binary-amd64/Packages").
func IndexPath(component, arch string) string { return component + "/binary-" + arch + "/Packages" }

// DistURL is the URL of a file listed in a suite's Release file.
func (a DebArchive) DistURL(suite, rel string) string { return a.URL + "/dists/" + suite + "/" + rel }

// PoolURL is the URL of a Packages Filename ("pool/main/h/haproxy/…deb").
// Error: a Filename that is not a clean relative path under pool/.
func (a DebArchive) PoolURL(filename string) (string, error) {
	c := path.Clean(filename)
	if c != filename || !strings.HasPrefix(c, "pool/") || strings.Contains(c, "..") || strings.ContainsAny(c, "?#\\ ") || !strings.HasSuffix(c, ".deb") {
		return "", fmt.Errorf("package index of %s: Filename %q is not a .deb under pool/", a, filename)
	}
	return a.URL + "/" + c, nil
}

// debArchiveHosts are the hosts of DebArchives, top-level directories of a
// mirror.
func debArchiveHosts() []string {
	var out []string
	for _, a := range DebArchives {
		if u, err := url.Parse(a.URL); err == nil && u.Host != "" && !slices.Contains(out, u.Host) {
			out = append(out, u.Host)
		}
	}
	return out
}
