package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A state directory another user could write or swap is refused: they
// could put their own CA into pki/ (reproduced by hand: a cluster directory
// made by nobody, its pki/ swapped for one with an "EVIL CA", and khw pki
// signed admin.pem with it).
func TestResolveRefusesAStateDirOthersControl(t *testing.T) {
	base := t.TempDir()
	// A base shared like /tmp (sticky) is fine; the cluster directory khw
	// makes in it is its own.
	shared := filepath.Join(base, "shared")
	os.Mkdir(shared, 0o700)
	os.Chmod(shared, 0o777|os.ModeSticky)
	if _, err := Resolve(shared, "c1"); err != nil {
		t.Errorf("sticky shared base: %v", err)
	}
	// A base anybody can rename things in is not.
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o777)
	if _, err := Resolve(open, "c1"); err == nil || !strings.Contains(err.Error(), "lets another user replace it") {
		t.Errorf("0777 base: %v", err)
	}
	// A parent of a base that does not exist yet is checked too.
	if _, err := Resolve(filepath.Join(open, "not", "yet"), "c1"); err == nil || !strings.Contains(err.Error(), open) {
		t.Errorf("missing base under a 0777 parent: %v", err)
	}
	// A cluster directory another user made, or opened up, is refused.
	mine := filepath.Join(base, "mine")
	os.Mkdir(mine, 0o700)
	theirs := filepath.Join(mine, "c2")
	os.Mkdir(theirs, 0o700)
	if os.Geteuid() == 0 {
		os.Chown(theirs, 65534, 65534)
		if _, err := Resolve(mine, "c2"); err == nil || !strings.Contains(err.Error(), "owner uid 65534") || !strings.Contains(err.Error(), "CA key") {
			t.Errorf("cluster dir owned by nobody: %v", err)
		}
		os.Chown(theirs, 0, 0)
	}
	os.Chmod(theirs, 0o770)
	if _, err := Resolve(mine, "c2"); err == nil || !strings.Contains(err.Error(), "can be changed by another user") {
		t.Errorf("group-writable cluster dir: %v", err)
	}
	os.Chmod(theirs, 0o700)
	if _, err := Resolve(mine, "c2"); err != nil {
		t.Errorf("own cluster dir: %v", err)
	}
}
