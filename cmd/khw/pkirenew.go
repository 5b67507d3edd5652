package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/lab/tlsbootstrap"
	"github.com/khw-dev/khw/internal/lab/upgrade"
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

type renewOptions struct {
	all, newKeys, yes, dryRun bool
}

func newPKIRenewCmd(a *app) *cobra.Command {
	var o renewOptions
	cmd := &cobra.Command{
		Use:   "renew [NAME…|--all]",
		Short: "Renew certificates, put them on the nodes and restart what reads them, one node at a time",
		Long:  help("pki-renew"),
		Example: `  khw pki renew kubernetes          # the apiserver/etcd cert: cp1, cp2, cp3 one by one
  khw pki renew --all               # every cert khw issued (keys kept)
  khw pki renew w1 --new-keys       # w1's kubelet cert with a new key
  khw pki renew --all --dry-run     # what would be renewed, and the cfssl commands`,
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			d, err := a.dir()
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return slices.DeleteFunc(pki.CertNames(d.PKIDir()), func(n string) bool { return slices.Contains(args, n) }), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case o.all && len(args) > 0:
				return usagef("give certificate names or --all, not both")
			case !o.all && len(args) == 0:
				return usagef("name the certificates to renew (khw pki inspect lists them) or give --all")
			}
			return runPKIRenew(cmd.Context(), a, args, o, cmd.InOrStdin())
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.all, "all", false, "renew every certificate khw issued (not imported kubelet certs) and the TLS-bootstrap kubelets' serving certs")
	f.BoolVar(&o.newKeys, "new-keys", false, "give the renewed certs new private keys (never the CA's or the service-account key: they are kept)")
	f.BoolVarP(&o.yes, "yes", "y", false, "do not ask for confirmation")
	f.BoolVar(&o.dryRun, "dry-run", false, "say what would be renewed and show the commands, change nothing")
	return cmd
}

// runPKIRenew renews the named certificates (all of them with o.all): it
// checks the names and the cluster, asks (unless o.yes), reissues them in
// the pki directory, then runs renewSteps while a prober watches what
// the cluster's clients see, and writes the operation's report.
func runPKIRenew(parent context.Context, a *app, names []string, o renewOptions, in io.Reader) error {
	d, c, err := a.load()
	if err != nil {
		return err
	}
	if o.all {
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
	// A TLS-bootstrap worker's serving cert is renewed by its kubelet
	// through a CSR; every other name is a cert of the pki directory.
	var certs, serving []string
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		if pki.IsBootstrapNode(c, n) {
			serving = append(serving, n)
		} else {
			certs = append(certs, n)
		}
	}
	specs := pki.Specs(c)
	plan, err := pki.Reconcile(c, d.PKIDir(), time.Time{}, pki.DryRun(), pki.Renew(certs, o.newKeys))
	var re *pki.RenewError
	if errors.As(err, &re) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "Renew in %s (valid for pki.certValidity %s from now):\n", d.PKIDir(), strings.TrimSuffix(c.PKI.CertValidity.String(), "0m0s"))
	for _, s := range plan.Certs {
		if s.Action == pki.Kept || s.Action == pki.Stale {
			continue
		}
		how := "new cert, same key"
		if s.Action == pki.Reissued || s.Action == pki.Created {
			how = "new cert, new key"
		}
		fmt.Fprintf(a.out, "  %-24s %s; read on %s\n", s.Name, how, readers(c, s.Name))
	}
	for _, n := range serving {
		fmt.Fprintf(a.out, "  %-24s its kubelet asks for a new serving cert with a CSR, which khw approves after checking it (its client cert the kubelet renews on its own)\n", n)
	}
	if o.dryRun {
		fmt.Fprintf(a.out, "\nBy hand, in %s:\n", d.PKIDir())
		for _, s := range specs {
			if st, ok := plan.Cert(s.Name); ok && st.Action != pki.Kept {
				// A cert that needs a new key anyway (another SAN, another
				// key algorithm) is made anew.
				fmt.Fprintln(a.out, steps.Indent(s.RenewRecipe(o.newKeys || st.Action == pki.Reissued), "  "))
			}
		}
		fmt.Fprintf(a.out, "then khw up --from %s (or lab 03's, 04's, 05's, 07's copies and restarts, one node at a time).\n", labid.Kubeconfig)
		for _, n := range serving {
			fmt.Fprintf(a.out, "On %s: sudo rm %s && sudo systemctl restart kubelet; then check its CSR as in lab 10 and approve it.\n", n, tlsbootstrap.ServingCertLink)
		}
		fmt.Fprintln(a.out, "(--dry-run: nothing was done.)")
		return nil
	}
	unlock, err := lockWithoutDrill(a, d)
	if err != nil {
		return err
	}
	defer unlock()
	if err := upgrade.RefuseDuring(d); err != nil {
		return err
	}
	if !o.yes {
		ok, err := goOn(a, in, "Each node that reads one of them gets it and has those services restarted, one node at a time.", "renew")
		if !ok || err != nil {
			return err
		}
	}
	return renewCerts(parent, a, d, c, certs, serving, o.newKeys, o.all)
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

// renewCerts reissues names under the caller's lock and puts them to
// use, and has the kubelets of the TLS-bootstrap workers in serving ask
// for new serving certs (approved by 10-tls-bootstrap): the drill prober samples the cluster (API reads and writes through
// the load balancer, etcd, apiservers, Leases, nodes, a workload on every
// worker) from before the first step until every signal is healthy
// again; each of renewSteps runs as khw up runs it; the report is written
// under <state>/operations. Ctrl-C and SIGTERM stop it between steps.
func renewCerts(parent context.Context, a *app, d state.Dir, c *config.Cluster, names, serving []string, newKeys, all bool) error {
	denv, err := drill.OpenCluster(c, d)
	if err != nil {
		return err
	}
	defer denv.S.Close()
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := denv.ReadyToRoll(ctx, a.out, "khw status, khw up; khw up also reissues expired certs"); err != nil {
		return err
	}
	// The renewal runs khw up's steps, which install cluster.yaml's release.
	if err := lab.RefuseReleaseChange(ctx, d, c, denv.S); err != nil {
		return err
	}
	cmdline := "khw pki renew "
	if all {
		cmdline += "--all"
	} else {
		cmdline += strings.Join(append(slices.Clone(names), serving...), " ")
	}
	if newKeys {
		cmdline += " --new-keys"
	}
	w, err := drill.StartWatch(drill.OperationsOf(d), denv.Prober, a.out, c.Name, "pki renew", cmdline)
	if err != nil {
		return err
	}
	env := steps.NewEnv(c, d)
	env.Verbosity = a.verbosity
	defer env.Close()
	upSteps := lab.Steps(nodeplan.New(denv.S), c)
	var opErr error
	total := 1 + len(renewSteps)
	if len(serving) > 0 {
		total++
	}
	fmt.Fprintf(a.out, "\n[1/%d] Reissue in %s\n", total, d.PKIDir())
	var rep *pki.Report
	opErr = w.Step("reissue on the jumpbox", func() error {
		var err error
		rep, err = pki.Reconcile(c, d.PKIDir(), time.Time{}, pki.Renew(names, newKeys))
		return err
	})
	if rep != nil {
		for _, s := range rep.Certs {
			if s.Action == pki.Kept || s.Action == pki.Stale {
				continue
			}
			fmt.Fprintf(a.out, "  %-24s %s, serial %s, expires %s\n", s.Name, s.Action, s.Serial, s.NotAfter.UTC().Format(time.RFC3339))
			w.Fact(s.Name, fmt.Sprintf("%s, serial %s, expires %s", s.Action, s.Serial, s.NotAfter.UTC().Format(time.RFC3339)))
		}
	}
	runner := steps.NewRunner(env, a.out)
	at := 1
	for _, id := range renewSteps {
		if opErr != nil {
			break
		}
		if id == labid.TLSBootstrap && len(serving) > 0 {
			at++
			fmt.Fprintf(a.out, "\n[%d/%d] New serving certs for %s (the kubelet asks with a CSR)\n", at, total, strings.Join(serving, ", "))
			opErr = w.Step("kubelet serving CSR of "+strings.Join(serving, ", "), func() error {
				return tlsbootstrap.RenewServing(ctx, denv.S.Pool, c, serving, a.out)
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
		fmt.Fprintf(a.out, "\n[%d/%d] %s  %s\n", at, total, s.ID(), s.Title())
		opErr = w.Step(s.ID(), func() error {
			rr, err := runner.Run(ctx, []steps.Step{s}, steps.Options{})
			if merr := lab.RecordRun(d, rr, false); merr != nil {
				a.logf(1, "lab progress: %v", merr)
			}
			return err
		})
	}
	if opErr != nil && rep != nil {
		opErr = fmt.Errorf("%w\nThe certificates are renewed in %s: khw up (it starts at 03-kubeconfig's check) puts them on the nodes one node at a time; khw pki renew again would sign them once more", opErr, d.PKIDir())
	}
	if _, err := w.End(ctx, a.out, opErr); err != nil {
		return err
	}
	fmt.Fprintln(a.out, "khw status shows each certificate's days left as the file on each node has it.")
	return nil
}
