package nodeplan

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/steps"
)

// artifacts fetches (from the cache, the mirror or the official URL) and
// holds in memory the files of catalog artifacts, once per run.
type artifacts struct {
	// Fetcher is the fetcher used; its Mirror is $KHW_MIRROR by default.
	Fetcher *components.Fetcher

	mu    sync.Mutex
	files map[string][]*wantFile // by artifact name
	urls  map[string]string      // by artifact name: the URL files holds
	// pinned is what the pinned mirror manifest lists, by
	// components.CacheKey, read once per run for the commands of files
	// not fetched in it; pinnedErr is why it could not be read (then it
	// is not tried again in the run).
	pinned    map[string]expected
	pinnedErr string
}

// fetcher is a.Fetcher, else one configured from the environment.
func (a *artifacts) fetcher() *components.Fetcher {
	if a.Fetcher != nil {
		return a.Fetcher
	}
	f := components.EnvFetcher()
	return &f
}

// expected is the digest a download typed by hand is checked against.
type expected struct {
	// sum is the hex SHA-256 khw verified the file with when it fetched it,
	// or the one the pinned mirror manifest lists for it.
	sum string
	// missing says why there is none although a mirror is set (the
	// manifest does not list the file, cannot be read or does not match
	// the pin); the check then fails. Both empty without a mirror: the
	// project's checksum file, over HTTPS, gives the digest.
	missing string
}

// expectedOf returns what the pinned mirror manifest lists for each of rs,
// by components.CacheKey: the manifest is read for the artifacts not asked
// for before in the run, and not again once it could not be read. Nothing
// without a mirror. The caller holds a.mu.
func (a *artifacts) expectedOf(ctx context.Context, rs []components.Resolved) map[string]expected {
	f := a.fetcher()
	if f.Mirror == "" {
		return nil
	}
	if a.pinned == nil {
		a.pinned = map[string]expected{}
	}
	var todo []components.Resolved
	for _, r := range rs {
		if _, ok := a.pinned[components.CacheKey(r)]; !ok {
			todo = append(todo, r)
		}
	}
	if len(todo) > 0 {
		var sums []components.PinnedDigest
		if a.pinnedErr == "" {
			var err error
			if sums, _, err = f.PinnedDigests(ctx, todo); err != nil {
				a.pinnedErr = err.Error()
			}
		}
		for i, r := range todo {
			var e expected
			switch {
			case a.pinnedErr != "":
				e.missing = a.pinnedErr
			case sums[i].Err != nil:
				e.missing = sums[i].Err.Error()
			default:
				e.sum = sums[i].SHA256
			}
			a.pinned[components.CacheKey(r)] = e
		}
	}
	return a.pinned
}

// binaries returns the files of the named catalog artifacts (e.g. "etcd",
// "kube-apiserver") for the cluster's arch, each as a wantFile with its
// node target path and mode. The first call per artifact fetches it
// (verified by SHA-256 against the published checksum, see
// components.Fetcher) and reads it into memory; progress goes to the
// cluster log.
func (a *artifacts) binaries(ctx context.Context, env *steps.Env, names ...string) ([]*wantFile, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.files == nil {
		a.files = map[string][]*wantFile{}
	}
	var missing []string
	for _, n := range names {
		if _, ok := a.files[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		if err := a.fetch(ctx, env, missing); err != nil {
			return nil, err
		}
	}
	var out []*wantFile
	for _, n := range names {
		out = append(out, a.files[n]...)
	}
	return out, nil
}

// resolve returns the catalog entries of the named artifacts for c.
func resolve(c *config.Cluster, names []string) ([]components.Resolved, error) {
	cat, err := components.Load()
	if err != nil {
		return nil, err
	}
	all, err := cat.Resolve(c, nodeArch(c))
	if err != nil {
		return nil, err
	}
	var sel []components.Resolved
	for _, n := range names {
		found := false
		for _, r := range all {
			if r.Artifact.Name == n {
				sel = append(sel, r)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("artifact %q is not in the component catalog (a khw bug)", n)
		}
	}
	return sel, nil
}

func nodeArch(c *config.Cluster) string {
	if c.Arch == "" {
		return config.ArchAMD64
	}
	return c.Arch
}

// describe returns the named artifacts' files as binaries() does, but
// without fetching them: the content is there only when binaries()
// already fetched it in this run. For shell equivalents: the download
// commands of a file fetched in this run check the digest khw verified,
// the others the one the pinned mirror manifest lists (read here, once
// per run), or without a mirror the project's published one.
func (a *artifacts) describe(ctx context.Context, c *config.Cluster, names ...string) ([]*wantFile, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sel, err := resolve(c, names)
	if err != nil {
		return nil, err
	}
	var todo []components.Resolved
	for _, r := range sel {
		if _, ok := a.files[r.Artifact.Name]; !ok || a.urls[r.Artifact.Name] != r.URL {
			todo = append(todo, r)
		}
	}
	exp := a.expectedOf(ctx, todo)
	mirror := a.fetcher().Mirror
	var out []*wantFile
	for _, r := range sel {
		if fs, ok := a.files[r.Artifact.Name]; ok && a.urls[r.Artifact.Name] == r.URL {
			out = append(out, fs...)
			continue
		}
		for _, file := range r.Files {
			out = append(out, newBinaryFile(mirror, r, file, exp[components.CacheKey(r)]))
		}
	}
	return out, nil
}

// downloadCommand is the shell that puts the file at url into the current
// directory: curl from the official URL, or, with a mirror, from the
// mirror's copy (mirrorSource): cp for a directory mirror, curl for an
// http(s) one.
func downloadCommand(mirror, url string) string {
	src, isFile, err := mirrorSource(mirror, url)
	switch {
	case err != nil:
		return "curl -fLO " + steps.Quote(url)
	case isFile:
		return "cp " + src + " ."
	}
	return "curl -fLO " + src
}

// mirrorEnvURL is how a command names a mirror whose URL has a user and a
// password: by $KHW_MIRROR (one trailing / dropped), so that they are
// never written into a command or a by-hand script; curl takes them from
// the URL the variable holds.
const mirrorEnvURL = `"${KHW_MIRROR%/}"`

// mirrorSource is official's copy in mirror (components.MirrorLocation)
// as one shell word: a directory mirror's file as an absolute path (the
// commands cd elsewhere first), an http(s) mirror's URL, or for one with
// credentials mirrorEnvURL and the path. isFile is true for a directory
// mirror. Errors: no mirror, or official cannot be mapped into one.
func mirrorSource(mirror, official string) (src string, isFile bool, err error) {
	if mirror == "" {
		return "", false, fmt.Errorf("no mirror")
	}
	if components.MirrorHasCredentials(mirror) {
		rel, err := components.Resolved{URL: official}.MirrorPath()
		if err != nil {
			return "", false, err
		}
		return mirrorEnvURL + "/" + steps.Quote(rel), false, nil
	}
	loc, isFile, err := components.MirrorLocation(mirror, official)
	if err != nil {
		return "", false, err
	}
	if isFile {
		if abs, err := filepath.Abs(loc); err == nil {
			loc = abs
		}
	}
	return steps.Quote(loc), isFile, nil
}

// MirrorCredentialsNote is what the explanation of commands that download
// from the mirror adds when shell names it by $KHW_MIRROR because its URL
// has a user and a password ("" otherwise).
func MirrorCredentialsNote(shell string) string {
	if !strings.Contains(shell, mirrorEnvURL) {
		return ""
	}
	return " (the mirror's URL has a user and a password, which khw never writes into a command: curl takes them from $KHW_MIRROR, so set it in this shell as you did for khw, or put them in ~/.netrc and $KHW_MIRROR without them)"
}

// newBinaryFile is file of the resolved artifact r as a wantFile whose
// Fetch downloads r (from mirror's copy when mirror is set), checks it
// against exp (verifyCommands) and, for an archive, extracts the file.
func newBinaryFile(mirror string, r components.Resolved, file components.File, exp expected) *wantFile {
	wf := &wantFile{What: fmt.Sprintf("%s %s %s binary", path.Base(file.Target), r.Version, r.Arch), Src: path.Base(file.Target)}
	if r.URL != "" {
		lines := append([]string{downloadCommand(mirror, r.URL)}, verifyCommands(mirror, r, exp)...)
		if file.Path != "" {
			lines = append(lines, "tar -xzf "+steps.Quote(r.FileName)+" --strip-components="+fmt.Sprint(len(splitPath(file.Path))-1)+" "+steps.Quote(file.Path))
			wf.Src = path.Base(file.Path)
		} else if r.FileName != "" {
			wf.Src = r.FileName // runc.amd64 becomes /usr/local/bin/runc
		}
		wf.Fetch = strings.Join(lines, "\n")
	}
	wf.Path, wf.Mode = file.Target, file.Mode
	return wf
}

// verifyCommands is the shell that checks the download of r, with
// sha256sum -c as the install pages of kubectl and etcd do, against the
// digest khw trusts for it: exp.sum (verified by khw's fetch, or listed in
// the pinned mirror manifest) when there is one. With a mirror and none,
// a command that fails and says why: a mirror's own checksum files prove
// nothing, since whoever can change a file there can change them too.
// Without a mirror, the catalog's pinned digest, else the project's
// checksum file fetched from its own HTTPS site (a file with only the
// digest, format hex, or a sha256sum list of which only the files present
// are checked).
func verifyCommands(mirror string, r components.Resolved, exp expected) []string {
	switch {
	case exp.sum != "":
		return []string{checkCommand(exp.sum, r.FileName)}
	case mirror != "":
		why := exp.missing
		if why == "" {
			why = "khw has not read the pinned mirror manifest"
		}
		return []string{refuseCommand(r.FileName, r.FileName+": no SHA-256 khw trusts to check it against: "+why)}
	case r.SHA256 != "":
		return []string{checkCommand(r.SHA256, r.FileName)}
	case strings.HasPrefix(r.ChecksumURL, "https://") && r.ChecksumFormat == components.ChecksumHex:
		return []string{downloadCommand("", r.ChecksumURL),
			fmt.Sprintf(`echo "$(cat %s)  %s" | sha256sum -c -`, steps.Quote(path.Base(r.ChecksumURL)), r.FileName) + removeOnFailure(r.FileName)}
	case strings.HasPrefix(r.ChecksumURL, "https://"):
		return []string{downloadCommand("", r.ChecksumURL), "sha256sum -c --ignore-missing " + steps.Quote(path.Base(r.ChecksumURL)) + removeOnFailure(r.FileName)}
	}
	return []string{refuseCommand(r.FileName, r.FileName+": the catalog names no HTTPS checksum file and no digest for it")}
}

// checkCommand is sha256sum -c of file against sum (hex), the digest
// written into the command; a file that fails is removed (removeOnFailure).
func checkCommand(sum, file string) string {
	return "echo " + steps.Quote(sum+"  "+file) + " | sha256sum -c -" + removeOnFailure(file)
}

// removeOnFailure ends a check of file: when it fails, the file is removed
// and the line fails. A script stops there (set -e); commands typed or
// pasted one by one go on, but find no file to extract or copy, so nothing
// unchecked reaches a node either way.
func removeOnFailure(file string) string {
	return " || { rm -f -- " + steps.Quote(file) + "; false; }"
}

// refuseCommand is a command that prints msg on stderr, removes file (the
// download that cannot be checked) and fails: where a check cannot be
// written, the commands stop (set -e), and typed ones find no file.
func refuseCommand(file, msg string) string {
	return "echo " + steps.Quote(msg) + " >&2; rm -f -- " + steps.Quote(file) + "; false"
}

// fetchNamed resolves the named artifacts for the cluster and fetches them
// (cache, then $KHW_MIRROR or the official URL), progress to the cluster
// log. The caller checks each Fetched.Err.
func (a *artifacts) fetchNamed(ctx context.Context, env *steps.Env, names []string) ([]components.Fetched, error) {
	sel, err := resolve(env.Cluster, names)
	if err != nil {
		return nil, err
	}
	fc := *a.fetcher()
	if fc.Progress == nil {
		fc.Progress = env.NodeLog("")
	}
	fetched, err := fc.Fetch(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("fetch %v: %w (set %s to an offline mirror and %s to its pin, or run khw fetch to see each download)", names, err, components.EnvMirror, components.EnvMirrorDigest)
	}
	return fetched, nil
}

func (a *artifacts) fetch(ctx context.Context, env *steps.Env, names []string) error {
	fetched, err := a.fetchNamed(ctx, env, names)
	if err != nil {
		return err
	}
	f := a.fetcher()
	memoPath := filepath.Join(cacheDir(f), "member-sums.json")
	memo := readMemo(memoPath)
	memoChanged := false
	for _, ft := range fetched {
		r := ft.Resolved
		if ft.Err != nil {
			return fmt.Errorf("fetch %s %s: %w", r.Artifact.Name, r.Version, ft.Err)
		}
		var files []*wantFile
		for _, file := range r.Files {
			// The commands check the digest this fetch verified.
			wf := newBinaryFile(f.Mirror, r, file, expected{sum: ft.SHA256})
			wf.load = func() ([]byte, error) {
				var buf bytes.Buffer
				if _, err := ft.WriteFile(file, &buf); err != nil {
					return nil, fmt.Errorf("%s %s: %w", r.Artifact.Name, r.Version, err)
				}
				return buf.Bytes(), nil
			}
			switch {
			case r.Artifact.Format == components.FormatBinary:
				// The blob is the file: its verified digest is the file's.
				wf.sum = ft.SHA256
			case memo[memoKey(ft, file)] != "":
				wf.sum = memo[memoKey(ft, file)]
			default:
				if err := wf.ensureData(); err != nil {
					return err
				}
				memo[memoKey(ft, file)] = wf.sumOf()
				memoChanged = true
			}
			files = append(files, wf)
		}
		a.files[r.Artifact.Name] = files
		if a.urls == nil {
			a.urls = map[string]string{}
		}
		a.urls[r.Artifact.Name] = r.URL
	}
	if memoChanged {
		// Best effort: without the memo the next run extracts again.
		if data, err := json.Marshal(memo); err == nil {
			_ = fsutil.WriteFileAtomic(memoPath, data, fsutil.PublicMode)
		}
	}
	return nil
}

// The member memo: the SHA-256 of each archive member khw extracted,
// keyed by "<archive sha256>/<member path>", in <cache>/member-sums.json.
// The archive digest is verified on every fetch, so a member's digest
// derived from it stays true; it saves decompressing the etcd archive on
// every run just to compare digests with the nodes.
func memoKey(ft components.Fetched, file components.File) string { return ft.SHA256 + "/" + file.Path }

func readMemo(p string) map[string]string {
	m := map[string]string{}
	if data, err := os.ReadFile(p); err == nil {
		_ = json.Unmarshal(data, &m)
	}
	return m
}

func cacheDir(f *components.Fetcher) string {
	if f.CacheDir != "" {
		return f.CacheDir
	}
	return components.DefaultCacheDir()
}

func splitPath(p string) []string {
	var out []string
	for _, e := range bytes.Split([]byte(p), []byte("/")) {
		if len(e) > 0 {
			out = append(out, string(e))
		}
	}
	return out
}

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }

// DownloadCommands is the shell that puts the files of the catalog
// artifacts names, at c's versions, in the current directory as a person
// would get them: each downloaded (from $KHW_MIRROR's copy when there is
// one), checked with sha256sum -c against the digest khw trusts for it
// (the one it verified when FetchBinaries fetched it in this run, else
// the one the pinned mirror manifest lists, read now; without a mirror,
// the project's checksum file over HTTPS), an archive's file extracted.
// With a mirror and no such digest the check is a command that fails and
// says why. A line two files share (an archive's download) comes once.
// Errors: a name not in the catalog, or a version it cannot resolve.
func (m *Machines) DownloadCommands(ctx context.Context, c *config.Cluster, names ...string) (string, error) {
	files, err := m.Art.describe(ctx, c, names...)
	if err != nil {
		return "", err
	}
	var lines []string
	seen := map[string]bool{}
	for _, wf := range files {
		if wf.Fetch == "" {
			continue
		}
		for _, l := range strings.Split(wf.Fetch, "\n") {
			if !seen[l] {
				seen[l] = true
				lines = append(lines, l)
			}
		}
	}
	return strings.Join(lines, "\n"), nil
}

// FetchBinaries fetches the catalog artifacts names for env.Cluster's
// versions into the cache, each checked against its digest, changing no
// node: a version the mirror lacks fails here, before anything changes.
func (m *Machines) FetchBinaries(ctx context.Context, env *steps.Env, names ...string) error {
	_, err := m.Art.binaries(ctx, env, names...)
	return err
}
