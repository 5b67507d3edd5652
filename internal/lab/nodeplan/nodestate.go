package nodeplan

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/remote"
)

// fileState is what one probe found at a path on a node.
type fileState struct {
	Path string
	// Present is true for a regular file; Other for something else at the
	// path (a directory, a device); neither means absent.
	Present, Other bool
	Mode           uint32 // permission bits, e.g. 0o644
	Owner, Group   string
	MTime          time.Time
	SHA256         string // lower-case hex
}

// unitState is what `systemctl show` says about one unit.
type unitState struct {
	Name string
	// Load is LoadState (loaded, not-found …), Active is ActiveState
	// (active, activating, failed, inactive …), Sub is SubState, Enabled is
	// UnitFileState (enabled, disabled, "" when not found).
	Load, Active, Sub, Enabled string
	// NeedReload is NeedDaemonReload=yes: the unit file on disk changed since
	// systemd last read it.
	NeedReload bool
	// Started is ExecMainStartTimestamp: when the running main process was
	// started; zero when it never was.
	Started time.Time
	// Restarts is NRestarts: how often systemd restarted the unit by its
	// Restart= setting since it was last started or stopped by hand
	// (systemd.service(5)).
	Restarts int
	// Reloaded is when the unit's last reload command (its last ExecReload
	// line, e.g. haproxy's kill -USR2) started, if it exited with status 0;
	// zero when the unit has none or it never ran. A unit's reload makes
	// it read its files again (systemd.service(5), ExecReload=).
	Reloaded time.Time
}

// readSince is when u last read its files: its start, or a later
// successful reload.
func (u unitState) readSince() time.Time {
	if u.Reloaded.After(u.Started) {
		return u.Reloaded
	}
	return u.Started
}

// runsOld reports whether u runs and has not read f since f last changed.
func (u unitState) runsOld(f fileState) bool {
	return f.Present && !u.Started.IsZero() && f.MTime.After(u.readSince())
}

// nodeState is one probe of one node.
type nodeState struct {
	Files map[string]fileState
	Units map[string]unitState
	// Now is the node's clock when the units were read (zero without
	// units): unit times compare with it, not with the jumpbox's.
	Now time.Time
}

// unitTimeLayout is systemd's --timestamp=us+utc format.
const unitTimeLayout = "Mon 2006-01-02 15:04:05.000000 MST"

// sumCache is the node file where khw records the SHA-256 of each file it
// installed, keyed by size and modification time (ns): lines
// "<sha256> <size> <mtime> <path>". The probe trusts an entry only while the
// file's size and mtime are unchanged, so a file edited or replaced since
// (by hand, by a student) is hashed again; only a change that keeps both
// the size and the nanosecond mtime would go unseen. It saves hashing
// ~1 GB of binaries on every run.
const sumCache = "/var/lib/khw/sha256sums"

// probeScript returns one POSIX shell script that prints, for every path,
// "F <path> <mode> <owner> <group> <mtime sec.usec> <sha256>" (a regular
// file, or a symlink to one: iptables is one through Debian's alternatives),
// "X <path>" (something else) or "A <path>" (absent); then the
// `systemctl show` blocks of the units (blank-line separated). Paths must not
// contain whitespace (khw's node paths never do). The SHA-256 comes from
// sumCache when it has the file's size and mtime, else from sha256sum.
func probeScript(paths, units []string) string { return probeScriptWith(sumCache, paths, units) }

func probeScriptWith(cache string, paths, units []string) string {
	var b strings.Builder
	b.WriteString("set -u\nc=" + quote(cache) + "\n")
	if len(paths) > 0 {
		b.WriteString("set --\nfor p in")
		for _, p := range paths {
			b.WriteString(" " + quote(p))
		}
		// One stat and one awk for all files, not a few processes per file:
		// on a busy node each fork costs milliseconds. Only a file whose size
		// or mtime changed since its digest was recorded is hashed again.
		b.WriteString(`; do
  if [ -f "$p" ]; then set -- "$@" "$p"
  elif [ -e "$p" ] || [ -L "$p" ]; then echo "X $p"
  else echo "A $p"; fi
done
if [ $# -gt 0 ]; then
  [ -f "$c" ] || c=/dev/null
  r=$(stat -L -c '%a %U %G %.6Y %s %.9Y %n' -- "$@" | awk -v c="$c" -v n=$# '
    BEGIN { while ((getline l < c) > 0) sum[substr(l, 66)] = substr(l, 1, 64) }
    {
      p = $0; for (i = 0; i < 6; i++) sub(/^[^ ]+ /, "", p)
      k = $5 " " $6 " " p
      if (k in sum) print "F " p " " $1 " " $2 " " $3 " " $4 " " sum[k]
      else print "M " p " " $1 " " $2 " " $3 " " $4
    }
    END { if (NR != n) exit 1 }') || exit 1
  printf '%s\n' "$r" | while read -r t p a u g m; do
    if [ "$t" = M ]; then s=$(sha256sum < "$p") || exit 1; echo "F $p $a $u $g $m ${s%% *}"
    else echo "$t $p $a $u $g $m"; fi
  done || exit 1
fi
`)
	}
	if len(units) > 0 {
		b.WriteString("echo \"N $(date -u +%s.%N)\"\necho '--units--'\n")
		b.WriteString("systemctl show --timestamp=us+utc -p Id,LoadState,ActiveState,SubState,UnitFileState,NeedDaemonReload,ExecMainStartTimestamp,ExecReload,NRestarts")
		for _, u := range units {
			b.WriteString(" " + quote(u))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// quote single-quotes s for a POSIX shell.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// parseProbe reads the output of probeScript.
func parseProbe(out []byte) (nodeState, error) {
	st := nodeState{Files: map[string]fileState{}, Units: map[string]unitState{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	inUnits := false
	cur := map[string]string{}
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		u, err := unitFromShow(cur)
		if err != nil {
			return err
		}
		st.Units[u.Name] = u
		cur = map[string]string{}
		return nil
	}
	for sc.Scan() {
		line := sc.Text()
		if !inUnits {
			if line == "--units--" {
				inUnits = true
				continue
			}
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "A":
				st.Files[f[1]] = fileState{Path: f[1]}
			case len(f) == 2 && f[0] == "N":
				now, err := parseEpoch(f[1])
				if err != nil {
					return st, fmt.Errorf("probe: bad clock in %q: %w", line, err)
				}
				st.Now = now
			case len(f) == 2 && f[0] == "X":
				st.Files[f[1]] = fileState{Path: f[1], Other: true}
			case len(f) == 7 && f[0] == "F":
				mode, err := strconv.ParseUint(f[2], 8, 32)
				if err != nil {
					return st, fmt.Errorf("probe: bad mode in %q", line)
				}
				mt, err := parseEpoch(f[5])
				if err != nil {
					return st, fmt.Errorf("probe: bad mtime in %q: %w", line, err)
				}
				st.Files[f[1]] = fileState{Path: f[1], Present: true, Mode: uint32(mode), Owner: f[3], Group: f[4], MTime: mt, SHA256: f[6]}
			default:
				return st, fmt.Errorf("probe: unexpected line %q", line)
			}
			continue
		}
		if strings.TrimSpace(line) == "" {
			if err := flush(); err != nil {
				return st, err
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return st, fmt.Errorf("probe: unexpected systemctl show line %q", line)
		}
		cur[k] = v
	}
	if err := sc.Err(); err != nil {
		return st, err
	}
	return st, flush()
}

// parseEpoch parses "1795972122.701081" (seconds.fraction since the epoch).
func parseEpoch(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	var nsec int64
	if frac != "" {
		if len(frac) > 9 {
			frac = frac[:9]
		}
		frac += strings.Repeat("0", 9-len(frac))
		nsec, err = strconv.ParseInt(frac, 10, 64)
		if err != nil {
			return time.Time{}, err
		}
	}
	return time.Unix(n, nsec), nil
}

func unitFromShow(kv map[string]string) (unitState, error) {
	u := unitState{
		Name:       kv["Id"],
		Load:       kv["LoadState"],
		Active:     kv["ActiveState"],
		Sub:        kv["SubState"],
		Enabled:    kv["UnitFileState"],
		NeedReload: kv["NeedDaemonReload"] == "yes",
	}
	if u.Name == "" {
		return u, fmt.Errorf("probe: systemctl show block without Id: %v", kv)
	}
	if ts := kv["ExecMainStartTimestamp"]; ts != "" && ts != "n/a" {
		t, err := time.Parse(unitTimeLayout, ts)
		if err != nil {
			return u, fmt.Errorf("probe: unit %s: ExecMainStartTimestamp %q: %w", u.Name, ts, err)
		}
		u.Started = t
	}
	u.Reloaded = reloadedAt(kv["ExecReload"])
	if n, err := strconv.Atoi(kv["NRestarts"]); err == nil {
		u.Restarts = n
	}
	return u, nil
}

// reloadedAt reads the start time of a successful run from systemctl
// show's ExecReload value ("{ path=/bin/kill ; argv[]=… ; start_time=[Fri
// 2026-12-04 10:24:01.123456 UTC] ; stop_time=[…] ; pid=… ; code=exited ;
// status=0 }"); zero when it never ran, failed or cannot be read (then the
// unit's start is what counts).
func reloadedAt(v string) time.Time {
	if !strings.Contains(v, "code=exited ; status=0") {
		return time.Time{}
	}
	_, rest, ok := strings.Cut(v, "start_time=[")
	if !ok {
		return time.Time{}
	}
	ts, _, _ := strings.Cut(rest, "]")
	for _, layout := range []string{unitTimeLayout, "Mon 2006-01-02 15:04:05 MST"} {
		if t, err := time.Parse(layout, ts); err == nil {
			return t
		}
	}
	return time.Time{}
}

// Probe runs probeScript on the node through cl (as root) and parses it.
func Probe(ctx context.Context, cl *remote.Client, paths, units []string) (nodeState, error) {
	out, _, err := cl.Run(ctx, probeScript(paths, units), remote.RunOptions{Sudo: true})
	if err != nil {
		return nodeState{}, fmt.Errorf("read the state of files and units: %w", err)
	}
	return parseProbe(out)
}

// recordSumsScript records the installed files in sumCache (see there),
// keeping only the newest entry per path.
func recordSumsScript(files []*wantFile) string { return recordSumsScriptWith(sumCache, files) }

func recordSumsScriptWith(cache string, files []*wantFile) string {
	var b strings.Builder
	b.WriteString("set -eu\nc=" + quote(cache) + "\nmkdir -p -m 0755 \"${c%/*}\"\ntouch \"$c\"\n")
	for _, f := range files {
		fmt.Fprintf(&b, "printf '%%s %%s %%s\\n' %s \"$(stat -L -c '%%s %%.9Y' -- %s)\" %s >> \"$c\"\n", f.sumOf(), quote(f.Path), quote(f.Path))
	}
	// Keep the last line per path (the path is everything after the third
	// space-separated field).
	b.WriteString(`awk '{ k = $0; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", k); last[k] = $0; order[k] = NR } END { for (k in last) print order[k], last[k] }' "$c" | sort -n | cut -d' ' -f2- > "$c.tmp" && mv "$c.tmp" "$c"` + "\n")
	return b.String()
}
