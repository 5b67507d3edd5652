// Package etcdsnap takes a snapshot of the cluster's etcd from the jumpbox:
// the etcd v3 Maintenance.Snapshot stream of the current leader, written
// to a file with its SHA-256 and the etcd revision it holds — what
// `etcdctl snapshot save` does, as upstream documents for backing up an
// etcd cluster
// (https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/#backing-up-an-etcd-cluster,
// https://etcd.io/docs/v3.7/op-guide/recovery/#snapshotting-the-keyspace).
package etcdsnap

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/health"
)

// Result is one saved snapshot.
type Result struct {
	// Path is the snapshot file (mode 0600: it holds every object of the
	// cluster, Secrets encrypted at rest but everything else in clear).
	Path string `json:"path"`
	// Member is the control plane whose member streamed it (the leader),
	// Endpoint its client URL.
	Member   string `json:"member"`
	Endpoint string `json:"endpoint"`
	// Revision is the etcd revision of the last change the snapshot holds
	// (the highest revision in its key bucket, as etcdutl snapshot status
	// reports it).
	Revision int64 `json:"revision"`
	// Keys is how many key revisions the snapshot's key bucket holds
	// (every version etcd has not compacted yet, not only the live keys).
	Keys int `json:"keys"`
	// Size is the file's size in bytes; SHA256 its hex SHA-256 digest.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Took is the wall time from the first request to the file in place.
	Took time.Duration `json:"tookNs"`
}

// ErrExists is Save's error when the file is there already and overwrite
// is false.
var ErrExists = errors.New("the file exists")

// Save streams a snapshot of the etcd cluster of t from its leader into
// path: first into a temporary file beside it (mode 0600), fsynced, its
// SHA-256 computed on the way and its revision read back from the file,
// then renamed into place, so path is either the whole snapshot or
// untouched. It refuses (ErrExists) to replace an existing path unless
// overwrite. Errors: no member answers or there is no leader (quorum
// lost: restore from a snapshot taken earlier), the stream breaks, the
// file cannot be written, or what arrived is not an etcd database.
func Save(ctx context.Context, t health.Target, path string, overwrite bool) (Result, error) {
	start := time.Now()
	res := Result{Path: path}
	if _, err := os.Lstat(path); err == nil && !overwrite {
		return res, fmt.Errorf("%s: %w (give another file, or --force to replace it)", path, ErrExists)
	}
	rep, err := health.Etcd(ctx, t)
	if err != nil {
		return res, err
	}
	if rep.Leader == "" {
		return res, fmt.Errorf("etcd has no leader (%d of %d members healthy, quorum needs %d): a snapshot now could miss committed writes; bring the members back first (khw status), or restore from an earlier snapshot", rep.Healthy, rep.Size, rep.QuorumSize)
	}
	node, ok := t.Cluster.Node(rep.Leader)
	if !ok {
		return res, fmt.Errorf("etcd's leader %q is not a node of cluster.yaml", rep.Leader)
	}
	for _, e := range rep.Endpoints {
		if e.Node == node.Name {
			res.Endpoint = e.Endpoint
		}
	}
	res.Member = node.Name
	cli, err := t.EtcdMemberClient(node)
	if err != nil {
		return res, err
	}
	defer cli.Close()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return res, fmt.Errorf("snapshot from %s: %w", node.Name, err)
	}
	defer rc.Close()
	if err := fsutil.MkdirAllPrivate(filepath.Dir(path)); err != nil {
		return res, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".part-*")
	if err != nil {
		return res, err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(fsutil.SecretMode); err != nil {
		return res, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), rc)
	if err != nil {
		return res, fmt.Errorf("snapshot from %s: the stream broke after %d bytes: %w", node.Name, n, err)
	}
	if err := tmp.Sync(); err != nil {
		return res, err
	}
	if err := tmp.Close(); err != nil {
		return res, err
	}
	res.Size, res.SHA256 = n, hex.EncodeToString(h.Sum(nil))
	if res.Revision, res.Keys, err = Revision(tmp.Name()); err != nil {
		return res, fmt.Errorf("snapshot from %s: %w", node.Name, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return res, err
	}
	done = true
	res.Took = time.Since(start)
	return res, nil
}

// Revision opens the etcd database file at path read-only and returns the
// highest revision in its "key" bucket and how many key revisions it
// holds. etcd stores each key revision under the 17-byte key
// <main revision, 8 bytes big-endian>_<sub revision, 8 bytes>
// (go.etcd.io/etcd/server/v3/storage/mvcc revision.go), so the last key
// of the bucket is the newest. Errors, each naming path: it is not a
// bbolt database, it has no "key" bucket, it is shorter than its own
// header says (a cut copy), its pages are damaged (bbolt's panics on a
// damaged file, and faults reading past the end of the mapped file, are
// turned into this error), or its newest revision does not fit an int64.
func Revision(path string) (rev int64, keys int, err error) {
	// bbolt reads the file through mmap and panics (or faults) on pages
	// that do not hold what they should; a damaged file is an input
	// error, not a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			rev, keys = 0, 0
			err = fmt.Errorf("%s is not a valid etcd snapshot: its database is damaged (%v); take a new snapshot (khw etcd snapshot save) or use another copy", path, r)
		}
	}()
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	if fi.Size() == 0 {
		// bbolt would try to initialise an empty file as a new database.
		return 0, 0, fmt.Errorf("%s is empty (0 bytes): not an etcd snapshot; copy it again from where it was saved, or take a new one (khw etcd snapshot save)", path)
	}
	db, err := bolt.Open(path, fs.FileMode(0o400), &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, 0, fmt.Errorf("%s is not an etcd database: %w", path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		// The meta page says how many pages the database has; reading one
		// past the end of a cut file would fault.
		if need := tx.Size(); need > fi.Size() {
			return fmt.Errorf("%s is not a valid etcd snapshot: it is cut short (%d bytes, its database needs %d); copy it again from where it was saved", path, fi.Size(), need)
		}
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return fmt.Errorf("%s has no key bucket: not an etcd snapshot", path)
		}
		keys = b.Stats().KeyN
		k, _ := b.Cursor().Last()
		if len(k) >= 8 {
			u := binary.BigEndian.Uint64(k[:8])
			if u > math.MaxInt64 {
				return fmt.Errorf("%s is not a valid etcd snapshot: its newest revision %d does not fit an int64 (etcd's revisions are int64)", path, u)
			}
			rev = int64(u)
		}
		return nil
	})
	return rev, keys, err
}

// CheckHash verifies the SHA-256 of the contents that a snapshot saved
// from a member (etcdctl snapshot save, Save) ends with, reading the file
// once as a stream. etcdutl snapshot restore checks it the same way
// (etcdutl/snapshot/v3_snapshot.go: a file has the hash when its size is
// 32 bytes past a multiple of 512). Errors: no hash (a copy of a member's
// data file, member/snap/db, which etcdutl restores only with
// --skip-hash-check), a hash that does not match (a damaged or cut file),
// or the file cannot be read.
func CheckHash(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	n := fi.Size()
	if n%512 != sha256.Size {
		return fmt.Errorf("%s does not end with the SHA-256 an etcd snapshot has (%d bytes): a copy of a member's data directory (member/snap/db) is not a snapshot; save one with khw etcd snapshot save or etcdctl snapshot save", path, n)
	}
	h := sha256.New()
	if _, err := io.CopyN(h, f, n-sha256.Size); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	var want [sha256.Size]byte
	if _, err := io.ReadFull(f, want[:]); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if !bytes.Equal(h.Sum(nil), want[:]) {
		return fmt.Errorf("%s is damaged: the SHA-256 of its contents is not the one it ends with", path)
	}
	return nil
}

// Write writes r as khw etcd snapshot save prints it: indented JSON with
// asJSON, else where it came from, its revision, size and digest, and
// that it must be kept like a key.
func (r Result) Write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(w, "Snapshot of etcd from %s, the leader (%s): revision %d, %d key revisions, %.1f MiB in %s\n",
		r.Member, r.Endpoint, r.Revision, r.Keys, float64(r.Size)/(1<<20), r.Took.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  file:   %s (mode 0600)\n  sha256: %s\n", r.Path, r.SHA256)
	fmt.Fprintln(w, "It holds every object of the cluster (Secrets encrypted with encryption-config.yaml's key, which it does not hold): keep it like a key.")
	return nil
}
