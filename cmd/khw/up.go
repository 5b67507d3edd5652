package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/bringup"
	"github.com/khw-dev/khw/internal/steps"
)

const upLong = `Bring the cluster up, one lab step at a time, in order:

  01-machines   Create the machines: every node of cluster.yaml exists, is
                powered on and answers SSH (user ubuntu, khw's key in
                <state>/ssh/id_ed25519).

Each step first checks the actual state against cluster.yaml. A step that
is already done prints "✓ ID  Title  (clean)" and changes nothing; otherwise
it fixes only what differs and checks again. So running khw up again is safe
and quick, and after a failure it continues where it stopped.

--dry-run checks and prints what would change with the equivalent shell
commands, changing nothing. --from and --until run a sub-range (both
inclusive; "01-machines", "01" or "machines").

Logs: <state>/logs/<node>.log per node and <state>/logs/_khw.log.
Provider nspawn needs root (sudo); the first run builds the Debian node image
with debootstrap into ~/.cache/khw/nspawn (a few minutes).`

const upExample = `  khw up
  khw up --dry-run
  khw up --until 01-machines
  khw status
  khw down`

func newUpCmd(a *app) *cobra.Command {
	var opts steps.Options
	cmd := &cobra.Command{
		Use:     "up",
		Short:   "Create the machines and build the cluster, step by step (idempotent)",
		Long:    upLong,
		Example: upExample,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, c, unlock, err := a.loadForWrite()
			if err != nil {
				return err
			}
			defer unlock()
			env := steps.NewEnv(c, d)
			env.Verbosity = a.verbosity
			defer env.Close()
			m, err := bringup.Open(c, d, env.NodeLog(""))
			if err != nil {
				return err
			}
			defer m.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := steps.NewRunner(env, a.out).Run(ctx, bringup.Steps(m), opts)
			if err != nil {
				return err
			}
			if opts.DryRun {
				if ch := rep.Changed(); len(ch) > 0 {
					fmt.Fprintf(a.out, "dry-run: %s would change; nothing was changed\n", ch[0])
				} else {
					fmt.Fprintln(a.out, "dry-run: every step is clean")
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.DryRun, "dry-run", false, "check only: print what would change and the shell commands, change nothing")
	f.StringVar(&opts.From, "from", "", "first step to run (ID, number or name, e.g. 01-machines)")
	f.StringVar(&opts.Until, "until", "", "last step to run (ID, number or name)")
	return cmd
}

const downLong = `Destroy everything the provider made for this cluster: every node
(powered off at once, like pulling the plug, then its root directory or disk
removed) and the cluster's network (nspawn: the network namespace
khw-<cluster> with its bridge). The nodes' pinned SSH host keys
(<state>/ssh/known_hosts) go too. cluster.yaml, pki/, kubeconfigs/, the SSH
key and the shared node image in ~/.cache/khw stay, so khw up builds the
same cluster again.`

func newDownCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "down",
		Short:   "Destroy the cluster's machines and network (keeps the state directory)",
		Long:    downLong,
		Example: "  khw down\n  khw status",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, c, unlock, err := a.loadForWrite()
			if err != nil {
				return err
			}
			defer unlock()
			p, err := bringup.NewProvider(c, d, "", nil)
			if err != nil {
				return err
			}
			removed, err := bringup.Down(cmd.Context(), p, d, c.Name)
			for _, r := range removed {
				fmt.Fprintf(a.out, "removed %s\n", r)
			}
			if err != nil {
				return fmt.Errorf("cluster %s: down: %w (run khw down again to retry)", c.Name, err)
			}
			if len(removed) == 0 {
				fmt.Fprintf(a.out, "cluster %s: nothing to remove\n", c.Name)
			}
			return nil
		},
	}
}

const statusLong = `Print each node of cluster.yaml with its state as the provider sees it
(running, stopped or absent), its IP and the host process holding it (nspawn:
the systemd-nspawn pid). It only reads; it does not contact the nodes.

-o json prints a JSON array of {"name", "state", "ip", "pid"}.`

// statusRow is one node in `khw status -o json`.
type statusRow struct {
	Name  string `json:"name"`
	State string `json:"state"`
	IP    string `json:"ip"`
	PID   int    `json:"pid,omitempty"`
}

func newStatusCmd(a *app) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show each node's state (running, stopped, absent) and IP",
		Long:    statusLong,
		Example: "  khw status\n  khw status -o json",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "text" && output != "json" {
				return usagef("-o %q: use text or json", output)
			}
			d, c, err := a.load()
			if err != nil {
				return err
			}
			p, err := bringup.NewProvider(c, d, "", nil)
			if err != nil {
				return err
			}
			st, err := p.Status(cmd.Context())
			if err != nil {
				return err
			}
			rows := make([]statusRow, 0, len(st))
			for _, n := range st {
				rows = append(rows, statusRow{Name: n.Name, State: string(n.State), IP: n.IP.String(), PID: n.PID})
			}
			if output == "json" {
				enc := json.NewEncoder(a.out)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tSTATE\tIP\tPID")
			for _, r := range rows {
				pid := "-"
				if r.PID != 0 {
					pid = strconv.Itoa(r.PID)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, r.State, r.IP, pid)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
