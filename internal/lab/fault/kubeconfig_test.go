package fault

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
)

// recorder is Actions that records what an injection does.
type recorder struct {
	d      state.Dir
	pushed map[string][]byte
	ran    []string
}

func (r *recorder) Cluster() *config.Cluster {
	return config.Default("t", "amd64", config.ProviderNspawn)
}
func (r *recorder) State() state.Dir { return r.d }
func (r *recorder) Run(_ context.Context, node, script string) (string, error) {
	r.ran = append(r.ran, node+": "+script)
	return "", nil
}
func (r *recorder) Push(_ context.Context, node, path string, data []byte, _ fs.FileMode) error {
	r.pushed[node+":"+path] = data
	return nil
}
func (r *recorder) Kube() (kubernetes.Interface, error) { return nil, nil }

func TestPushKubeconfigChangesTheStateCopy(t *testing.T) {
	d := state.New(t.TempDir(), "t")
	if err := os.MkdirAll(d.KubeconfigDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	k := clientcmdapi.NewConfig()
	k.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://lb:6443", CertificateAuthorityData: []byte("right")}
	k.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	k.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	k.CurrentContext = "x"
	if err := clientcmd.WriteToFile(*k, filepath.Join(d.KubeconfigDir(), "kube-proxy.kubeconfig")); err != nil {
		t.Fatal(err)
	}
	r := &recorder{d: d, pushed: map[string][]byte{}}
	err := PushKubeconfig(context.Background(), r, "w2", "kube-proxy.kubeconfig", "/var/lib/kube-proxy/kubeconfig", "kube-proxy", func(c *clientcmdapi.Config) {
		c.Clusters["c"].CertificateAuthorityData = []byte("wrong")
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := clientcmd.Load(r.pushed["w2:/var/lib/kube-proxy/kubeconfig"])
	if err != nil || string(got.Clusters["c"].CertificateAuthorityData) != "wrong" || got.Clusters["c"].Server != "https://lb:6443" {
		t.Fatalf("pushed %v (%v): want the state copy with the CA changed", got, err)
	}
	if len(r.ran) != 1 || !strings.Contains(r.ran[0], "w2: systemctl restart kube-proxy") {
		t.Errorf("ran %v, want the unit restarted on w2", r.ran)
	}
	if err := PushKubeconfig(context.Background(), r, "w2", "missing.kubeconfig", "/x", "y", func(*clientcmdapi.Config) {}); err == nil {
		t.Error("a missing state kubeconfig: no error")
	}
}

func TestOnNodeRunsTheScript(t *testing.T) {
	r := &recorder{pushed: map[string][]byte{}}
	if err := OnNode("cp3", "systemctl stop etcd")(context.Background(), r); err != nil || len(r.ran) != 1 || r.ran[0] != "cp3: systemctl stop etcd" {
		t.Errorf("ran %v (%v)", r.ran, err)
	}
}
