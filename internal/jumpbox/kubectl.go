package jumpbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/state"
)

// KubectlMode is the mode of D/bin/kubectl.
const KubectlMode fs.FileMode = 0o755

// KubectlArtifact is the catalog artifact installed as D/bin/kubectl (role
// jumpbox in internal/components/catalog.yaml).
const KubectlArtifact = "kubectl"

// Kubectl describes the kubectl EnsureKubectl installed.
type Kubectl struct {
	// Path is D/bin/kubectl.
	Path string
	// Version is the Kubernetes version (cluster.yaml versions.kubernetes).
	Version string
	// Arch is the architecture the binary is for (the host's).
	Arch string
	// SHA256 is the lower-case hex SHA-256 of the installed file.
	SHA256 string
	// Written is true when the file was (re)written, false when it already
	// had the right content.
	Written bool
	// Fetched is false when the stamp showed the file was already the
	// wanted artifact and nothing was fetched or hashed.
	Fetched bool
}

// kubectlStamp is D/bin/.kubectl.stamp: what EnsureKubectl installed last.
// It lets later calls skip the fetch (which re-hashes the ~60 MB cached
// blob) and the hash of the installed file, as long as the file still has
// the size and modification time recorded when khw wrote or verified it.
type kubectlStamp struct {
	URL     string    `json:"url"`
	SHA256  string    `json:"sha256"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"modTime"`
}

func stampPath(d state.Dir) string { return filepath.Join(BinDir(d), ".kubectl.stamp") }

// ResolveKubectl returns the catalog's kubectl artifact (role jumpbox) for
// cluster c's versions.kubernetes and arch. arch is the jumpbox's
// architecture (runtime.GOARCH), not the nodes'; only amd64 and arm64 have
// kubectl builds in the catalog.
func ResolveKubectl(c *config.Cluster, arch string) (components.Resolved, error) {
	if arch != config.ArchAMD64 && arch != config.ArchARM64 {
		return components.Resolved{}, fmt.Errorf("host architecture %q: khw installs kubectl for amd64 and arm64 only", arch)
	}
	cat, err := components.Load()
	if err != nil {
		return components.Resolved{}, err
	}
	all, err := cat.Resolve(c, arch)
	if err != nil {
		return components.Resolved{}, err
	}
	for _, r := range components.ForRole(all, components.RoleJumpbox) {
		if r.Artifact.Name == KubectlArtifact {
			if len(r.Files) != 1 {
				return components.Resolved{}, fmt.Errorf("catalog: artifact %s must have exactly one file, has %d", KubectlArtifact, len(r.Files))
			}
			return r, nil
		}
	}
	return components.Resolved{}, fmt.Errorf("catalog: no artifact %q with role %s", KubectlArtifact, components.RoleJumpbox)
}

// EnsureKubectl makes D/bin/kubectl the kubectl of cluster c's
// versions.kubernetes for arch (runtime.GOARCH of the host), mode 0755.
//
// Fast path: when D/bin/.kubectl.stamp records the same download URL and the
// file still has the recorded size and modification time, nothing is
// fetched or hashed. Otherwise the artifact is fetched with f (verified
// against its published SHA-256, from f.Mirror when set, kept in
// f.CacheDir) and the file is written only when its SHA-256 differs from the
// artifact's (a matching file just gets its mode fixed); then the stamp is
// rewritten. Delete D/bin/kubectl to force a fresh copy.
//
// Errors: an unsupported arch, a failed fetch (offline without a mirror: the
// error says so), a write error.
func EnsureKubectl(ctx context.Context, c *config.Cluster, d state.Dir, arch string, f *components.Fetcher) (Kubectl, error) {
	r, err := ResolveKubectl(c, arch)
	if err != nil {
		return Kubectl{}, err
	}
	k := Kubectl{Path: KubectlPath(d), Version: r.Version, Arch: arch}
	if st, ok := readStamp(d); ok && st.URL == r.URL {
		if fi, err := os.Stat(k.Path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == KubectlMode &&
			fi.Size() == st.Size && fi.ModTime().Equal(st.ModTime) {
			k.SHA256 = st.SHA256
			return k, nil
		}
	}
	k.Fetched = true
	got, err := f.Fetch(ctx, []components.Resolved{r})
	if err != nil {
		return k, fmt.Errorf("kubectl %s for %s: %w (fix: set %s to a mirror that has it, e.g. one made by `khw mirror export`, or go online)", r.Version, arch, err, components.EnvMirror)
	}
	fetched := got[0]
	var content bytes.Buffer
	if _, err := fetched.WriteFile(r.Files[0], &content); err != nil {
		return k, fmt.Errorf("kubectl %s: %w", r.Version, err)
	}
	sum := sha256.Sum256(content.Bytes())
	k.SHA256 = hex.EncodeToString(sum[:])
	have, err := fileSHA256(k.Path)
	switch {
	case err == nil && have == k.SHA256:
		if err := os.Chmod(k.Path, KubectlMode); err != nil {
			return k, fmt.Errorf("chmod %s: %w", k.Path, err)
		}
	case err == nil || errors.Is(err, fs.ErrNotExist):
		if err := fsutil.WriteFileAtomic(k.Path, content.Bytes(), KubectlMode); err != nil {
			return k, err
		}
		k.Written = true
	default:
		return k, fmt.Errorf("read %s: %w (fix: remove it, khw puts it back)", k.Path, err)
	}
	fi, err := os.Stat(k.Path)
	if err != nil {
		return k, err
	}
	data, err := json.Marshal(kubectlStamp{URL: r.URL, SHA256: k.SHA256, Size: fi.Size(), ModTime: fi.ModTime()})
	if err != nil {
		return k, err
	}
	if err := fsutil.WriteFileAtomic(stampPath(d), append(data, '\n'), fsutil.PublicMode); err != nil {
		return k, err
	}
	return k, nil
}

func readStamp(d state.Dir) (kubectlStamp, bool) {
	data, err := os.ReadFile(stampPath(d))
	if err != nil {
		return kubectlStamp{}, false
	}
	var st kubectlStamp
	if json.Unmarshal(data, &st) != nil || st.URL == "" {
		return kubectlStamp{}, false
	}
	return st, true
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
