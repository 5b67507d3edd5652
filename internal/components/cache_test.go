package components

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestVerifyBlobStamp: a blob that hashed correctly is not hashed again
// while its stamp matches, and any write to it (even one that keeps its
// size and mtime) makes verifyBlob hash it again and see the damage.
func TestVerifyBlobStamp(t *testing.T) {
	c, err := openCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("kube-apiserver, pretend")
	h := sha256.Sum256(data)
	sum := hex.EncodeToString(h[:])
	p := c.blobPath(sum)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.verifyBlob(sum, int64(len(data))); err != nil {
		t.Fatalf("first verify: %v", err)
	}
	stampPath := filepath.Join(c.dir, cacheStampDir, sum)
	if _, err := os.Stat(stampPath); err != nil {
		t.Fatalf("no stamp after a good hash: %v", err)
	}

	// Damage it with the same size, then put its mtime back: only the
	// ctime tells, and that is enough.
	st, _ := os.Stat(p)
	time.Sleep(30 * time.Millisecond) // a ctime tick apart (file times advance by jiffies: up to 10 ms)
	bad := append([]byte(nil), data...)
	bad[0] ^= 0xff
	if err := os.WriteFile(p, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := c.verifyBlob(sum, int64(len(data))); err == nil {
		t.Fatal("a blob written after its stamp was trusted without hashing")
	}
	if _, err := os.Stat(stampPath); !os.IsNotExist(err) {
		t.Errorf("the stamp of a damaged blob was kept (%v)", err)
	}

	// The stamp is what skips the hash: one written for the damaged file
	// as it is now makes verifyBlob trust it (which is why only the cache's
	// owner may write stamps: the directory is checked like sha256/).
	st, _ = os.Stat(p)
	if err := os.WriteFile(stampPath, []byte(blobStamp(st)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.verifyBlob(sum, int64(len(data))); err != nil {
		t.Errorf("a matching stamp did not skip the hash: %v", err)
	}
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv(EnvCacheDir, "")
	t.Setenv("XDG_CACHE_HOME", "/x/cache")
	if d := DefaultCacheDir(); d != "/x/cache/khw/artifacts" {
		t.Errorf("XDG: %s", d)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if d := DefaultCacheDir(); d != "/home/u/.cache/khw/artifacts" {
		t.Errorf("home: %s", d)
	}
	t.Setenv(EnvCacheDir, "/c")
	if d := DefaultCacheDir(); d != "/c" {
		t.Errorf("env: %s", d)
	}
}
