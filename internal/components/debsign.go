package components

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
)

// VerifyInRelease checks a suite's clear-signed InRelease file (RFC 4880
// §7) and returns the signed text, which is the suite's Release file. The
// signature must be by a key of keyring (OpenPGP public keys, binary as in
// /usr/share/keyrings/*.gpg, or ASCII-armoured) whose primary key's
// fingerprint is in fingerprints (40 hex digits, spaces allowed); other keys
// of the keyring are ignored, so a keyring file that gained a key cannot
// widen what is trusted. Errors: not clear-signed, no pinned key in the
// keyring, no valid signature by one.
func VerifyInRelease(inRelease, keyring []byte, fingerprints []string) ([]byte, error) {
	block, _ := clearsign.Decode(inRelease)
	if block == nil {
		return nil, fmt.Errorf("InRelease is not an OpenPGP clear-signed message")
	}
	all, err := openpgp.ReadKeyRing(bytes.NewReader(keyring))
	if err != nil {
		if all, err = openpgp.ReadArmoredKeyRing(bytes.NewReader(keyring)); err != nil {
			return nil, fmt.Errorf("archive keyring: not OpenPGP public keys: %w", err)
		}
	}
	want := map[string]bool{}
	for _, f := range fingerprints {
		want[strings.ToLower(strings.ReplaceAll(f, " ", ""))] = true
	}
	var pinned openpgp.EntityList
	for _, e := range all {
		if want[hex.EncodeToString(e.PrimaryKey.Fingerprint)] {
			pinned = append(pinned, e)
		}
	}
	if len(pinned) == 0 {
		return nil, fmt.Errorf("archive keyring has none of the pinned keys %s (fix: use the distribution's archive keyring, e.g. the ubuntu-keyring or debian-archive-keyring package's file)", strings.Join(fingerprints, ", "))
	}
	if _, err := block.VerifySignature(pinned, nil); err != nil {
		return nil, fmt.Errorf("InRelease signature does not verify with the pinned archive keys: %w", err)
	}
	return block.Plaintext, nil
}
