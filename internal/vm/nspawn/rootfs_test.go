package nspawn

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/vm/vmtest"
)

func TestMirrorIn(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"deb822 main before security", `Types: deb
# comment
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
`, "http://deb.debian.org/debian"},
		{"deb822 security only", "Types: deb\nURIs: http://security.debian.org/debian-security\nSuites: bookworm-security\n", ""},
		{"one-line with options", "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian/ bookworm main\n", "http://mirror.example/debian"},
		{"one-line other suite", "deb http://mirror.example/debian trixie main\n", ""},
		{"commented out", "# deb http://mirror.example/debian bookworm main\n", ""},
		{"non-Debian repo", "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mirrorIn(tc.text); got != tc.want {
				t.Errorf("mirrorIn = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAptMirrorFallsBackToDefault(t *testing.T) {
	if got := AptMirror(t.TempDir()); got != DefaultMirror {
		t.Errorf("AptMirror(empty root) = %q, want %q", got, DefaultMirror)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/apt/sources.list.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/apt/sources.list.d/debian.sources"),
		[]byte("Types: deb\nURIs: http://ftp.example.org/debian/\nSuites: bookworm\nComponents: main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := AptMirror(root), "http://ftp.example.org/debian"; got != want {
		t.Errorf("AptMirror = %q, want %q", got, want)
	}
}

// TestEnsureRootfsDebootstrap builds the node image for real into a fresh
// cache directory (~3-5 minutes, needs the Debian mirror). Opt in with
// KHW_TEST_DEBOOTSTRAP=1.
func TestEnsureRootfsDebootstrap(t *testing.T) {
	vmtest.RequireRoot(t)
	if os.Getenv("KHW_TEST_DEBOOTSTRAP") != "1" {
		t.Skip("SKIP: set KHW_TEST_DEBOOTSTRAP=1 to run debootstrap for real (~3-5 min)")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Skip("SKIP: debootstrap not installed (apt-get install debootstrap)")
	}
	cache := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	t0 := time.Now()
	dst, err := EnsureRootfs(ctx, cache, runtime.GOARCH, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("debootstrap into %s: %v", dst, time.Since(t0).Round(time.Second))
	st, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o755 {
		t.Errorf("image root mode %o, want 755", st.Mode().Perm())
	}
	for _, f := range []string{"usr/bin/systemctl", "usr/sbin/sshd", "usr/sbin/haproxy", "usr/bin/jq", "usr/sbin/conntrack", "usr/bin/socat", "usr/bin/sudo"} {
		if _, err := os.Stat(filepath.Join(dst, f)); err != nil {
			t.Errorf("image lacks %s: %v", f, err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(cache, ".rootfs-*"))
	if len(left) != 0 {
		t.Errorf("temporary directories left: %v", left)
	}
	// Reuse, not rebuild: a marker placed in the image survives the second call.
	marker := filepath.Join(dst, "khw-reuse-marker")
	if err := os.WriteFile(marker, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	if _, err := EnsureRootfs(ctx, cache, runtime.GOARCH, "", &logged); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("second EnsureRootfs rebuilt the image instead of reusing it (log: %s)", logged.String())
	}
}
