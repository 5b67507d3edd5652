package bringup

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/encryption"
	"github.com/khw-dev/khw/internal/kubeconfig"
	"github.com/khw-dev/khw/internal/labid"
	"github.com/khw-dev/khw/internal/pki"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// stateFile reads a file of the state directory (src relative to it, or
// absolute for a pre-issued kubelet cert) as a wantFile for node path p.
// A missing file is reported with ok=false and no error.
func stateFile(d state.Dir, src, p string, mode fs.FileMode, what string) (*wantFile, bool, error) {
	local := src
	if !filepath.IsAbs(local) {
		local = filepath.Join(d.Root, filepath.FromSlash(src))
	}
	data, err := os.ReadFile(local)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	wf := &wantFile{What: what, Src: local, origin: fromState}
	wf.Path, wf.Data, wf.Mode = p, data, mode
	return wf, true, nil
}

// inputWants turns render.Inputs of every node, filtered by keep, into
// wants. A source file that does not exist yet (the workstation half of the
// step has not run) is skipped when skipMissing, else an error.
func inputWants(c *config.Cluster, d state.Dir, keep func(render.Input) bool, skipMissing bool) ([]*nodeWant, error) {
	var wants []*nodeWant
	for _, n := range c.Nodes {
		ins, err := render.Inputs(c, n.Name)
		if err != nil {
			return nil, err
		}
		w := &nodeWant{Node: n}
		for _, in := range ins {
			if !keep(in) {
				continue
			}
			wf, ok, err := stateFile(d, in.Source, in.Path, in.Mode, in.What)
			if err != nil {
				return nil, err
			}
			if !ok {
				if skipMissing {
					continue
				}
				return nil, fmt.Errorf("%s: %s is missing on the jumpbox (%s)", n.Name, in.Source, in.What)
			}
			w.Files = append(w.Files, wf)
		}
		wants = append(wants, w)
	}
	return wants, nil
}

// notChecked is one diff per node saying its copies of what were not
// compared, because the jumpbox's files are about to change (by cmd).
func notChecked(c *config.Cluster, what, cmd string) []steps.Diff {
	var diffs []steps.Diff
	for _, n := range c.Nodes {
		diffs = append(diffs, steps.Diff{Node: n.Name, What: what + " not checked: the jumpbox's are about to change", Fix: "copy them after " + cmd})
	}
	return diffs
}

// copyToNodes installs the wanted state files on every node where they
// differ (the node half of 02 and 03).
func copyToNodes(ctx context.Context, env *steps.Env, m *Machines, id string, wants []*nodeWant) error {
	nd, err := checkNodes(ctx, m, wants)
	if err != nil {
		return err
	}
	_, err = applyNodes(ctx, env, m, id, wants, nd)
	return err
}

func isPKIInput(in render.Input) bool {
	return strings.HasPrefix(in.Source, "pki/") || filepath.IsAbs(in.Source)
}

func isKubeconfigInput(in render.Input) bool {
	return (strings.HasPrefix(in.Source, "kubeconfigs/") && !strings.HasSuffix(in.Source, "-bootstrap.kubeconfig")) ||
		in.Source == "encryption-config.yaml"
}

// PKIStep is lab 02-pki: the CA and every component certificate on the
// jumpbox (khw pki, cfssl as a library), then each node's certificates and
// keys copied to the paths its units read (render.Inputs).
type PKIStep struct {
	M *Machines
	// Now is the clock for validity checks (nil: time.Now).
	Now func() time.Time
}

// NewPKIStep returns the 02-pki step.
func NewPKIStep(m *Machines) *PKIStep { return &PKIStep{M: m} }

// ID returns "02-pki".
func (s *PKIStep) ID() string { return labid.PKI }

// Title returns "Issue the certificates and copy them to the nodes".
func (s *PKIStep) Title() string { return "Issue the certificates and copy them to the nodes" }

func (s *PKIStep) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// workstationDiffs is what `khw pki --dry-run` would write.
func (s *PKIStep) workstationDiffs(env *steps.Env) ([]steps.Diff, error) {
	rep, err := pki.Reconcile(env.Cluster, env.State.PKIDir(), s.now(), pki.DryRun())
	if err != nil {
		return nil, err
	}
	var diffs []steps.Diff
	for _, cs := range rep.Certs {
		if cs.Action == pki.Kept || cs.Action == pki.Stale {
			continue
		}
		what := fmt.Sprintf("pki/%s.pem would be %s", cs.Name, cs.Action)
		if len(cs.Reasons) > 0 {
			var rs []string
			for _, r := range cs.Reasons {
				rs = append(rs, r.String())
			}
			what += ": " + strings.Join(rs, "; ")
		}
		diffs = append(diffs, steps.Diff{What: what, Fix: "khw pki"})
	}
	for _, mf := range rep.ModeFixed {
		diffs = append(diffs, steps.Diff{What: "pki/" + mf.String(), Fix: "khw pki"})
	}
	return diffs, nil
}

// Check compares the PKI directory with cluster.yaml (pki.Reconcile in
// dry-run: missing, expiring or mismatching certs) and, when that is clean,
// every node's certificate files with the jumpbox's (content, mode 0644 for
// certs and 0600 for keys, owner root).
func (s *PKIStep) Check(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
	diffs, err := s.workstationDiffs(env)
	if err != nil {
		return nil, err
	}
	if len(diffs) > 0 {
		return append(diffs, notChecked(env.Cluster, "certificates", "khw pki")...), nil
	}
	wants, err := inputWants(env.Cluster, env.State, isPKIInput, false)
	if err != nil {
		return nil, err
	}
	return checkNodes(ctx, s.M, wants)
}

// Apply runs pki.Reconcile when the jumpbox's certs differ, then installs
// the certificate files on every node that differs.
func (s *PKIStep) Apply(ctx context.Context, env *steps.Env, diffs []steps.Diff) error {
	for _, d := range diffs {
		if d.Node == "" {
			if _, err := pki.Reconcile(env.Cluster, env.State.PKIDir(), s.now(), pki.WithLog(env.NodeLog(""))); err != nil {
				return err
			}
			break
		}
	}
	wants, err := inputWants(env.Cluster, env.State, isPKIInput, false)
	if err != nil {
		return err
	}
	return copyToNodes(ctx, env, s.M, s.ID(), wants)
}

// Commands returns the cfssl commands that make the CA and each cert from
// the CSR JSON files khw writes into D/pki, then the copies to the nodes.
func (s *PKIStep) Commands(env *steps.Env, diffs []steps.Diff) []steps.Command {
	dir := env.State.PKIDir()
	wants, werr := inputWants(env.Cluster, env.State, isPKIInput, true)
	if diffs != nil && !hasWorkstationDiff(diffs) && werr == nil {
		return diffCommands(wants, diffs)
	}
	cmds := []steps.Command{{
		Why:   "khw does this with cfssl as a library; by hand, in " + dir + ", with the CSR JSON files khw wrote there",
		Shell: "cd " + dir + "\ncfssl gencert -initca ca-csr.json | cfssljson -bare ca",
	}}
	var gen []string
	for _, sp := range pki.Specs(env.Cluster) {
		if sp.Name == "ca" {
			continue
		}
		gen = append(gen, fmt.Sprintf("cfssl gencert -ca=ca.pem -ca-key=ca-key.pem -config=ca-config.json -profile=%s %s-csr.json | cfssljson -bare %s", sp.Profile, sp.Name, sp.Name))
	}
	cmds = append(cmds, steps.Command{Why: "every component cert, signed by the CA (profile = key usages, see ca-config.json)", Shell: strings.Join(gen, "\n")})
	if werr != nil {
		return cmds
	}
	return append(cmds, diffCommands(wants, nodeOnly(diffs))...)
}

// hasWorkstationDiff reports whether a diff is about the jumpbox's files.
func hasWorkstationDiff(diffs []steps.Diff) bool {
	for _, d := range diffs {
		if d.Node == "" {
			return true
		}
	}
	return false
}

// nodeOnly returns the node diffs (nil stays nil: the whole step).
func nodeOnly(diffs []steps.Diff) []steps.Diff {
	if diffs == nil {
		return nil
	}
	out := []steps.Diff{}
	for _, d := range diffs {
		if d.Node != "" {
			out = append(out, d)
		}
	}
	return out
}

// KubeconfigStep is lab 03-kubeconfig: the kubeconfigs (clientcmd, certs
// embedded) and the encryption config for Secrets on the jumpbox, then each
// node's copies (kubeconfig.ForNode, render.Inputs). The TLS-bootstrap
// worker's bootstrap kubeconfig is left to step 10.
type KubeconfigStep struct{ M *Machines }

// NewKubeconfigStep returns the 03-kubeconfig step.
func NewKubeconfigStep(m *Machines) *KubeconfigStep { return &KubeconfigStep{M: m} }

// ID returns "03-kubeconfig".
func (s *KubeconfigStep) ID() string { return labid.Kubeconfig }

// Title returns "Write the kubeconfigs and the encryption config".
func (s *KubeconfigStep) Title() string { return "Write the kubeconfigs and the encryption config" }

func (s *KubeconfigStep) workstationDiffs(env *steps.Env) ([]steps.Diff, error) {
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
func (s *KubeconfigStep) Check(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
	diffs, err := s.workstationDiffs(env)
	if err != nil {
		return nil, err
	}
	if len(diffs) > 0 {
		return append(diffs, notChecked(env.Cluster, "kubeconfigs", "khw kubeconfig")...), nil
	}
	wants, err := s.wants(env, false)
	if err != nil {
		return nil, err
	}
	return checkNodes(ctx, s.M, wants)
}

// wants is the node files of this step: render.Inputs from kubeconfigs/ and
// the encryption config, plus admin-cp.kubeconfig on the control planes.
func (s *KubeconfigStep) wants(env *steps.Env, skipMissing bool) ([]*nodeWant, error) {
	wants, err := inputWants(env.Cluster, env.State, isKubeconfigInput, skipMissing)
	if err != nil {
		return nil, err
	}
	for _, w := range wants {
		for _, sp := range kubeconfig.ForNode(env.Cluster, w.Node.Name) {
			if sp.Bootstrap || w.file(sp.Targets[0].Path) != nil {
				continue
			}
			wf, ok, err := stateFile(env.State, "kubeconfigs/"+sp.File, sp.Targets[0].Path, 0o600, "kubeconfig of "+sp.User+" (D/kubeconfigs/"+sp.File+")")
			if err != nil {
				return nil, err
			}
			if !ok {
				if skipMissing {
					continue
				}
				return nil, fmt.Errorf("%s: kubeconfigs/%s is missing on the jumpbox", w.Node.Name, sp.File)
			}
			w.Files = append(w.Files, wf)
		}
	}
	return wants, nil
}

// Apply writes the kubeconfigs and creates the encryption config when the
// jumpbox's differ (existing encryption keys are never replaced), then
// installs them on the nodes that differ.
func (s *KubeconfigStep) Apply(ctx context.Context, env *steps.Env, diffs []steps.Diff) error {
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
	return copyToNodes(ctx, env, s.M, s.ID(), wants)
}

// Commands returns the kubectl config commands that build each kubeconfig,
// the encryption config, then the copies to the nodes.
func (s *KubeconfigStep) Commands(env *steps.Env, diffs []steps.Diff) []steps.Command {
	c := env.Cluster
	if diffs != nil && !hasWorkstationDiff(diffs) {
		if wants, err := s.wants(env, true); err == nil {
			return diffCommands(wants, diffs)
		}
	}
	var kc []string
	for _, sp := range kubeconfig.Specs(c) {
		out := "kubeconfigs/" + sp.File
		creds := fmt.Sprintf("--client-certificate=pki/%s --client-key=pki/%s --embed-certs=true", sp.CertFile, sp.KeyFile)
		if sp.Bootstrap {
			creds = "--token=<bootstrap token, made in step 10>"
		}
		kc = append(kc, fmt.Sprintf("kubectl config set-cluster %s --certificate-authority=pki/ca.pem --embed-certs=true --server=%s --kubeconfig=%s\n"+
			"kubectl config set-credentials %s %s --kubeconfig=%s\n"+
			"kubectl config set-context %s --cluster=%s --user=%s --kubeconfig=%s\n"+
			"kubectl config use-context %s --kubeconfig=%s",
			c.Kubernetes.ClusterName, sp.Server, out, sp.User, creds, out,
			kubeconfig.ContextName, c.Kubernetes.ClusterName, sp.User, out, kubeconfig.ContextName, out))
	}
	cmds := []steps.Command{
		{Why: "one kubeconfig per identity (khw uses client-go's clientcmd); run in " + env.State.Root, Shell: "cd " + env.State.Root + "\n" + strings.Join(kc, "\n")},
		{Why: "the key that encrypts Secrets in etcd: 32 random bytes, aescbc first, identity last (reads old plain Secrets)",
			Shell: "cat > encryption-config.yaml <<EOF\napiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - aescbc:\n          keys:\n            - name: key1\n              secret: $(head -c 32 /dev/urandom | base64)\n      - identity: {}\nEOF\nchmod 600 encryption-config.yaml"},
	}
	wants, err := s.wants(env, true)
	if err != nil {
		return cmds
	}
	return append(cmds, diffCommands(wants, nodeOnly(diffs))...)
}
