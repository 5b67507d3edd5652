package tlsbootstrap

import (
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/lab/labcheck/labchecktest"
	tb "github.com/khw-dev/khw/internal/tlsbootstrap"
	certsv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestDetectorsTLSBootstrap breaks one thing at a time in a good cluster and
// expects lab 10-tls-bootstrap's detectors to name it.
func TestDetectorsTLSBootstrap(t *testing.T) {
	cases := []struct {
		name   string
		lab    string
		break_ func(t *testing.T, f *labchecktest.Fixture)
		want   []labchecktest.Want
	}{
		{"token-id in capitals", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			f.SecretObj(t).Data[tb.KeyTokenID] = []byte("ABCDEF")
		}, []labchecktest.Want{{"10-tls-bootstrap", "", `token-id "ABCDEF" must be 6 characters`}}},
		{"token-secret too short", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			f.SecretObj(t).Data[tb.KeyTokenSecret] = []byte("abc")
		}, []labchecktest.Want{{"10-tls-bootstrap", "", "token-secret must be 16 characters"}}},
		{"expired token", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			f.SecretObj(t).Data[tb.KeyExpiration] = []byte(labchecktest.Now.Add(-time.Hour).UTC().Format(time.RFC3339))
		}, []labchecktest.Want{{"10-tls-bootstrap", "", "is in the past"}, {"10-tls-bootstrap", "w3", "has no usable Secret"}}},
		{"bad extra group", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			f.SecretObj(t).Data[tb.KeyExtraGroups] = []byte("system:nodes")
		}, []labchecktest.Want{{"10-tls-bootstrap", "", `auth-extra-groups entry "system:nodes"`}}},
		{"wrong type and name", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			s := f.SecretObj(t)
			s.Type = corev1.SecretTypeOpaque
		}, []labchecktest.Want{{"10-tls-bootstrap", "", "type is \"Opaque\""}}},
		{"authentication usage off", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			delete(f.SecretObj(t).Data, tb.KeyUsageAuth)
		}, []labchecktest.Want{{"10-tls-bootstrap", "", "usage-bootstrap-authentication"}}},
		{"whole token pasted into token-id", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			s := f.SecretObj(t)
			s.Data[tb.KeyTokenID] = []byte(f.Token.ID + "." + f.Token.Secret)
		}, []labchecktest.Want{{"10-tls-bootstrap", "", "token-id"}}},
		{"nodeclient auto-approval missing", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			f.DropObj(t, func(o runtime.Object) bool {
				b, ok := o.(*rbacv1.ClusterRoleBinding)
				return ok && b.RoleRef.Name == "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
			})
		}, []labchecktest.Want{{"10-tls-bootstrap", "", "certificatesigningrequests:nodeclient"}}},
		{"node-bootstrapper bound to the wrong group", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			f.Binding(t, "khw:kubelet-bootstrap").Subjects[0].Name = "system:bootstrapers"
		}, []labchecktest.Want{{"10-tls-bootstrap", "", "the ClusterRole system:node-bootstrapper"}}},
		{"selfnodeclient missing", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			f.DropObj(t, func(o runtime.Object) bool {
				b, ok := o.(*rbacv1.ClusterRoleBinding)
				return ok && b.Name == "khw:node-autoapprove-certificate-rotation"
			})
		}, []labchecktest.Want{{"10-tls-bootstrap", "", "selfnodeclient"}}},
		{"pending serving CSR", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			f.Objs = append(f.Objs, labchecktest.ServingCSR(t, "csr-abcde", "w3", []string{"w3"}, []string{"192.168.122.23"}, labchecktest.Now.Add(-time.Minute)))
		}, []labchecktest.Want{{"10-tls-bootstrap", "w3", "kubernetes/kubernetes#73356"}}},
		{"approved CSR never signed", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			csr := labchecktest.ServingCSR(t, "csr-zzz", "w3", []string{"w3"}, []string{"192.168.122.23"}, labchecktest.Now.Add(-time.Hour))
			csr.Status.Conditions = []certsv1.CertificateSigningRequestCondition{{Type: certsv1.CertificateApproved, Status: corev1.ConditionTrue}}
			f.Objs = append(f.Objs, csr)
		}, []labchecktest.Want{{"10-tls-bootstrap", "", "approved but has no certificate"}}},
		{"bootstrap token auth off", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp1", "/etc/systemd/system/kube-apiserver.service", "--enable-bootstrap-token-auth=true", "--enable-bootstrap-token-auth=false")
		}, []labchecktest.Want{{"05-control-plane", "cp1", "does not accept bootstrap tokens"}}},
		{"no signing cert on the controller-manager", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "cp2", "/etc/systemd/system/kube-controller-manager.service", "  --cluster-signing-key-file=/var/lib/kubernetes/ca-key.pem \\\n", "")
		}, []labchecktest.Want{{"05-control-plane", "cp2", "no --cluster-signing-key-file"}}},
		{"bootstrap kubeconfig without a token", "10-tls-bootstrap", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Edit(t, "w3", "/var/lib/kubelet/bootstrap-kubeconfig", "token: "+f.Token.Value(), "token: \"\"")
		}, []labchecktest.Want{{"10-tls-bootstrap", "w3", "holds no token"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { labchecktest.RunCase(t, Detectors, tc.break_, tc.want) })
	}
}

func TestBootstrappedWorker(t *testing.T) {
	f := labchecktest.NewFixture(t)
	f.Bootstrapped(t, "system:node:w3")
	ms, err := f.Check(t, Detectors)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Errorf("a bootstrapped w3 is fine, got:\n%s", m)
	}
	f.Bootstrapped(t, "system:node:w1")
	ms, err = f.Check(t, Detectors)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Node != "w3" || !strings.Contains(ms[0].What, `logs in as "system:node:w1", but must be "system:node:w3"`) {
		t.Errorf("w3 with w1's identity: got %v", ms)
	}
	labchecktest.AssertNoSecrets(t, f, ms)
}

func TestServingCSRWithWrongSANsIsNotToBeApproved(t *testing.T) {
	f := labchecktest.NewFixture(t)
	f.Objs = append(f.Objs, labchecktest.ServingCSR(t, "csr-evil", "w3", []string{"w3", "lb"}, []string{"192.168.122.23", "192.168.122.10"}, labchecktest.Now))
	ms, err := f.Check(t, Detectors)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || !strings.Contains(ms[0].Fix, "do not approve") || !strings.Contains(ms[0].Fix, "not allowed: lb") || !strings.Contains(ms[0].Evidence, "SANs [w3, lb, 192.168.122.23, 192.168.122.10]") {
		t.Errorf("got %v", ms)
	}
}

// TestBootstrappedWorkerWithoutServingCert: a kubelet that joined but lost
// its serving certificate, before its new CSR shows up, is a mistake (its
// logs and exec fail), not only a difference.
func TestBootstrappedWorkerWithoutServingCert(t *testing.T) {
	f := labchecktest.NewFixture(t)
	f.Bootstrapped(t, "system:node:w3")
	f.Src.Del("w3", "/var/lib/kubelet/pki/kubelet-server-current.pem")
	ms, err := f.Check(t, Detectors)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Node != "w3" || !strings.Contains(ms[0].What, "has no serving certificate") {
		t.Fatalf("got %v, want w3 named without a serving certificate", ms)
	}
	// Once its CSR waits, the Pending CSR is the finding, not this one.
	f.Objs = append(f.Objs, labchecktest.ServingCSR(t, "csr-new", "w3", []string{"w3"}, []string{"192.168.122.23"}, labchecktest.Now))
	ms, err = f.Check(t, Detectors)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || !strings.Contains(ms[0].What, "csr-new is Pending") {
		t.Errorf("with its CSR waiting: got %v, want the Pending CSR alone", ms)
	}
}
