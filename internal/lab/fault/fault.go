// Package fault defines a row of the troubleshooting-challenge catalogue
// (khw challenge) and the guarded actions an injection may take. Each lab
// folder (internal/lab/<name>/faults.go) holds the faults that belong to
// its lab; package internal/lab/challenge assembles the catalogue from
// them, as the lab catalogue is assembled from the lab folders.
//
// A fault's texts (symptom, goal, hints, the fix, the explanation) are
// Markdown, in English and Korean, in labs/challenges/NN-name.md and
// labs/ko/challenges/NN-name.md (package internal/labtext); the row here
// holds what code needs.
package fault

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"

	"k8s.io/client-go/kubernetes"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
)

// Fault is one row of the catalogue.
type Fault struct {
	// ID names the fault on the command line and heads its text
	// ("etcd-client-loopback"): lower-case words joined by '-', unique
	// in the catalogue (ValidID).
	ID string
	// Lab is the lab the fault belongs to (package labid): the step that
	// installs what it breaks. Its khw lab check grades the cause.
	Lab string
	// Checked is the lab whose khw lab check grades the repair and names
	// the cause, when it is not Lab (a certificate of lab 02 is read where
	// it is served: lab 06 finds the apiserver's); "" means Lab.
	Checked string
	// Level is 1 (one setting on one node), 2 (a cause that takes reading
	// more than one place: a log and a file, or a cluster object) or 3
	// (two interacting causes, or a cause on another node than the
	// symptom).
	Level int
	// Source is the public report or upstream document the fault comes
	// from.
	Source Source
	// Break injects the fault on a cluster that is healthy. It acts only
	// through a's guarded methods (cluster nodes only) and returns once
	// the fault is in place (a restarted unit restarted, an object
	// deleted); the symptom may take longer to show.
	Break func(ctx context.Context, a Actions) error
	// Named are fixed strings that khw lab check Checked (or Lab) prints on a cluster
	// with this fault and no other (the proof's witness that the checks
	// name the cause; the checks themselves never see them).
	Named []string
}

// Source is where a fault comes from: a tracker issue of a hard-way guide,
// a Kubernetes, etcd or containerd issue, or an upstream document.
type Source struct {
	Title string
	URL   string
}

// Actions are what an injection may do, each refused for a machine that
// is not a node of the cluster (the jumpbox is not one).
type Actions interface {
	// Cluster is the cluster's desired state (cluster.yaml).
	Cluster() *config.Cluster
	// State is the cluster's state directory, read-only for an injection
	// (the CA to sign a faulty certificate with).
	State() state.Dir
	// Run runs script with sh as root on node and returns its combined
	// output. Errors: node is not a cluster node, SSH, or the script's
	// exit status (with its output).
	Run(ctx context.Context, node, script string) (string, error)
	// Push writes data to path on node as root with mode (atomically:
	// through a temporary file in the same directory).
	Push(ctx context.Context, node, path string, data []byte, mode fs.FileMode) error
	// Kube is a clientset with the admin kubeconfig, through the load
	// balancer.
	Kube() (kubernetes.Interface, error)
}

// idPattern is the shape of a fault ID.
var idPattern = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)+$`)

// ValidID reports an ID that is not lower-case words joined by '-' (at
// least two, at most 40 characters).
func ValidID(id string) error {
	if len(id) > 40 || !idPattern.MatchString(id) {
		return fmt.Errorf("fault ID %q: use lower-case words joined by '-' (at least two words, at most 40 characters)", id)
	}
	return nil
}

// CheckedBy is the lab whose check grades f: Checked, or Lab.
func (f Fault) CheckedBy() string {
	if f.Checked != "" {
		return f.Checked
	}
	return f.Lab
}

// OnNode is a Break that runs script as root on node (Actions.Run) and
// nothing else.
func OnNode(node, script string) func(context.Context, Actions) error {
	return func(ctx context.Context, a Actions) error {
		_, err := a.Run(ctx, node, script)
		return err
	}
}
