package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/state"
)

// randomCluster runs khw init for an nspawn cluster with a random name (no
// namespace or node of another test can answer to it) and returns its name
// and directory.
func randomCluster(t *testing.T, base, prefix string) (string, state.Dir) {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := prefix + hex.EncodeToString(b)
	if _, e, code := run(t, base, "init", "--name", name, "--provider", "nspawn", "--arch", "amd64"); code != 0 {
		t.Fatalf("init: exit %d: %s", code, e)
	}
	return name, state.New(base, name)
}

// treeDigest describes every entry under root (path, type and mode, size,
// mtime, content digest), so two calls differ when anything was created,
// removed, written, chmod'ed or touched.
func treeDigest(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		sum := ""
		if st.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum = fmt.Sprintf("%x", sha256.Sum256(data))
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = fmt.Sprintf("%v %d %d %s", st.Mode(), st.Size(), st.ModTime().UnixNano(), sum)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffTrees(before, after map[string]string) []string {
	var d []string
	for p, b := range before {
		if a, ok := after[p]; !ok {
			d = append(d, "removed "+p)
		} else if a != b {
			d = append(d, fmt.Sprintf("changed %s: %s → %s", p, b, a))
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			d = append(d, "created "+p)
		}
	}
	return d
}

// TestEveryChangingCommandTakesTheLock: while another khw holds the
// cluster lock, every command that changes the cluster or its state is
// refused with the lock's error before it touches anything; the read-only
// ones run (whatever else they then say).
func TestEveryChangingCommandTakesTheLock(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	name, d := randomCluster(t, base, "lk")
	if _, e, code := run(t, base, "pki"); code != 0 {
		t.Fatalf("pki: %s", e)
	}
	// An active drill, broken and left by a khw break that has exited, so
	// khw heal gets as far as the lock.
	activeDrill(t, d, &drill.Record{ID: "20260101-000000-etcd-1", Cluster: name, Spec: drill.Spec{Kind: drill.KindEtcd, Count: 1},
		Actions: []drill.Action{{Node: "cp1", Unit: "etcd.service"}}, Applied: 1, BrokeAt: time.Now()})

	unlock, err := d.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	locked := "cluster is locked: another khw (pid " + strconv.Itoa(os.Getpid()) + ") is changing cluster " + strconv.Quote(name)

	for _, args := range [][]string{
		{"init", "--name", name, "--force"},
		{"pki"},
		{"kubeconfig"},
		{"encryption"},
		{"render"},
		{"up"},
		{"up", "--from", "04", "--until", "05"},
		{"down"},
		{"power", "on", "w1"},
		{"power", "off", "cp2"},
		{"smoke"},
		{"break", "etcd", "--count", "1", "--for", "10s"},
		{"break", "node", "cp2"},
		{"heal"},
		{"lab", "04-etcd", "--yes"},
		{"lab", "run", "04", "--yes"},
		{"lab", "run", "12", "--yes", "--force"},
		{"lab", "check", "04"},
		{"lab", "reset", "04", "--yes"},
	} {
		before := treeDigest(t, d.Root)
		_, errOut, code := run(t, base, args...)
		if code != exitFailed || !strings.Contains(errOut, locked) {
			t.Errorf("khw %s while locked: exit %d, want 1 and %q:\n%s", strings.Join(args, " "), code, locked, errOut)
		}
		if diff := diffTrees(before, treeDigest(t, d.Root)); len(diff) > 0 {
			t.Errorf("khw %s changed the state directory although it was refused: %v", strings.Join(args, " "), diff)
		}
	}

	for _, args := range [][]string{
		{"status"},
		{"config", "validate"},
		{"config", "show"},
		{"pki", "inspect", "admin"},
		{"up", "--dry-run"},
		{"lab", "list"},
		{"shell", "--", "true"},
		{"version"},
	} {
		_, errOut, _ := run(t, base, args...)
		if strings.Contains(errOut, "another khw") {
			t.Errorf("khw %s is read-only and must not need the lock:\n%s", strings.Join(args, " "), errOut)
		}
	}
}

// TestHealUnderTheWatchersLock: the documented flow `khw break etcd
// --count 2` (no --for: it keeps the lock and watches) and, in another
// shell, `khw heal` works: heal goes on under the lock of the live watcher
// of the active drill, and only of that one. Any other command is told
// that a drill holds the lock and how to end it.
func TestHealUnderTheWatchersLock(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	name, d := randomCluster(t, base, "hl")
	// This test process plays the watching khw break: it holds the lock
	// and is the drill's WatcherPID.
	rec := &drill.Record{ID: "20260101-000000-etcd-2", Cluster: name, Spec: drill.Spec{Kind: drill.KindEtcd, Count: 2},
		Actions: []drill.Action{{Node: "cp1", Unit: "etcd.service"}}, Applied: 1, BrokeAt: time.Now(), WatcherPID: os.Getpid()}
	store := activeDrill(t, d, rec)
	unlock, err := d.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	// heal passes the lock (and then fails further on: this cluster has no
	// certificates to reach the nodes with).
	if _, errOut, _ := run(t, base, "heal"); strings.Contains(errOut, "another khw") {
		t.Errorf("khw heal refused while the drill's own watcher holds the lock:\n%s", errOut)
	}
	if _, errOut, code := run(t, base, "up"); code != exitFailed || !strings.Contains(errOut, "another khw") ||
		!strings.Contains(errOut, "khw break of drill "+rec.ID) || !strings.Contains(errOut, "khw heal") {
		t.Errorf("up during a drill should name the drill and khw heal: exit %d:\n%s", code, errOut)
	}
	// A lock holder that is not the drill's watcher does not let heal by.
	rec.WatcherPID = 1
	if err := store.Save(rec); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, base, "heal"); code != exitFailed || !strings.Contains(errOut, "another khw") {
		t.Errorf("heal while someone else holds the lock: exit %d:\n%s", code, errOut)
	}
}

// activeDrill saves rec as the cluster's active drill and returns the store.
func activeDrill(t *testing.T, d state.Dir, rec *drill.Record) drill.Store {
	t.Helper()
	store := drill.StoreOf(d)
	if err := store.Save(rec); err != nil {
		t.Fatal(err)
	}
	if err := store.SetActive(rec.ID); err != nil {
		t.Fatal(err)
	}
	return store
}
