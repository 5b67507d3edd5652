package etcdsnap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/etcdsnap/etcdsnaptest"
)

// TestSaveFromARealMember writes keys into a real etcd, saves a snapshot
// and checks the file: mode 0600, the digest and size reported, the
// revision of the last write (also as etcdutl snapshot status reads it),
// and a second save that must not replace it
// without overwrite.
func TestSaveFromARealMember(t *testing.T) {
	tg, d := etcdsnaptest.RealMember(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp1, _ := tg.Cluster.Node("cp1")
	cli, err := tg.EtcdMemberClient(cp1)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var last int64
	for i := range 5 {
		r, err := cli.Put(ctx, fmt.Sprintf("/registry/test/k%d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	path := filepath.Join(d.Root, "etcd-snapshots", "before.db")
	res, err := Save(ctx, tg, path, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Member != "cp1" || res.Endpoint != "https://192.168.122.11:2379" || res.Revision != last || res.Keys < 5 {
		t.Errorf("result %+v, want member cp1, revision %d, at least 5 keys", res, last)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != res.SHA256 || int64(len(data)) != res.Size {
		t.Errorf("file: %d bytes, sha256 %x; reported %d bytes, %s", len(data), sum, res.Size, res.SHA256)
	}
	// etcd's own tool, an independent witness, reads the same revision.
	out, err := exec.Command(etcdsnaptest.EtcdBinary(t, "etcdutl"), "snapshot", "status", path, "-w", "json").Output()
	if err != nil {
		t.Fatalf("etcdutl snapshot status: %v", err)
	}
	if !strings.Contains(string(out), fmt.Sprintf(`"revision":%d,`, last)) {
		t.Errorf("etcdutl snapshot status says %s, want revision %d", out, last)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	// The file ends with the SHA-256 etcdutl snapshot restore checks.
	if err := CheckHash(path); err != nil {
		t.Errorf("CheckHash of a real snapshot: %v", err)
	}
	if _, err := cli.Put(ctx, "/registry/test/after", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := Save(ctx, tg, path, false); !errors.Is(err, ErrExists) {
		t.Errorf("a second save over the file: %v, want ErrExists", err)
	}
	again, err := Save(ctx, tg, path, true)
	if err != nil || again.Revision != last+1 {
		t.Errorf("save with overwrite: revision %d, %v; want %d", again.Revision, err, last+1)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestRevisionRefusesOtherFiles: a file that is not an etcd database is
// named as such, not read as revision 0.
func TestRevisionRefusesOtherFiles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.db")
	if err := os.WriteFile(p, []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Revision(p); err == nil || !strings.Contains(err.Error(), "not an etcd database") {
		t.Errorf("Revision of a text file: %v", err)
	}
}

// TestRevisionRefusesDamagedSnapshots: damaged files that make bbolt
// panic or fault are errors naming the file and what is wrong, and the
// process goes on.
func TestRevisionRefusesDamagedSnapshots(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage etcdsnaptest.Damage
		want   string
	}{
		{"a page naming another page", etcdsnaptest.PageIDChanged, "Page expected to be: 4"},
		{"cut short", etcdsnaptest.CutShort, "is cut short (12320 bytes, its database needs 24576)"},
		{"root bucket past the end", etcdsnaptest.RootPastEnd, "its database is damaged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "damaged.db")
			etcdsnaptest.WriteDamaged(t, p, tc.damage)
			rev, keys, err := Revision(p)
			if err == nil || !strings.Contains(err.Error(), p+" is not a valid etcd snapshot") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Revision: %d, %d, %v; want an error naming %s, 'is not a valid etcd snapshot' and %q", rev, keys, err, p, tc.want)
			}
		})
	}
}

// TestRevisionRefusesRevisionsPastInt64: a key whose main revision has the
// top bit set is not read as a negative revision.
func TestRevisionRefusesRevisionsPastInt64(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.db")
	etcdsnaptest.WriteRevisions(t, p, 7, 1<<63)
	if rev, _, err := Revision(p); err == nil || !strings.Contains(err.Error(), "newest revision 9223372036854775808 does not fit an int64") {
		t.Fatalf("Revision: %d, %v; want an error that the revision does not fit an int64", rev, err)
	}
}

// TestCheckHashStreams: checking a 16 MiB snapshot's hash allocates far
// less than the file's size (the file is read as a stream, not whole),
// and still finds a changed byte.
func TestCheckHashStreams(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.db")
	data := make([]byte, 16<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	sum := sha256.Sum256(data)
	if err := os.WriteFile(p, append(data, sum[:]...), 0o600); err != nil {
		t.Fatal(err)
	}
	data = nil
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := CheckHash(p)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("CheckHash of a whole file: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("CheckHash allocated %d bytes for a 16 MiB file, want under 4 MiB", got)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x55}, 9<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := CheckHash(p); err == nil || !strings.Contains(err.Error(), p+" is damaged") {
		t.Errorf("CheckHash of a changed file: %v, want %s is damaged", err, p)
	}
}
