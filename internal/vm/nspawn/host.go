package nspawn

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/vm"
)

func ownerPath(cluster string) string { return filepath.Join(OwnerDir, vm.NetnsName(cluster)+".owner") }

// owner returns the state directory recorded for the cluster's namespace,
// or "" when none is.
func owner(cluster string) string {
	data, err := os.ReadFile(ownerPath(cluster))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// checkOwner fails with *ForeignOwnerError when another state directory
// made the namespace.
func (p *Provider) checkOwner() error {
	if o := owner(p.c.Name); o != "" && o != p.opts.StateDir {
		return &vm.ForeignOwnerError{Cluster: p.c.Name, Resource: "the network namespace " + vm.NetnsName(p.c.Name) + " (with the nodes " + p.c.Name + "-*)", Owner: o, StateDir: p.opts.StateDir}
	}
	return nil
}

// claim records this state directory as the namespace's owner.
func (p *Provider) claim() error {
	if err := os.MkdirAll(OwnerDir, 0o755); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(ownerPath(p.c.Name), []byte(p.opts.StateDir+"\n"), fsutil.PublicMode)
}

// raiseInotifyLimits raises fs.inotify.max_user_instances and
// max_user_watches to the minimums above when they are lower (host-wide,
// until reboot; never lowered), saying so in log.
func raiseInotifyLimits(log io.Writer) {
	for _, l := range []struct {
		path string
		min  int
	}{{"/proc/sys/fs/inotify/max_user_instances", MinInotifyInstances}, {"/proc/sys/fs/inotify/max_user_watches", MinInotifyWatches}} {
		data, err := os.ReadFile(l.path)
		if err != nil {
			continue
		}
		cur, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || cur >= l.min {
			continue
		}
		if err := os.WriteFile(l.path, []byte(strconv.Itoa(l.min)), 0o644); err == nil && log != nil {
			fmt.Fprintf(log, "host: raised %s from %d to %d (each nspawn node's systemd and containerd need inotify instances)\n", l.path, cur, l.min)
		}
	}
}

func mountsBelow(dir string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 {
			mp := unescapeMount(f[4])
			if mp == dir || strings.HasPrefix(mp, dir+"/") {
				out = append(out, mp)
			}
		}
	}
	return out
}

// nspawnRunLeftovers lists what systemd-nspawn leaves on the host after a
// node exits when the host's /run is not a tmpfs it may clean: the empty
// mount-propagation directory propagate/<machine> and the image lock file
// locks/inode-<st_dev>:<st_ino> of the node root.
func (p *Provider) nspawnRunLeftovers(node string) []string {
	out := []string{filepath.Join(NspawnRunDir, "propagate", p.MachineName(node))}
	var st syscall.Stat_t
	if err := syscall.Stat(p.NodeRoot(node), &st); err == nil {
		out = append(out, filepath.Join(NspawnRunDir, "locks", fmt.Sprintf("inode-%d:%d", st.Dev, st.Ino)))
	}
	return out
}

// removeRunLeftovers removes nspawnRunLeftovers of a stopped node. os.Remove
// never deletes a non-empty directory, so a propagation directory still in
// use is kept.
func (p *Provider) removeRunLeftovers(node string) {
	for _, f := range p.nspawnRunLeftovers(node) {
		_ = os.Remove(f)
	}
}
