package render

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/khw-dev/khw/internal/config"
)

// decodeManifest splits a multi-document file and decodes every document
// strictly (unknown or duplicate fields are errors) into its client-go type.
func decodeManifest(t *testing.T, name string, data []byte) []runtime.Object {
	t.Helper()
	dec := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: document does not decode strictly: %v\n%s", name, err, doc)
		}
		objs = append(objs, obj)
	}
	return objs
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(append(out, l...), '\n')
		}
	}
	return out
}

func manifests(t *testing.T, c *config.Cluster) map[string][]runtime.Object {
	t.Helper()
	files, err := Manifests(c)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]runtime.Object{}
	for _, f := range files {
		if f.Mode != ConfigMode {
			t.Errorf("%s mode %v", f.Path, f.Mode)
		}
		out[f.Path] = decodeManifest(t, f.Path, f.Data)
	}
	return out
}

func TestManifestsRBAC(t *testing.T) {
	m := manifests(t, defaultCluster(t, config.ProviderLibvirt, nil))

	objs := m["apiserver-to-kubelet-rbac.yaml"]
	if len(objs) != 2 {
		t.Fatalf("apiserver-to-kubelet-rbac.yaml has %d objects, want 2", len(objs))
	}
	role, ok1 := objs[0].(*rbacv1.ClusterRole)
	binding, ok2 := objs[1].(*rbacv1.ClusterRoleBinding)
	if !ok1 || !ok2 {
		t.Fatalf("got %T, %T", objs[0], objs[1])
	}
	if role.Name != "system:kube-apiserver-to-kubelet" || len(role.Rules) != 1 {
		t.Fatalf("ClusterRole %s with %d rules", role.Name, len(role.Rules))
	}
	rule := role.Rules[0]
	if strings.Join(rule.Resources, ",") != "nodes/proxy,nodes/stats,nodes/log,nodes/spec,nodes/metrics,nodes/pods,nodes/healthz,nodes/configz" ||
		strings.Join(rule.Verbs, ",") != "*" || strings.Join(rule.APIGroups, ",") != "" || len(rule.APIGroups) != 1 {
		t.Errorf("rule %+v", rule)
	}
	if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != role.Name ||
		len(binding.Subjects) != 1 || binding.Subjects[0].Kind != rbacv1.UserKind || binding.Subjects[0].Name != KubeletClientUser {
		t.Errorf("binding %+v", binding)
	}

	want := map[string]rbacv1.Subject{
		"system:node-bootstrapper": {Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:bootstrappers"},
		"system:certificates.k8s.io:certificatesigningrequests:nodeclient":     {Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:bootstrappers"},
		"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient": {Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"},
	}
	got := map[string]rbacv1.Subject{}
	for _, o := range m["tls-bootstrap-rbac.yaml"] {
		b, ok := o.(*rbacv1.ClusterRoleBinding)
		if !ok || len(b.Subjects) != 1 || b.RoleRef.Kind != "ClusterRole" {
			t.Fatalf("tls-bootstrap-rbac.yaml: unexpected %T %+v", o, o)
		}
		got[b.RoleRef.Name] = b.Subjects[0]
	}
	if len(got) != len(want) {
		t.Errorf("tls-bootstrap bindings %v, want %v", got, want)
	}
	for role, s := range want {
		if got[role] != s {
			t.Errorf("binding of %s: subject %+v, want %+v", role, got[role], s)
		}
	}
}

func TestManifestsCoreDNS(t *testing.T) {
	for _, tc := range []struct {
		name     string
		change   func(*config.Cluster)
		replicas int32
		domain   string
		dns      string
	}{
		{"default", nil, 2, "cluster.local", "10.32.0.10"},
		{"one worker, other domain and DNS IP", func(c *config.Cluster) {
			c.Nodes = c.Nodes[:5]
			c.Kubernetes.ClusterDomain = "example.internal"
			c.Kubernetes.ClusterDNS = "10.32.0.53"
		}, 1, "example.internal", "10.32.0.53"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := manifests(t, defaultCluster(t, config.ProviderLibvirt, tc.change))["coredns.yaml"]
			var kinds []string
			var cm *corev1.ConfigMap
			var dep *appsv1.Deployment
			var svc *corev1.Service
			var role *rbacv1.ClusterRole
			for _, o := range objs {
				kinds = append(kinds, o.GetObjectKind().GroupVersionKind().Kind)
				switch v := o.(type) {
				case *corev1.ConfigMap:
					cm = v
				case *appsv1.Deployment:
					dep = v
				case *corev1.Service:
					svc = v
				case *rbacv1.ClusterRole:
					role = v
				}
			}
			if strings.Join(kinds, ",") != "ServiceAccount,ClusterRole,ClusterRoleBinding,ConfigMap,Deployment,Service" {
				t.Fatalf("kinds %v", kinds)
			}
			corefile := cm.Data["Corefile"]
			for _, line := range []string{"kubernetes " + tc.domain + " in-addr.arpa ip6.arpa {", "forward . /etc/resolv.conf",
				"cache 30", "loop", "reload", "loadbalance", "errors", "health", "ready"} {
				if !strings.Contains(corefile, "\n    "+line) {
					t.Errorf("Corefile lacks %q:\n%s", line, corefile)
				}
			}
			if *dep.Spec.Replicas != tc.replicas {
				t.Errorf("replicas %d, want %d", *dep.Spec.Replicas, tc.replicas)
			}
			ctr := dep.Spec.Template.Spec.Containers[0]
			if ctr.Image != "registry.k8s.io/coredns/coredns:"+config.DefaultVersions.CoreDNS {
				t.Errorf("image %s", ctr.Image)
			}
			if p := ctr.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/ready" || p.HTTPGet.Port.IntValue() != 8181 {
				t.Errorf("readiness probe %+v, want GET :8181/ready", p)
			}
			if dep.Spec.Template.Spec.ServiceAccountName != "coredns" || dep.Spec.Template.Spec.DNSPolicy != corev1.DNSDefault {
				t.Error("CoreDNS must run as ServiceAccount coredns with dnsPolicy Default")
			}
			if sel := dep.Spec.Selector.MatchLabels["k8s-app"]; sel != "kube-dns" || svc.Spec.Selector["k8s-app"] != sel {
				t.Errorf("Deployment selector %q and Service selector %q must match", sel, svc.Spec.Selector["k8s-app"])
			}
			if svc.Name != "kube-dns" || svc.Namespace != "kube-system" || svc.Spec.ClusterIP != tc.dns {
				t.Errorf("Service %s/%s clusterIP %s, want kube-system/kube-dns %s", svc.Namespace, svc.Name, svc.Spec.ClusterIP, tc.dns)
			}
			var ports []string
			for _, p := range svc.Spec.Ports {
				ports = append(ports, fmt.Sprintf("%s/%d", p.Protocol, p.Port))
			}
			if strings.Join(ports, ",") != "UDP/53,TCP/53,TCP/9153" {
				t.Errorf("Service ports %v", ports)
			}
			var watched []string
			for _, r := range role.Rules {
				watched = append(watched, r.Resources...)
			}
			for _, res := range []string{"services", "endpointslices", "namespaces"} {
				if !contains(watched, res) {
					t.Errorf("ClusterRole system:coredns cannot list/watch %s", res)
				}
			}
		})
	}
}
