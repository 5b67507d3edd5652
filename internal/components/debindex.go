package components

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// The archive's index formats (https://wiki.debian.org/DebianRepository/Format):
// a Release file lists every index file of a suite with its SHA-256 and
// size; a Packages file has one deb822 paragraph per package with its
// Filename, Size, SHA256 and relations (Depends, Pre-Depends, Provides;
// Debian Policy §7.1 https://www.debian.org/doc/debian-policy/ch-relationships.html).

// ReleaseFile is one line of a Release file's SHA256 field.
type ReleaseFile struct {
	SHA256 string // hex
	Size   int64  // bytes
}

// Release is a parsed Release file.
type Release struct {
	Suite, Codename string
	// Files maps a path relative to the suite's directory
	// ("main/binary-amd64/Packages.xz") to its digest.
	Files map[string]ReleaseFile
}

// ParseRelease parses a Release file, or the body of an InRelease file (the
// OpenPGP clear-signing armour is removed; the signature is not checked
// here). Error: no SHA256 field, or a malformed line in it.
func ParseRelease(data []byte) (*Release, error) {
	data = clearSignedBody(data)
	paras, err := parseDeb822(bytes.NewReader(data), 1<<20)
	if err != nil || len(paras) == 0 {
		return nil, fmt.Errorf("Release file: not a deb822 paragraph: %v", err)
	}
	p := paras[0]
	rel := &Release{Suite: p["Suite"], Codename: p["Codename"], Files: map[string]ReleaseFile{}}
	sums, ok := p["SHA256"]
	if !ok {
		return nil, fmt.Errorf("Release file (suite %q): no SHA256 field", rel.Suite)
	}
	for _, line := range strings.Split(sums, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("Release file (suite %q): SHA256 line %q: want <sha256> <size> <path>", rel.Suite, line)
		}
		h, err := normalizeHex(f[0])
		n, err2 := strconv.ParseInt(f[1], 10, 64)
		if err != nil || err2 != nil || n < 0 {
			return nil, fmt.Errorf("Release file (suite %q): SHA256 line %q: bad digest or size", rel.Suite, line)
		}
		rel.Files[f[2]] = ReleaseFile{SHA256: h, Size: n}
	}
	return rel, nil
}

// clearSignedBody returns the signed text of an OpenPGP clear-signed
// message (RFC 4880 §7: after the armour headers, up to the signature,
// dash-escaping removed), or data unchanged when it is not one.
func clearSignedBody(data []byte) []byte {
	const begin = "-----BEGIN PGP SIGNED MESSAGE-----"
	if !bytes.HasPrefix(bytes.TrimLeft(data, "\r\n"), []byte(begin)) {
		return data
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	state := 0 // 0 armour header, 1 headers, 2 body
	for sc.Scan() {
		l := strings.TrimRight(sc.Text(), "\r")
		switch state {
		case 0:
			if l == begin {
				state = 1
			}
		case 1:
			if l == "" {
				state = 2
			}
		case 2:
			if strings.HasPrefix(l, "-----BEGIN PGP SIGNATURE-----") {
				return out.Bytes()
			}
			out.WriteString(strings.TrimPrefix(l, "- "))
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}

// DebPackage is one paragraph of a Packages file.
type DebPackage struct {
	Name, Version, Arch string
	// Filename is relative to the archive root ("pool/main/h/haproxy/…deb").
	Filename string
	Size     int64
	SHA256   string // hex
	// Depends, PreDepends and Provides are the fields as written.
	Depends, PreDepends, Provides string
}

// FileName is the .deb's base name.
func (p DebPackage) FileName() string { return p.Filename[strings.LastIndexByte(p.Filename, '/')+1:] }

// ParsePackages parses a Packages file. Error: a paragraph without Package,
// Filename, Size or SHA256.
func ParsePackages(r io.Reader) ([]DebPackage, error) {
	paras, err := parseDeb822(r, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("Packages file: %w", err)
	}
	out := make([]DebPackage, 0, len(paras))
	for _, p := range paras {
		n, err := strconv.ParseInt(p["Size"], 10, 64)
		sum, err2 := normalizeHex(p["SHA256"])
		if p["Package"] == "" || p["Filename"] == "" || err != nil || err2 != nil || n < 0 {
			return nil, fmt.Errorf("Packages file: the paragraph of %q lacks a Filename, Size or SHA256", p["Package"])
		}
		out = append(out, DebPackage{Name: p["Package"], Version: p["Version"], Arch: p["Architecture"], Filename: p["Filename"],
			Size: n, SHA256: sum, Depends: p["Depends"], PreDepends: p["Pre-Depends"], Provides: p["Provides"]})
	}
	return out, nil
}

// parseDeb822 reads deb822 paragraphs (RFC 822-style fields, continuation
// lines start with a space or tab, paragraphs separated by blank lines);
// a continued field's lines are joined with "\n". maxLine bounds a line.
func parseDeb822(r io.Reader, maxLine int) ([]map[string]string, error) {
	var out []map[string]string
	cur := map[string]string{}
	last := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	flush := func() {
		if len(cur) > 0 {
			out = append(out, cur)
		}
		cur, last = map[string]string{}, ""
	}
	for sc.Scan() {
		l := strings.TrimRight(sc.Text(), "\r")
		switch {
		case strings.TrimSpace(l) == "":
			flush()
		case l[0] == ' ' || l[0] == '\t':
			if last == "" {
				return nil, fmt.Errorf("continuation line %q without a field", l)
			}
			cur[last] += "\n" + strings.TrimSpace(l)
		case l[0] == '#':
		default:
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				return nil, fmt.Errorf("line %q is not a field", l)
			}
			last = strings.TrimSpace(k)
			cur[last] = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	flush()
	return out, nil
}

// DebIndex is the packages of one archive for one architecture.
type DebIndex struct {
	Archive DebArchive
	Arch    string
	pkgs    map[string]DebPackage
	order   []string            // package names in index order
	provide map[string][]string // virtual name -> real packages, index order

	// src, when set, is the pinned mirror the index was read from
	// (Fetcher.DebIndex); FetchDebs reads the .debs through it.
	src *debSource
}

// NewDebIndex indexes pkgs (later ones replace earlier ones of the same
// name: pass the updates suite last).
func NewDebIndex(a DebArchive, arch string, pkgs []DebPackage) *DebIndex {
	ix := &DebIndex{Archive: a, Arch: arch, pkgs: map[string]DebPackage{}, provide: map[string][]string{}}
	for _, p := range pkgs {
		if _, ok := ix.pkgs[p.Name]; !ok {
			ix.order = append(ix.order, p.Name)
		}
		ix.pkgs[p.Name] = p
	}
	for _, n := range ix.order {
		for _, v := range relationNames(ix.pkgs[n].Provides) {
			ix.provide[v] = append(ix.provide[v], n)
		}
	}
	return ix
}

// Package returns the index's package of that name.
func (ix *DebIndex) Package(name string) (DebPackage, bool) {
	p, ok := ix.pkgs[name]
	return p, ok
}

// Len is the number of packages.
func (ix *DebIndex) Len() int { return len(ix.pkgs) }

// relationNames returns the package names of a relation field that is a
// plain list ("a (= 1), b"), without versions or architecture qualifiers.
func relationNames(field string) []string {
	var out []string
	for _, alt := range strings.Split(field, ",") {
		if n := relationName(alt); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// relationName is the package name of one relation ("libc6:any (>= 2.34)
// [amd64]" -> "libc6").
func relationName(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " ([<"); i >= 0 {
		s = s[:i]
	}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s = s[:i]
	}
	return s
}

// relationGroups splits Depends or Pre-Depends into its AND groups, each a
// list of alternatives (package names, in the order written).
func relationGroups(field string) [][]string {
	var out [][]string
	for _, g := range strings.Split(field, ",") {
		var alts []string
		for _, a := range strings.Split(g, "|") {
			if n := relationName(a); n != "" {
				alts = append(alts, n)
			}
		}
		if len(alts) > 0 {
			out = append(out, alts)
		}
	}
	return out
}

// DebMissingError is a package the archive index (so the mirror) does not
// have.
type DebMissingError struct {
	Package  string // the name asked for or depended on
	NeededBy string // the package whose Depends names it ("" for a wanted one)
	Archive  DebArchive
	Arch     string
	// File, when set, is the .deb the index lists but the mirror lacks.
	File string
}

func (e *DebMissingError) Error() string {
	by := ""
	if e.NeededBy != "" {
		by = " (a dependency of " + e.NeededBy + ")"
	}
	where := "is not in the " + e.Archive.String() + " " + e.Arch + " package index of the mirror"
	if e.File != "" {
		where = "is in the " + e.Archive.String() + " " + e.Arch + " package index, but the mirror does not hold its .deb " + e.File
	}
	return fmt.Sprintf("package %s%s %s "+
		"(fix: rebuild the mirror with the packages for this node OS and arch: hack/build-mirror.sh --node-debs <image manifest> for the stand-in image, "+
		"or `khw mirror export DIR --arch %s` for the Ubuntu image, and pin the new digest it prints)", e.Package, by, where, e.Arch)
}

// Closure returns the packages to install so that every name in want is
// installed: each wanted package not in installed, plus, transitively,
// what their Depends and Pre-Depends need that installed lacks, in index
// order. installed holds the names the node has, including the names its
// packages Provide (see InstalledFromDpkg).
//
// A dependency group with alternatives ("a | b") is satisfied by an
// alternative the node has or that is already chosen, else the first
// alternative the index has takes it; a virtual name is satisfied by the
// first package that Provides it. Version constraints are not compared:
// a package the node has counts as present at any version (the images
// and the archives khw supports are of one release). Error: a
// *DebMissingError for a wanted name or a dependency group that no
// package of the index can satisfy.
func (ix *DebIndex) Closure(want []string, installed map[string]bool) ([]DebPackage, error) {
	chosen := map[string]bool{}    // real package names
	satisfied := map[string]bool{} // names the chosen packages are or provide
	var queue []string
	choose := func(real string) {
		if chosen[real] {
			return
		}
		chosen[real] = true
		satisfied[real] = true
		for _, v := range relationNames(ix.pkgs[real].Provides) {
			satisfied[v] = true
		}
		queue = append(queue, real)
	}
	// resolve maps a name to a real package of the index ("" if none).
	resolve := func(name string) string {
		if _, ok := ix.pkgs[name]; ok {
			return name
		}
		if ps := ix.provide[name]; len(ps) > 0 {
			return ps[0]
		}
		return ""
	}
	for _, n := range want {
		if installed[n] || satisfied[n] {
			continue
		}
		real := resolve(n)
		if real == "" {
			return nil, &DebMissingError{Package: n, Archive: ix.Archive, Arch: ix.Arch}
		}
		choose(real)
	}
	for len(queue) > 0 {
		p := ix.pkgs[queue[0]]
		queue = queue[1:]
		for _, field := range []string{p.PreDepends, p.Depends} {
			for _, alts := range relationGroups(field) {
				ok := false
				for _, a := range alts {
					if installed[a] || satisfied[a] {
						ok = true
						break
					}
				}
				if ok {
					continue
				}
				for _, a := range alts {
					if real := resolve(a); real != "" {
						choose(real)
						ok = true
						break
					}
				}
				if !ok {
					return nil, &DebMissingError{Package: strings.Join(alts, " | "), NeededBy: p.Name, Archive: ix.Archive, Arch: ix.Arch}
				}
			}
		}
	}
	var out []DebPackage
	for _, n := range ix.order {
		if chosen[n] {
			out = append(out, ix.pkgs[n])
		}
	}
	return out, nil
}

// DpkgInstalledQuery prints, on a node, one line per package dpkg knows:
// its status abbreviation, name and Provides ("ii \thaproxy\t"). Parse it
// with InstalledFromDpkg.
const DpkgInstalledQuery = `dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Provides}\n'`

// InstalledFromDpkg returns the names of the packages DpkgInstalledQuery
// lists as installed ("ii": wanted install, status installed) and the
// names they provide.
func InstalledFromDpkg(out []byte) map[string]bool {
	set := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 2 || !strings.HasPrefix(f[0], "ii") {
			continue
		}
		set[strings.TrimSpace(f[1])] = true
		if len(f) > 2 {
			for _, v := range relationNames(f[2]) {
				set[v] = true
			}
		}
	}
	return set
}

// InstalledFromManifest returns the package names of an image manifest in
// the format Ubuntu publishes beside its cloud images (lines
// "name<TAB>version", as `dpkg-query -W -f='${Package}\t${Version}\n'`
// prints; a name may carry ":arch"). Provides are taken from idx, since the
// manifest does not list them. Error: a line that is not name and version.
func InstalledFromManifest(data []byte, idx *DebIndex) (map[string]bool, error) {
	set := map[string]bool{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("image manifest line %d %q: want <package><TAB><version>", i+1, line)
		}
		n := relationName(f[0])
		set[n] = true
		if idx != nil {
			if p, ok := idx.pkgs[n]; ok {
				for _, v := range relationNames(p.Provides) {
					set[v] = true
				}
			}
		}
	}
	return set, nil
}

// sortedNames returns the names of pkgs, sorted.
func sortedNames(pkgs []DebPackage) []string {
	out := make([]string, len(pkgs))
	for i, p := range pkgs {
		out[i] = p.Name
	}
	sort.Strings(out)
	return out
}
