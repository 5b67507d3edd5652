package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/pki"
)

func newPKICmd(a *app) *cobra.Command {
	var dryRun, newCA, newSAKey bool
	var output string
	cmd := &cobra.Command{
		Use:   "pki",
		Short: "Create or reconcile the CA and every component certificate",
		Long:  help("pki"),
		Example: `  khw pki                 # create what is missing, reissue what changed
  khw pki --dry-run       # say what would change
  khw pki inspect admin   # who is this cert, and what may it do?`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			d, c, unlock, err := a.loadForWrite()
			if err != nil {
				return err
			}
			defer unlock()
			var opts []pki.Option
			if dryRun {
				opts = append(opts, pki.DryRun())
			}
			if newCA {
				opts = append(opts, pki.AllowNewCA())
			}
			if newSAKey {
				opts = append(opts, pki.AllowNewServiceAccountKey())
			}
			if a.verbosity >= 2 {
				opts = append(opts, pki.WithLog(a.errOut))
			}
			start := time.Now()
			rep, err := pki.Reconcile(c, d.PKIDir(), time.Time{}, opts...)
			if rep != nil {
				var written io.Writer
				if a.verbosity >= 2 {
					written = a.errOut
				}
				if jerr := rep.Write(a.out, output == "json", time.Since(start), written); jerr != nil {
					return jerr
				}
			}
			var pk *pki.PreciousKeyError
			if errors.As(err, &pk) {
				return invalidInputError{err}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what would be created or reissued, write nothing")
	cmd.Flags().BoolVar(&newCA, "new-ca", false, "allow a new CA key when ca-key.pem is lost or damaged (reissues every cert; every kubeconfig and node must be updated)")
	cmd.Flags().BoolVar(&newSAKey, "new-service-account-key", false, "allow a new service-account key when it is lost or damaged (invalidates every ServiceAccount token)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.RegisterFlagCompletionFunc("output", fixedCompletions("text", "json"))
	cmd.AddCommand(newPKIInspectCmd(a), newPKIRenewCmd(a))
	return cmd
}

func newPKIInspectCmd(a *app) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "inspect [NAME]",
		Short: "Show a certificate: subject, SANs, usages, validity, identity",
		Long:  help("pki-inspect"),
		Example: `  khw pki inspect kubernetes
  khw pki inspect w1 -o json`,
		Args: maxArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			d, err := a.dir()
			if err != nil || len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return pki.CertNames(d.PKIDir()), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			d, c, err := a.load()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				if n, ok := c.Node(args[0]); ok && n.TLSBootstrap {
					return usagef("%s joins by TLS bootstrap: khw issues no cert for it; its kubelet asks the cluster for one with a CSR (see its /var/lib/kubelet/pki/ once it joined)", n.Name)
				}
				if known := pki.CertNames(d.PKIDir()); len(known) > 0 && !slices.Contains(known, args[0]) {
					return usagef("no certificate %q in %s; the certificates are: %s", args[0], d.PKIDir(), strings.Join(known, ", "))
				}
			}
			names := args
			if len(names) == 0 {
				names = pki.CertNames(d.PKIDir())
				if len(names) == 0 {
					return fmt.Errorf("no certificates in %s (fix: run `khw pki` first)", d.PKIDir())
				}
			}
			var infos []*pki.CertInfo
			for _, n := range names {
				info, err := pki.Inspect(d.PKIDir(), n)
				var cn *pki.CertNameError
				if errors.As(err, &cn) {
					return usageError{err}
				}
				if err != nil {
					return err
				}
				infos = append(infos, info)
			}
			return pki.WriteInfos(a.out, infos, output == "json", len(args) == 1)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func checkOutput(o string) error {
	if o != "text" && o != "json" {
		return usagef("--output %q: use text or json", o)
	}
	return nil
}
