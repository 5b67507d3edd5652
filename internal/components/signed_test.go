package components

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// testKey is an OpenPGP key the tests sign checksum files with, added to
// signingKeyring by init.
type testKey struct {
	entity      *openpgp.Entity
	fingerprint string
	armored     []byte
}

var testSigner, otherSigner testKey

func newTestKey(name string) testKey {
	// Made in the past, so that a test can sign as of an earlier day.
	born := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e, err := openpgp.NewEntity(name, "", name+"@example.invalid", &packet.Config{Time: func() time.Time { return born }})
	if err != nil {
		panic(err)
	}
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err != nil {
		panic(err)
	}
	if err := e.Serialize(w); err != nil {
		panic(err)
	}
	w.Close()
	return testKey{entity: e, fingerprint: strings.ToUpper(hex.EncodeToString(e.PrimaryKey.Fingerprint)), armored: b.Bytes()}
}

// init makes testSigner (trusted: in signingKeyring) and otherSigner (not
// in it) for this package's tests.
func init() {
	testSigner, otherSigner = newTestKey("khw test signer"), newTestKey("someone else")
	signingKeyring = append(append(append([]byte{}, signingKeyring...), '\n'), testSigner.armored...)
}

// sign is k's armoured detached signature over data, as SHA256SUMS.gpg.
func (k testKey) sign(t *testing.T, data []byte) []byte {
	return k.signAt(t, data, time.Now())
}

// signAt is sign with the signature's creation time at.
func (k testKey) signAt(t *testing.T, data []byte, at time.Time) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := openpgp.ArmoredDetachSign(&b, k.entity, bytes.NewReader(data), &packet.Config{Time: func() time.Time { return at }}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The pinned release is Ubuntu's: testdata holds release-20260725's
// SHA256SUMS and SHA256SUMS.gpg as cloud-images.ubuntu.com published them;
// the signature verifies with the key khw embeds, only for that key's
// fingerprint, and only for the list as published; the catalog pins the
// digests that list gives for both arches.
func TestUbuntuPinIsWhatUbuntuSigned(t *testing.T) {
	sums := readFile(t, "testdata/ubuntu-release-20260725/SHA256SUMS")
	sig := readFile(t, "testdata/ubuntu-release-20260725/SHA256SUMS.gpg")
	const uec = "D2EB44626FDDC30B513D5BB71A5D6C4C7DB87C81"
	cat, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, c := range cat.Components {
		for _, a := range c.Artifacts {
			if a.Fallback != nil && a.Fallback.Checksum.Signature != nil {
				keys = a.Fallback.Checksum.Signature.Keys
			}
		}
	}
	if len(keys) != 1 || normalizeFingerprint(keys[0]) != strings.ToLower(uec) {
		t.Fatalf("catalog signature keys %v, want only the UEC Image Automatic Signing Key %s", keys, uec)
	}
	signer, err := VerifyDetached(signingKeyring, sums, sig, keys)
	if err != nil || signer != uec {
		t.Fatalf("Ubuntu's signature over release-20260725's SHA256SUMS: signer %q, %v; want %s", signer, err, uec)
	}
	if _, err := VerifyDetached(signingKeyring, sums, sig, []string{testSigner.fingerprint}); err == nil {
		t.Error("the signature verified for a key the caller did not name")
	}
	tampered := bytes.Replace(sums, []byte("d1940f7d"), []byte("d1940f7e"), 1)
	if _, err := VerifyDetached(signingKeyring, tampered, sig, keys); err == nil {
		t.Error("a list changed after signing verified")
	}
	// The fallback refuses lists signed before the pinned release: its
	// notBefore is the day Ubuntu signed the pinned release's list.
	at, err := SignatureTime(sig)
	if err != nil {
		t.Fatal(err)
	}
	r0 := ubuntuImage(t, "amd64")
	if nb := r0.Fallback.SignatureNotBefore; nb != at.UTC().Format("2006-01-02") || r0.Version != "release-"+strings.ReplaceAll(nb, "-", "") {
		t.Errorf("fallback notBefore %q, pinned %s, Ubuntu signed it on %s: want all three the same day", nb, r0.Version, at.UTC())
	}
	for _, arch := range []string{"amd64", "arm64"} {
		r := ubuntuImage(t, arch)
		want, err := ParseChecksum(sums, ChecksumSHA256Sum, r.FileName)
		if err != nil {
			t.Fatal(err)
		}
		if r.SHA256 != want || !strings.Contains(r.URL, "/releases/noble/release-20260725/") {
			t.Errorf("%s: catalog pins %s at %s; Ubuntu signed %s for release-20260725", arch, r.SHA256, r.URL, want)
		}
	}
}

// VerifyDetached refuses a signature by a key outside the keyring, garbage,
// and a keyring without the named key; it accepts a binary signature too.
func TestVerifyDetached(t *testing.T) {
	data := []byte("abc *file\n")
	if _, err := VerifyDetached(signingKeyring, data, otherSigner.sign(t, data), []string{testSigner.fingerprint}); err == nil {
		t.Error("a signature by another key verified")
	}
	if _, err := VerifyDetached(signingKeyring, data, []byte("not a signature"), []string{testSigner.fingerprint}); err == nil {
		t.Error("garbage verified")
	}
	if _, err := VerifyDetached(otherSigner.armored, data, testSigner.sign(t, data), []string{testSigner.fingerprint}); err == nil || !strings.Contains(err.Error(), "none of the keys") {
		t.Errorf("keyring without the key: %v", err)
	}
	var bin bytes.Buffer
	if err := openpgp.DetachSign(&bin, testSigner.entity, bytes.NewReader(data), nil); err != nil {
		t.Fatal(err)
	}
	if fp, err := VerifyDetached(signingKeyring, data, bin.Bytes(), []string{testSigner.fingerprint}); err != nil || fp != testSigner.fingerprint {
		t.Errorf("binary signature: %q, %v", fp, err)
	}
}

// WriteDropped prints entries of a manifest that a mirror's writer can
// choose, so a control character in one is escaped.
func TestWriteDroppedEscapes(t *testing.T) {
	var b bytes.Buffer
	WriteDropped(&b, "khw-mirror.json", []string{"evil/\x1b[2Jx: its file is not in the mirror"})
	if strings.ContainsRune(b.String(), 0x1b) || !strings.Contains(b.String(), `evil/\x1b[2Jx`) {
		t.Errorf("WriteDropped wrote %q, want the ESC escaped", b.String())
	}
}

// RedactMirror hides a password, a user name alone (a token can be one) and
// a query; it leaves a mirror without them as it is.
func TestRedactMirror(t *testing.T) {
	for in, want := range map[string]string{
		"https://teacher:s3cret@m.example:8443/": "https://xxxxx:xxxxx@m.example:8443/",
		"http://TOKEN123@127.0.0.1:1/":           "http://xxxxx@127.0.0.1:1/",
		"https://m.example/?token=abc":           "https://m.example/?xxxxx",
		"https://m.example/mirror":               "https://m.example/mirror",
		"/srv/khw mirror":                        "/srv/khw mirror",
	} {
		if got := RedactMirror(in); got != want {
			t.Errorf("RedactMirror(%q) = %q, want %q", in, got, want)
		}
	}
	if err := NewMirrorPinError("http://TOKEN123@127.0.0.1:1/"); strings.Contains(err.Error(), "TOKEN123") {
		t.Errorf("the pin error shows the token: %v", err)
	}
}
