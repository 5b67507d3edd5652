package health

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
)

// Unit is one systemd unit as `systemctl show` reports it.
type Unit struct {
	// Name is the unit's Id (etcd.service).
	Name string `json:"name"`
	// Load is LoadState: loaded, or not-found when the unit file is missing.
	Load string `json:"load"`
	// Active is ActiveState (active, activating, deactivating, failed,
	// inactive) and Sub the finer SubState (running, auto-restart, dead …).
	Active string `json:"active"`
	Sub    string `json:"sub"`
	// Enabled is UnitFileState: enabled (starts at boot), disabled, or ""
	// when there is no unit file.
	Enabled string `json:"enabled"`
	// Since is ExecMainStartTimestamp as printed (UTC, microseconds), ""
	// when the main process never started; Started is the same parsed.
	Since   string    `json:"since,omitempty"`
	Started time.Time `json:"started,omitzero"`
	// Restarts is NRestarts: how often systemd restarted the unit
	// (Restart=) since it was last started by hand. A growing number means
	// a crash loop.
	Restarts int `json:"restarts"`
}

// Running reports ActiveState active with SubState running.
func (u Unit) Running() bool { return u.Active == "active" && u.Sub == "running" }

// RoleUnits returns the systemd units khw installs on a node of role (a
// config.Role* value), in start order: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler on a control plane; haproxy on the
// load balancer; containerd, kubelet, kube-proxy on a worker. Nil for an
// unknown role.
func RoleUnits(role string) []string {
	switch role {
	case config.RoleControlPlane:
		return []string{"etcd.service", "kube-apiserver.service", "kube-controller-manager.service", "kube-scheduler.service"}
	case config.RoleLoadBalancer:
		return []string{"haproxy.service"}
	case config.RoleWorker:
		return []string{"containerd.service", "kubelet.service", "kube-proxy.service"}
	}
	return nil
}

// showProps are the properties Units asks systemctl for.
const showProps = "Id,LoadState,ActiveState,SubState,UnitFileState,ExecMainStartTimestamp,NRestarts"

// UnitsCommand is the one command Units runs on a node for units:
// `systemctl show` of the properties Unit holds, timestamps in UTC
// (--timestamp needs systemd 248 or later).
func UnitsCommand(units []string) string {
	return "systemctl show --no-pager --timestamp=us+utc -p " + showProps + " " + strings.Join(units, " ")
}

// Units asks each named node (nil nodes: every node of c) over SSH for the
// units of its role (RoleUnits), one `systemctl show` per node
// (UnitsCommand, no sudo: reading unit properties needs no privilege), all
// nodes in parallel through pool. The map holds every node that answered,
// its units in RoleUnits order; err joins one error per node that did not
// (each prefixed "node <name>: "). A node name not in cluster.yaml is an
// error and nothing is asked.
func Units(ctx context.Context, pool *remote.Pool, c *config.Cluster, nodes []string) (map[string][]Unit, error) {
	if c == nil {
		return nil, fmt.Errorf("health: Units needs the cluster (cluster.yaml)")
	}
	if nodes == nil {
		for _, n := range c.Nodes {
			nodes = append(nodes, n.Name)
		}
	}
	var targets []remote.Node
	want := map[string][]string{}
	for _, name := range nodes {
		n, ok := c.Node(name)
		if !ok {
			known := make([]string, 0, len(c.Nodes))
			for _, k := range c.Nodes {
				known = append(known, k.Name)
			}
			return nil, fmt.Errorf("node %q is not in cluster %s (nodes: %s)", name, c.Name, strings.Join(known, ", "))
		}
		units := RoleUnits(n.Role)
		if len(units) == 0 {
			continue
		}
		want[n.Name] = units
		targets = append(targets, remote.Node{Name: n.Name, Addr: n.IP})
	}
	out := map[string][]Unit{}
	var mu sync.Mutex
	err := pool.ForEach(ctx, targets, 0, func(ctx context.Context, cl *remote.Client) error {
		units := want[cl.Node.Name]
		stdout, _, err := cl.Run(ctx, UnitsCommand(units), remote.RunOptions{})
		if err != nil {
			return err
		}
		us, err := ParseSystemctlShow(stdout, units)
		if err != nil {
			return err
		}
		mu.Lock()
		out[cl.Node.Name] = us
		mu.Unlock()
		return nil
	})
	return out, err
}

// ParseSystemctlShow parses the output of `systemctl show -p … unit1
// unit2 …`: one block of Key=Value lines per unit, blocks separated by an
// empty line, in the order the units were named. units are the names asked
// for, in that order; a block without an Id takes the name at its
// position. It is an error when the number of blocks differs from
// len(units), a line is not Key=Value, or NRestarts is not a number.
// Unknown keys are ignored. A unit without a unit file still has a block
// (LoadState=not-found).
func ParseSystemctlShow(out []byte, units []string) ([]Unit, error) {
	var blocks []map[string]string
	cur := map[string]string{}
	flush := func() {
		if len(cur) > 0 {
			blocks = append(blocks, cur)
			cur = map[string]string{}
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("systemctl show: line %q is not Key=Value", line)
		}
		cur[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("systemctl show: %w", err)
	}
	flush()
	if len(blocks) != len(units) {
		return nil, fmt.Errorf("systemctl show: %d unit blocks for %d units (%s)", len(blocks), len(units), strings.Join(units, " "))
	}
	res := make([]Unit, 0, len(blocks))
	for i, kv := range blocks {
		u := Unit{
			Name:    kv["Id"],
			Load:    kv["LoadState"],
			Active:  kv["ActiveState"],
			Sub:     kv["SubState"],
			Enabled: kv["UnitFileState"],
		}
		if u.Name == "" {
			u.Name = units[i]
		}
		if ts := kv["ExecMainStartTimestamp"]; ts != "" && ts != "n/a" {
			u.Since = ts
			if t, err := parseUnitTime(ts); err == nil {
				u.Started = t
			}
		}
		if n := kv["NRestarts"]; n != "" {
			r, err := strconv.Atoi(n)
			if err != nil {
				return nil, fmt.Errorf("systemctl show: unit %s: NRestarts=%q is not a number", u.Name, n)
			}
			u.Restarts = r
		}
		res = append(res, u)
	}
	return res, nil
}

// parseUnitTime parses systemd timestamps: "Mon 2025-01-06 10:00:00.123456
// UTC" (--timestamp=us+utc), also without microseconds.
func parseUnitTime(s string) (time.Time, error) {
	var err error
	for _, layout := range []string{"Mon 2006-01-02 15:04:05.000000 MST", "Mon 2006-01-02 15:04:05 MST"} {
		var t time.Time
		if t, err = time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, err
}

// SortedNodes returns the node names of a result by node (Units, Certs)
// in cluster.yaml order (names not in c last, sorted).
func SortedNodes[V any](c *config.Cluster, m map[string]V) []string {
	pos := map[string]int{}
	for i, n := range c.Nodes {
		pos[n.Name] = i
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		pi, iok := pos[names[i]]
		pj, jok := pos[names[j]]
		switch {
		case iok && jok:
			return pi < pj
		case iok != jok:
			return iok
		}
		return names[i] < names[j]
	})
	return names
}
