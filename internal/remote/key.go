package remote

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"encoding/pem"

	"golang.org/x/crypto/ssh"

	"github.com/khw-dev/khw/internal/fsutil"
)

// KeyComment is the comment on khw's authorized_keys line, so an operator can
// find and remove it on a node.
const KeyComment = "khw"

// EnsureKey loads the OpenSSH private key at path, or generates a new
// ed25519 key there (OpenSSH "BEGIN OPENSSH PRIVATE KEY" PEM, mode 0600,
// written atomically) when path does not exist. It also writes path+".pub"
// (0644) so `ssh -i path` works by hand. It returns the signer and the
// authorized_keys line ("ssh-ed25519 AAAA… khw", no trailing newline) to put
// on the nodes. An existing key file with group/other permission bits is
// tightened to 0600. A passphrase-protected key is an error.
func EnsureKey(path string) (ssh.Signer, string, error) {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		_, priv, gerr := ed25519.GenerateKey(rand.Reader)
		if gerr != nil {
			return nil, "", fmt.Errorf("generate SSH key %s: %w", path, gerr)
		}
		block, merr := ssh.MarshalPrivateKey(priv, KeyComment)
		if merr != nil {
			return nil, "", fmt.Errorf("encode SSH key %s: %w", path, merr)
		}
		data = pem.EncodeToMemory(block)
		if werr := fsutil.WriteFileAtomic(path, data, fsutil.SecretMode); werr != nil {
			return nil, "", werr
		}
	case err != nil:
		return nil, "", fmt.Errorf("read SSH key %s: %w", path, err)
	default:
		st, serr := os.Stat(path)
		if serr != nil {
			return nil, "", fmt.Errorf("stat SSH key %s: %w", path, serr)
		}
		if st.Mode().Perm()&0o077 != 0 {
			if cerr := os.Chmod(path, fsutil.SecretMode); cerr != nil {
				return nil, "", fmt.Errorf("SSH key %s has mode %04o; tighten it to 0600: %w", path, st.Mode().Perm(), cerr)
			}
		}
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		var pm *ssh.PassphraseMissingError
		if errors.As(err, &pm) {
			return nil, "", fmt.Errorf("SSH key %s is passphrase-protected; khw needs an unencrypted key there (move it away and khw generates one)", path)
		}
		return nil, "", fmt.Errorf("SSH key %s is not an OpenSSH private key: %w; move it away and khw generates a new one", path, err)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " " + KeyComment
	if _, err := fsutil.WriteIfChanged(path+".pub", []byte(line+"\n"), fsutil.PublicMode); err != nil {
		return nil, "", err
	}
	return signer, line, nil
}
