package fsutil

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// trustedOwner reports whether uid may own what khw trusts: the effective
// user, root, or, when khw runs as root under sudo, the user who ran sudo
// ($SUDO_UID: that user could run khw as root anyway).
func trustedOwner(uid uint32, allowRoot bool) bool {
	euid := uint32(os.Geteuid())
	if uid == euid || (allowRoot && uid == 0) {
		return true
	}
	if euid == 0 {
		if s, err := strconv.ParseUint(os.Getenv("SUDO_UID"), 10, 32); err == nil && uint32(s) == uid {
			return true
		}
	}
	return false
}

// CheckPrivateDir refuses a directory that a user other than the one
// running khw could change, or be swapped for: dir (which must exist; it is
// resolved through symbolic links first) must be owned by that user (or, as
// root under sudo, by the user who ran sudo) and not be writable by group or
// others; every parent must be owned by that user or root and be either not
// writable by group and others or sticky (like /tmp, where others cannot
// rename what they do not own). This is OpenSSH's StrictModes rule. what
// names the directory in the error ("artifact cache", "state directory"),
// why says what is at stake, flag names the option that chooses another.
// It returns the resolved path, which callers should use from then on.
func CheckPrivateDir(dir, what, why, flag string) (string, error) {
	return checkPrivate(dir, what, why, flag, true)
}

// CheckPrivateParents applies CheckPrivateDir's rule for parents to dir
// itself and everything above it: for a directory khw is about to create
// in dir.
func CheckPrivateParents(dir, what, why, flag string) (string, error) {
	return checkPrivate(dir, what, why, flag, false)
}

func checkPrivate(dir, what, why, flag string, self bool) (string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, dir, err)
	}
	for d, first := real, self; ; d, first = filepath.Dir(d), false {
		st, err := os.Stat(d)
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", what, dir, err)
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return real, nil
		}
		mode := st.Mode()
		writable := mode.Perm()&0o022 != 0
		switch {
		case first && (!trustedOwner(sys.Uid, false) || writable):
			return "", fmt.Errorf("%s %s (owner uid %d, mode %s) can be changed by another user, and %s: khw refuses to use it "+
				"(fix: `chown %d %s && chmod go-w %s`, or choose one only you can write with %s)", what, real, sys.Uid, showMode(mode), why, os.Geteuid(), real, real, flag)
		case !first && (!trustedOwner(sys.Uid, true) || (writable && mode&fs.ModeSticky == 0)):
			return "", fmt.Errorf("%s %s: its parent directory %s (owner uid %d, mode %s) lets another user replace it, and %s: khw refuses to use it "+
				"(fix: `chmod go-w %s`, or choose one under a directory only you and root can write, with %s)", what, real, d, sys.Uid, showMode(mode), why, d, flag)
		}
		if d == filepath.Dir(d) {
			return real, nil
		}
	}
}

// CheckPrivateFile refuses a file khw trusts that is a symlink, not owned by
// the user running khw, or writable by group or others. Errors from Lstat
// (fs.ErrNotExist among them) are returned as they are.
func CheckPrivateFile(p string) error {
	st, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (fix: remove it; khw makes it again)", p)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && (!trustedOwner(sys.Uid, false) || st.Mode().Perm()&0o022 != 0) {
		return fmt.Errorf("%s (owner uid %d, mode %s) could have been written by another user (fix: remove it; khw makes it again)", p, sys.Uid, showMode(st.Mode()))
	}
	return nil
}

// showMode is the permission bits in octal with the sticky bit (1777).
func showMode(m fs.FileMode) string {
	p := uint32(m.Perm())
	if m&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	return fmt.Sprintf("%04o", p)
}
