package certrenew

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/lab/tlsbootstrap"
	"github.com/khw-dev/khw/internal/pki"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// renewSteps are the steps of khw up that put certificates and
// kubeconfigs on the nodes and restart what reads them, in the order a
// renewal runs them: the kubeconfigs that embed the certs first, then
// etcd, the control planes and the workers (each rolling, one node at a
// time, while the cluster serves), then the TLS-bootstrap worker, whose
// kubelet renews its own certs and whose serving CSR khw approves; last
// the smoke tests, whose logs and exec reach every kubelet through the
// renewed certs (and which khw up would otherwise run again, a change
// having been applied).
var renewSteps = []string{labid.Kubeconfig, labid.Etcd, labid.ControlPlane, labid.Workers, labid.TLSBootstrap, labid.Smoke}

// Renewal is what khw pki renew renews.
type Renewal struct {
	// Certs are certificates of the pki directory, by name.
	Certs []string
	// Serving are the TLS-bootstrap workers whose kubelet asks for a new
	// serving cert with a CSR, which khw approves.
	Serving []string
	// NewKeys gives the renewed certs new private keys (never the CA's or
	// the service-account key).
	NewKeys bool
	// All is --all: every cert khw issued and every TLS-bootstrap worker.
	All bool
}

// Select is the renewal of names, each taken once, or with all of every
// certificate khw issued (not imported kubelet certs) and every
// TLS-bootstrap worker: a TLS-bootstrap worker's serving cert is renewed
// by its kubelet through a CSR; every other name is a cert of the pki
// directory (Plan refuses one that is not).
func Select(c *config.Cluster, names []string, all, newKeys bool) Renewal {
	if all {
		names = nil
		for _, s := range pki.Specs(c) {
			if s.Import == nil {
				names = append(names, s.Name)
			}
		}
		for _, n := range c.Workers() {
			if n.TLSBootstrap {
				names = append(names, n.Name)
			}
		}
	}
	r := Renewal{NewKeys: newKeys, All: all}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		if pki.IsBootstrapNode(c, n) {
			r.Serving = append(r.Serving, n)
		} else {
			r.Certs = append(r.Certs, n)
		}
	}
	return r
}

// LabRenewal is lab 14's renewal: the certs of Renewed and every
// TLS-bootstrap worker's serving cert, keys kept.
func LabRenewal(c *config.Cluster) Renewal {
	r := Renewal{Certs: Renewed(c)}
	for _, n := range c.Workers() {
		if n.TLSBootstrap {
			r.Serving = append(r.Serving, n.Name)
		}
	}
	return r
}

// CommandLine is the khw pki renew command line that asks for r.
func (r Renewal) CommandLine() string {
	cmdline := "khw pki renew "
	if r.All {
		cmdline += "--all"
	} else {
		cmdline += strings.Join(append(slices.Clone(r.Certs), r.Serving...), " ")
	}
	if r.NewKeys {
		cmdline += " --new-keys"
	}
	return cmdline
}

// Plan prints to out what r renews in d's pki directory (new cert or new
// key, and where each is read) and, with dryRun, the commands that do it
// by hand (each cert's pki.Spec.RenewRecipe, then khw up's steps, and each
// TLS-bootstrap worker's CSR). It writes nothing. Errors: *pki.RenewError
// (a name that is no certificate khw issued), the pki directory's.
func (r Renewal) Plan(c *config.Cluster, d state.Dir, out io.Writer, dryRun bool) error {
	plan, err := pki.Reconcile(c, d.PKIDir(), time.Time{}, pki.DryRun(), pki.Renew(r.Certs, r.NewKeys))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Renew in %s (valid for pki.certValidity %s from now):\n", d.PKIDir(), strings.TrimSuffix(c.PKI.CertValidity.String(), "0m0s"))
	for _, s := range plan.Certs {
		if s.Action == pki.Kept || s.Action == pki.Stale {
			continue
		}
		how := "new cert, same key"
		if s.Action == pki.Reissued || s.Action == pki.Created {
			how = "new cert, new key"
		}
		fmt.Fprintf(out, "  %-24s %s; read on %s\n", s.Name, how, readers(c, s.Name))
	}
	for _, n := range r.Serving {
		fmt.Fprintf(out, "  %-24s its kubelet asks for a new serving cert with a CSR, which khw approves after checking it (its client cert the kubelet renews on its own)\n", n)
	}
	if !dryRun {
		return nil
	}
	fmt.Fprintf(out, "\nBy hand, in %s:\n", d.PKIDir())
	for _, s := range pki.Specs(c) {
		if st, ok := plan.Cert(s.Name); ok && st.Action != pki.Kept {
			// A cert that needs a new key anyway (another SAN, another
			// key algorithm) is made anew.
			fmt.Fprintln(out, steps.Indent(s.RenewRecipe(r.NewKeys || st.Action == pki.Reissued), "  "))
		}
	}
	fmt.Fprintf(out, "then khw up --from %s (or lab 03's, 04's, 05's, 07's copies and restarts, one node at a time).\n", labid.Kubeconfig)
	for _, n := range r.Serving {
		fmt.Fprintf(out, "On %s: sudo rm %s && sudo systemctl restart kubelet; then check its CSR as in lab 10 and approve it.\n", n, tlsbootstrap.ServingCertLink)
	}
	fmt.Fprintln(out, "(--dry-run: nothing was done.)")
	return nil
}

// readers says where certificate name is read (the nodes whose files hold
// it or a kubeconfig embedding it), for the plan's lines.
func readers(c *config.Cluster, name string) string {
	switch name {
	case pki.CAName:
		return "every node and kubeconfig"
	case "admin":
		return "the jumpbox only (admin.kubeconfig)"
	case "kubernetes":
		return "the control planes (etcd, kube-apiserver)"
	case "service-account":
		return "the control planes (kube-apiserver)"
	case "kube-controller-manager", "kube-scheduler":
		return "the control planes (" + name + ")"
	case "kube-proxy":
		return "the workers (kube-proxy)"
	}
	if n, ok := c.Node(name); ok {
		return n.Name + " (kubelet)"
	}
	return "?"
}

// Options is where Run prints and what it takes from its caller.
type Options struct {
	// Out gets the progress; ErrOut, with Verbosity 1 or more, a labs'
	// progress file that could not be written. Verbosity is also the
	// steps' (-v).
	Out, ErrOut io.Writer
	Verbosity   int
	// Up gives khw up's steps, records their runs in the labs' progress
	// and refuses a release change (lab.Up).
	Up nodeplan.Up
}

// Run renews r on cluster c (state d) under the caller's lock and puts
// the certs to use, and has the kubelets of the TLS-bootstrap workers in
// r.Serving ask for new serving certs (approved by 10-tls-bootstrap): the
// drill prober samples the cluster (API reads and writes through the load
// balancer, etcd, apiservers, Leases, nodes, a workload on every worker)
// from before the first step until every signal is healthy again; each of
// renewSteps runs as khw up runs it; the report is written under
// <state>/operations. Ctrl-C and SIGTERM stop it between steps. Errors:
// an unhealthy cluster or a release change (nothing done), a step's
// (saying that the certs are renewed and khw up puts them on the nodes).
func (r Renewal) Run(parent context.Context, c *config.Cluster, d state.Dir, o Options) error {
	out := o.Out
	denv, err := drill.OpenCluster(c, d)
	if err != nil {
		return err
	}
	defer denv.S.Close()
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := denv.ReadyToRoll(ctx, out, "khw status, khw up; khw up also reissues expired certs"); err != nil {
		return err
	}
	// The renewal runs khw up's steps, which install cluster.yaml's release.
	if err := o.Up.RefuseReleaseChange(ctx, d, c, denv.S); err != nil {
		return err
	}
	w, err := drill.StartWatch(drill.OperationsOf(d), denv.Prober, out, c.Name, "pki renew", r.CommandLine())
	if err != nil {
		return err
	}
	env := steps.NewEnv(c, d)
	env.Verbosity = o.Verbosity
	defer env.Close()
	upSteps := o.Up.Steps(nodeplan.New(denv.S), c)
	var opErr error
	total := 1 + len(renewSteps)
	if len(r.Serving) > 0 {
		total++
	}
	fmt.Fprintf(out, "\n[1/%d] Reissue in %s\n", total, d.PKIDir())
	var rep *pki.Report
	opErr = w.Step("reissue on the jumpbox", func() error {
		var err error
		rep, err = pki.Reconcile(c, d.PKIDir(), time.Time{}, pki.Renew(r.Certs, r.NewKeys))
		return err
	})
	if rep != nil {
		for _, s := range rep.Certs {
			if s.Action == pki.Kept || s.Action == pki.Stale {
				continue
			}
			fmt.Fprintf(out, "  %-24s %s, serial %s, expires %s\n", s.Name, s.Action, s.Serial, s.NotAfter.UTC().Format(time.RFC3339))
			w.Fact(s.Name, fmt.Sprintf("%s, serial %s, expires %s", s.Action, s.Serial, s.NotAfter.UTC().Format(time.RFC3339)))
		}
	}
	runner := steps.NewRunner(env, out)
	at := 1
	for _, id := range renewSteps {
		if opErr != nil {
			break
		}
		if id == labid.TLSBootstrap && len(r.Serving) > 0 {
			at++
			fmt.Fprintf(out, "\n[%d/%d] New serving certs for %s (the kubelet asks with a CSR)\n", at, total, strings.Join(r.Serving, ", "))
			opErr = w.Step("kubelet serving CSR of "+strings.Join(r.Serving, ", "), func() error {
				return tlsbootstrap.RenewServing(ctx, denv.S.Pool, c, r.Serving, out)
			})
			if opErr != nil {
				break
			}
		}
		if ctx.Err() != nil {
			opErr = fmt.Errorf("interrupted before %s", id)
			break
		}
		s, err := steps.Lookup(upSteps, id)
		if err != nil {
			opErr = err
			break
		}
		at++
		fmt.Fprintf(out, "\n[%d/%d] %s  %s\n", at, total, s.ID(), s.Title())
		opErr = w.Step(s.ID(), func() error {
			rr, err := runner.Run(ctx, []steps.Step{s}, steps.Options{})
			if merr := o.Up.Record(d, rr); merr != nil && o.Verbosity >= 1 {
				fmt.Fprintf(o.ErrOut, "lab progress: %v\n", merr)
			}
			return err
		})
	}
	if opErr != nil && rep != nil {
		opErr = fmt.Errorf("%w\nThe certificates are renewed in %s: khw up (it starts at 03-kubeconfig's check) puts them on the nodes one node at a time; khw pki renew again would sign them once more", opErr, d.PKIDir())
	}
	if _, err := w.End(ctx, out, opErr); err != nil {
		return err
	}
	fmt.Fprintln(out, "khw status shows each certificate's days left as the file on each node has it.")
	return nil
}
