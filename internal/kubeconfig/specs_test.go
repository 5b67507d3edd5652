package kubeconfig

import (
	"reflect"
	"testing"
)

func TestSpecsDefault(t *testing.T) {
	c := defaultCluster()
	specs := Specs(c)
	var files []string
	for _, s := range specs {
		files = append(files, s.File)
	}
	wantFiles := []string{"admin.kubeconfig", "admin-cp.kubeconfig", "w1.kubeconfig", "w2.kubeconfig", "kube-proxy.kubeconfig",
		"kube-controller-manager.kubeconfig", "kube-scheduler.kubeconfig", "w3-bootstrap.kubeconfig"}
	if !reflect.DeepEqual(files, wantFiles) {
		t.Fatalf("files = %v\nwant    %v", files, wantFiles)
	}
	cps := func(p string) []Target {
		return []Target{{"cp1", p}, {"cp2", p}, {"cp3", p}}
	}
	wantTargets := map[string][]Target{
		"admin.kubeconfig":                   nil,
		"admin-cp.kubeconfig":                cps("/etc/kubernetes/admin.kubeconfig"),
		"w1.kubeconfig":                      {{"w1", "/var/lib/kubelet/kubeconfig"}},
		"w2.kubeconfig":                      {{"w2", "/var/lib/kubelet/kubeconfig"}},
		"kube-proxy.kubeconfig":              {{"w1", "/var/lib/kube-proxy/kubeconfig"}, {"w2", "/var/lib/kube-proxy/kubeconfig"}, {"w3", "/var/lib/kube-proxy/kubeconfig"}},
		"kube-controller-manager.kubeconfig": cps("/var/lib/kubernetes/kube-controller-manager.kubeconfig"),
		"kube-scheduler.kubeconfig":          cps("/var/lib/kubernetes/kube-scheduler.kubeconfig"),
		"w3-bootstrap.kubeconfig":            {{"w3", "/var/lib/kubelet/bootstrap-kubeconfig"}},
	}
	for _, s := range specs {
		w := wantDefault[s.File]
		if s.User != w.user || s.Server != w.server || s.Bootstrap != w.bootstrap {
			t.Errorf("%s: user/server/bootstrap = %s/%s/%v, want %s/%s/%v", s.File, s.User, s.Server, s.Bootstrap, w.user, w.server, w.bootstrap)
		}
		if !reflect.DeepEqual(s.Targets, wantTargets[s.File]) {
			t.Errorf("%s: targets = %v, want %v", s.File, s.Targets, wantTargets[s.File])
		}
		if s.OnJumpbox != (s.File == "admin.kubeconfig") {
			t.Errorf("%s: OnJumpbox = %v", s.File, s.OnJumpbox)
		}
		if w.certName != "" && (s.CertFile != w.certName+".pem" || s.KeyFile != w.certName+"-key.pem" || s.External) {
			t.Errorf("%s: cert/key = %s/%s", s.File, s.CertFile, s.KeyFile)
		}
	}
}

func TestForNode(t *testing.T) {
	c := defaultCluster()
	names := func(node string) []string {
		var out []string
		for _, s := range ForNode(c, node) {
			if len(s.Targets) != 1 || s.Targets[0].Node != node {
				t.Errorf("ForNode(%s) %s has targets %v", node, s.File, s.Targets)
			}
			out = append(out, s.File+"→"+s.Targets[0].Path)
		}
		return out
	}
	tests := map[string][]string{
		"lb":  nil,
		"cp2": {"admin-cp.kubeconfig→/etc/kubernetes/admin.kubeconfig", "kube-controller-manager.kubeconfig→/var/lib/kubernetes/kube-controller-manager.kubeconfig", "kube-scheduler.kubeconfig→/var/lib/kubernetes/kube-scheduler.kubeconfig"},
		"w1":  {"w1.kubeconfig→/var/lib/kubelet/kubeconfig", "kube-proxy.kubeconfig→/var/lib/kube-proxy/kubeconfig"},
		"w3":  {"kube-proxy.kubeconfig→/var/lib/kube-proxy/kubeconfig", "w3-bootstrap.kubeconfig→/var/lib/kubelet/bootstrap-kubeconfig"},
	}
	for node, w := range tests {
		if got := names(node); !reflect.DeepEqual(got, w) {
			t.Errorf("ForNode(%s) = %v, want %v", node, got, w)
		}
	}
}
