package nspawn

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// v1Hierarchy is one cgroup v1 hierarchy this process is in: the directory
// of its cgroup there, e.g. /sys/fs/cgroup/memory/process_api/abc.
type v1Hierarchy struct {
	controllers string // "memory", "name=systemd", "cpu,cpuacct"
	dir         string
}

// currentV1Cgroups lists the cgroup v1 hierarchies of this process
// (/proc/self/cgroup lines with a controller list; the cgroup2 "0::" line is
// skipped) with the directory of its cgroup in each, found through the
// hierarchy's mount in /proc/self/mountinfo.
func currentV1Cgroups() ([]v1Hierarchy, error) {
	type mnt struct{ root, point string }
	mounts := map[string]mnt{} // controller → mount
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 || qf[0] != "cgroup" {
			continue
		}
		for _, o := range strings.Split(qf[2], ",") {
			if _, seen := mounts[o]; !seen {
				mounts[o] = mnt{root: pf[3], point: unescapeMount(pf[4])}
			}
		}
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	var out []v1Hierarchy
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 || f[1] == "" {
			continue
		}
		first := strings.Split(f[1], ",")[0]
		m, ok := mounts[first]
		if !ok {
			continue // hierarchy not mounted here
		}
		rel, err := filepath.Rel(m.root, f[2])
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // our cgroup is outside what is mounted
		}
		out = append(out, v1Hierarchy{controllers: f[1], dir: filepath.Join(m.point, rel)})
	}
	return out, nil
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// makeNodeCgroups creates child cgroup <leaf> under this process' cgroup in
// every v1 hierarchy (copying cpuset.cpus/cpuset.mems first in cpuset, which
// a new cpuset cgroup needs before it takes tasks) and returns the
// directories made, in hierarchy order.
func makeNodeCgroups(leaf string) ([]string, error) {
	hs, err := currentV1Cgroups()
	if err != nil {
		return nil, fmt.Errorf("read this process' cgroups: %w", err)
	}
	var dirs []string
	for _, h := range hs {
		d := filepath.Join(h.dir, leaf)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return dirs, fmt.Errorf("create cgroup %s: %w", d, err)
		}
		dirs = append(dirs, d)
		if strings.Contains(","+h.controllers+",", ",cpuset,") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h.dir, f))
				if err != nil {
					return dirs, fmt.Errorf("read %s: %w", filepath.Join(h.dir, f), err)
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return dirs, fmt.Errorf("write %s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return dirs, nil
}

// makeUnifiedCgroup creates child cgroup <leaf> under this process' cgroup in
// the cgroup2 hierarchy when one is mounted (hybrid mode: systemd-nspawn
// takes its own cgroup path from the "0::" line of /proc/self/cgroup there
// and makes supervisor/ and payload/ below it, so without this every node
// would share /supervisor and /payload). It returns "" when there is no
// cgroup2 mount.
func makeUnifiedCgroup(leaf string) (string, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	var root, point string
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) >= 5 && len(qf) >= 1 && qf[0] == "cgroup2" {
			root, point = pf[3], unescapeMount(pf[4])
			break
		}
	}
	if point == "" {
		return "", nil
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if cg, ok := strings.CutPrefix(line, "0::"); ok {
			rel, err := filepath.Rel(root, cg)
			if err != nil || strings.HasPrefix(rel, "..") {
				return "", nil
			}
			d := filepath.Join(point, rel, leaf)
			if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return "", fmt.Errorf("create cgroup %s: %w", d, err)
			}
			return d, nil
		}
	}
	return "", nil
}

// startInCgroups runs start on an OS thread that was moved (its thread id
// written to "tasks") into every cgroup in dirs, so the process it forks
// starts there; in cgroup v1 membership is per thread and a child inherits
// its parent thread's cgroups. The thread is moved back afterwards; if that
// fails it stays locked and ends with its goroutine.
func startInCgroups(dirs []string, start func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		hs, err := currentV1Cgroups()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		tid := []byte(strconv.Itoa(unix.Gettid()))
		restore := func() error {
			var errs []error
			for _, h := range hs {
				if err := os.WriteFile(filepath.Join(h.dir, "tasks"), tid, 0o644); err != nil {
					errs = append(errs, fmt.Errorf("move thread back to cgroup %s: %w", h.dir, err))
				}
			}
			return errors.Join(errs...)
		}
		for _, d := range dirs {
			if err := os.WriteFile(filepath.Join(d, "tasks"), tid, 0o644); err != nil {
				if rerr := restore(); rerr == nil {
					runtime.UnlockOSThread()
				}
				errc <- fmt.Errorf("move thread into cgroup %s: %w", d, err)
				return
			}
		}
		serr := start()
		if rerr := restore(); rerr != nil {
			errc <- errors.Join(serr, rerr)
			return
		}
		runtime.UnlockOSThread()
		errc <- serr
	}()
	return <-errc
}

// cgroupPids returns the pids in dir and all cgroups below it.
func cgroupPids(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return nil
	})
	return pids
}

// killCgroups SIGKILLs every process in the cgroup trees dirs until they are
// empty or timeout passes, and returns the pids still there.
func killCgroups(dirs []string, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, d := range dirs {
			left = append(left, cgroupPids(d)...)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		for _, p := range left {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCgroups removes each cgroup tree in dirs depth-first (a v1 cgroup
// directory outlives the processes that were in it). A missing directory is
// fine; a busy one is an error naming it.
func removeCgroups(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		var all []string
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				all = append(all, p)
			}
			return nil
		})
		sort.Slice(all, func(i, j int) bool { return len(all[i]) > len(all[j]) })
		for _, p := range all {
			if err := unix.Rmdir(p); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}
