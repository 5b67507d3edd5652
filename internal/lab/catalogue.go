// Package lab is khw's course: the ordered catalogue of labs that khw up,
// khw lab (list, run, check, reset), their help texts and completions are
// all derived from. A lab is a step of khw up (or, for 12-failover, the
// drills) with its text (labs/<ID>.md) and its grading: the same knowledge
// builds it, explains it and grades it.
//
// Each lab is one folder, internal/lab/<name>: step.go (its step of khw up,
// built on package nodeplan), grade.go (its detectors, built on package
// labcheck) and their tests (labchecktest). Adding a lab: its ID in
// package labid, its folder, its text in labs/, and one row in catalogue
// below.
package lab

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/certrenew"
	"github.com/khw-dev/khw/internal/lab/controlplane"
	"github.com/khw-dev/khw/internal/lab/coredns"
	"github.com/khw-dev/khw/internal/lab/etcd"
	"github.com/khw-dev/khw/internal/lab/etcdbackup"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/kubeconfig"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/lb"
	"github.com/khw-dev/khw/internal/lab/machines"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/lab/pki"
	"github.com/khw-dev/khw/internal/lab/podnet"
	"github.com/khw-dev/khw/internal/lab/smoke"
	"github.com/khw-dev/khw/internal/lab/tlsbootstrap"
	"github.com/khw-dev/khw/internal/lab/upgrade"
	"github.com/khw-dev/khw/internal/lab/workers"
	"github.com/khw-dev/khw/internal/labtext"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// Kind says how a lab relates to khw up.
type Kind int

const (
	// Reconcile is a step of khw up whose Check only reads the cluster:
	// the lab is done when Check finds nothing to change.
	Reconcile Kind = iota
	// Test is a step of khw up whose Check creates objects and takes
	// seconds (11-smoke): khw lab list and the "earlier labs done" rule
	// read its progress record instead of running it.
	Test
	// Drill is not a step of khw up (12-failover): khw lab runs a failover
	// drill, which changes nothing it does not heal.
	Drill
	// Operation is not a step of khw up (13-etcd-backup): a day-2
	// operation on the built cluster, which khw lab runs (UI.Operate) or
	// shows for the student to do by hand; its check grades the result
	// either way.
	Operation
)

// Lab is one row of the catalogue.
type Lab struct {
	// ID is "NN-name" (package labid).
	ID string
	// Kind says how the lab relates to khw up.
	Kind Kind
	// Up says in a few words what the step makes, for khw up --help
	// (lines of at most 58 characters, joined by "\n"); "" for a Drill.
	Up string
	// Look is where to look first for a mistake of this lab, as commands
	// to run in khw shell, "{node}" standing for the node: the first rung
	// of a hint ladder (grade.LadderOf).
	Look string
	// MakesNodes is true for the lab that creates the nodes (01-machines):
	// there are no nodes to snapshot before it, and resetting to before it
	// destroys them.
	MakesNodes bool

	title     string // of a Drill or an Operation, which have no step
	step      func(m *nodeplan.Machines, c *config.Cluster) steps.Step
	detectors []labcheck.Detector
	// excuse says whether a required node setting that the step's Check
	// found wrong (steps.DiffRequired) is a correct variant on this node,
	// reading the node through src: the Variant finding, or ok false.
	excuse func(ctx context.Context, d steps.Diff, src labcheck.Source) (grade.Finding, bool, error)

	// An Operation's parts: begin records what the check compares with
	// (before khw or the student changes anything; again: a try after an
	// unfinished one, which keeps the first record), byHand is what the
	// student types, grade reads the cluster and returns the mistakes
	// (none: the lab passes), passed says what a pass means.
	begin func(ctx context.Context, s *cluster.Session, again bool) error
	// stopsAPI: the operation takes the API down for a while (a restore
	// stops every apiserver); the others keep it serving.
	stopsAPI bool
	passed   string
	byHand   func(ctx context.Context, c *config.Cluster, d state.Dir) []steps.Command
	grade    func(ctx context.Context, s *cluster.Session) ([]grade.Finding, error)
}

// HasStep reports whether the lab is a step of khw up.
func (l Lab) HasStep() bool { return l.step != nil }

// onMachines adapts a step constructor that needs only the machines to
// the catalogue's signature.
func onMachines[S steps.Step](f func(*nodeplan.Machines) S) func(*nodeplan.Machines, *config.Cluster) steps.Step {
	return func(m *nodeplan.Machines, _ *config.Cluster) steps.Step { return f(m) }
}

// catalogue is every lab, in the order of the course.
var catalogue = []Lab{
	{ID: labid.Machines, MakesNodes: true,
		Look: "khw status; then `ssh -F \"$KHW_SSH_CONFIG\" {node} true`",
		Up:   "every node of cluster.yaml exists, is powered on and\nanswers SSH (user ubuntu, khw's key <state>/ssh/id_ed25519)",
		step: onMachines(machines.NewStep)},
	{ID: labid.PKI,
		Look:      "`ssh -F \"$KHW_SSH_CONFIG\" {node} sudo ls -l /etc/etcd /var/lib/kubernetes /var/lib/kubelet`, then each certificate's subject and SANs: `ssh -F \"$KHW_SSH_CONFIG\" {node} sudo openssl x509 -noout -subject -ext subjectAltName -in FILE`",
		Up:        "the CA and every component cert in <state>/pki (cfssl),\nthen each node's certs and keys copied to it",
		step:      onMachines(pki.NewStep),
		detectors: pki.Detectors},
	{ID: labid.Kubeconfig,
		Look:      "`ssh -F \"$KHW_SSH_CONFIG\" {node} 'sudo grep -H server: /var/lib/kubernetes/*.kubeconfig /var/lib/kubelet/kubeconfig /var/lib/kube-proxy/kubeconfig'`, and the log of the component that reads it: `ssh -F \"$KHW_SSH_CONFIG\" {node} sudo journalctl -u UNIT -n 30 --no-pager`",
		Up:        "the kubeconfigs and the encryption config for Secrets,\nthen each node's copies",
		step:      onMachines(kubeconfig.NewStep),
		detectors: kubeconfig.Detectors},
	{ID: labid.Etcd,
		Look:      "`ssh -F \"$KHW_SSH_CONFIG\" {node} sudo journalctl -u etcd -n 30 --no-pager` and `ssh -F \"$KHW_SSH_CONFIG\" {node} systemctl cat etcd`; the members: lab 04's Observe (etcdctl member list)",
		Up:        "etcd on the control planes, started together; every member\nlisted and one leader (asked with the etcd v3 client)",
		step:      onMachines(etcd.NewStep),
		detectors: etcd.Detectors},
	{ID: labid.ControlPlane,
		Look:      "`ssh -F \"$KHW_SSH_CONFIG\" {node} sudo journalctl -u kube-apiserver -n 30 --no-pager` (and kube-controller-manager, kube-scheduler); `kubectl get --raw '/readyz?verbose' --server https://{node}:6443`",
		Up:        "kube-apiserver, kube-controller-manager, kube-scheduler on\nthe control planes; each /readyz ok; both leader-election\nLeases held; the RBAC that lets the apiserver reach kubelets",
		step:      onMachines(controlplane.NewStep),
		detectors: controlplane.Detectors},
	{ID: labid.LB,
		Look:      "`ssh -F \"$KHW_SSH_CONFIG\" {node} sudo journalctl -u haproxy -n 30 --no-pager`; `kubectl get --raw /readyz` through lb",
		Up:        "HAProxy on lb (TCP passthrough, HTTPS /readyz health\nchecks); /readyz through lb:6443 with the admin kubeconfig",
		step:      onMachines(lb.NewStep),
		detectors: lb.Detectors},
	{ID: labid.Workers,
		Look:      "`ssh -F \"$KHW_SSH_CONFIG\" {node} sudo journalctl -u kubelet -n 30 --no-pager` (and containerd, kube-proxy); `kubectl get nodes -o wide`; the node's config files: `ssh -F \"$KHW_SSH_CONFIG\" {node} 'sudo head -n 50 /etc/cni/net.d/* /var/lib/kubelet/kubelet-config.yaml'`",
		Up:        "every worker: kernel prerequisites, containerd, runc,\nCNI, images imported; w1, w2: kubelet, kube-proxy; Nodes\nReady",
		step:      workers.NewStep,
		detectors: workers.Detectors,
		excuse:    workers.Excuse},
	{ID: labid.PodNetwork,
		Look:      "`ssh -F \"$KHW_SSH_CONFIG\" {node} ip -4 route show` and `ssh -F \"$KHW_SSH_CONFIG\" {node} systemctl status khw-pod-routes`; then the same on the other workers",
		Up:        "routes to every other worker's podCIDR on each worker",
		step:      podnet.NewStep,
		detectors: podnet.Detectors},
	{ID: labid.CoreDNS,
		Look:      "`kubectl -n kube-system get deploy,pods,svc,endpointslices -l k8s-app=kube-dns`; `kubectl -n kube-system logs deploy/coredns`",
		Up:        "CoreDNS (Service kube-dns at the cluster DNS IP) Available",
		step:      onMachines(coredns.NewStep),
		detectors: coredns.Detectors},
	{ID: labid.TLSBootstrap,
		Look:      "`kubectl get csr`; `ssh -F \"$KHW_SSH_CONFIG\" {node} sudo journalctl -u kubelet -n 30 --no-pager`",
		Up:        "w3's kubelet and kube-proxy; it joins with a bootstrap\ntoken: its client CSR is approved by the controller-\nmanager, its serving CSR by khw after checking requestor\nand SANs; token deleted",
		step:      tlsbootstrap.NewStep,
		detectors: tlsbootstrap.Detectors},
	{ID: labid.Smoke, Kind: Test,
		Look: "`khw smoke --keep`, then the namespace khw-smoke: `kubectl -n khw-smoke get pods,svc -o wide`",
		Up:   "encryption at rest, a Deployment, logs, exec,\nport-forward, NodePort on every worker, DNS, a pod on w3\n(also: khw smoke)",
		step: onMachines(smoke.NewStep)},
	{ID: labid.Failover, Kind: Drill, title: "Break the cluster and watch it heal"},
	{ID: labid.EtcdBackup, Kind: Operation, title: "Back up etcd and restore it", stopsAPI: true,
		Look: "`khw status` (ETCD: one cluster ID?); `ssh -F \"$KHW_SSH_CONFIG\" {node} sudo journalctl -u etcd -n 30 --no-pager`",
		begin: func(ctx context.Context, s *cluster.Session, again bool) error {
			_, err := etcdbackup.Begin(ctx, s.Target(), s.Dir, again)
			return err
		},
		byHand: withoutCtx(etcdbackup.ByHandCommands),
		grade:  etcdbackup.Grade,
		passed: "every etcd member in one new cluster, past every revision of the old one, and the snapshot's objects as they were"},
	{ID: labid.CertRenewal, Kind: Operation, title: "Renew the certificates while the cluster serves",
		Look: "`khw status --certs`; `kubectl get csr`; `ssh -F \"$KHW_SSH_CONFIG\" {node} sudo journalctl -u kubelet -n 30 --no-pager` (or -u etcd, -u kube-apiserver)",
		begin: func(ctx context.Context, s *cluster.Session, again bool) error {
			_, err := certrenew.Begin(ctx, s, again)
			return err
		},
		byHand: withoutCtx(certrenew.ByHandCommands),
		grade:  certrenew.Grade,
		passed: "every renewed certificate on its nodes and in use, the TLS-bootstrap worker's new serving certificate approved, and the cluster serving"},
	{ID: labid.Upgrade, Kind: Operation, title: "Upgrade Kubernetes one node at a time while the cluster serves",
		Look: "`kubectl get nodes` (VERSION, SchedulingDisabled); `ssh -F \"$KHW_SSH_CONFIG\" {node} /usr/local/bin/kube-scheduler --version` (or kube-controller-manager, kube-proxy); `ssh -F \"$KHW_SSH_CONFIG\" {node} sudo journalctl -u kubelet -n 30 --no-pager`",
		begin: func(ctx context.Context, s *cluster.Session, again bool) error {
			_, err := upgrade.Begin(ctx, s, again)
			return err
		},
		byHand: upgrade.ByHandCommands,
		grade:  upgrade.Grade,
		passed: "every apiserver, controller-manager, scheduler, kubectl, kubelet and kube-proxy at the new release and restarted onto it, each worker drained before its kubelet changed and none left cordoned, cluster.yaml naming the release, and the cluster serving"},
}

// withoutCtx adapts the commands of an Operation that reads nothing
// slow while it writes them to Lab.byHand's form.
func withoutCtx(f func(c *config.Cluster, d state.Dir) []steps.Command) func(context.Context, *config.Cluster, state.Dir) []steps.Command {
	return func(_ context.Context, c *config.Cluster, d state.Dir) []steps.Command { return f(c, d) }
}

// All returns every lab in the order of the course.
func All() []Lab { return append([]Lab(nil), catalogue...) }

// IDs returns every lab's ID in order.
func IDs() []string {
	out := make([]string, len(catalogue))
	for i, l := range catalogue {
		out[i] = l.ID
	}
	return out
}

// Number is the NN of the ID (1-14).
func (l Lab) Number() int {
	n, _ := strconv.Atoi(l.ID[:2])
	return n
}

// Name is the part of the ID after the number, e.g. "etcd".
func (l Lab) Name() string {
	_, name, _ := strings.Cut(l.ID, "-")
	return name
}

// byID is the catalogue's row with this ID: the zero Lab (a Reconcile lab
// without a Look) for an ID not in the catalogue, such as a test's step.
func byID(id string) Lab {
	for _, l := range catalogue {
		if l.ID == id {
			return l
		}
	}
	return Lab{}
}

// Step builds the lab's step of khw up, working through m for cluster c
// (m may be nil when only the step's ID and title are needed). Nil for a
// Drill.
func (l Lab) Step(m *nodeplan.Machines, c *config.Cluster) steps.Step {
	if l.step == nil {
		return nil
	}
	return l.step(m, c)
}

// Detectors are the lab's mistake detectors for khw lab check, in the
// order they run (none for 01-machines, 11-smoke and 12-failover).
func (l Lab) Detectors() []labcheck.Detector { return append([]labcheck.Detector(nil), l.detectors...) }

var texts = sync.OnceValues(func() (map[string]map[string]labtext.Lab, error) {
	out := map[string]map[string]labtext.Lab{}
	for _, lang := range labtext.Languages() {
		all, err := labtext.AllLang(lang)
		if err != nil {
			return nil, err
		}
		out[lang] = map[string]labtext.Lab{}
		for _, t := range all {
			out[lang][t.ID] = t
		}
	}
	return out, nil
})

// Text is the lab's parsed English text (labs/<ID>.md, embedded). Errors:
// a text that does not parse, or none for this lab (a build problem).
func (l Lab) Text() (labtext.Lab, error) {
	t, _, err := l.TextIn("en")
	return t, err
}

// TextIn is the lab's text in language lang (labs/<lang>/<ID>.md), or its
// English text when that language has none for this lab yet (fellBack is
// then true). Errors: Text's, or an unknown language.
func (l Lab) TextIn(lang string) (t labtext.Lab, fellBack bool, err error) {
	all, err := texts()
	if err != nil {
		return labtext.Lab{}, false, err
	}
	byID, ok := all[lang]
	if !ok {
		return labtext.Lab{}, false, fmt.Errorf("no lab texts in language %q; have %s", lang, strings.Join(labtext.Languages(), ", "))
	}
	if t, ok := byID[l.ID]; ok {
		return t, false, nil
	}
	t, ok = all["en"][l.ID]
	if !ok {
		return labtext.Lab{}, false, fmt.Errorf("lab %s has no text labs/%s.md (a build problem)", l.ID, l.ID)
	}
	return t, lang != "en", nil
}

// Language picks the language of the lab texts: flag when it is not
// empty, else $KHW_LANG, else Korean when the locale ($LC_ALL, then
// $LC_MESSAGES, then $LANG, as POSIX orders them) is Korean ("ko_KR.UTF-8"),
// else English. getenv is os.Getenv in the program. Errors: flag or
// $KHW_LANG names a language with no lab texts.
func Language(flag string, getenv func(string) string) (string, error) {
	for _, v := range []struct{ name, val string }{{"--lang", flag}, {"KHW_LANG", getenv("KHW_LANG")}} {
		if v.val == "" {
			continue
		}
		if slices.Contains(labtext.Languages(), v.val) {
			return v.val, nil
		}
		return "", fmt.Errorf("%s=%q: the labs are written in %s", v.name, v.val, strings.Join(labtext.Languages(), " and "))
	}
	for _, name := range []string{"LC_ALL", "LC_MESSAGES", "LANG"} {
		if v := getenv(name); v != "" {
			if strings.HasPrefix(v, "ko") {
				return "ko", nil
			}
			return "en", nil
		}
	}
	return "en", nil
}

// Steps returns the steps of khw up in order, working through m for
// cluster c (m may be nil when only IDs and titles are needed).
func Steps(m *nodeplan.Machines, c *config.Cluster) []steps.Step {
	var out []steps.Step
	for _, l := range catalogue {
		if s := l.Step(m, c); s != nil {
			out = append(out, s)
		}
	}
	return out
}

// Lookup finds the lab named by arg: its ID ("04-etcd"), its number with or
// without the leading zero ("04", "4") or its name ("etcd"), case and
// surrounding spaces ignored. An unknown arg is an error listing the IDs.
func Lookup(arg string) (Lab, error) {
	q := strings.ToLower(strings.TrimSpace(arg))
	n, numErr := strconv.Atoi(q)
	digits := numErr == nil && strings.Trim(q, "0123456789") == ""
	for _, l := range catalogue {
		if q == l.ID || q == l.Name() || (digits && n == l.Number()) {
			return l, nil
		}
	}
	return Lab{}, fmt.Errorf("no lab %q: valid labs are %s (a number such as 4 or a name such as etcd works too)", arg, strings.Join(IDs(), ", "))
}

// Next is the lab after id; ok is false for the last lab or an unknown id.
func Next(id string) (next Lab, ok bool) {
	for i, l := range catalogue {
		if l.ID == id && i+1 < len(catalogue) {
			return catalogue[i+1], true
		}
	}
	return Lab{}, false
}

// From returns the labs from id (included) to the end of the course: what
// resetting to before id makes not done. Nil for an unknown id.
func From(id string) []Lab {
	for i, l := range catalogue {
		if l.ID == id {
			return append([]Lab(nil), catalogue[i:]...)
		}
	}
	return nil
}

// UpHelp is the step table of khw up --help: each step's ID and what it
// makes (Lab.Up), indented by two spaces.
func UpHelp() string {
	var b strings.Builder
	for _, l := range catalogue {
		if !l.HasStep() {
			continue
		}
		for i, line := range strings.Split(l.Up, "\n") {
			id := ""
			if i == 0 {
				id = l.ID
			}
			fmt.Fprintf(&b, "  %-17s %s\n", id, line)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// IDTable lists the IDs, at most perLine on a line, indented by two spaces.
func IDTable(perLine int) string {
	var b strings.Builder
	for i, id := range IDs() {
		switch {
		case i == 0:
			b.WriteString("  ")
		case i%perLine == 0:
			b.WriteString("\n  ")
		default:
			b.WriteString("  ")
		}
		b.WriteString(id)
	}
	return b.String()
}

// Complete is a shell completion of a lab argument: every ID starting with
// prefix, only those of khw up's steps when stepsOnly.
func Complete(prefix string, stepsOnly bool) []string {
	var out []string
	for _, l := range catalogue {
		if strings.HasPrefix(l.ID, prefix) && !(stepsOnly && !l.HasStep()) {
			out = append(out, l.ID)
		}
	}
	return out
}

// DetectorHelp lists each lab's detectors by name, wrapped to 80 columns
// under the lab's ID, for khw lab check --help.
func DetectorHelp() string {
	var b strings.Builder
	b.WriteString("What khw lab check looks for, per lab:\n")
	for _, l := range All() {
		ds := l.Detectors()
		if len(ds) == 0 {
			continue
		}
		var names []string
		for _, d := range ds {
			names = append(names, d.Name)
		}
		// Names wrapped to 80 columns under the lab's ID.
		line := fmt.Sprintf("  %-17s", l.ID)
		for i, n := range names {
			sep := " "
			if i > 0 {
				sep = ", "
			}
			if len(line)+len(sep)+len(n) > 80 {
				b.WriteString(strings.TrimRight(line, " ") + ",\n")
				line, sep = strings.Repeat(" ", 19), " "
			}
			line += sep + n
		}
		b.WriteString(line + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}
