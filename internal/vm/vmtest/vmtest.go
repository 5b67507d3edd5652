// Package vmtest holds the helpers that the provider tests share (vm and
// vm/nspawn): real network namespaces, mounts and cgroups need root, and
// each test needs a cluster name no other run uses.
package vmtest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"testing"
)

// RequireRoot skips loudly: these tests make namespaces, mounts and cgroups.
func RequireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP (needs root): creates network namespaces, bind mounts and cgroups")
	}
}

// RandomCluster is a cluster name no other test run uses ("t" and 8 hex
// digits).
func RandomCluster(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "t" + hex.EncodeToString(b)
}

// RootNSAddrs returns `ip -4 -o addr` of the test process's own (root)
// network namespace.
func RootNSAddrs(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-4", "-o", "addr").CombinedOutput()
	if err != nil {
		t.Fatalf("ip -4 addr: %v: %s", err, out)
	}
	return string(out)
}

// RootNSLinks returns `ip -o link` of the test process's own network
// namespace.
func RootNSLinks(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link: %v: %s", err, out)
	}
	return string(out)
}
