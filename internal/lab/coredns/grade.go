package coredns

import (
	"fmt"
	"strings"

	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// coreDNS checks the cluster DNS objects: the Service kube-system/kube-dns
// must exist at the clusterDNS IP of cluster.yaml (the IP every kubelet
// writes into pods' resolv.conf), and the Corefile's kubernetes plugin must
// serve the cluster domain, or Service names (kubernetes.default.svc.<domain>)
// do not resolve. Upstream: https://kubernetes.io/docs/tasks/administer-cluster/dns-custom-nameservers/
// and https://coredns.io/plugins/kubernetes/.
func coreDNS(e *labcheck.Env) ([]labcheck.Mistake, error) {
	const lab = labid.CoreDNS
	if e.API == nil {
		return nil, labcheck.ErrNoAPI
	}
	want := e.Cluster.Kubernetes.ClusterDNS
	apply := "kubectl apply -f $KHW_STATE_DIR/$KHW_CLUSTER/manifests/coredns.yaml"
	var out []labcheck.Mistake
	svc, err := e.API.CoreV1().Services(metav1.NamespaceSystem).Get(e.Ctx, "kube-dns", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		out = append(out, labcheck.Mistake{Lab: lab, What: "there is no Service kube-system/kube-dns: pods send their DNS queries to " + want + " and nobody answers",
			Evidence: "kubectl -n kube-system get service kube-dns: NotFound", Fix: apply})
	case err != nil:
		return nil, fmt.Errorf("get Service kube-system/kube-dns: %w", err)
	case svc.Spec.ClusterIP != want:
		out = append(out, labcheck.Mistake{Lab: lab, What: fmt.Sprintf("the kube-dns Service has ClusterIP %s, but the kubelets give pods %s (clusterDNS of cluster.yaml): DNS queries go nowhere", svc.Spec.ClusterIP, want),
			Evidence: "Service kube-system/kube-dns: clusterIP " + svc.Spec.ClusterIP,
			Fix:      "a ClusterIP cannot be changed: kubectl -n kube-system delete service kube-dns, then recreate it with clusterIP: " + want + " (" + apply + ")"})
	}
	// Somebody must answer behind the Service: at least one ready CoreDNS
	// pod, i.e. an address in the kube-dns EndpointSlices
	// (https://kubernetes.io/docs/concepts/services-networking/endpoint-slices/).
	if svc != nil && err == nil {
		slices, serr := e.API.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).List(e.Ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kube-dns"})
		if serr != nil {
			return nil, fmt.Errorf("list EndpointSlices of kube-system/kube-dns: %w", serr)
		}
		ready := 0
		for _, sl := range slices.Items {
			for _, ep := range sl.Endpoints {
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					ready += len(ep.Addresses)
				}
			}
		}
		if ready == 0 {
			replicas := "?"
			if d, derr := e.API.AppsV1().Deployments(metav1.NamespaceSystem).Get(e.Ctx, "coredns", metav1.GetOptions{}); derr == nil {
				want := int32(1)
				if d.Spec.Replicas != nil {
					want = *d.Spec.Replicas
				}
				replicas = fmt.Sprintf("%d wanted, %d ready", want, d.Status.ReadyReplicas)
			} else if apierrors.IsNotFound(derr) {
				replicas = "no Deployment kube-system/coredns"
			}
			out = append(out, labcheck.Mistake{Lab: lab, What: "no ready CoreDNS pod stands behind the kube-dns Service: every DNS query in the cluster times out",
				Evidence: "EndpointSlices of kube-system/kube-dns: no ready address; CoreDNS: " + replicas,
				Fix:      "kubectl -n kube-system scale deploy/coredns --replicas=2 (or " + apply + "), then kubectl -n kube-system get pods -l k8s-app=kube-dns"})
		}
	}
	cm, err := e.API.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(e.Ctx, "coredns", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		out = append(out, labcheck.Mistake{Lab: lab, What: "there is no ConfigMap kube-system/coredns: the CoreDNS pods cannot mount their Corefile and do not start",
			Evidence: "kubectl -n kube-system get configmap coredns: NotFound", Fix: apply})
	case err != nil:
		return nil, fmt.Errorf("get ConfigMap kube-system/coredns: %w", err)
	default:
		dom := strings.TrimSuffix(e.Cluster.Kubernetes.ClusterDomain, ".")
		zones, found := kubernetesZones(cm.Data["Corefile"])
		switch {
		case !found:
			out = append(out, labcheck.Mistake{Lab: lab, What: "the Corefile has no kubernetes plugin: CoreDNS does not answer for Services at all",
				Evidence: "ConfigMap kube-system/coredns: no `kubernetes` line in Corefile", Fix: "add `kubernetes " + dom + " in-addr.arpa ip6.arpa { pods insecure; fallthrough in-addr.arpa ip6.arpa }` to the Corefile, then kubectl -n kube-system rollout restart deploy/coredns"})
		case len(zones) > 0 && !containsFold(zones, dom):
			out = append(out, labcheck.Mistake{Lab: lab, What: fmt.Sprintf("the Corefile's kubernetes plugin serves %v, not the cluster domain %s: Service names such as kubernetes.default.svc.%s do not resolve", zones, dom, dom),
				Evidence: "ConfigMap kube-system/coredns Corefile: kubernetes " + strings.Join(zones, " "), Fix: "kubernetes " + dom + " in-addr.arpa ip6.arpa in the Corefile, then kubectl -n kube-system rollout restart deploy/coredns"})
		}
	}
	return out, nil
}

// kubernetesZones returns the zones of the Corefile's kubernetes plugin
// lines (https://coredns.io/plugins/kubernetes/: `kubernetes [ZONES...]`,
// none meaning the server block's zones), without trailing dots; found
// is false when no such line exists.
func kubernetesZones(corefile string) (zones []string, found bool) {
	for _, l := range strings.Split(corefile, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "kubernetes" {
			continue
		}
		found = true
		for _, z := range f[1:] {
			if z == "{" {
				break
			}
			zones = append(zones, strings.TrimSuffix(z, "."))
		}
	}
	return zones, found
}

func containsFold(list []string, v string) bool {
	for _, s := range list {
		if strings.EqualFold(s, v) {
			return true
		}
	}
	return false
}

// coreDNSDetectors are the detectors of lab CoreDNS, in the order they run.
var Detectors = []labcheck.Detector{
	{Name: "coredns", Lab: labid.CoreDNS, Doc: "Service kube-dns at the clusterDNS IP, the Corefile serving the cluster domain (API)", Run: coreDNS},
	{Name: "dns-from-pods", Lab: labid.CoreDNS, Doc: "tries it live: a pod on each Ready worker resolves kubernetes.default.svc.<domain> to the Service's IP; a failure named with its cause (resolv.conf, CoreDNS's pods, endpoints)", Run: dnsFromPods},
}
