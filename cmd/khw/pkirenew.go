package main

import (
	"context"
	"errors"
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/certrenew"
	"github.com/khw-dev/khw/internal/lab/upgrade"
	"github.com/khw-dev/khw/internal/pki"
)

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

// runPKIRenew renews the named certificates (all of them with o.all):
// certrenew.Renewal.Plan checks the names (an unknown one is a usage
// error) and says what changes; then, under the lock and unless an
// upgrade is under way, it asks (unless o.yes) and runs
// certrenew.Renewal.Run.
func runPKIRenew(ctx context.Context, a *app, names []string, o renewOptions, in io.Reader) error {
	d, c, err := a.load()
	if err != nil {
		return err
	}
	r := certrenew.Select(c, names, o.all, o.newKeys)
	err = r.Plan(c, d, a.out, o.dryRun)
	if errors.As(err, new(*pki.RenewError)) {
		return usageError{err}
	}
	if err != nil || o.dryRun {
		return err
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
	return r.Run(ctx, c, d, renewalOptions(a))
}

// renewalOptions is how khw pki renew and khw lab 14 run a renewal.
func renewalOptions(a *app) certrenew.Options {
	return certrenew.Options{Out: a.out, ErrOut: a.errOut, Verbosity: a.verbosity, Up: lab.Up()}
}
