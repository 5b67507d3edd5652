package components

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/khw-dev/khw/internal/fsutil"
)

// signedSums is a checksum file and the detached signature that verified
// it, kept as published so that `khw mirror export` can put both into a
// mirror unchanged (a rewritten file would no longer verify).
type signedSums struct {
	sums, sig []byte
	signer    string
}

// verifySums checks data, r's checksum file as read from sigLoc's side
// (the official URL or the mirror), against its detached signature at
// sigLoc with the keys r.SignatureKeys names. Errors: the signature cannot
// be had (a missing signature is an error: an unsigned list is refused) or
// does not verify; each names the checksum file, the signature and the
// key that were checked.
func (f *Fetcher) verifySums(ctx context.Context, run *fetchRun, r Resolved, data []byte, sigLoc string, isFile bool) (*signedSums, error) {
	what := fmt.Sprintf("%s against its signature %s and the key %s", r.ChecksumURL, r.SignatureURL, strings.Join(r.SignatureKeys, ", "))
	sig, err := f.getBounded(ctx, run, sigLoc, isFile, maxSignatureSize, "signature")
	if err != nil {
		return nil, fmt.Errorf("checked %s: the signature cannot be had, so the list is refused (an unsigned checksum list proves nothing beyond the transport): %w", what, err)
	}
	signer, err := VerifyDetached(signingKeyring, data, sig, r.SignatureKeys)
	if err == nil {
		err = checkSignedAfter(sig, r.SignatureNotBefore)
	}
	if err != nil {
		return nil, permanentError{fmt.Errorf("checked %s: %w; the list is refused (fix: the source serves a changed, old or foreign list; use another mirror or report it)", what, err)}
	}
	return &signedSums{sums: data, sig: sig, signer: signer}, nil
}

// signedBy is the VerifiedBy text of a checksum file that s verified.
func (s *signedSums) signedBy(r Resolved) string {
	return fmt.Sprintf("checksum file %s, signed by %s (%s)", r.ChecksumURL, s.signer, r.SignatureURL)
}

// mirrorSignature checks, for r (an artifact whose checksum file is signed)
// fetched through a mirror with manifest digest want, the signed list that
// the mirror keeps beside it: the signature must verify and the list must
// name want for r's file. It returns the words to add to VerifiedBy and the
// signed list. A mirror that holds no signature for r (the builder's
// stand-in image, or a mirror made by hand) is trusted through its pinned
// manifest alone, and the words say so. Errors: a signature that does not
// verify, or a signed list without want.
func (f *Fetcher) mirrorSignature(ctx context.Context, run *fetchRun, r Resolved, want string) (string, *signedSums, error) {
	sigLoc, sigIsFile, err := MirrorLocation(f.Mirror, r.SignatureURL)
	if err != nil {
		return "", nil, err
	}
	sig, err := f.getBounded(ctx, run, sigLoc, sigIsFile, maxSignatureSize, "signature")
	if err != nil {
		var pe permanentError
		if errors.Is(err, fs.ErrNotExist) || (errors.As(err, &pe) && strings.Contains(err.Error(), "HTTP 404")) {
			return "; the mirror holds no signed " + r.ChecksumURL + " for it (not a file its publisher signed, or a mirror made without the signature): trusted through the pinned manifest alone", nil, nil
		}
		return "", nil, err
	}
	sumsLoc, sumsIsFile, err := MirrorLocation(f.Mirror, r.ChecksumURL)
	if err != nil {
		return "", nil, err
	}
	data, err := f.getBounded(ctx, run, sumsLoc, sumsIsFile, maxChecksumFileSize, "checksum file")
	if err != nil {
		return "", nil, fmt.Errorf("the mirror holds the signature %s but not the list it signs: %w", sigLoc, err)
	}
	signer, err := VerifyDetached(signingKeyring, data, sig, r.SignatureKeys)
	if err == nil {
		err = checkSignedAfter(sig, r.SignatureNotBefore)
	}
	if err != nil {
		return "", nil, permanentError{fmt.Errorf("checked the mirror's %s against its signature %s and the key %s: %w; refused (fix: export the mirror again from a verified download)", sumsLoc, sigLoc, strings.Join(r.SignatureKeys, ", "), err)}
	}
	listed, err := ParseChecksum(data, r.ChecksumFormat, r.FileName)
	if err != nil {
		return "", nil, permanentError{fmt.Errorf("the mirror's signed %s: %w", sumsLoc, err)}
	}
	if listed != want {
		return "", nil, permanentError{fmt.Errorf("the mirror manifest lists %s with sha256 %s, but the signed %s lists %s: the mirror holds another file than its publisher signed (fix: export the mirror again)", r.URL, want, r.ChecksumURL, listed)}
	}
	s := &signedSums{sums: data, sig: sig, signer: signer}
	return " and " + r.ChecksumURL + " signed by " + signer, s, nil
}

// storeSigned keeps s's list and signature in the cache as blobs and
// returns their digests (hex), which an IndexEntry records.
func (c *cache) storeSigned(s *signedSums) (sums, sig string, err error) {
	put := func(data []byte) (string, error) {
		h := sha256.Sum256(data)
		sum := hex.EncodeToString(h[:])
		if err := fsutil.WriteFileAtomic(c.blobPath(sum), data, fsutil.PublicMode); err != nil {
			return "", fmt.Errorf("artifact cache: %w", err)
		}
		return sum, nil
	}
	if sums, err = put(s.sums); err != nil {
		return "", "", err
	}
	if sig, err = put(s.sig); err != nil {
		return "", "", err
	}
	return sums, sig, nil
}

// readSigned reads back what storeSigned kept; ok is false when either blob
// is gone or changed.
func (c *cache) readSigned(sums, sig string) (data, sigData []byte, ok bool) {
	read := func(sum string) ([]byte, bool) {
		b, err := os.ReadFile(c.blobPath(sum))
		if err != nil {
			return nil, false
		}
		h := sha256.Sum256(b)
		return b, hex.EncodeToString(h[:]) == sum
	}
	var ok1, ok2 bool
	data, ok1 = read(sums)
	sigData, ok2 = read(sig)
	return data, sigData, ok1 && ok2
}

// exportSigned writes f's signed checksum file and its signature, as the
// cache kept them, to r's checksum and signature paths under the mirror
// root abs. It returns each path (relative) and whether it was written.
func exportSigned(abs string, r Resolved, f Fetched) (map[string]bool, error) {
	out := map[string]bool{}
	for _, p := range []struct{ src, url string }{{f.SignedChecksum, r.ChecksumURL}, {f.ChecksumSignature, r.SignatureURL}} {
		data, err := os.ReadFile(p.src)
		if err != nil {
			return nil, fmt.Errorf("export %s: the cache lost its signed checksum file: %w (fix: khw fetch again)", r.Artifact.Name, err)
		}
		rel, err := mirrorRel(p.url)
		if err != nil {
			return nil, err
		}
		w, err := writeSmall(filepath.Join(abs, filepath.FromSlash(rel)), data)
		if err != nil {
			return nil, err
		}
		out[rel] = w
	}
	return out, nil
}
