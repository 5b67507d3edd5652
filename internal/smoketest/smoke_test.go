package smoketest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/khw-dev/khw/internal/config"
)

const (
	testPrefix   = "k8s:enc:aescbc:v1:key1:"
	webPod       = "khw-smoke-web-7c9d-x2k4p"
	testNodePort = 30080
)

// fakeStreams answers exec like agnhost with busybox (cat, nslookup) and
// port-forward with a local HTTP server that answers /hostname.
type fakeStreams struct {
	resolv      string
	nslookup    string
	nslookupErr error
	execErr     error // for cat /etc/hostname

	mu    sync.Mutex
	execs []string
}

func (f *fakeStreams) Exec(ctx context.Context, namespace, pod, container string, cmd []string) (string, string, error) {
	f.mu.Lock()
	f.execs = append(f.execs, pod+": "+strings.Join(cmd, " "))
	f.mu.Unlock()
	switch {
	case len(cmd) == 2 && cmd[1] == "/etc/hostname":
		if f.execErr != nil {
			return "", "", f.execErr
		}
		return pod + "\n", "", nil
	case len(cmd) == 2 && cmd[1] == "/etc/resolv.conf":
		return f.resolv, "", nil
	case cmd[0] == "nslookup":
		return f.nslookup, "", f.nslookupErr
	}
	return "", "", fmt.Errorf("unexpected command %v", cmd)
}

func (f *fakeStreams) PortForward(ctx context.Context, namespace, pod string, port int) (string, func(), error) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hostname" && port == HTTPPort {
			fmt.Fprint(w, pod)
			return
		}
		http.NotFound(w, r)
	}))
	return srv.Listener.Addr().String(), srv.Close, nil
}

const busyboxAnswer = `Server:		10.32.0.10
Address:	10.32.0.10:53


Name:	kubernetes.default.svc.cluster.local
Address: 10.32.0.1

*** Can't find kubernetes.default.svc.cluster.local: No answer
`

const podResolv = "search khw-smoke.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.32.0.10\noptions ndots:5\n"

func readyStatus(node string) corev1.PodStatus {
	return corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      "10.200.1.7",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
}

// fixture is a Runner on fakes that behave like a healthy default cluster:
// the Deployment gets a ready pod on w2, the pinned pod runs on w3, each
// worker answers the NodePort, w3's kubelet serves a certificate from the
// CA, etcd holds an aescbc value.
type fixture struct {
	r       *Runner
	cs      *fake.Clientset
	streams *fakeStreams
	dial    *mapDialer
	// depPod, if set, replaces the pod the Deployment gets.
	depPod func(ns string) *corev1.Pod
	etcd   []byte
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	c := config.Default("t", config.ArchAMD64, config.ProviderNspawn)
	if _, err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	f := &fixture{streams: &fakeStreams{resolv: podResolv, nslookup: busyboxAnswer}}
	f.etcd = append([]byte(testPrefix), []byte{0x5e, 0x0b, 0x9c, 0x1d, 0x74, 0xa2, 0x33, 0x10, 0xc8, 0x7f, 0x01, 0x2b, 0x9e, 0x44, 0xd0, 0x61, 0xaa, 0xbb}...)
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w3"}})
	f.cs = cs
	cs.PrependReactor("create", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ns := a.(k8stesting.CreateAction).GetObject().(*corev1.Namespace)
		// The serviceaccount controller's job.
		_ = cs.Tracker().Add(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}})
		return false, nil, nil
	})
	cs.PrependReactor("delete", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) {
		// The namespace controller's job: remove what the namespace holds.
		ns := a.(k8stesting.DeleteAction).GetName()
		for gvr, kind := range map[schema.GroupVersionResource]string{
			{Version: "v1", Resource: "pods"}: "Pod", {Version: "v1", Resource: "services"}: "Service",
			{Version: "v1", Resource: "secrets"}: "Secret", {Version: "v1", Resource: "serviceaccounts"}: "ServiceAccount",
			{Group: "apps", Version: "v1", Resource: "deployments"}: "Deployment",
		} {
			list, err := cs.Tracker().List(gvr, gvr.GroupVersion().WithKind(kind), ns)
			if err != nil {
				t.Errorf("list %s: %v", gvr, err)
				continue
			}
			items, _ := meta.ExtractList(list)
			for _, o := range items {
				m, _ := meta.Accessor(o)
				_ = cs.Tracker().Delete(gvr, ns, m.GetName())
			}
		}
		return false, nil, nil
	})
	cs.PrependReactor("create", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.CreateAction).GetObject().(*appsv1.Deployment)
		// The deployment and replicaset controllers, the scheduler and
		// the kubelet of w2, in one go.
		var p *corev1.Pod
		if f.depPod != nil {
			p = f.depPod(a.GetNamespace())
		} else {
			p = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: webPod, Namespace: a.GetNamespace(), Labels: d.Spec.Template.Labels},
				Spec: d.Spec.Template.Spec, Status: readyStatus("w2")}
			p.Spec.NodeName = "w2"
		}
		if p != nil {
			_ = cs.Tracker().Add(p)
		}
		return false, nil, nil
	})
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		p.Status = readyStatus(p.Spec.NodeName)
		return false, nil, nil
	})
	cs.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		s.Spec.ClusterIP = "10.32.0.77"
		s.Spec.Ports[0].NodePort = testNodePort
		return false, nil, nil
	})
	cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "log" {
			return false, nil, nil
		}
		return true, &runtime.Unknown{Raw: []byte("I1129 10:00:00.000000 1 log.go:245] Started HTTP server on port 80\nI1129 10:00:01.000000 1 log.go:245] GET /readyz\n")}, nil
	})

	// The NodePort on every worker reaches the web pod.
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, webPod) }))
	t.Cleanup(web.Close)
	// w3's kubelet serves a certificate from the cluster CA for its IP.
	ca := newTestCA(t, "khw-ca")
	w3, _ := c.Node("w3")
	kcert, _, _ := ca.issue(t, "system:node:w3", []string{"w3"}, []string{w3.IP}, x509.ExtKeyUsageServerAuth)
	kubelet := httptest.NewUnstartedServer(http.NotFoundHandler())
	kubelet.TLS = &tls.Config{Certificates: []tls.Certificate{kcert}}
	kubelet.Config.ErrorLog = log.New(io.Discard, "", 0)
	kubelet.StartTLS()
	t.Cleanup(kubelet.Close)
	f.dial = &mapDialer{to: map[string]string{w3.IP + ":10250": kubelet.Listener.Addr().String()}}
	for _, w := range c.Workers() {
		f.dial.to[fmt.Sprintf("%s:%d", w.IP, testNodePort)] = web.Listener.Addr().String()
	}

	f.r = &Runner{
		Cluster: c, Client: cs, Streams: f.streams, Dial: f.dial.dial, CA: ca.pool(),
		EncryptionPrefix: testPrefix, Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
		APIServerVerifiesKubelets: true, Poll: 10 * time.Millisecond, RetryWindow: 500 * time.Millisecond,
		EtcdGet: func(ctx context.Context, key string) ([]byte, error) {
			if key != "/registry/secrets/khw-smoke/kubernetes-the-hard-way" {
				return nil, nil
			}
			return f.etcd, nil
		},
	}
	return f
}

func checkByName(t *testing.T, rep *Report, name string) Check {
	t.Helper()
	for _, c := range rep.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %s in %+v", name, rep.Checks)
	return Check{}
}

func nsExists(t *testing.T, f *fixture) bool {
	t.Helper()
	_, err := f.cs.CoreV1().Namespaces().Get(context.Background(), Namespace, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func TestRunHealthyCluster(t *testing.T) {
	f := newFixture(t)
	var progress []string
	rep := f.r.Run(context.Background(), Options{Wait: 5 * time.Second, Progress: func(c Check) { progress = append(progress, c.Name) }})
	for _, c := range rep.Checks {
		if !c.OK {
			t.Errorf("%s failed: %s (evidence %q)", c.Name, c.Err, c.Evidence)
		}
	}
	want := []string{CheckEncryption, CheckDeployment, CheckLogs, CheckExec, CheckPortForward, CheckNodePort, CheckDNS, CheckBootstrapNode}
	if strings.Join(progress, ",") != strings.Join(want, ",") {
		t.Errorf("checks reported %v, want %v", progress, want)
	}
	if !rep.OK() || rep.Kept || rep.CleanupErr != "" {
		t.Errorf("report OK %v kept %v cleanup %q", rep.OK(), rep.Kept, rep.CleanupErr)
	}
	for name, wants := range map[string][]string{
		CheckEncryption:    {`"k8s:enc:aescbc:v1:key1:" + 5e 0b 9c 1d 74 a2 33 10 c8 7f 01 2b 9e 44 d0 61 …`, "(41 bytes, no plaintext"},
		CheckDeployment:    {"pod " + webPod + " Running and Ready on w2", "agnhost:2.66.1"},
		CheckLogs:          {"Started HTTP server on port 80", "kubelet on w2"},
		CheckExec:          {`cat /etc/hostname in ` + webPod + ` → "` + webPod + `"`},
		CheckPortForward:   {"127.0.0.1:", "GET /hostname 200 \"" + webPod + "\""},
		CheckNodePort:      {":30080/hostname", "w1: 200", "w2 (runs the pod): 200", "w3: 200"},
		CheckDNS:           {"nslookup kubernetes.default.svc.cluster.local 10.32.0.10 → 10.32.0.1", "nameserver 10.32.0.10"},
		CheckBootstrapNode: {"pod khw-smoke-pinned-w3 on w3", "CN=system:node:w3", "SANs w3 192.168.122.23", "verified against ca.pem", "--kubelet-certificate-authority"},
	} {
		c := checkByName(t, rep, name)
		for _, w := range wants {
			if !strings.Contains(c.Evidence, w) {
				t.Errorf("%s evidence %q lacks %q", name, c.Evidence, w)
			}
		}
	}
	if n := checkByName(t, rep, CheckDeployment).Node; n != "w2" {
		t.Errorf("deployment check node %q, want w2", n)
	}
	if nsExists(t, f) {
		t.Error("namespace khw-smoke still exists after the run")
	}
	// The pinned pod went to w3 by spec.nodeName, not through the scheduler.
	var pinned *corev1.Pod
	for _, a := range f.cs.Actions() {
		if ca, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "pods" {
			pinned = ca.GetObject().(*corev1.Pod)
		}
	}
	if pinned == nil || pinned.Spec.NodeName != "w3" || pinned.Name != "khw-smoke-pinned-w3" || pinned.Labels["app"] != PinnedApp {
		t.Errorf("pinned pod %+v", pinned)
	}
	if f.dial.askedFor("192.168.122.23:10250") != 1 {
		t.Errorf("w3's kubelet was dialed %d times, want 1", f.dial.askedFor("192.168.122.23:10250"))
	}
}

func TestRunKeepLeavesTheNamespace(t *testing.T) {
	f := newFixture(t)
	rep := f.r.Run(context.Background(), Options{Keep: true, Wait: 5 * time.Second})
	if !rep.OK() || !rep.Kept {
		t.Fatalf("OK %v kept %v: %+v", rep.OK(), rep.Kept, rep.Failed())
	}
	if !nsExists(t, f) {
		t.Fatal("--keep: the namespace is gone")
	}
	// A second run starts from a fresh namespace: it deletes the kept one.
	rep = f.r.Run(context.Background(), Options{Wait: 5 * time.Second})
	if !rep.OK() {
		t.Fatalf("second run: %+v", rep.Failed())
	}
	deletes := 0
	for _, a := range f.cs.Actions() {
		if a.GetVerb() == "delete" && a.GetResource().Resource == "namespaces" {
			deletes++
		}
	}
	if deletes != 2 || nsExists(t, f) {
		t.Errorf("namespace deleted %d times (want 2: the kept one, then the cleanup); exists %v", deletes, nsExists(t, f))
	}
}

func TestRunRefusesAForeignNamespace(t *testing.T) {
	f := newFixture(t)
	if err := f.cs.Tracker().Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil {
		t.Fatal(err)
	}
	rep := f.r.Run(context.Background(), Options{Wait: time.Second})
	if rep.OK() || len(rep.Checks) != 8 {
		t.Fatalf("%+v", rep)
	}
	for _, c := range rep.Checks {
		if c.OK || !strings.Contains(c.Err, "not run: namespace khw-smoke exists and is not khw's") {
			t.Errorf("%s: %+v", c.Name, c)
		}
	}
	if !nsExists(t, f) {
		t.Error("khw deleted a namespace it does not own")
	}
}

func TestRunDeploymentWithoutPods(t *testing.T) {
	f := newFixture(t)
	f.depPod = func(string) *corev1.Pod { return nil } // no controller-manager
	rep := f.r.Run(context.Background(), Options{Wait: 300 * time.Millisecond})
	dep := checkByName(t, rep, CheckDeployment)
	if dep.OK || !strings.Contains(dep.Err, "no pod app=khw-smoke-web in namespace khw-smoke became Ready within 300ms") ||
		!strings.Contains(dep.Err, "ReplicaSet controller (kube-controller-manager) has not created one") {
		t.Errorf("deployment check: %+v", dep)
	}
	for _, name := range []string{CheckLogs, CheckExec, CheckPortForward, CheckNodePort, CheckDNS} {
		if c := checkByName(t, rep, name); c.OK || !strings.HasPrefix(c.Err, "not run: no Ready pod") {
			t.Errorf("%s: %+v", name, c)
		}
	}
	// Independent checks still ran.
	if !checkByName(t, rep, CheckEncryption).OK || !checkByName(t, rep, CheckBootstrapNode).OK {
		t.Errorf("encryption/bootstrap: %+v", rep.Checks)
	}
	if nsExists(t, f) {
		t.Error("the namespace is left behind after a failed run")
	}
}

func TestRunImageNotImported(t *testing.T) {
	f := newFixture(t)
	f.depPod = func(ns string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: webPod, Namespace: ns, Labels: map[string]string{"app": AppName}},
			Spec:       corev1.PodSpec{NodeName: "w1"},
			Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
				Name: Container, Image: f.r.Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}},
			}}},
		}
	}
	rep := f.r.Run(context.Background(), Options{Wait: 200 * time.Millisecond})
	dep := checkByName(t, rep, CheckDeployment)
	if dep.OK || !strings.Contains(dep.Err, "container agnhost waiting: ImagePullBackOff") ||
		!strings.Contains(dep.Err, "the image registry.k8s.io/e2e-test-images/agnhost:2.66.1 is not imported on w1") {
		t.Errorf("deployment check: %+v", dep)
	}
}

func TestRunEncryptionAndDNSFailures(t *testing.T) {
	f := newFixture(t)
	f.etcd = []byte("k8s\x00\n\x0c\n\x02v1\x12\x06Secret mydata")
	f.streams.resolv = "nameserver 192.168.122.1\n"
	rep := f.r.Run(context.Background(), Options{Wait: 5 * time.Second})
	enc := checkByName(t, rep, CheckEncryption)
	if enc.OK || !strings.Contains(enc.Err, `holds the plaintext "mydata"`) {
		t.Errorf("encryption: %+v", enc)
	}
	dns := checkByName(t, rep, CheckDNS)
	if dns.OK || !strings.Contains(dns.Err, "names nameserver [192.168.122.1], not the cluster DNS 10.32.0.10") || !strings.Contains(dns.Evidence, "nameserver 192.168.122.1") {
		t.Errorf("dns: %+v", dns)
	}
	if got := rep.Failed(); len(got) != 2 {
		t.Errorf("failed %v, want encryption and dns only", got)
	}
}

func TestRunKubeletErrors(t *testing.T) {
	f := newFixture(t)
	// The apiserver's call to the kubelet fails TLS verification.
	f.cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "log" {
			return false, nil, nil
		}
		return true, nil, errors.New(`Get "https://192.168.122.22:10250/containerLogs/khw-smoke/x/agnhost": tls: failed to verify certificate: x509: certificate signed by unknown authority`)
	})
	f.streams.execErr = apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "w2", errors.New("user=kubernetes, verb=create, resource=nodes, subresource=proxy"))
	// w3's NodePort answers nothing (kube-proxy down there).
	delete(f.dial.to, fmt.Sprintf("192.168.122.23:%d", testNodePort))
	f.r.Poll = 50 * time.Millisecond
	start := time.Now()
	rep := f.r.Run(context.Background(), Options{Wait: 2 * time.Second})
	logs := checkByName(t, rep, CheckLogs)
	if logs.OK || !strings.Contains(logs.Err, "does not accept the kubelet serving certificate of w2") {
		t.Errorf("logs: %+v", logs)
	}
	ex := checkByName(t, rep, CheckExec)
	if ex.OK || !strings.Contains(ex.Err, "apply manifests/apiserver-to-kubelet-rbac.yaml") {
		t.Errorf("exec: %+v", ex)
	}
	np := checkByName(t, rep, CheckNodePort)
	if np.OK || !strings.Contains(np.Err, "on w3:") || !strings.Contains(np.Evidence, "w1: 200") || !strings.Contains(np.Evidence, "connection refused") {
		t.Errorf("nodeport: %+v", np)
	}
	// Logs (twice: web and pinned pod) and the NodePort retried for
	// RetryWindow each, not longer.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the run took %v: a retry is not bounded by RetryWindow", d)
	}
}

func TestCleanupWaitsForTheNamespaceToGo(t *testing.T) {
	for _, tc := range []struct {
		name        string
		terminating int // Gets that still see the namespace
		wantErr     string
	}{
		{"gone after a few polls", 3, ""},
		{"stuck", 1 << 30, "namespace khw-smoke is still there after 100ms (Terminating; NamespaceDeletionContentFailure: pods remain)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			gets := 0
			cs.PrependReactor("delete", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) { return true, nil, nil })
			cs.PrependReactor("get", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) {
				gets++
				if gets > tc.terminating {
					return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, Namespace)
				}
				return true, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}, Status: corev1.NamespaceStatus{
					Phase:      corev1.NamespaceTerminating,
					Conditions: []corev1.NamespaceCondition{{Type: "NamespaceDeletionContentFailure", Status: corev1.ConditionTrue, Message: "pods remain"}},
				}}, nil
			})
			r := &Runner{Client: cs, Poll: 5 * time.Millisecond}
			err := r.Cleanup(context.Background(), 100*time.Millisecond)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr == "" && gets != tc.terminating+1:
				t.Errorf("returned after %d Gets, want %d", gets, tc.terminating+1)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestPrepareWaitsForTheDefaultServiceAccount(t *testing.T) {
	cs := fake.NewClientset() // no serviceaccount controller
	r := &Runner{Client: cs, Poll: 5 * time.Millisecond}
	err := r.Prepare(context.Background(), 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "ServiceAccount khw-smoke/default did not appear within 50ms") {
		t.Fatalf("err %v", err)
	}
	ns, err := cs.CoreV1().Namespaces().Get(context.Background(), Namespace, metav1.GetOptions{})
	if err != nil || ns.Labels[managedByLabel] != "khw" {
		t.Fatalf("namespace %+v %v, want it labelled as khw's", ns, err)
	}
}

func TestBootstrapWorker(t *testing.T) {
	c := config.Default("t", config.ArchAMD64, config.ProviderNspawn)
	n, ok := BootstrapWorker(c)
	if !ok || !n.TLSBootstrap {
		t.Fatalf("default cluster: %+v %v, want its TLS bootstrap worker", n, ok)
	}
	var want string
	for _, w := range c.Workers() {
		if w.TLSBootstrap && want == "" {
			want = w.Name
		}
	}
	if n.Name != want {
		t.Errorf("picked %s, want the first bootstrap worker %s", n.Name, want)
	}
	for i := range c.Nodes {
		c.Nodes[i].TLSBootstrap = false
	}
	if n, ok := BootstrapWorker(c); ok {
		t.Errorf("no bootstrap worker: got %+v", n)
	}
	for i := range c.Nodes {
		if c.Nodes[i].Role == config.RoleWorker {
			c.Nodes[i].TLSBootstrap = true
		}
	}
	if n, _ := BootstrapWorker(c); n.Name != c.Workers()[0].Name {
		t.Errorf("all bootstrap: picked %s, want the first worker %s", n.Name, c.Workers()[0].Name)
	}
}

func TestAgnhostImageAndAPIServerFlag(t *testing.T) {
	c := config.Default("t", config.ArchARM64, config.ProviderNspawn)
	img, err := AgnhostImage(c)
	if err != nil || !strings.HasPrefix(img, "registry.k8s.io/e2e-test-images/agnhost:") || strings.HasSuffix(img, ":") {
		t.Fatalf("AgnhostImage = %q, %v", img, err)
	}
	ok, err := apiServerVerifiesKubelets(c)
	if err != nil || !ok {
		t.Fatalf("the rendered kube-apiserver unit should pass --kubelet-certificate-authority: %v %v", ok, err)
	}
}
