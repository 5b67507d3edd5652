package cluster

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/termtext"
)

// statusPrinter writes one StatusReport as text, one method per section.
// Unit states, errors and certificate subjects are text read on the
// nodes, so everything goes through termtext: no control character of
// theirs reaches the terminal.
type statusPrinter struct {
	// w is the caller's writer behind termtext; raw the caller's writer,
	// under the tables' tabwriters (which get escaped text: tw).
	w    io.Writer
	raw  io.Writer
	c    *config.Cluster
	rep  StatusReport
	now  time.Time
	opts StatusOptions
	errs []error
}

// StatusOptions tune khw status's text.
type StatusOptions struct {
	// AllCerts lists every certificate of every node; without it each
	// node has one line (its soonest expiry), plus a line for each
	// certificate that expires within CertWarnDays or has expired.
	AllCerts bool
}

// CertWarnDays: a certificate with fewer days left than this is listed
// in khw status even without --certs.
const CertWarnDays = 30

// table is one aligned table: what is written to it is escaped
// (termtext) before the tabwriter measures the columns.
type table struct {
	io.Writer
	tw *tabwriter.Writer
}

func (p *statusPrinter) tw() table {
	t := tabwriter.NewWriter(p.raw, 0, 4, 2, ' ', 0)
	return table{termtext.NewWriter(t), t}
}

func (p *statusPrinter) flush(t table) { p.errs = append(p.errs, t.tw.Flush()) }

// sectionErr prints the error of a section, if it has one.
func (p *statusPrinter) sectionErr(section string) {
	if e, ok := p.rep.Errors[section]; ok {
		for i, line := range strings.Split(strings.TrimRight(e, "\n"), "\n") {
			if i == 0 {
				fmt.Fprintf(p.w, "error: %s\n", line)
			} else {
				fmt.Fprintf(p.w, "  %s\n", line)
			}
		}
	}
}

// WriteStatusText writes rep as khw status's text, section by section (ages
// relative to now), the nodes' text with its control characters escaped
// (termtext.Escape); the error is the writer's.
func WriteStatusText(w io.Writer, c *config.Cluster, rep StatusReport, now time.Time) error {
	return WriteStatusTextWith(w, c, rep, now, StatusOptions{})
}

// WriteStatusTextWith is WriteStatusText with options.
func WriteStatusTextWith(w io.Writer, c *config.Cluster, rep StatusReport, now time.Time, opts StatusOptions) error {
	p := &statusPrinter{w: termtext.NewWriter(w), raw: w, c: c, rep: rep, now: now, opts: opts}
	if p.nodes() {
		p.units()
		p.etcd()
		p.apiservers()
		p.leases()
		p.kubeNodes()
		p.certs()
	}
	return errors.Join(p.errs...)
}

// certs prints CERTIFICATES: days left of each certificate as the file on
// the node is (the jumpbox's copy may differ), one line per node with its
// soonest expiry, then every certificate near its end (or every one with
// AllCerts).
func (p *statusPrinter) certs() {
	fmt.Fprintln(p.w, "\nCERTIFICATES (the files on the nodes)")
	if len(p.rep.Certs) > 0 {
		t := p.tw()
		if p.opts.AllCerts {
			fmt.Fprintln(t, "NODE\tFILE\tSUBJECT\tEXPIRES\tDAYS LEFT")
		} else {
			fmt.Fprintln(t, "NODE\tCERTS\tSOONEST TO EXPIRE\tEXPIRES\tDAYS LEFT")
		}
		var near []string
		for _, node := range health.SortedNodes(p.c, p.rep.Certs) {
			var soonest *health.Cert
			n := 0
			for _, c := range p.rep.Certs[node] {
				if c.Err != "" {
					near = append(near, fmt.Sprintf("%s: %s unreadable: %s", node, c.File, c.Err))
					continue
				}
				n++
				if p.opts.AllCerts {
					fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", node, c.File, c.Subject, c.NotAfter.Format("2006-01-02 15:04"), daysLeft(c, p.now))
				} else if c.DaysLeft(p.now) < CertWarnDays {
					near = append(near, fmt.Sprintf("%s: %s (%s) %s", node, c.File, c.Subject, daysLeft(c, p.now)))
				}
				if soonest == nil || c.NotAfter.Before(soonest.NotAfter) {
					soonest = &c
				}
			}
			if !p.opts.AllCerts && soonest != nil {
				fmt.Fprintf(t, "%s\t%d\t%s\t%s\t%s\n", node, n, soonest.File, soonest.NotAfter.Format("2006-01-02 15:04"), daysLeft(*soonest, p.now))
			}
		}
		p.flush(t)
		if len(near) > 0 {
			fmt.Fprintf(p.w, "expiring within %d days, or unreadable:\n", CertWarnDays)
			for _, l := range near {
				fmt.Fprintf(p.w, "  %s\n", l)
			}
		}
		if !p.opts.AllCerts {
			fmt.Fprintln(p.w, "(khw status --certs lists every certificate)")
		}
	}
	p.sectionErr("certs")
}

// daysLeft is c's whole days left at now, or "expired N days ago".
func daysLeft(c health.Cert, now time.Time) string {
	switch left := c.NotAfter.Sub(now); {
	case left <= 0:
		return fmt.Sprintf("expired %s ago", age(-left))
	case left < 24*time.Hour:
		return "0 (expires in " + age(left) + ")"
	}
	return strconv.Itoa(c.DaysLeft(now))
}

// nodes prints NODES; false when no node runs (the other sections are
// then left out).
func (p *statusPrinter) nodes() bool {
	fmt.Fprintln(p.w, "NODES")
	p.sectionErr("nodes")
	if p.rep.Nodes != nil {
		t := p.tw()
		fmt.Fprintln(t, "NODE\tROLE\tSTATE\tIP\tPID")
		for _, r := range p.rep.Nodes {
			pid := "-"
			if r.PID != 0 {
				pid = strconv.Itoa(r.PID)
			}
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Role, r.State, r.IP, pid)
		}
		p.flush(t)
	}
	if msg, ok := p.rep.Errors["cluster"]; ok {
		fmt.Fprintf(p.w, "\n%s\n", msg)
		return false
	}
	return true
}

// units prints UNITS.
func (p *statusPrinter) units() {
	fmt.Fprintln(p.w, "\nUNITS")
	if len(p.rep.Units) > 0 {
		t := p.tw()
		fmt.Fprintln(t, "NODE\tUNIT\tSTATE\tENABLED\tRESTARTS\tSTARTED")
		for _, node := range health.SortedNodes(p.c, p.rep.Units) {
			for _, u := range p.rep.Units[node] {
				state := u.Active + "/" + u.Sub
				if u.Load != "" && u.Load != "loaded" {
					state = u.Load
				}
				fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%d\t%s\n", node, u.Name, state, dash(u.Enabled), u.Restarts, started(u, p.now))
			}
		}
		p.flush(t)
	}
	p.sectionErr("units")
}

// etcd prints ETCD: members, one row per endpoint, the verdict.
func (p *statusPrinter) etcd() {
	fmt.Fprintln(p.w, "\nETCD")
	if e := p.rep.Etcd; e != nil {
		if len(e.Members) > 0 {
			var names []string
			for _, m := range e.Members {
				name := m.Name
				if name == "" {
					name = "(not started)"
				}
				if m.IsLearner {
					name += " (learner)"
				}
				names = append(names, name+" "+m.ID)
			}
			fmt.Fprintf(p.w, "members: %s\n", strings.Join(names, ", "))
		} else if e.MembersErr != "" {
			fmt.Fprintf(p.w, "members: unknown (%s)\n", e.MembersErr)
		}
		t := p.tw()
		fmt.Fprintln(t, "NODE\tENDPOINT\tOK\tLEADER\tTERM\tINDEX\tDB SIZE\tVERSION\tLATENCY\tERROR")
		for _, ep := range e.Endpoints {
			if !ep.OK {
				fmt.Fprintf(t, "%s\t%s\tno\t-\t-\t-\t-\t-\t-\t%s\n", ep.Node, ep.Endpoint, ep.Err)
				continue
			}
			lead := "-"
			switch {
			case ep.IsLeader:
				lead = "*"
			case ep.LeaderID == "":
				lead = "none"
			}
			fmt.Fprintf(t, "%s\t%s\tyes\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", ep.Node, ep.Endpoint, lead, ep.RaftTerm, ep.RaftIndex,
				humanBytes(ep.DBSizeBytes), ep.Version, ms(ep.Latency), ep.Err)
		}
		p.flush(t)
		fmt.Fprintln(p.w, etcdSummary(e))
	}
	if p.rep.Etcd == nil {
		// With a report, its endpoint rows already say why each failed.
		p.sectionErr("etcd")
	}
}

// apiservers prints APISERVER: /readyz of each apiserver and of the load balancer.
func (p *statusPrinter) apiservers() {
	fmt.Fprintln(p.w, "\nAPISERVER")
	if len(p.rep.APIServers) > 0 {
		t := p.tw()
		fmt.Fprintln(t, "TARGET\tURL\tREADY\tHTTP\tLATENCY\tDETAIL")
		for _, r := range p.rep.APIServers {
			ready, code, lat := "no", "-", "-"
			if r.OK {
				ready = "yes"
			}
			if r.HTTPStatus != 0 {
				code = strconv.Itoa(r.HTTPStatus)
			}
			if r.HTTPStatus != 0 || r.Latency >= time.Millisecond {
				lat = ms(r.Latency)
			}
			detail := r.Err
			if len(r.Failed) > 0 {
				detail = strings.Join(r.Failed, "; ")
			}
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Target, r.URL, ready, code, lat, detail)
		}
		p.flush(t)
	}
	p.sectionErr("apiservers")
}

// leases prints LEASES: the leader-election Leases.
func (p *statusPrinter) leases() {
	fmt.Fprintln(p.w, "\nLEASES")
	if len(p.rep.Leases) > 0 {
		t := p.tw()
		fmt.Fprintln(t, "LEASE\tHOLDER\tRENEWED\tTRANSITIONS\tFRESH")
		for _, l := range p.rep.Leases {
			if !l.Found {
				fmt.Fprintf(t, "%s\t(no Lease: never elected)\t-\t-\tno\n", l.Name)
				continue
			}
			renewed, fresh := "-", "no"
			if !l.RenewTime.IsZero() {
				renewed = age(p.now.Sub(l.RenewTime)) + " ago"
			}
			if l.Fresh {
				fresh = "yes"
			}
			fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\n", l.Name, dash(l.HolderNode), renewed, l.Transitions, fresh)
		}
		p.flush(t)
	}
	p.sectionErr("leases")
}

// kubeNodes prints KUBE NODES and the workers not registered yet.
func (p *statusPrinter) kubeNodes() {
	fmt.Fprintln(p.w, "\nKUBE NODES")
	if p.rep.KubeNodes != nil {
		t := p.tw()
		fmt.Fprintln(t, "NAME\tSTATUS\tPOD CIDR\tVERSION\tAGE")
		var notes []string
		fromConfig := false
		for _, n := range p.rep.KubeNodes {
			cidr := n.PodCIDR
			if cn, ok := p.c.Node(n.Name); ok && cidr == "" && cn.PodCIDR != "" {
				cidr, fromConfig = cn.PodCIDR+" *", true
			}
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", n.Name, n.Summary(), dash(cidr), dash(n.KubeletVersion), age(p.now.Sub(n.Created)))
			if n.Message != "" {
				notes = append(notes, fmt.Sprintf("%s: %s", n.Name, n.Message))
			}
		}
		p.flush(t)
		if fromConfig {
			fmt.Fprintln(p.w, "* from cluster.yaml (the node's pod routes and CNI config); Node.spec.podCIDR is empty: the controller-manager runs with --allocate-node-cidrs=false")
		}
		for _, note := range notes {
			fmt.Fprintln(p.w, note)
		}
		var missing []string
		have := map[string]bool{}
		for _, n := range p.rep.KubeNodes {
			have[n.Name] = true
		}
		for _, n := range p.c.Workers() {
			if !have[n.Name] {
				missing = append(missing, n.Name)
			}
		}
		if len(missing) > 0 {
			fmt.Fprintf(p.w, "not registered: %s (no kubelet has registered the Node yet)\n", strings.Join(missing, ", "))
		}
	}
	p.sectionErr("kubeNodes")
}

// etcdSummary is the one-line verdict, e.g. "leader cp2, term 7, quorum
// 3/3 healthy (2 needed)".
func etcdSummary(e *health.EtcdReport) string {
	leader := "no leader"
	if e.Leader != "" {
		leader = "leader " + e.Leader
	}
	q := fmt.Sprintf("quorum %d/%d healthy (%d needed)", e.Healthy, e.Size, e.QuorumSize)
	if !e.Quorum {
		answered := 0
		for _, ep := range e.Endpoints {
			if ep.OK {
				answered++
			}
		}
		q = fmt.Sprintf("NO QUORUM: %d/%d members answer, %d healthy, %d needed; writes and linearizable reads block until enough members are back",
			answered, e.Size, e.Healthy, e.QuorumSize)
	}
	return fmt.Sprintf("%s, term %d, %s", leader, e.RaftTerm, q)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// started is "<age> ago" of a unit's main process start, or its raw
// timestamp, or "-".
func started(u health.Unit, now time.Time) string {
	switch {
	case !u.Started.IsZero():
		return age(now.Sub(u.Started)) + " ago"
	case u.Since != "":
		return u.Since
	}
	return "-"
}

// age is a short duration: 12s, 5m3s, 2h7m, 3d4h.
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// ms prints a latency in milliseconds, e.g. 12.3ms.
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}

// humanBytes prints a size in bytes with a binary unit (KiB, MiB, GiB).
func humanBytes(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	v := float64(n)
	for _, unit := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= 1024
		if v < 1024 || unit == "TiB" {
			return strconv.FormatFloat(v, 'f', 1, 64) + " " + unit
		}
	}
	return ""
}
