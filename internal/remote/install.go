package remote

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
)

// File is one file to install on a node.
type File struct {
	// Path is the absolute target path on the node.
	Path string
	// Data is the complete content.
	Data []byte
	// Mode holds the permission bits (fs.ModeSetuid, ModeSetgid and
	// ModeSticky are honoured too); 0 means 0644.
	Mode fs.FileMode
	// Owner and Group are user and group names on the node; "" means root.
	Owner, Group string
}

// InstallResult says what Install did.
type InstallResult struct {
	// Changed is true when the file's content, mode or owner was changed.
	Changed bool
	// Uploaded is true when the content was transferred (it differed or the
	// file was missing). Changed && !Uploaded means only mode/owner were
	// fixed.
	Uploaded bool
}

func unixMode(m fs.FileMode) uint32 {
	if m == 0 {
		m = 0o644
	}
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

func randomSuffix() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Install makes f.Path on the node hold exactly f.Data with f.Mode and
// f.Owner:f.Group, atomically, and reports what it changed.
//
// It first reads the current state with one command (stat and sha256sum,
// through sudo when not logged in as root). Nothing is uploaded when the
// SHA-256 of the content already matches; then only a wrong mode or owner
// is fixed with chown/chmod.
//
// Otherwise the content goes up over SFTP and is moved into place so that a
// reader on the node sees the old file or the new one, never a partial one:
//
//   - logged in as root: SFTP writes a staging file ".<name>.khw-<random>"
//     (created exclusively, 0600) in the target directory (created 0755 when
//     missing); one command sets owner and mode, fsyncs it (`sync FILE`),
//     renames it over the target (`mv -T`, a rename(2) within one
//     directory) and fsyncs the directory.
//   - otherwise: SFTP writes /tmp/khw-upload-<random> (0600, owned by the
//     login user, so no other user can read a secret); one `sudo -n`
//     command creates the target directory, copies the upload into the same
//     staging name in the target directory with `install -m MODE -o OWNER
//     -g GROUP`, fsyncs, renames it over the target, fsyncs the directory
//     and removes the upload.
//
// Staging files are removed when a step fails. Errors name the node and path
// (and are *CommandError for the remote commands). The upload itself does not
// watch ctx; ctx is checked before it and bounds the commands.
func (c *Client) Install(ctx context.Context, f File) (InstallResult, error) {
	var res InstallResult
	if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
		return res, fmt.Errorf("node %s: install path %q must be absolute and clean, e.g. /etc/kubernetes/pki/ca.pem", c.Node.Name, f.Path)
	}
	owner, group := f.Owner, f.Group
	if owner == "" {
		owner = "root"
	}
	if group == "" {
		group = "root"
	}
	mode := unixMode(f.Mode)
	sum := sha256.Sum256(f.Data)
	want := hex.EncodeToString(sum[:])
	q := shellQuote(f.Path)

	check := `p=` + q + `
if [ -f "$p" ]; then stat -L -c '%a %U %G' -- "$p" && sha256sum < "$p"
elif [ -e "$p" ] || [ -L "$p" ]; then echo "$p exists but is not a regular file" >&2; exit 3
else echo absent; fi`
	out, _, err := c.Run(ctx, check, RunOptions{Sudo: true})
	if err != nil {
		return res, fmt.Errorf("install %s: read current state: %w", f.Path, err)
	}
	state := strings.Fields(string(out))
	attrsOK, contentOK := false, false
	switch {
	case len(state) == 1 && state[0] == "absent":
	case len(state) >= 4:
		gotMode, perr := strconv.ParseUint(state[0], 8, 32)
		attrsOK = perr == nil && uint32(gotMode) == mode && state[1] == owner && state[2] == group
		contentOK = state[3] == want
	default:
		return res, fmt.Errorf("node %s: install %s: unexpected stat/sha256sum output %q", c.Node.Name, f.Path, out)
	}
	if contentOK && attrsOK {
		return res, nil
	}
	res.Changed = true
	modeStr := fmt.Sprintf("%04o", mode)
	chown := shellQuote(owner + ":" + group)
	if contentOK {
		fix := `chown -- ` + chown + ` ` + q + ` && chmod -- ` + modeStr + ` ` + q
		if _, _, err := c.Run(ctx, fix, RunOptions{Sudo: true}); err != nil {
			return res, fmt.Errorf("install %s: fix owner/mode: %w", f.Path, err)
		}
		return res, nil
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("node %s: install %s: %w", c.Node.Name, f.Path, err)
	}
	sc, err := c.sftpClient()
	if err != nil {
		return res, err
	}
	dir, base := path.Dir(f.Path), path.Base(f.Path)
	stage := path.Join(dir, "."+base+".khw-"+randomSuffix())
	direct := c.root && !c.stageViaTmp
	upload := stage
	if !direct {
		upload = "/tmp/khw-upload-" + randomSuffix()
	} else if err := sc.MkdirAll(dir); err != nil {
		return res, fmt.Errorf("node %s: install %s: create directory %s over SFTP: %w", c.Node.Name, f.Path, dir, err)
	}
	if err := c.upload(upload, f.Data); err != nil {
		sc.Remove(upload)
		return res, fmt.Errorf("node %s: install %s: upload to %s over SFTP: %w", c.Node.Name, f.Path, upload, err)
	}
	c.uploads.Add(1)
	res.Uploaded = true

	var script string
	if direct {
		script = `set -e
stage=` + shellQuote(stage) + `; dest=` + q + `; dir=` + shellQuote(dir) + `
trap 'rm -f -- "$stage"' EXIT
chown -- ` + chown + ` "$stage"
chmod -- ` + modeStr + ` "$stage"
sync -- "$stage"
mv -f -T -- "$stage" "$dest"
sync -- "$dir"`
	} else {
		script = `set -e
tmp=` + shellQuote(upload) + `; stage=` + shellQuote(stage) + `; dest=` + q + `; dir=` + shellQuote(dir) + `
trap 'rm -f -- "$stage" "$tmp"' EXIT
mkdir -p -- "$dir"
install -m ` + modeStr + ` -o ` + shellQuote(owner) + ` -g ` + shellQuote(group) + ` -T -- "$tmp" "$stage"
sync -- "$stage"
mv -f -T -- "$stage" "$dest"
sync -- "$dir"`
	}
	if _, _, err := c.Run(ctx, script, RunOptions{Sudo: true}); err != nil {
		return res, fmt.Errorf("install %s: move into place: %w", f.Path, err)
	}
	return res, nil
}

// upload writes data to a new file at p (exclusive create, 0600 before any
// byte is written).
func (c *Client) upload(p string, data []byte) error {
	sc, err := c.sftpClient()
	if err != nil {
		return err
	}
	f, err := sc.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
