package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	k8sversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
)

func newInitCmd(a *app) *cobra.Command {
	var name, arch, provider, kubeVersion string
	var force bool
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Write cluster.yaml for a new cluster and its state dir",
		Long:  help("init"),
		Example: `  khw init                                  # cluster "khw", this host's arch, libvirt
  khw init --name lab --arch amd64 --provider nspawn
  khw init --force                          # start over from the defaults (same provider and arch)
  khw init --kubernetes-version ` + config.PreviousKubernetes + `      # a cluster to upgrade (khw lab 15)`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.cluster != "" && cmd.Flags().Changed("name") && a.cluster != name {
				return usagef("--cluster %q and --name %q disagree: give only one of them", a.cluster, name)
			}
			if a.cluster != "" {
				if err := config.ValidName(a.cluster); err != nil {
					return usagef("--cluster %v", err)
				}
				if !cmd.Flags().Changed("name") {
					name = a.cluster
				}
			}
			if err := config.ValidName(name); err != nil {
				return usagef("--name: %v", err)
			}
			d, err := state.Resolve(a.stateBase, name)
			if err != nil {
				return usageError{err}
			}
			if force {
				keepMachines(a, d, cmd, &arch, &provider)
			}
			if arch != config.ArchARM64 && arch != config.ArchAMD64 {
				return usagef("--arch %q: use arm64 or amd64", arch)
			}
			if provider != config.ProviderLibvirt && provider != config.ProviderNspawn {
				return usagef("--provider %q: use libvirt (VMs) or nspawn (system containers)", provider)
			}
			c := config.Default(name, arch, provider)
			if kubeVersion != "" {
				c.Versions.Kubernetes = kubeVersion
			}
			warns, err := c.Validate()
			if err != nil {
				if kubeVersion != "" {
					return usagef("--kubernetes-version: %v", err)
				}
				return err
			}
			for _, w := range warns {
				fmt.Fprintf(a.errOut, "Warning: %s\n", w)
			}
			if kubeVersion != "" && kubeVersion != config.DefaultVersions.Kubernetes {
				if v, err := k8sversion.ParseSemantic(kubeVersion); err == nil && (v.PreRelease() != "" || v.GreaterThan(k8sversion.MustParseSemantic(config.DefaultVersions.Kubernetes))) {
					fmt.Fprintf(a.errOut, "Warning: --kubernetes-version %s: khw is made and tested for %s and, for upgrades, %s; a newer release or a pre-release may need node files khw does not have, and khw upgrade moves only between releases\n",
						kubeVersion, config.DefaultVersions.Kubernetes, config.PreviousKubernetes)
				}
			}
			if err := d.CheckNotForeign(); err != nil {
				return err
			}
			unlock, err := a.lock(d)
			if err != nil {
				return err
			}
			defer unlock()
			return d.Create(c, force, a.out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", defaultClusterName(), "cluster name (1-20 lowercase letters, digits, '-')")
	f.StringVar(&arch, "arch", hostArch(), "node CPU architecture, arm64 or amd64; the default is this host's")
	f.StringVar(&provider, "provider", config.ProviderLibvirt, "machine provider: libvirt or nspawn")
	f.BoolVar(&force, "force", false, "overwrite an existing cluster.yaml (its provider and arch are kept unless --provider or --arch is given)")
	f.StringVar(&kubeVersion, "kubernetes-version", "", "the Kubernetes release to install (versions.kubernetes), e.g. "+config.PreviousKubernetes+" to upgrade later (khw lab 15); the default is "+config.DefaultVersions.Kubernetes+", the release khw is made for")
	cmd.RegisterFlagCompletionFunc("arch", fixedCompletions(config.ArchARM64, config.ArchAMD64))
	cmd.RegisterFlagCompletionFunc("provider", fixedCompletions(config.ProviderLibvirt, config.ProviderNspawn))
	return cmd
}

func fixedCompletions(vals ...string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return vals, cobra.ShellCompDirectiveNoFileComp
	}
}

// keepMachines sets arch and provider, where their flags were not given,
// from the cluster.yaml that init --force replaces: starting over must not
// turn an nspawn cluster into a libvirt one because the flag's default is
// libvirt. A file that cannot be read keeps the flags' defaults.
func keepMachines(a *app, d state.Dir, cmd *cobra.Command, arch, provider *string) {
	old, _, err := config.Load(d.ConfigPath())
	if err != nil || old == nil {
		return
	}
	var kept []string
	if !cmd.Flags().Changed("provider") && old.Provider != "" {
		*provider = old.Provider
		kept = append(kept, "provider "+old.Provider)
	}
	if !cmd.Flags().Changed("arch") && old.Arch != "" {
		*arch = old.Arch
		kept = append(kept, "arch "+old.Arch)
	}
	if len(kept) > 0 {
		fmt.Fprintf(a.errOut, "keeping %s from the cluster.yaml it replaces (give --provider or --arch to change them)\n", strings.Join(kept, " and "))
	}
}
