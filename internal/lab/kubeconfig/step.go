// Package kubeconfig is lab 03-kubeconfig: the step that writes the
// kubeconfigs and the encryption config for Secrets and copies each node's
// (step.go), and its grading (grade.go: current context, server URL, CA,
// client identity of each kubeconfig).
//
// Text: labs/03-kubeconfig.md. The files come from internal/kubeconfig and
// internal/encryption.
package kubeconfig

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/encryption"
	"github.com/khw-dev/khw/internal/kubeconfig"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/steps"
)

func isKubeconfigInput(in render.Input) bool {
	return (strings.HasPrefix(in.Source, "kubeconfigs/") && !strings.HasSuffix(in.Source, "-bootstrap.kubeconfig")) ||
		in.Source == "encryption-config.yaml"
}

// Step is lab 03-kubeconfig: the kubeconfigs (clientcmd, certs
// embedded) and the encryption config for Secrets on the jumpbox, then each
// node's copies (kubeconfig.ForNode, render.Inputs). The TLS-bootstrap
// worker's bootstrap kubeconfig is left to step 10.
type Step struct{ M *nodeplan.Machines }

// NewStep returns the 03-kubeconfig step.
func NewStep(m *nodeplan.Machines) *Step { return &Step{M: m} }

// ID returns "03-kubeconfig".
func (s *Step) ID() string { return labid.Kubeconfig }

// Title returns "Write the kubeconfigs and the encryption config".
func (s *Step) Title() string { return "Write the kubeconfigs and the encryption config" }

func (s *Step) workstationDiffs(env *steps.Env) ([]steps.Diff, error) {
	rep, err := kubeconfig.Plan(env.Cluster, env.State.PKIDir(), env.State.KubeconfigDir())
	if err != nil {
		return nil, err
	}
	var diffs []steps.Diff
	for _, f := range rep.Files {
		if f.Action != kubeconfig.Kept {
			diffs = append(diffs, steps.Diff{What: fmt.Sprintf("kubeconfigs/%s would be %s: %s", f.File, f.Action, f.Reason), Fix: "khw kubeconfig"})
		}
	}
	p := env.State.EncryptionConfigPath()
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		diffs = append(diffs, steps.Diff{What: "encryption-config.yaml is missing", Fix: "khw encryption (a new random 32-byte aescbc key)"})
	} else if _, err := encryption.Check(p); err != nil {
		return nil, err
	}
	return diffs, nil
}

// Check compares the kubeconfigs and the encryption config on the jumpbox
// with what cluster.yaml and D/pki make (kubeconfig.Plan, encryption.Check),
// and when that is clean, every node's copies.
func (s *Step) Check(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
	diffs, err := s.workstationDiffs(env)
	if err != nil {
		return nil, err
	}
	if len(diffs) > 0 {
		return append(diffs, nodeplan.NotChecked(env.Cluster, "kubeconfigs", "khw kubeconfig")...), nil
	}
	wants, err := s.wants(env, false)
	if err != nil {
		return nil, err
	}
	return nodeplan.CheckNodes(ctx, s.M, wants)
}

// wants is the node files of this step: render.Inputs from kubeconfigs/ and
// the encryption config, plus admin-cp.kubeconfig on the control planes.
func (s *Step) wants(env *steps.Env, skipMissing bool) ([]*nodeplan.NodeWant, error) {
	wants, err := nodeplan.InputWants(env.Cluster, env.State, isKubeconfigInput, skipMissing)
	if err != nil {
		return nil, err
	}
	return wants, s.addKubeconfigs(env, wants, func(n config.Node, file, p, what string) (*nodeplan.WantFile, error) {
		wf, ok, err := nodeplan.StateFile(env.State, file, p, 0o600, what)
		switch {
		case err != nil:
			return nil, err
		case !ok && !skipMissing:
			return nil, fmt.Errorf("%s: %s is missing on the jumpbox", n.Name, file)
		}
		return wf, nil
	})
}

// plannedWants is wants for the commands of a jumpbox that has not made
// its files yet: every file, whether it exists or not.
func (s *Step) plannedWants(env *steps.Env) ([]*nodeplan.NodeWant, error) {
	wants, err := nodeplan.PlannedInputWants(env.Cluster, env.State, isKubeconfigInput)
	if err != nil {
		return nil, err
	}
	return wants, s.addKubeconfigs(env, wants, func(_ config.Node, file, p, what string) (*nodeplan.WantFile, error) {
		return nodeplan.PlannedStateFile(env.State, file, p, 0o600, what), nil
	})
}

// addKubeconfigs adds to each want the kubeconfigs of its node that
// render.Inputs does not list (admin-cp.kubeconfig on the control planes),
// as file makes them (nil: left out); the bootstrap kubeconfig is lab 10's.
func (s *Step) addKubeconfigs(env *steps.Env, wants []*nodeplan.NodeWant, file func(n config.Node, src, p, what string) (*nodeplan.WantFile, error)) error {
	for _, w := range wants {
		for _, sp := range kubeconfig.ForNode(env.Cluster, w.Node.Name) {
			if sp.Bootstrap || w.File(sp.Targets[0].Path) != nil {
				continue
			}
			wf, err := file(w.Node, kubeconfig.DirName+"/"+sp.File, sp.Targets[0].Path, "kubeconfig of "+sp.User+" (D/kubeconfigs/"+sp.File+")")
			if err != nil {
				return err
			}
			if wf != nil {
				w.Files = append(w.Files, wf)
			}
		}
	}
	return nil
}

// Apply writes the kubeconfigs and creates the encryption config when the
// jumpbox's differ (existing encryption keys are never replaced), then
// installs them on the nodes that differ.
func (s *Step) Apply(ctx context.Context, env *steps.Env, diffs []steps.Diff) error {
	for _, d := range diffs {
		if d.Node != "" {
			continue
		}
		if _, err := kubeconfig.Reconcile(env.Cluster, env.State.PKIDir(), env.State.KubeconfigDir()); err != nil {
			return err
		}
		if _, err := encryption.Reconcile(env.State.EncryptionConfigPath(), rand.Reader); err != nil {
			return err
		}
		break
	}
	wants, err := s.wants(env, false)
	if err != nil {
		return err
	}
	return nodeplan.CopyToNodes(ctx, env, s.M, s.ID(), wants)
}

// Commands returns the kubectl config commands that build each kubeconfig
// (the bootstrap kubeconfig with kubeconfig.BootstrapTokenPlaceholder: lab
// 10 puts the token in), the encryption config, then the copies to the
// nodes: all of them when the jumpbox's files change, else those that
// differ.
func (s *Step) Commands(env *steps.Env, diffs []steps.Diff) []steps.Command {
	c := env.Cluster
	if diffs != nil && !nodeplan.HasWorkstationDiff(diffs) {
		if wants, err := s.wants(env, true); err == nil {
			return nodeplan.DiffCommands(wants, diffs)
		}
	}
	var kc []string
	for _, sp := range kubeconfig.Specs(c) {
		out := kubeconfig.DirName + "/" + sp.File
		creds := fmt.Sprintf("--client-certificate=pki/%s --client-key=pki/%s --embed-certs=true", sp.CertFile, sp.KeyFile)
		if sp.Bootstrap {
			creds = "--token=" + kubeconfig.BootstrapTokenPlaceholder
		}
		kc = append(kc, fmt.Sprintf("kubectl config set-cluster %s --certificate-authority=pki/ca.pem --embed-certs=true --server=%s --kubeconfig=%s\n"+
			"kubectl config set-credentials %s %s --kubeconfig=%s\n"+
			"kubectl config set-context %s --cluster=%s --user=%s --kubeconfig=%s\n"+
			"kubectl config use-context %s --kubeconfig=%s",
			c.Kubernetes.ClusterName, sp.Server, out, sp.User, creds, out,
			kubeconfig.ContextName, c.Kubernetes.ClusterName, sp.User, out, kubeconfig.ContextName, out))
	}
	cmds := []steps.Command{
		{Why: "one kubeconfig per identity (khw uses client-go's clientcmd), in " + env.State.Root + "/" + kubeconfig.DirName + "; the bootstrap kubeconfig's token is a placeholder that no apiserver accepts, until lab 10 makes the bootstrap token",
			Shell: "cd " + steps.Quote(env.State.Root) + "\nmkdir -p -m 0700 " + kubeconfig.DirName + "\n" + strings.Join(kc, "\n")},
		{Why: "the key that encrypts Secrets in etcd: 32 random bytes, aescbc first, identity last (reads old plain Secrets); only you may read it (0600)",
			Shell: "install -m 0600 /dev/null encryption-config.yaml\ncat > encryption-config.yaml <<EOF\napiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - aescbc:\n          keys:\n            - name: key1\n              secret: $(head -c 32 /dev/urandom | base64)\n      - identity: {}\nEOF"},
	}
	wants, err := s.plannedWants(env)
	if err != nil {
		return cmds
	}
	return append(cmds, nodeplan.DiffCommands(wants, nil)...)
}
