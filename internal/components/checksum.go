package components

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"path"
	"sort"
	"strings"
)

// ParseChecksum returns the lower-case hex SHA-256 digest that a published
// checksum file gives for fileName.
//
// Formats (catalog-research "Checksum-file format summary"; docs/catalog.md):
//   - ChecksumHex: the file holds only the 64-digit digest, e.g. dl.k8s.io's
//     kubectl.sha256 (kubernetes/website install-kubectl-linux.md verifies it
//     with `echo "$(cat kubectl.sha256)  kubectl" | sha256sum --check`) and
//     crictl's .sha256. A "<hex>  <name>" line is accepted too if the name is
//     fileName.
//   - ChecksumSHA256Sum: lines "<hex>  <name>" (text mode) or "<hex> *<name>"
//     (binary mode) as GNU sha256sum prints them; BSD "SHA256 (<name>) = <hex>"
//     lines are accepted as well. The line whose name is fileName wins; a name
//     with a directory ("./x", "dist/x") matches by its base name if no line
//     names fileName exactly and exactly one digest has that base name.
//
// Errors name what is wrong: an unknown format, a malformed digest, no line
// for fileName (listing the names the file does have), or two different
// digests for the same name.
func ParseChecksum(data []byte, format, fileName string) (string, error) {
	switch format {
	case ChecksumHex:
		fields := strings.Fields(string(data))
		if len(fields) == 0 {
			return "", fmt.Errorf("checksum file is empty (want a 64-digit hex SHA-256 digest)")
		}
		if len(fields) == 2 && strings.TrimPrefix(fields[1], "*") != fileName {
			return "", fmt.Errorf("checksum file names %q, not %q", strings.TrimPrefix(fields[1], "*"), fileName)
		}
		if len(fields) > 2 {
			return "", fmt.Errorf("checksum file has %d fields; format %q wants only the hex digest (is it a sha256sum-format file?)", len(fields), format)
		}
		return normalizeHex(fields[0])
	case ChecksumSHA256Sum:
		return parseSHA256Sum(data, fileName)
	default:
		return "", fmt.Errorf("unknown checksum format %q (use %q or %q)", format, ChecksumHex, ChecksumSHA256Sum)
	}
}

// normalizeHex checks that s is a SHA-256 digest in hex and lower-cases it.
func normalizeHex(s string) (string, error) {
	s = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(s), "sha256:"))
	if len(s) != 64 {
		return "", fmt.Errorf("%q is not a SHA-256 digest (want 64 hex digits, got %d characters)", abbrev(s, 80), len(s))
	}
	if _, err := hex.DecodeString(s); err != nil {
		return "", fmt.Errorf("%q is not a SHA-256 digest (not hex)", abbrev(s, 80))
	}
	return s, nil
}

func parseSHA256Sum(data []byte, fileName string) (string, error) {
	exact := map[string]bool{}
	byBase := map[string]bool{}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var sum, name string
		if rest, ok := strings.CutPrefix(line, "SHA256 ("); ok {
			// BSD: SHA256 (name) = hex
			i := strings.LastIndex(rest, ") = ")
			if i < 0 {
				return "", fmt.Errorf("checksum file line %d: %q is neither \"<hex>  <name>\" nor \"SHA256 (<name>) = <hex>\"", n, abbrev(line, 120))
			}
			name, sum = rest[:i], rest[i+4:]
		} else {
			i := strings.IndexAny(line, " \t")
			if i < 0 {
				return "", fmt.Errorf("checksum file line %d: %q has no file name (format %q wants \"<hex>  <name>\"; is it a hex-only file?)", n, abbrev(line, 120), ChecksumSHA256Sum)
			}
			sum = line[:i]
			name = strings.TrimLeft(line[i:], " \t")
			name = strings.TrimPrefix(name, "*")
		}
		h, err := normalizeHex(sum)
		if err != nil {
			return "", fmt.Errorf("checksum file line %d: %w", n, err)
		}
		names = append(names, name)
		if name == fileName {
			exact[h] = true
		} else if path.Base(name) == fileName {
			byBase[h] = true
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("checksum file: %w", err)
	}
	pick := exact
	if len(pick) == 0 {
		pick = byBase
	}
	switch len(pick) {
	case 1:
		for h := range pick {
			return h, nil
		}
	case 0:
		sort.Strings(names)
		if len(names) > 12 {
			names = append(names[:12], "…")
		}
		return "", fmt.Errorf("checksum file has no line for %q (it lists: %s)", fileName, strings.Join(names, ", "))
	}
	return "", fmt.Errorf("checksum file gives %d different digests for %q", len(pick), fileName)
}

// FormatChecksum renders a checksum file entry the way upstream publishes it:
// for ChecksumHex the digest and a newline; for ChecksumSHA256Sum the
// sha256sum text-mode line "<hex>  <fileName>\n".
func FormatChecksum(format, sha256Hex, fileName string) (string, error) {
	switch format {
	case ChecksumHex:
		return sha256Hex + "\n", nil
	case ChecksumSHA256Sum:
		return sha256Hex + "  " + fileName + "\n", nil
	}
	return "", fmt.Errorf("unknown checksum format %q (use %q or %q)", format, ChecksumHex, ChecksumSHA256Sum)
}

func abbrev(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
