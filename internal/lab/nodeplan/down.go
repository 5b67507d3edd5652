package nodeplan

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm"
)

// Down destroys everything provider p made for the cluster in state
// directory d (Provider.Destroy: every node, force-stopped, and the
// cluster's network), then removes what identified those nodes:
// <state>/ssh/known_hosts (their pins) and <state>/ssh/hostkeys (the host
// keys khw generated for them). A node's identity is its machine's: a later
// `khw up` makes new machines with new keys, pinned before they boot, and
// no private key of a machine that is gone is left lying around. Both stay
// when Destroy fails (some node may still run with them). khw's SSH key,
// cluster.yaml, pki/ and every other file stay.
//
// It returns one line per thing removed, e.g. "node cp1 (was running)",
// "network namespace khw-lab (/run/netns/khw-lab)", "node roots
// <state>/nspawn", "<state>/ssh/known_hosts", "<state>/ssh/hostkeys";
// nothing removed is an empty list and no error.
func Down(ctx context.Context, p vm.Provider, d state.Dir, clusterName string) ([]string, error) {
	st, err := p.Status(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, n := range st {
		if n.State != vm.StateAbsent {
			removed = append(removed, fmt.Sprintf("node %s (was %s)", n.Name, n.State))
		}
	}
	nsPath := vm.NetnsPath(clusterName)
	_, nsErr := os.Stat(nsPath)
	nspawnDir := filepath.Join(d.Root, "nspawn")
	_, dirErr := os.Stat(nspawnDir)
	if err := p.Destroy(ctx); err != nil {
		return removed, err
	}
	if p.Name() == config.ProviderNspawn {
		if nsErr == nil {
			removed = append(removed, fmt.Sprintf("network namespace %s (%s)", vm.NetnsName(clusterName), nsPath))
		}
		if dirErr == nil {
			removed = append(removed, "node root directories "+nspawnDir)
		}
	}
	kh := cluster.KnownHostsPath(d)
	if err := os.Remove(kh); err == nil {
		removed = append(removed, kh+" (the destroyed nodes' SSH host keys)")
	} else if !errors.Is(err, fs.ErrNotExist) {
		return removed, fmt.Errorf("remove %s: %w", kh, err)
	}
	hk := cluster.HostKeysDir(d)
	if _, err := os.Lstat(hk); err == nil {
		if err := os.RemoveAll(hk); err != nil {
			return removed, fmt.Errorf("remove %s: %w", hk, err)
		}
		removed = append(removed, hk+" (the SSH host keys khw generated for them)")
	}
	return removed, nil
}
