// Package etcdsnaptest writes files shaped like etcd snapshots for tests
// that need one without running etcd.
package etcdsnaptest

import (
	"crypto/sha256"
	"encoding/binary"
	"os"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// Write writes a bbolt database at path with etcd's "key" bucket holding
// one key revision for each main revision 1..rev (etcd's 17-byte key
// <main, 8 bytes big-endian>_<sub, 8 bytes>), so that its newest revision
// is rev, followed by the SHA-256 of the database as a snapshot saved from
// a member has it. It fails t when the file cannot be written.
func Write(t testing.TB, path string, rev int64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		for r := int64(1); r <= rev; r++ {
			k := make([]byte, 17)
			binary.BigEndian.PutUint64(k[:8], uint64(r))
			k[8] = '_'
			if err := b.Put(k, []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if err := os.WriteFile(path, append(data, sum[:]...), 0o600); err != nil {
		t.Fatal(err)
	}
}
