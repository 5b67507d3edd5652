// Package state locates a cluster's state directory and its well-known files.
//
// Layout of one cluster directory (0700 when khw creates it), chosen so a student recognises the
// files of "Kubernetes the Hard Way":
//
//	<base>/<cluster>/cluster.yaml              desired state
//	<base>/<cluster>/pki/ca.pem, ca-key.pem, admin-csr.json, …
//	<base>/<cluster>/kubeconfigs/admin.kubeconfig, …
//	<base>/<cluster>/encryption-config.yaml
//	<base>/<cluster>/nodes/<node>/<target path>   rendered node files
//	<base>/<cluster>/manifests/*.yaml          cluster-wide manifests
//	<base>/<cluster>/logs/, drills/
package state

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
)

// Environment variables that set the defaults of --state-dir and --cluster.
const (
	EnvStateDir = "KHW_STATE_DIR"
	EnvCluster  = "KHW_CLUSTER"
)

// DefaultBase returns the base state directory: $KHW_STATE_DIR, else
// $XDG_STATE_HOME/khw, else ~/.local/state/khw (XDG Base Directory spec; a
// relative $XDG_STATE_HOME is ignored, as the spec requires), else
// $TMPDIR/khw-state when there is no home directory.
func DefaultBase() string {
	if d := os.Getenv(EnvStateDir); d != "" {
		return d
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "khw")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "khw")
	}
	return filepath.Join(os.TempDir(), "khw-state")
}

// Dir is one cluster's state directory.
type Dir struct {
	// Root is the absolute path of the cluster directory.
	Root string
	// Name is the cluster name (the directory's base name).
	Name string
}

// New returns the Dir of cluster name under base.
func New(base, name string) Dir {
	abs, err := filepath.Abs(base)
	if err != nil {
		abs = base
	}
	return Dir{Root: filepath.Join(abs, name), Name: name}
}

// Clusters lists the cluster names under base that hold a cluster.yaml,
// sorted. A missing base yields none.
func Clusters(base string) ([]string, error) {
	entries, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && fsutil.Exists(filepath.Join(base, e.Name(), config.FileName)) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Resolve picks the cluster to work on: the explicit name if given, else
// $KHW_CLUSTER, else the only cluster under base, else config.DefaultName.
// With several clusters and no choice it returns an error listing them.
// A base or cluster directory that is a system or home directory, itself or
// through a symbolic link, is refused (CheckStateDir) before anything under
// it is read, and so is one that another user could write to or swap
// (CheckOwner).
func Resolve(base, explicit string) (Dir, error) {
	what := "--state-dir (or $" + EnvStateDir + ")"
	if err := CheckStateDir(what, base); err != nil {
		return Dir{}, err
	}
	if err := CheckOwner(what, base, false); err != nil {
		return Dir{}, err
	}
	d, err := resolve(base, explicit)
	if err != nil {
		return d, err
	}
	what = fmt.Sprintf("the directory of cluster %q", d.Name)
	if err := CheckStateDir(what, d.Root); err != nil {
		return Dir{}, err
	}
	if err := CheckOwner(what, d.Root, true); err != nil {
		return Dir{}, err
	}
	return d, nil
}

func resolve(base, explicit string) (Dir, error) {
	if explicit != "" {
		if err := config.ValidName(explicit); err != nil {
			return Dir{}, fmt.Errorf("--cluster %w", err)
		}
		return New(base, explicit), nil
	}
	if env := os.Getenv(EnvCluster); env != "" {
		if err := config.ValidName(env); err != nil {
			return Dir{}, fmt.Errorf("$%s %w", EnvCluster, err)
		}
		return New(base, env), nil
	}
	names, err := Clusters(base)
	if err != nil {
		return Dir{}, err
	}
	switch len(names) {
	case 0:
		return New(base, config.DefaultName), nil
	case 1:
		return New(base, names[0]), nil
	}
	return Dir{}, fmt.Errorf("%d clusters in %s (%v): choose one with --cluster NAME or %s", len(names), base, names, EnvCluster)
}

// ConfigPath is <root>/cluster.yaml.
func (d Dir) ConfigPath() string { return filepath.Join(d.Root, config.FileName) }

// PKIDir is <root>/pki.
func (d Dir) PKIDir() string { return filepath.Join(d.Root, "pki") }

// KubeconfigDir is <root>/kubeconfigs.
func (d Dir) KubeconfigDir() string { return filepath.Join(d.Root, "kubeconfigs") }

// EncryptionConfigPath is <root>/encryption-config.yaml.
func (d Dir) EncryptionConfigPath() string { return filepath.Join(d.Root, "encryption-config.yaml") }

// NodesDir is <root>/nodes.
func (d Dir) NodesDir() string { return filepath.Join(d.Root, "nodes") }

// ManifestsDir is <root>/manifests.
func (d Dir) ManifestsDir() string { return filepath.Join(d.Root, "manifests") }

// LogsDir is <root>/logs.
func (d Dir) LogsDir() string { return filepath.Join(d.Root, "logs") }

// Load reads the cluster's cluster.yaml and checks that its name matches the
// directory, so two clusters never share or swap state.
func (d Dir) Load() (*config.Cluster, []config.Warning, error) {
	c, warns, err := config.Load(d.ConfigPath())
	if err != nil {
		return nil, warns, err
	}
	if c.Name != d.Name {
		return nil, warns, fmt.Errorf("%s: name %q does not match its state directory %q (fix: set name: %s, or move the directory)", d.ConfigPath(), c.Name, d.Name, d.Name)
	}
	return c, warns, nil
}

// Create is khw init's end, under the caller's lock: it writes c as d's
// cluster.yaml (refusing to replace one unless force) and says on out
// where, the state directory's mode and what to run next (with khw -c
// NAME when the base holds more than this cluster, as later commands
// must then name it). Errors: an existing cluster.yaml without force,
// the write's.
func (d Dir) Create(c *config.Cluster, force bool, out io.Writer) error {
	if fsutil.Exists(d.ConfigPath()) && !force {
		return fmt.Errorf("%s already exists; khw will not overwrite a cluster's desired state (fix: edit it, pick another --name, or pass --force to start over from the defaults)", d.ConfigPath())
	}
	if _, err := c.Save(d.ConfigPath()); err != nil {
		return err
	}
	fmt.Fprintf(out, "Wrote %s (cluster %q, %s, provider %s, Kubernetes %s)\n", d.ConfigPath(), c.Name, c.Arch, c.Provider, c.Versions.Kubernetes)
	mode := "?"
	if st, err := os.Stat(d.Root); err == nil {
		mode = fmt.Sprintf("%04o", st.Mode().Perm())
	}
	fmt.Fprintf(out, "State directory: %s (mode %s)\n\n", d.Root, mode)
	khw := "khw"
	if names, err := Clusters(filepath.Dir(d.Root)); err == nil && len(names) > 1 {
		khw = "khw -c " + c.Name
	}
	fmt.Fprintf(out, "Next, one of:\n  %[1]s up           # every step, from machines to smoke tests\n  %[1]s lab 01       # the same steps one lab at a time, explained (khw lab list)\n  %[1]s up --dry-run # what would change, as the hard way's shell commands\n", khw)
	return nil
}
