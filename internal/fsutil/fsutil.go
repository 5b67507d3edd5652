// Package fsutil holds the few file-system rules every part of khw follows:
// files are written atomically (temp file in the same directory, fsync,
// rename, fsync of the directory) so a crash never leaves a half-written
// cert, kubeconfig or unit; secrets are 0600 and the state directory 0700.
package fsutil

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
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

// EnsureDir creates dir (and parents) with DirMode and tightens an existing
// dir to DirMode, so the state directory never ends up world-readable.
func EnsureDir(dir string) error {
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	return os.Chmod(dir, DirMode)
}

// Exists reports whether path exists (any type). Errors other than "not
// exist" count as existing so callers never overwrite what they cannot read.
func Exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}
