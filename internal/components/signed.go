package components

import (
	"bytes"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// keysFS holds the OpenPGP public keys khw checks signed checksum files
// with, one ASCII-armoured file per key:
//
//   - ubuntu-cloudimage-uec.asc: "UEC Image Automatic Signing Key
//     <cdimage@ubuntu.com>", D2EB 4462 6FDD C30B 513D 5BB7 1A5D 6C4C 7DB8
//     7C81, which signs the SHA256SUMS of cloud-images.ubuntu.com (exported
//     from /usr/share/keyrings/ubuntu-cloudimage-keyring.gpg of the
//     ubuntu-keyring package 2023.11.28.1).
//
// The catalog names which fingerprint may sign what (Signature.Keys); a key
// here that no catalog entry names is trusted for nothing.
//
//go:embed keys/*.asc
var keysFS embed.FS

// signingKeyring is the concatenation of keysFS's files; tests in this
// package add their own keys to it.
var signingKeyring = func() []byte {
	var b bytes.Buffer
	_ = fs.WalkDir(keysFS, "keys", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := keysFS.ReadFile(p)
		b.Write(data)
		b.WriteByte('\n')
		return err
	})
	return b.Bytes()
}()

// VerifyDetached checks that sig (a detached OpenPGP signature, binary or
// ASCII-armoured) over data was made by one of the keys in keyring whose
// primary key's fingerprint is in fingerprints (40 hex digits, spaces
// allowed; subkeys of those keys count). It returns the signer's primary
// fingerprint in upper-case hex. Errors: keyring has none of the keys, sig
// is not a signature, or it does not verify (data changed after signing,
// another key, an expired or revoked key).
func VerifyDetached(keyring, data, sig []byte, fingerprints []string) (string, error) {
	all, err := readKeyring(keyring)
	if err != nil {
		return "", err
	}
	want := map[string]bool{}
	for _, f := range fingerprints {
		want[normalizeFingerprint(f)] = true
	}
	var pinned openpgp.EntityList
	for _, e := range all {
		if want[hex.EncodeToString(e.PrimaryKey.Fingerprint)] {
			pinned = append(pinned, e)
		}
	}
	if len(pinned) == 0 {
		return "", fmt.Errorf("khw's keyring has none of the keys %s", strings.Join(fingerprints, ", "))
	}
	var signer *openpgp.Entity
	if bytes.Contains(sig, []byte("-----BEGIN PGP SIGNATURE-----")) {
		signer, err = openpgp.CheckArmoredDetachedSignature(pinned, bytes.NewReader(data), bytes.NewReader(sig), nil)
	} else {
		signer, err = openpgp.CheckDetachedSignature(pinned, bytes.NewReader(data), bytes.NewReader(sig), nil)
	}
	if err != nil {
		return "", fmt.Errorf("the signature does not verify with %s: %w", strings.Join(fingerprints, ", "), err)
	}
	return strings.ToUpper(hex.EncodeToString(signer.PrimaryKey.Fingerprint)), nil
}

// readKeyring reads OpenPGP public keys, ASCII-armoured blocks one after
// another (as signingKeyring is) or binary.
func readKeyring(keyring []byte) (openpgp.EntityList, error) {
	if !bytes.Contains(keyring, []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----")) {
		all, err := openpgp.ReadKeyRing(bytes.NewReader(keyring))
		if err != nil {
			return nil, fmt.Errorf("keyring: not OpenPGP public keys: %w", err)
		}
		return all, nil
	}
	var all openpgp.EntityList
	rest := keyring
	for {
		i := bytes.Index(rest, []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----"))
		if i < 0 {
			break
		}
		rest = rest[i:]
		end := bytes.Index(rest, []byte("-----END PGP PUBLIC KEY BLOCK-----"))
		if end < 0 {
			return nil, fmt.Errorf("keyring: an armoured key block has no end line")
		}
		end += len("-----END PGP PUBLIC KEY BLOCK-----")
		es, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(rest[:end]))
		if err != nil {
			return nil, fmt.Errorf("keyring: %w", err)
		}
		all = append(all, es...)
		rest = rest[end:]
	}
	return all, nil
}

func normalizeFingerprint(f string) string { return strings.ToLower(strings.ReplaceAll(f, " ", "")) }

// shortFingerprint is "7DB8 7C81"-style: the last 8 hex digits, for
// messages.
func shortFingerprint(f string) string {
	f = strings.ToUpper(normalizeFingerprint(f))
	if len(f) < 8 {
		return f
	}
	return f[len(f)-8:len(f)-4] + " " + f[len(f)-4:]
}

// maxSignatureSize bounds a detached signature's download: one RSA-4096
// signature is about 0.9 KiB armoured; a few kilobytes allow several.
const maxSignatureSize = 64 << 10

// SignatureTime is when the first signature packet in sig (binary or
// ASCII-armoured) says it was made. Errors: sig holds no signature packet.
func SignatureTime(sig []byte) (time.Time, error) {
	var r io.Reader = bytes.NewReader(sig)
	if bytes.Contains(sig, []byte("-----BEGIN PGP SIGNATURE-----")) {
		b, err := armor.Decode(bytes.NewReader(sig))
		if err != nil {
			return time.Time{}, fmt.Errorf("signature: %w", err)
		}
		r = b.Body
	}
	pr := packet.NewReader(r)
	for {
		p, err := pr.Next()
		if err != nil {
			return time.Time{}, fmt.Errorf("signature: no signature packet: %w", err)
		}
		if s, ok := p.(*packet.Signature); ok {
			return s.CreationTime, nil
		}
	}
}

// checkSignedAfter refuses a signature made before notBefore ("" or a
// date, 2006-01-02): an older list the same key signed would roll the file
// back to an older release.
func checkSignedAfter(sig []byte, notBefore string) error {
	if notBefore == "" {
		return nil
	}
	nb, err := time.Parse("2006-01-02", notBefore)
	if err != nil {
		return fmt.Errorf("catalog: signature notBefore %q is not a date (2006-01-02)", notBefore)
	}
	at, err := SignatureTime(sig)
	if err != nil {
		return err
	}
	if at.Before(nb) {
		return fmt.Errorf("the signature was made on %s, before %s, the release khw pins: an older list would roll the file back", at.UTC().Format("2006-01-02"), notBefore)
	}
	return nil
}
