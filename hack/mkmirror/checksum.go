package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/khw-dev/khw/internal/components"
)

// sumEntry is one line of a checksum file: a file name and its SHA-256 (hex).
type sumEntry struct {
	Name string
	Hex  string
}

// renderChecksumFile renders a checksum file the way upstream publishes it
// (internal/components.FormatChecksum does one entry):
//   - components.ChecksumHex (dl.k8s.io *.sha256, crictl): exactly one entry,
//     the digest alone on one line;
//   - components.ChecksumSHA256Sum (etcd SHA256SUMS, runc.sha256sum,
//     containerd/CNI *.sha256sum / *.sha256): one "<hex>  <name>" line per
//     entry, sorted by name, as `sha256sum *` prints them.
//
// Errors: an unknown format, a hex file with other than one entry, two
// different digests for one name.
func renderChecksumFile(format string, entries []sumEntry) ([]byte, error) {
	byName := map[string]string{}
	for _, e := range entries {
		if old, ok := byName[e.Name]; ok && old != e.Hex {
			return nil, fmt.Errorf("checksum file: two digests for %s (%s and %s)", e.Name, old, e.Hex)
		}
		byName[e.Name] = e.Hex
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	if format == components.ChecksumHex && len(names) != 1 {
		return nil, fmt.Errorf("checksum format %q holds one digest, but %d files map to it (%s)", format, len(names), strings.Join(names, ", "))
	}
	var b strings.Builder
	for _, n := range names {
		line, err := components.FormatChecksum(format, byName[n], n)
		if err != nil {
			return nil, err
		}
		b.WriteString(line)
	}
	return []byte(b.String()), nil
}

// sha256sumNames lists the file names in a sha256sum-format file ("<hex>  name"
// or "<hex> *name" lines); blank and # lines are skipped, other lines are
// ignored (the file is about to be rewritten from the files themselves).
func sha256sumNames(data []byte) []string {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || len(f[0]) != 64 {
			continue
		}
		n := strings.TrimPrefix(f[1], "*")
		if n != "" && !strings.ContainsAny(n, "/\\") {
			names = append(names, n)
		}
	}
	return names
}

// fileSHA256 is the hex SHA-256 of a file's content.
func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
