package nspawn

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"testing"
)

// randomCluster is a cluster name no other test run uses.
func randomCluster(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "t" + hex.EncodeToString(b)
}

// requireRoot skips loudly: these tests make namespaces, mounts and cgroups.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP (needs root): creates network namespaces, bind mounts and cgroups")
	}
}

// rootNSAddrs returns `ip -4 -o addr` of the root namespace (the test
// process' namespace).
func rootNSAddrs(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-4", "-o", "addr").CombinedOutput()
	if err != nil {
		t.Fatalf("ip -4 addr: %v: %s", err, out)
	}
	return string(out)
}

func rootNSLinks(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link: %v: %s", err, out)
	}
	return string(out)
}
