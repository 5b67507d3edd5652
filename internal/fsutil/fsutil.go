// Package fsutil holds the few file-system rules every part of khw follows:
// files are written atomically (temp file in the same directory, fsync,
// rename, fsync of the directory) so a crash never leaves a half-written
// cert, kubeconfig or unit; secrets are 0600; directories khw creates are
// 0700, and a directory khw did not create keeps its mode.
package fsutil

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Permission bits used across the state directory.
const (
	// DirMode is the mode of the state directory and every directory in it.
	DirMode fs.FileMode = 0o700
	// SecretMode is the mode of private keys, kubeconfigs with embedded keys,
	// encryption configs and bootstrap tokens.
	SecretMode fs.FileMode = 0o600
	// PublicMode is the mode of certificates, CSR JSON and rendered node files
	// that hold no secret.
	PublicMode fs.FileMode = 0o644
)

// WriteFileAtomic writes data to path so that a reader sees either the old
// content or the new one, never a mix: it writes a temporary file in the same
// directory, fsyncs it, sets perm, renames it over path and fsyncs the
// directory. Missing parent directories are created with DirMode. On error the
// temporary file is removed and path is untouched.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	if err := MkdirAllPrivate(dir); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// WriteIfChanged writes data atomically unless path already holds exactly
// data with mode perm. It reports whether it wrote. Reconcile loops use it so a
// second run changes nothing (and file mtimes stay put).
func WriteIfChanged(path string, data []byte, perm fs.FileMode) (bool, error) {
	old, err := os.ReadFile(path)
	if err == nil && bytes.Equal(old, data) {
		st, serr := os.Stat(path)
		if serr == nil && st.Mode().Perm() == perm {
			return false, nil
		}
		if serr == nil {
			return true, os.Chmod(path, perm)
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	return true, WriteFileAtomic(path, data, perm)
}

// EnsureDir is for a directory that khw owns by name inside a cluster's
// state directory or khw's cache (<cluster>/pki, <cluster>/drills/<id>,
// ~/.cache/khw/nspawn …): it creates dir and its missing parents
// (MkdirAllPrivate) and tightens dir itself to DirMode, so a directory of
// keys never stays group- or world-readable. Parents that already exist are
// never changed. Never call it on a directory the user chose (the base
// state directory, a cluster directory): use MkdirAllPrivate there.
func EnsureDir(dir string) error {
	if err := MkdirAllPrivate(dir); err != nil {
		return err
	}
	if err := os.Chmod(dir, DirMode); err != nil {
		return fmt.Errorf("tighten directory %s to %04o: %w", dir, DirMode, err)
	}
	return nil
}

// MkdirAllPrivate creates dir and every missing parent with mode DirMode
// exactly (each is chmod'ed after mkdir, so the umask cannot leave it wider
// or narrower). A directory that already exists, dir included, keeps its mode
// and owner: khw tightens only what it created, so a state directory given
// as a shared 1777 directory keeps its sticky and world bits. A symbolic
// link to a directory counts as an existing directory (as for os.MkdirAll).
// Errors: a path component that exists but is not a directory, or a mkdir
// that fails, named with its path.
func MkdirAllPrivate(dir string) error {
	dir = filepath.Clean(dir)
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("create directory %s: %s exists and is not a directory", dir, p)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("create directory %s: %w", dir, err)
		}
		missing = append(missing, p)
		if parent := filepath.Dir(p); parent == p {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		p := missing[i]
		if err := os.Mkdir(p, DirMode); err != nil {
			if errors.Is(err, fs.ErrExist) {
				// Made by someone else meanwhile: theirs, left as it is.
				if st, serr := os.Stat(p); serr == nil && st.IsDir() {
					continue
				}
			}
			return fmt.Errorf("create directory %s: %w", p, err)
		}
		if err := os.Chmod(p, DirMode); err != nil {
			return fmt.Errorf("create directory %s: %w", p, err)
		}
	}
	return nil
}

// Exists reports whether path exists (any type). Errors other than "not
// exist" count as existing so callers never overwrite what they cannot read.
func Exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}
