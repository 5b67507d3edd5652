// Package pki is lab 02-pki: the step that issues the CA and every
// component certificate with cfssl into <state>/pki and copies each node's
// certs and keys to it (step.go), and its grading (grade.go: each cert's
// CN/O, SANs, key usages, validity, signature and key pair).
//
// Text: labs/02-pki.md. The certificate table is internal/pki.
package pki

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/pki"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/steps"
)

func isPKIInput(in render.Input) bool {
	return strings.HasPrefix(in.Source, "pki/") || filepath.IsAbs(in.Source)
}

// Step is lab 02-pki: the CA and every component certificate on the
// jumpbox (khw pki, cfssl as a library), then each node's certificates and
// keys copied to the paths its units read (render.Inputs).
type Step struct {
	M *nodeplan.Machines
	// Now is the clock for validity checks (nil: time.Now).
	Now func() time.Time
}

// NewStep returns the 02-pki step.
func NewStep(m *nodeplan.Machines) *Step { return &Step{M: m} }

// ID returns "02-pki".
func (s *Step) ID() string { return labid.PKI }

// Title returns "Issue the certificates and copy them to the nodes".
func (s *Step) Title() string { return "Issue the certificates and copy them to the nodes" }

func (s *Step) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// workstationDiffs is what `khw pki --dry-run` would write.
func (s *Step) workstationDiffs(env *steps.Env) ([]steps.Diff, error) {
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
func (s *Step) Check(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
	diffs, err := s.workstationDiffs(env)
	if err != nil {
		return nil, err
	}
	if len(diffs) > 0 {
		return append(diffs, nodeplan.NotChecked(env.Cluster, "certificates", "khw pki")...), nil
	}
	wants, err := nodeplan.InputWants(env.Cluster, env.State, isPKIInput, false)
	if err != nil {
		return nil, err
	}
	return nodeplan.CheckNodes(ctx, s.M, wants)
}

// Apply runs pki.Reconcile when the jumpbox's certs differ, then installs
// the certificate files on every node that differs.
func (s *Step) Apply(ctx context.Context, env *steps.Env, diffs []steps.Diff) error {
	for _, d := range diffs {
		if d.Node == "" {
			if _, err := pki.Reconcile(env.Cluster, env.State.PKIDir(), s.now(), pki.WithLog(env.NodeLog(""))); err != nil {
				return err
			}
			break
		}
	}
	wants, err := nodeplan.InputWants(env.Cluster, env.State, isPKIInput, false)
	if err != nil {
		return err
	}
	return nodeplan.CopyToNodes(ctx, env, s.M, s.ID(), wants)
}

// Commands returns the commands of the step by hand: when the jumpbox's
// certs change, cfssl's command-line tools (cfssl, cfssljson) make the CA
// and each cert in D/pki from the CSR JSON files written there first, and
// every node gets its copies; otherwise only the node copies that differ.
func (s *Step) Commands(env *steps.Env, diffs []steps.Diff) []steps.Command {
	dir := env.State.PKIDir()
	wants, werr := nodeplan.InputWants(env.Cluster, env.State, isPKIInput, true)
	if diffs != nil && !nodeplan.HasWorkstationDiff(diffs) && werr == nil {
		return nodeplan.DiffCommands(wants, diffs)
	}
	cmds := []steps.Command{
		{
			Why:   "cfssl and cfssljson: the command-line tools of cfssl, the library khw uses (Debian and Ubuntu: sudo apt install golang-cfssl)",
			Shell: "command -v cfssl cfssljson || { echo 'install cfssl first: sudo apt install golang-cfssl' >&2; false; }",
		},
		{Why: "the PKI directory on the jumpbox: only you may read it (0700)", Shell: "mkdir -p -m 0700 " + steps.Quote(dir) + "\ncd " + steps.Quote(dir)},
	}
	var files []string
	for _, f := range pki.InputFiles(env.Cluster) {
		files = append(files, fmt.Sprintf("cat > %s <<'EOF'\n%sEOF", f.Name, f.Data))
	}
	cmds = append(cmds, steps.Command{
		Why:   "cfssl's input: ca-config.json (a profile per set of key usages, and the validity), then one CSR JSON per certificate (CN, O, key, and the SANs in hosts)",
		Shell: strings.Join(files, "\n"),
	}, steps.Command{
		Why:   "the CA: a self-signed certificate and its key (cfssljson -bare writes ca.pem, ca-key.pem and ca.csr)",
		Shell: "cfssl gencert -initca ca-csr.json | cfssljson -bare ca",
	})
	var gen []string
	for _, sp := range pki.Specs(env.Cluster) {
		if sp.Name == "ca" {
			continue
		}
		gen = append(gen, fmt.Sprintf("cfssl gencert -ca=ca.pem -ca-key=ca-key.pem -config=ca-config.json -profile=%s %s-csr.json | cfssljson -bare %s", sp.Profile, sp.Name, sp.Name))
	}
	cmds = append(cmds, steps.Command{Why: "every component cert, signed by the CA (profile = key usages, see ca-config.json)", Shell: strings.Join(gen, "\n")})
	planned, err := nodeplan.PlannedInputWants(env.Cluster, env.State, isPKIInput)
	if err != nil {
		return cmds
	}
	return append(cmds, nodeplan.DiffCommands(planned, nil)...)
}
