package state

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/khw-dev/khw/internal/config"
)

func TestResolveAndLoad(t *testing.T) {
	t.Setenv(EnvCluster, "")
	base := t.TempDir()
	if d, err := Resolve(base, ""); err != nil || d.Name != config.DefaultName {
		t.Fatalf("empty base: %v %v", d, err)
	}
	for _, n := range []string{"alpha", "beta"} {
		c := config.Default(n, config.ArchAMD64, config.ProviderNspawn)
		os.MkdirAll(filepath.Join(base, n), 0o700)
		if _, err := c.Save(New(base, n).ConfigPath()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Resolve(base, ""); err == nil || !strings.Contains(err.Error(), "alpha") {
		t.Fatalf("two clusters must be named: %v", err)
	}
	t.Setenv(EnvCluster, "beta")
	d, err := Resolve(base, "")
	if err != nil || d.Name != "beta" {
		t.Fatalf("env: %v %v", d, err)
	}
	if d.PKIDir() != filepath.Join(d.Root, "pki") || d.KubeconfigDir() != filepath.Join(d.Root, "kubeconfigs") {
		t.Fatal("paths")
	}
	if _, _, err := d.Load(); err != nil {
		t.Fatal(err)
	}
	// A cluster.yaml whose name does not match its directory is refused.
	os.Rename(filepath.Join(base, "alpha"), filepath.Join(base, "gamma"))
	if _, _, err := New(base, "gamma").Load(); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("mismatch: %v", err)
	}
}

func TestLockIsExclusive(t *testing.T) {
	d := New(t.TempDir(), "lab")
	unlock, err := d.Lock()
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to the open file description, so a second Lock in
	// the same process conflicts just like another process would.
	if _, err := d.Lock(); err == nil || !strings.Contains(err.Error(), "another khw") {
		t.Fatalf("second lock: %v", err)
	}
	unlock()
	u2, err := d.Lock()
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	u2()
	if st, _ := os.Stat(d.Root); st.Mode().Perm() != 0o700 {
		t.Fatalf("cluster dir mode %v", st.Mode().Perm())
	}
}

// TestLockRefusesAForeignLockFile: a .lock that khw did not make (a symbolic
// link, say to /etc/shadow; a hard link; a file of the user's; a FIFO) is
// refused and left exactly as it was.
func TestLockRefusesAForeignLockFile(t *testing.T) {
	secret := []byte("root:$6$hash:19000:0:99999:7:::\n")
	cases := []struct {
		name  string
		make  func(t *testing.T, lock, target string)
		words string
	}{
		{"symlink", func(t *testing.T, lock, target string) {
			if err := os.Symlink(target, lock); err != nil {
				t.Fatal(err)
			}
		}, "is a symbolic link"},
		{"hard link", func(t *testing.T, lock, target string) {
			if err := os.Link(target, lock); err != nil {
				t.Fatal(err)
			}
		}, "2 hard links"},
		{"user's file", func(t *testing.T, lock, target string) {
			if err := os.WriteFile(lock, secret, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "something other than a process id"},
		{"fifo", func(t *testing.T, lock, target string) {
			if err := syscall.Mkfifo(lock, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "a named pipe"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			target := filepath.Join(tmp, "shadow")
			if err := os.WriteFile(target, secret, 0o640); err != nil {
				t.Fatal(err)
			}
			d := New(filepath.Join(tmp, "state"), "lab")
			if err := os.MkdirAll(d.Root, 0o700); err != nil {
				t.Fatal(err)
			}
			lock := filepath.Join(d.Root, LockFile)
			tc.make(t, lock, target)
			before, _ := os.Lstat(lock)
			unlock, err := d.Lock()
			if err == nil {
				unlock()
				t.Fatal("Lock accepted a lock file khw did not make")
			}
			if !strings.Contains(err.Error(), tc.words) || !strings.Contains(err.Error(), lock) || errors.Is(err, ErrLocked) {
				t.Errorf("error %q should name %s and say %q", err, lock, tc.words)
			}
			if got, _ := os.ReadFile(target); string(got) != string(secret) {
				t.Errorf("the target was changed: %q", got)
			}
			after, _ := os.Lstat(lock)
			if after.Mode() != before.Mode() || after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
				t.Errorf("the lock path changed: %v %d → %v %d", before.Mode(), before.Size(), after.Mode(), after.Size())
			}
			if tc.name == "user's file" {
				if got, _ := os.ReadFile(lock); string(got) != string(secret) {
					t.Errorf("a file khw did not make was truncated or rewritten: %q", got)
				}
			}
		})
	}
}

// TestLockReusesItsOwnFile: a lock file an earlier khw left (its pid, or
// empty after a crash) is taken over and holds this process's pid; the
// holder's pid is in the error of a second Lock.
func TestLockReusesItsOwnFile(t *testing.T) {
	for _, old := range []string{"", "4242\n", "17"} {
		d := New(t.TempDir(), "lab")
		os.MkdirAll(d.Root, 0o700)
		lock := filepath.Join(d.Root, LockFile)
		if err := os.WriteFile(lock, []byte(old), 0o600); err != nil {
			t.Fatal(err)
		}
		unlock, err := d.Lock()
		if err != nil {
			t.Fatalf("old content %q: %v", old, err)
		}
		if got, _ := os.ReadFile(lock); string(got) != strconv.Itoa(os.Getpid())+"\n" {
			t.Errorf("lock file holds %q", got)
		}
		_, err = d.Lock()
		var le *LockedError
		if !errors.As(err, &le) || le.PID != os.Getpid() || !errors.Is(err, ErrLocked) {
			t.Errorf("second Lock: %v", err)
		}
		unlock()
	}
}

// TestLockKeepsASharedBase: a 1777 base directory keeps its mode; the
// cluster directory khw creates in it is 0700. An existing cluster
// directory keeps its mode too.
func TestLockKeepsASharedBase(t *testing.T) {
	base := filepath.Join(t.TempDir(), "shared")
	os.Mkdir(base, 0o700)
	if err := os.Chmod(base, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	d := New(base, "lab")
	unlock, err := d.Lock()
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	if st, _ := os.Stat(base); st.Mode()&os.ModePerm != 0o777 || st.Mode()&os.ModeSticky == 0 {
		t.Errorf("base changed to %v", st.Mode())
	}
	if st, _ := os.Stat(d.Root); st.Mode().Perm() != 0o700 {
		t.Errorf("cluster directory made with %v", st.Mode().Perm())
	}
	os.Chmod(d.Root, 0o750)
	unlock, err = d.Lock()
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	if st, _ := os.Stat(d.Root); st.Mode().Perm() != 0o750 {
		t.Errorf("an existing cluster directory was changed to %v", st.Mode().Perm())
	}
}

// TestSystemDirectoriesAreRefused: / and the directories of the system or
// of every user, named directly, through a symbolic link or as $HOME, are
// no state directory; a directory of its own below them is.
func TestSystemDirectoriesAreRefused(t *testing.T) {
	tmp := t.TempDir()
	home := filepath.Join(tmp, "home")
	os.Mkdir(home, 0o700)
	t.Setenv("HOME", home)
	t.Setenv("SUDO_USER", "")
	linkToEtc := filepath.Join(tmp, "etc-link")
	if err := os.Symlink("/etc", linkToEtc); err != nil {
		t.Fatal(err)
	}
	linkToRoot := filepath.Join(tmp, "root-link")
	os.Symlink("/", linkToRoot)
	for _, p := range []string{"/", "/tmp", "/tmp/", "/var/tmp", "/etc", "/usr", "/usr/local", "/home", "/root", "/var", "/var/lib",
		"/bin", "/boot", "/dev", "/dev/shm", "/proc", "/sys", "/run", "/run/user", "/etc/khw", "/usr/share/khw", "/proc/self",
		"/home/alice", home, linkToEtc, linkToRoot, filepath.Join(linkToRoot, "etc"), filepath.Join(linkToEtc, "new-dir"),
		"/tmp/../etc"} {
		err := CheckStateDir("--state-dir", p)
		if err == nil {
			t.Errorf("%s: accepted as a state directory", p)
			continue
		}
		if !strings.Contains(err.Error(), "--state-dir") || !strings.Contains(err.Error(), "fix:") {
			t.Errorf("%s: error should name the flag and the fix: %v", p, err)
		}
	}
	for _, p := range []string{filepath.Join(tmp, "state"), "/tmp/khw-state", "/var/lib/khw", filepath.Join(home, ".local", "state", "khw"), "/srv/khw", "relative/state"} {
		if err := CheckStateDir("--state-dir", p); err != nil {
			t.Errorf("%s: refused: %v", p, err)
		}
	}
	// Resolve refuses a base that is one, and a cluster directory that is
	// a link to one, before reading anything.
	if _, err := Resolve("/tmp", "lab"); err == nil || !strings.Contains(err.Error(), "$"+EnvStateDir) {
		t.Errorf("Resolve(/tmp): %v", err)
	}
	base := filepath.Join(tmp, "base")
	os.Mkdir(base, 0o700)
	os.Symlink("/var/lib", filepath.Join(base, "lib"))
	if _, err := Resolve(base, "lib"); err == nil || !strings.Contains(err.Error(), `cluster "lib"`) {
		t.Errorf("cluster directory linked to /var/lib: %v", err)
	}
	if _, err := Resolve(base, "lab"); err != nil {
		t.Errorf("a plain base: %v", err)
	}
}

func TestLocksAreReentrantForOneCluster(t *testing.T) {
	base := t.TempDir()
	d, other := New(base, "lab"), New(base, "other")
	var l Locks
	r1, err := l.Lock(d)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.Lock(d)
	if err != nil {
		t.Fatalf("second Lock of the same cluster: %v", err)
	}
	if _, err := l.Lock(other); err == nil || !strings.Contains(err.Error(), "one command works on one cluster") {
		t.Errorf("Lock of another cluster while holding one: %v", err)
	}
	r2()
	r2() // a release counts once
	if _, err := d.Lock(); !errors.Is(err, ErrLocked) {
		t.Errorf("after one of two releases, the lock must still be held: %v", err)
	}
	r1()
	free, err := d.Lock()
	if err != nil {
		t.Fatalf("after the last release the lock must be free: %v", err)
	}
	free()
}
