// Package etcdsnaptest writes files shaped like etcd snapshots for tests
// that need one without running etcd.
package etcdsnaptest

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/fnv"
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
	revs := make([]uint64, 0, max(rev, 0))
	for r := int64(1); r <= rev; r++ {
		revs = append(revs, uint64(r))
	}
	WriteRevisions(t, path, revs...)
}

// WriteRevisions is Write with one key revision for each main revision
// in revs (any uint64, also those past etcd's int64 revisions), so that
// the newest is the largest of revs.
func WriteRevisions(t testing.TB, path string, revs ...uint64) {
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
		for _, r := range revs {
			k := make([]byte, 17)
			binary.BigEndian.PutUint64(k[:8], r)
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
	writeHashed(t, path, data)
}

// Damage is a way WriteDamaged spoils a snapshot.
type Damage int

const (
	// PageIDChanged: the header of the database's fifth page (the root
	// bucket's leaf) names another page; bbolt panics with "assertion
	// failed: Page expected to be: 4" when it reads it.
	PageIDChanged Damage = iota
	// CutShort: the file ends after the database's first three pages (a
	// copy that stopped early); reading the pages past the end of the
	// mapped file faults.
	CutShort
	// RootPastEnd: the newest meta page (its checksum made right again)
	// puts the root bucket on a page past the end of the file but within
	// what bbolt maps; reading it faults (SIGBUS).
	RootPastEnd
)

// WriteDamaged writes Write(t, path, 5)'s snapshot spoiled as d says,
// ending with the SHA-256 of the spoiled contents, so that only reading
// the database finds what is wrong. It fails t when the file cannot be
// written.
func WriteDamaged(t testing.TB, path string, d Damage) {
	t.Helper()
	Write(t, path, 5)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data = data[:len(data)-sha256.Size]
	// bbolt's meta page: a 16-byte page header, then magic, version and
	// the page size, each 4 bytes little-endian.
	ps := int(binary.LittleEndian.Uint32(data[24:28]))
	switch d {
	case PageIDChanged:
		data[4*ps] = 0xff
	case CutShort:
		data = data[:3*ps]
	case RootPastEnd:
		// The meta: page header (16 bytes), then magic, version, page
		// size, flags (4 bytes each), the root bucket's page (8 bytes at
		// 32), its sequence, the freelist's page, the page count, the
		// transaction ID (8 bytes at 64) and the FNV-64a of the 56 bytes
		// before the checksum (at 72).
		m := data[:ps]
		if binary.LittleEndian.Uint64(data[ps+64:]) > binary.LittleEndian.Uint64(m[64:]) {
			m = data[ps : 2*ps]
		}
		// The first page that starts past the file's end (the file is the
		// database and its 32-byte hash): bbolt maps the file's size
		// rounded up to a power of two (64 KiB for this one), so the page
		// is mapped but has no file behind it.
		binary.LittleEndian.PutUint64(m[32:], uint64((len(data)+sha256.Size+ps-1)/ps))
		h := fnv.New64a()
		h.Write(m[16:72])
		binary.LittleEndian.PutUint64(m[72:], h.Sum64())
	default:
		t.Fatalf("unknown damage %d", d)
	}
	writeHashed(t, path, data)
}

// writeHashed writes data followed by its SHA-256 to path (mode 0600).
func writeHashed(t testing.TB, path string, data []byte) {
	t.Helper()
	sum := sha256.Sum256(data)
	if err := os.WriteFile(path, append(data, sum[:]...), 0o600); err != nil {
		t.Fatal(err)
	}
}
