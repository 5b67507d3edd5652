package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/spf13/cobra"
)

const statusLong = `Show what the cluster is doing right now. khw status only reads: it changes
nothing on the nodes or in the state directory. Sections, in order:

NODES      Each node of cluster.yaml with its role, its state as the provider
           sees it (running, stopped or absent), its IP and the host process
           holding it (nspawn: the systemd-nspawn pid). No node is contacted.

UNITS      For every running node, over SSH, the systemd units of its role
           (control plane: etcd, kube-apiserver, kube-controller-manager,
           kube-scheduler; lb: haproxy; worker: containerd, kubelet,
           kube-proxy) as "systemctl show" reports them: active/running is
           healthy; activating/auto-restart with a growing RESTARTS count is a
           crash loop (read the unit's log on the node with journalctl -u
           <unit>: open khw shell, then ssh to the node); not-found means the
           unit file was never installed.

ETCD       The members (etcdctl member list) and each member's status
           (etcdctl endpoint status), asked at https://<cp IP>:2379 with the
           apiserver's kubernetes certificate (etcd accepts no other):
             LEADER  * marks the member that currently leads. Every write goes
                     through the leader, which replicates it to the others.
             TERM    the raft term: it goes up by one at every election, so a
                     jump means leaders were lost (a member died, or the
                     network between members broke).
             INDEX   the last raft log entry the member holds; members that
                     keep up show nearly the same index.
           The summary line says who leads and whether there is quorum: a
           cluster of n members needs n/2+1 of them (2 of 3) to agree on every
           write and every linearizable read. One of three down: it keeps
           working. Two down: no leader, the apiserver times out on reads and
           writes, while running pods keep serving.

APISERVER  GET /readyz?verbose on each control plane directly
           (https://cpN:6443) and through the load balancer (https://lb:6443),
           with the latency. A failing apiserver lists its failed checks, e.g.
           "etcd failed: reason withheld" (the reason is only in the
           apiserver's own log). If every cp is ready but lb is not, look at
           HAProxy; if lb is ready while a cp is not, HAProxy is routing
           around it, as it should.

LEASES     The leader-election Leases of kube-controller-manager and
           kube-scheduler (kube-system, coordination.k8s.io/v1), read through
           the load balancer. Three instances run, one leads: the Lease holder
           ("<hostname>_<uuid>", shown as the node). The leader renews the
           Lease every 2 s; if it stops for the lease duration (15 s) another
           instance takes over and TRANSITIONS goes up by one. A renewal older
           than the lease duration (FRESH no) means the leader is gone and no
           one has taken over yet. With libvirt.domainType qemu (TCG) both are
           4× (8 s and 60 s): their templates say why.

Every section stands alone: one that cannot be read prints its error and
the others still run. The sections that contact the nodes are skipped when
no node is running. The whole command is bounded to 10 s; each etcd member
gets 2 s and each HTTPS request 3 s, so a dead node shows up as an error
row rather than a hang. On VMs these bounds grow with the provider's
slowdown (TCG: 30 s, 8 s and 12 s), so an emulated node that is merely slow
is not shown as down.

Exit status: 0 when the nodes could be listed, even if the cluster is
unhealthy (read the sections); 1 when nothing at all could be read.

-o json prints one object:
  {"nodes": [{"name", "role", "state", "ip", "pid"}],
   "units": {"<node>": [{"name", "load", "active", "sub", "enabled", "since", "started", "restarts"}]},
   "etcd": {"members", "endpoints", "leader", "raftTerm", "healthy", "size", "quorumSize", "quorum"},
   "apiservers": [{"target", "url", "ok", "httpStatus", "failed", "error", "latencyNs"}],
   "leases": [{"name", "found", "holder", "holderNode", "renewTime", "transitions", "durationSeconds", "fresh"}],
   "kubeNodes": [{"name", "ready", "reason", "message", "problems", "podCIDR", "kubeletVersion", "unschedulable", "created"}],
   "errors": {"<section>": "<message>"}}
A section that was skipped or could not be read is null and has its message
in "errors" (sections: nodes, cluster, units, etcd, apiservers, leases, kubeNodes).`

func newStatusCmd(a *app) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show nodes, units, etcd quorum, apiserver readiness, Leases",
		Long:    statusLong,
		Example: "  khw status\n  khw status -o json\n  khw status -o json | jq .etcd.leader",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "text" && output != "json" {
				return usagef("-o %q: use text or json", output)
			}
			d, c, err := a.load()
			if err != nil {
				return err
			}
			s, err := cluster.Open(c, d, cluster.ProviderOnly, nil)
			if err != nil {
				return err
			}
			rep, read := s.Status(cmd.Context())
			if output == "json" {
				enc := json.NewEncoder(a.out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else if err := cluster.WriteStatusText(a.out, c, rep, time.Now()); err != nil {
				return err
			}
			if !read {
				return fmt.Errorf("cluster %s: nothing could be read (%s)", c.Name, cluster.JoinErrors(rep.Errors))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
