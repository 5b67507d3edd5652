package nodeplan

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/remote"
)

// A fresh cloud VM is busy with its package manager for its first minutes:
// cloud-init's own modules, then apt-daily.service (apt-get update) and
// apt-daily-upgrade.service (unattended-upgrades), which Ubuntu's timers start
// soon after the first boot. While one of them holds a dpkg or apt lock,
// apt-get fails at once with "Could not get lock /var/lib/dpkg/lock-frontend.
// It is held by process N (unattended-upgr)". So before it installs packages
// khw waits for cloud-init (`cloud-init status --wait`, cloud-init's
// documented way to block until it is done), names the process that holds a
// lock, lets apt wait for the dpkg lock itself (DPkg::Lock::Timeout, apt ≥
// 1.9.11, apt-get(8) and apt.conf(5)), and retries `apt-get update`, whose
// lists lock that option does not cover.

// AptLockTimeout is how long apt-get waits for the dpkg lock
// (DPkg::Lock::Timeout, in seconds on the command line). unattended-upgrades
// on a fresh image can run for several minutes; a lock held longer than this
// is a stuck process that a person should look at.
const AptLockTimeout = 15 * time.Minute

// CloudInitTimeout bounds `cloud-init status --wait`.
const CloudInitTimeout = 15 * time.Minute

// aptLockOpt is the apt-get option that makes it wait for the dpkg lock.
var aptLockOpt = "-o DPkg::Lock::Timeout=" + strconv.Itoa(int(AptLockTimeout/time.Second))

// aptUpdateRetries are the pauses before the second and later attempts of
// `apt-get update`: it fails at once while apt-daily.service holds
// /var/lib/apt/lists/lock, or on a transient network or mirror error.
var aptUpdateRetries = []time.Duration{10 * time.Second, 30 * time.Second, 60 * time.Second}

// aptLockFiles are the locks apt and dpkg take (apt-get(8) FILES, dpkg(1)):
// the frontend lock, dpkg's database lock, the package lists' lock and the
// download cache's.
var aptLockFiles = []string{"/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock", "/var/cache/apt/archives/lock"}

// aptBusyProbe prints, as the login user, "cloud-init STATUS" when cloud-init
// is installed (STATUS as `cloud-init status` words it: running, done,
// disabled, error, not started), then one line "lock FILE PID COMM" for each
// process that holds one of aptLockFiles. The holders are read from
// /proc/locks (proc(5): "MAJOR:MINOR:INODE" of the locked file in field 6,
// the owner's PID in field 5; lines with "->" are waiters, not holders),
// matched against `stat` of each file, so neither fuser nor lsof is needed.
var aptBusyProbe = `if command -v cloud-init >/dev/null 2>&1; then echo "cloud-init $(cloud-init status 2>/dev/null | sed -n 's/^status: //p')"; fi
for f in ` + strings.Join(aptLockFiles, " ") + `; do
  k=$(stat -c '%Hd %Ld %i' "$f" 2>/dev/null | awk '{ printf "%02x:%02x:%s", $1, $2, $3 }')
  [ -n "$k" ] || continue
  awk -v k="$k" '$2 != "->" && $6 == k { print $5 }' /proc/locks 2>/dev/null | while read -r pid; do
    echo "lock $f $pid $(cat "/proc/$pid/comm" 2>/dev/null || echo '?')"
  done
done
true`

// aptBusy is what aptBusyProbe found on a node.
type aptBusy struct {
	// CloudInit is cloud-init's status, "" when it is not installed.
	CloudInit string
	// Holders are the processes holding a lock, in aptLockFiles' order.
	Holders []lockHolder
}

// lockHolder is one process that holds one of aptLockFiles.
type lockHolder struct {
	File, Comm string
	PID        int
}

func (h lockHolder) String() string {
	return fmt.Sprintf("%s is held by %s (pid %d)", h.File, h.Comm, h.PID)
}

// parseAptBusy reads aptBusyProbe's output; lines it does not know are
// skipped (a shell that printed a warning must not stop an install).
func parseAptBusy(out []byte) aptBusy {
	var b aptBusy
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 1 && f[0] == "cloud-init":
			b.CloudInit = strings.Join(f[1:], " ")
		case len(f) >= 4 && f[0] == "lock":
			pid, err := strconv.Atoi(f[2])
			if err != nil || pid <= 0 {
				continue
			}
			b.Holders = append(b.Holders, lockHolder{File: f[1], PID: pid, Comm: strings.Join(f[3:], " ")})
		}
	}
	return b
}

// cloudInitBusy reports whether cloud-init status words a run that has not
// finished (cloud-init's `status` subcommand: "not started", "running").
func cloudInitBusy(status string) bool { return status == "running" || status == "not started" }

// waitForApt waits on w's node until cloud-init is done (bounded by
// CloudInitTimeout), then says which process holds an apt or dpkg lock, if
// one does: apt-get itself then waits for it (aptLockOpt). note shows a line
// to the person running the step. It returns the holders it named. Errors:
// the probe could not run, or cloud-init did not finish in time (naming
// cloud-init's last status and what to do).
func waitForApt(ctx context.Context, cl *remote.Client, node string, note func(string, ...any)) ([]lockHolder, error) {
	out, _, err := cl.Run(ctx, aptBusyProbe, remoteRunNoSudo)
	if err != nil {
		return nil, fmt.Errorf("check whether cloud-init or another apt holds the package manager: %w", err)
	}
	b := parseAptBusy(out)
	if cloudInitBusy(b.CloudInit) {
		note("%s: waiting for cloud-init to finish before installing packages (cloud-init status --wait, at most %v)", node, CloudInitTimeout)
		wctx, cancel := context.WithTimeout(ctx, CloudInitTimeout)
		start := time.Now()
		_, _, err := cl.Run(wctx, "cloud-init status --wait >/dev/null", remoteRunNoSudo)
		cancel()
		var ce *remote.CommandError
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &ce) && ce.ExitCode == 2:
			// cloud-init ≥ 23.4: done, with recoverable errors (its
			// `status` docs); the node is up and apt may run.
			note("%s: cloud-init finished with recoverable errors (see cloud-init status --long on the node)", node)
		case errors.As(err, &ce) && ce.ExitCode == 1:
			note("%s: cloud-init finished with an error (see cloud-init status --long on the node); installing anyway", node)
		case wctx.Err() != nil:
			return nil, fmt.Errorf("cloud-init still runs on %s after %v (fix: look at `cloud-init status --long` and /var/log/cloud-init-output.log on the node, then run khw up again)", node, CloudInitTimeout)
		default:
			return nil, fmt.Errorf("wait for cloud-init on %s: %w", node, err)
		}
		note("%s: cloud-init done after %v", node, time.Since(start).Round(time.Second))
		if out, _, err = cl.Run(ctx, aptBusyProbe, remoteRunNoSudo); err != nil {
			return nil, fmt.Errorf("check whether another apt holds the package manager: %w", err)
		}
		b = parseAptBusy(out)
	}
	if len(b.Holders) > 0 {
		note("%s: waiting for the package manager: %s; apt-get waits for it (at most %v)", node, b.Holders[0], AptLockTimeout)
	}
	return b.Holders, nil
}

// aptUpdate runs `apt-get update` on the node, again after each pause of
// aptUpdateRetries when it fails (the lists lock or a transient error),
// saying so through note. Error: the last attempt's.
func aptUpdate(ctx context.Context, cl *remote.Client, node string, note func(string, ...any)) error {
	var err error
	for i := 0; ; i++ {
		_, _, err = cl.Run(ctx, "apt-get update -q", remote.RunOptions{Sudo: true})
		if err == nil || ctx.Err() != nil || i == len(aptUpdateRetries) {
			return err
		}
		note("%s: apt-get update failed (%s); trying again in %v (attempt %d of %d)", node, lastLines([]byte(err.Error()), 1), aptUpdateRetries[i], i+2, len(aptUpdateRetries)+1)
		select {
		case <-time.After(aptUpdateRetries[i]):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// aptWaitShell is the by-hand form of waitForApt: wait for cloud-init where
// it is installed (its exit code 2, done with recoverable errors, is no
// reason to stop).
const aptWaitShell = "if command -v cloud-init >/dev/null; then cloud-init status --wait >/dev/null || true; fi"

// aptUpdateShell is the by-hand form of aptUpdate: two more tries, 10 and
// 30 seconds later, when the lists are locked or a download failed.
const aptUpdateShell = "sudo apt-get update || { sleep 10; sudo apt-get update; } || { sleep 30; sudo apt-get update; }"
