package controlplane

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/lab/labcheck/labchecktest"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestDetectorsControlPlane breaks one thing at a time in a good cluster and
// expects lab 05-control-plane's detectors to name it.
func TestDetectorsControlPlane(t *testing.T) {
	aKey := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	shortKey := base64.StdEncoding.EncodeToString([]byte("tenbytes!!"))
	cases := []struct {
		name   string
		lab    string
		break_ func(t *testing.T, f *labchecktest.Fixture)
		want   []labchecktest.Want
	}{
		{"apiserver cert on cp2 without lb", "05-control-plane", func(t *testing.T, f *labchecktest.Fixture) {
			dns, ips := f.KubernetesSANs()
			f.ReplaceCert(t, "cp2", "/var/lib/kubernetes/kubernetes.pem", "/var/lib/kubernetes/kubernetes-key.pem", labchecktest.CertSpec{CN: "kubernetes", DNS: labchecktest.Without(dns, "lb"), IPs: ips, Server: true, Client: true})
		}, []labchecktest.Want{{"02-pki", "cp2", "lacks the SANs lb"}}},
		{"kubelet RBAC bound to another user", "05-control-plane", func(t *testing.T, f *labchecktest.Fixture) {
			f.Binding(t, "system:kube-apiserver").Subjects[0].Name = "kube-apiserver"
		}, []labchecktest.Want{{"05-control-plane", "cp1", `calls kubelets as user "kubernetes"`}}},
		{"kubelet RBAC missing", "05-control-plane", func(t *testing.T, f *labchecktest.Fixture) {
			f.DropObj(t, func(o runtime.Object) bool {
				b, ok := o.(*rbacv1.ClusterRoleBinding)
				return ok && b.Name == "system:kube-apiserver"
			})
		}, []labchecktest.Want{{"05-control-plane", "cp1", "no ClusterRoleBinding gives that user nodes/proxy"}}},
		{"scheduler with the controller-manager's kubeconfig", "05-control-plane", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Set("cp2", "/var/lib/kubernetes/kube-scheduler.kubeconfig", f.Src.Get(t, "cp2", "/var/lib/kubernetes/kube-controller-manager.kubeconfig"))
		}, []labchecktest.Want{{"05-control-plane", "cp2", `the kubeconfig of kube-scheduler logs in as "system:kube-controller-manager"`}}},
		{"controller-manager kubeconfig at an unknown server", "05-control-plane", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp1", "/var/lib/kubernetes/kube-controller-manager.kubeconfig", "server: https://127.0.0.1:6443", "server: https://10.0.0.1:6443")
		}, []labchecktest.Want{{"05-control-plane", "cp1", "names 10.0.0.1, which is neither the load balancer nor a control plane"}}},
		{"identity first", "05-control-plane", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Set("cp1", "/var/lib/kubernetes/encryption-config.yaml", labchecktest.EncWith+"  - identity: {}\n  - aescbc:\n      keys:\n      - name: key1\n        secret: "+aKey+"\n")
		}, []labchecktest.Want{{"05-control-plane", "cp1", "identity is the first provider"}, {"05-control-plane", "", "different encryption configs"}}},
		{"aescbc key of 10 bytes", "05-control-plane", func(t *testing.T, f *labchecktest.Fixture) {
			for _, n := range []string{"cp1", "cp2", "cp3"} {
				f.Src.Set(n, "/var/lib/kubernetes/encryption-config.yaml", labchecktest.EncWith+"  - aescbc:\n      keys:\n      - name: key1\n        secret: "+shortKey+"\n  - identity: {}\n")
			}
		}, []labchecktest.Want{{"05-control-plane", "cp2", `key "key1" of aescbc is 10 bytes`}}},
		{"legacy kind", "05-control-plane", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Set("cp3", "/var/lib/kubernetes/encryption-config.yaml", "kind: EncryptionConfig\napiVersion: v1\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n      - name: key1\n        secret: "+aKey+"\n")
		}, []labchecktest.Want{{"05-control-plane", "cp3", "legacy kind EncryptionConfig"}}},
		{"encryption flag missing on one apiserver", "05-control-plane", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp3", "/etc/systemd/system/kube-apiserver.service", "  --encryption-provider-config=/var/lib/kubernetes/encryption-config.yaml \\\n", "")
		}, []labchecktest.Want{{"05-control-plane", "cp3", "does not encrypt Secrets"}}},
		{"no secrets resource", "05-control-plane", func(t *testing.T, f *labchecktest.Fixture) {
			for _, n := range []string{"cp1", "cp2", "cp3"} {
				f.Src.Edit(t, n, "/var/lib/kubernetes/encryption-config.yaml", "  - secrets", "  - configmaps")
			}
		}, []labchecktest.Want{{"05-control-plane", "cp1", "does not cover secrets"}}},
		{"ServiceAccount keys of two pairs", "05-control-plane", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Set("cp1", "/var/lib/kubernetes/service-account-key.pem", f.Src.Get(t, "cp1", "/var/lib/kubernetes/kubernetes-key.pem"))
		}, []labchecktest.Want{{"05-control-plane", "cp1", "signing key is not the pair of the verification key"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { labchecktest.RunCase(t, Detectors, tc.break_, tc.want) })
	}
}

func TestServiceAccountSigningKeyRequired(t *testing.T) {
	f := labchecktest.NewFixture(t)
	f.Src.Edit(t, "cp2", "/etc/systemd/system/kube-apiserver.service", "--service-account-signing-key-file=", "--x-service-account-signing-key-file=")
	ms, err := f.Check(t, Detectors)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Node != "cp2" || !strings.Contains(ms[0].What, "no --service-account-signing-key-file") {
		t.Errorf("got %v", ms)
	}
}
