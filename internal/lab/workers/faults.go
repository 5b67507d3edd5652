package workers

import (
	"github.com/khw-dev/khw/internal/lab/fault"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// Faults are lab 07's troubleshooting challenges (texts:
// labs/challenges/07-workers.md).
func Faults() []fault.Fault {
	return []fault.Fault{
		{
			ID: "containerd-stopped", Lab: labid.Workers, Level: 1,
			Source: fault.Source{Title: "kubernetes/kubernetes #72533: node NotReady, \"container runtime is down, PLEG is not healthy\"",
				URL: "https://github.com/kubernetes/kubernetes/issues/72533"},
			Break: fault.OnNode("w2", "systemctl stop containerd"),
			Named: []string{"[07-workers] w2: containerd.service is not running"},
		},
		{
			ID: "kubelet-cluster-dns", Lab: labid.Workers, Level: 1,
			Source: fault.Source{Title: "poseidon/matchbox #180: pod DNS resolution broken, the kubelets expected the cluster DNS Service at a mistyped IP",
				URL: "https://github.com/poseidon/matchbox/issues/180"},
			Break: fault.OnNode("w2", `sed -i 's/^  - 10\.32\.0\.10$/  - 10.32.0.100/' /var/lib/kubelet/kubelet-config.yaml
grep -q '^  - 10\.32\.0\.100$' /var/lib/kubelet/kubelet-config.yaml
systemctl restart kubelet`),
			Named: []string{"[07-workers] w2: clusterDNS in kubelet-config.yaml is 10.32.0.100, want 10.32.0.10"},
		},
		{
			ID: "kubelet-anonymous", Lab: labid.Workers, Level: 2,
			Source: fault.Source{Title: "Kubernetes documentation, kubelet authentication/authorization: requests no other method rejects are treated as anonymous",
				URL: "https://kubernetes.io/docs/reference/access-authn-authz/kubelet-authn-authz/"},
			Break: fault.OnNode("w2", `sed -i '/^  anonymous:/{n;s/enabled: false/enabled: true/}' /var/lib/kubelet/kubelet-config.yaml
grep -A1 '^  anonymous:' /var/lib/kubelet/kubelet-config.yaml | grep -q 'enabled: true'
systemctl restart kubelet`),
			Named: []string{"[07-workers] w2: authentication.anonymous.enabled in kubelet-config.yaml is true, want false"},
		},
		{
			ID: "ip-forward-off", Lab: labid.Workers, Level: 3,
			Source: fault.Source{Title: "kubernetes/kubeadm #580: a cluster was broken because IP forwarding was turned off",
				URL: "https://github.com/kubernetes/kubeadm/issues/580"},
			Break: fault.OnNode("w1", "sysctl -w net.ipv4.ip_forward=0"),
			Named: []string{"[07-workers] w1", "ip_forward"},
		},
	}
}
