// Package upgrade is khw upgrade: a rolling upgrade of the cluster's
// Kubernetes to the next patch or minor release in the order the
// version-skew policy requires — every kube-apiserver one at a time, then
// every kube-controller-manager and kube-scheduler, then each worker
// (cordoned and drained, kubelet and kube-proxy, uncordoned) — each a
// check/apply step like the steps of khw up (steps.go), refused when the
// policy would be broken (skew.go), resumable after a crash (record.go),
// run while the drill prober watches (operation.go).
package upgrade

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// Running is what runs now: each component instance's version as it
// reports it ("v1.36.3"), by node name.
type Running struct {
	// APIServers: each control plane's kube-apiserver (GET /version).
	APIServers map[string]string
	// Kubelets: each Node's status.nodeInfo.kubeletVersion.
	Kubelets map[string]string
}

// TargetError is a --to that is not a release version.
type TargetError struct{ Target string }

func (e *TargetError) Error() string {
	return fmt.Sprintf("--to %q: give a Kubernetes release such as v1.37.2", e.Target)
}

// ParseTarget parses target, the release to upgrade to: "v" and a
// semantic version X.Y.Z without pre-release or build metadata
// ("v1.37.2"). It reads nothing else, so a command can refuse a bad --to
// before it opens the cluster. Errors: *TargetError.
func ParseTarget(target string) (*version.Version, error) {
	to, err := version.ParseSemantic(strings.TrimPrefix(target, "v"))
	if err != nil || !strings.HasPrefix(target, "v") || to.PreRelease() != "" || to.BuildMetadata() != "" {
		return nil, &TargetError{target}
	}
	return to, nil
}

// SkewError is an upgrade the version-skew policy does not allow; Rule
// names the rule.
type SkewError struct {
	Rule, Why string
}

func (e *SkewError) Error() string { return e.Why + " (" + e.Rule + ")" }

// PolicyURL is the version-skew policy the rules come from.
const PolicyURL = "https://kubernetes.io/releases/version-skew-policy/"

// Check says whether the cluster running r may be upgraded to target,
// by the version-skew policy (PolicyURL) and its supported upgrade order:
//
//   - target is a release version vX.Y.Z of the same major;
//   - no kube-apiserver is newer than target (no downgrades);
//   - kube-apiserver must "not skip minor versions when upgrading, even in
//     single-instance clusters", and "the newest and oldest kube-apiserver
//     instances must be within one minor version": target is at most one
//     minor above the oldest apiserver;
//   - "kubelet may be up to three minor versions older than
//     kube-apiserver": every kubelet is at least target − 3 minors, and
//     none is newer than the oldest apiserver.
//
// A cluster where some instances already run target (an upgrade cut
// short) passes when the rest do. It returns the oldest apiserver's
// version. Errors: *TargetError, a reported version that does not parse,
// no apiserver answered, *SkewError.
func Check(r Running, target string) (*version.Version, error) {
	to, err := ParseTarget(target)
	if err != nil {
		return nil, err
	}
	if len(r.APIServers) == 0 {
		return nil, fmt.Errorf("no kube-apiserver answered /version: the cluster must be serving to be upgraded (khw status)")
	}
	parse := func(what, node, v string) (*version.Version, error) {
		p, err := version.ParseGeneric(v)
		if err != nil {
			return nil, fmt.Errorf("%s on %s reports version %q: %w", what, node, v, err)
		}
		return p, nil
	}
	var oldest *version.Version
	var oldestAt string
	for _, node := range sortedKeys(r.APIServers) {
		v, err := parse("kube-apiserver", node, r.APIServers[node])
		if err != nil {
			return nil, err
		}
		if v.Major() != to.Major() {
			return nil, &SkewError{"one major version", fmt.Sprintf("kube-apiserver on %s runs %s: khw upgrades within major version %d only", node, r.APIServers[node], v.Major())}
		}
		if oldest == nil || v.LessThan(oldest) {
			oldest, oldestAt = v, node
		}
		if to.LessThan(v) {
			return nil, &SkewError{"no downgrades", fmt.Sprintf("kube-apiserver on %s runs %s, newer than %s: Kubernetes supports upgrades, not downgrades (etcd may hold objects stored by the newer version)", node, r.APIServers[node], target)}
		}
	}
	if to.Minor() > oldest.Minor()+1 {
		return nil, &SkewError{"kube-apiserver must not skip minor versions, and HA instances stay within one minor version", fmt.Sprintf("kube-apiserver on %s runs %s: upgrade one minor version at a time, first to v%d.%d.x", oldestAt, r.APIServers[oldestAt], to.Major(), oldest.Minor()+1)}
	}
	for _, node := range sortedKeys(r.Kubelets) {
		v, err := parse("kubelet", node, r.Kubelets[node])
		if err != nil {
			return nil, err
		}
		if v.Minor()+3 < to.Minor() {
			return nil, &SkewError{"kubelet at most three minor versions older than kube-apiserver", fmt.Sprintf("the kubelet on %s runs %s, more than three minor versions older than %s: upgrade it first", node, r.Kubelets[node], target)}
		}
		if oldest.LessThan(v) && !v.EqualTo(to) {
			return nil, &SkewError{"kubelet not newer than kube-apiserver", fmt.Sprintf("the kubelet on %s runs %s, newer than kube-apiserver on %s (%s)", node, r.Kubelets[node], oldestAt, r.APIServers[oldestAt])}
		}
	}
	return oldest, nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
