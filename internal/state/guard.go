package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/khw-dev/khw/internal/fsutil"
)

// systemDirs may not be a state directory (base or cluster directory):
// directories of the operating system or shared by every user. khw creates
// files and directories in a state directory, `khw lab reset` replaces its
// content with rsync --delete and `khw down` removes parts of it, so as root
// any of these would break the host. Taken from the Filesystem Hierarchy
// Standard 3.0 (chapters 3, 4 and 5) plus /run, /snap and /lost+found.
var systemDirs = []string{
	"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
	"/lost+found", "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap",
	"/srv", "/sys", "/tmp", "/usr", "/var",
	"/dev/shm", "/run/lock", "/run/user", "/usr/local",
	"/var/backups", "/var/cache", "/var/lib", "/var/local", "/var/lock", "/var/log",
	"/var/mail", "/var/opt", "/var/run", "/var/snap", "/var/spool", "/var/tmp",
}

// systemTrees may not hold a state directory anywhere below them: the
// kernel's pseudo file systems, the boot files, the installed system and its
// configuration (read-only or package-managed by the FHS).
var systemTrees = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin", "/sys", "/usr"}

// CheckStateDir refuses path as a state directory (what names it, e.g.
// "--state-dir (or $KHW_STATE_DIR)", starts the error) when path, or what it
// resolves to through symbolic links, is a system directory (systemDirs), lies
// in a system tree (systemTrees), is a home directory (/home/<user>, $HOME,
// the home of $SUDO_USER), or is not absolute after filepath.Abs. Part of
// path may not exist yet: the existing prefix is resolved.
func CheckStateDir(what, path string) error {
	return CheckNotSystemDir(what, path,
		"khw creates, replaces and removes files in its state directory, so it must not share one with the system or other users",
		"choose a directory of its own with --state-dir or $"+EnvStateDir+"; without either, khw uses "+defaultHomeBase())
}

// CheckNotSystemDir is CheckStateDir's test for any directory khw writes
// into or publishes (a mirror): why says what khw does with it, fix what to
// do instead; both go into the error.
func CheckNotSystemDir(what, path, why, fix string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, path, err)
	}
	resolved := resolveExisting(abs)
	for _, p := range []string{abs, resolved} {
		reason := systemReason(p)
		if reason == "" {
			continue
		}
		shown := fmt.Sprintf("%q", path)
		if p != abs {
			shown = fmt.Sprintf("%q (a symbolic link to %s)", path, p)
		} else if abs != path {
			shown = fmt.Sprintf("%q (%s)", path, abs)
		}
		return fmt.Errorf("%s %s is %s: %s (fix: %s)", what, shown, reason, why, fix)
	}
	return nil
}

// CheckOwner refuses a state directory that another user could write to or
// swap: whoever can can put their own CA into pki/ and have khw sign every
// identity with it. A cluster directory (cluster true) must be the user's
// own and not writable by others (fsutil.CheckPrivateDir) once it exists; a
// base directory, and the parents of a directory khw is about to create,
// may be shared only like /tmp (sticky), so that nobody else can rename or
// replace what khw makes in it (fsutil.CheckPrivateParents).
func CheckOwner(what, path string, cluster bool) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, path, err)
	}
	why := "it holds the cluster's CA key and every credential"
	flag := "--state-dir / $" + EnvStateDir
	existing := abs
	for {
		if _, err := os.Stat(existing); err == nil || filepath.Dir(existing) == existing {
			break
		}
		existing = filepath.Dir(existing)
	}
	if cluster && existing == abs {
		_, err = fsutil.CheckPrivateDir(abs, what, why, flag)
	} else {
		_, err = fsutil.CheckPrivateParents(existing, what+" "+abs, why, flag)
	}
	return err
}

// systemReason says why p (absolute, clean) may not be a state directory,
// or "" when it may.
func systemReason(p string) string {
	for _, d := range systemDirs {
		if p == d {
			return "a system directory"
		}
	}
	for _, d := range systemTrees {
		if strings.HasPrefix(p, d+"/") {
			return "inside the system directory " + d
		}
	}
	if filepath.Dir(p) == "/home" {
		return "a home directory"
	}
	for _, h := range homes() {
		if p == h {
			return "a home directory"
		}
	}
	return ""
}

// homes are the home directories of the user running khw: $HOME and, under
// sudo, $SUDO_USER's (both resolved through symbolic links).
func homes() []string {
	var out []string
	add := func(h string) {
		if h != "" && filepath.IsAbs(h) {
			h = filepath.Clean(h)
			out = append(out, h, resolveExisting(h))
		}
	}
	if h, err := os.UserHomeDir(); err == nil {
		add(h)
	}
	if name := os.Getenv("SUDO_USER"); name != "" {
		if u, err := user.Lookup(name); err == nil {
			add(u.HomeDir)
		}
	}
	return out
}

// resolveExisting returns abs (absolute, clean) with every symbolic link in
// its longest existing prefix resolved, the missing rest appended.
func resolveExisting(abs string) string {
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(r, rest)
		}
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(p) == p {
			return abs
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// defaultHomeBase is what DefaultBase gives without $KHW_STATE_DIR, for
// error messages.
func defaultHomeBase() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "khw")
	}
	return "~/.local/state/khw"
}

// CheckNotForeign refuses a cluster directory that exists, is not empty and
// holds neither cluster.yaml nor khw's lock file: it is someone else's
// directory (khw lab reset would rsync --delete over it). Errors name the
// directory and the fix.
func (d Dir) CheckNotForeign() error {
	entries, err := os.ReadDir(d.Root)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster directory %s: %w", d.Root, err)
	}
	for _, e := range entries {
		if e.Name() == LockFile || e.Name() == filepath.Base(d.ConfigPath()) {
			return nil
		}
	}
	return fmt.Errorf("%s exists and is not a khw cluster directory (it holds %s and no cluster.yaml); khw will not write into it (fix: choose another --name or --state-dir, or move the directory away)", d.Root, entries[0].Name())
}
