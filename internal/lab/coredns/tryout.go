package coredns

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/smoketest"
)

// dnsFromPods tries what lab 09 exists to make work: a pod resolves a
// Service's name through the cluster DNS
// (https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/).
// It starts a web pod on every Ready worker (each worker's kube-proxy
// carries its pods' queries to the kube-dns Service) and looks up
// kubernetes.default.svc.<domain> there with the pod's own resolv.conf;
// the answer must be the kubernetes Service's IP. A failure is named with
// the likely cause read from the pod and the cluster: the nameserver the
// kubelet gave the pod, CoreDNS's pods and the Service's endpoints.
func dnsFromPods(e *labcheck.Env) ([]labcheck.Mistake, error) {
	if e.Live == nil || e.API == nil {
		return nil, nil
	}
	workers, err := e.ReadyWorkers()
	if err != nil || len(workers) == 0 {
		return nil, err
	}
	pods, err := e.StartWebPods(workers, e.Live.Target.Scaled(90*time.Second, 5*time.Minute))
	defer pods.Delete()
	if err != nil {
		return nil, err
	}
	name := "kubernetes.default.svc." + e.Cluster.Kubernetes.ClusterDomain
	want := e.Cluster.APIServerServiceIP().String()
	// The lookups at once (one that fails waits for nslookup's timeouts),
	// then the causes.
	type result struct {
		answers []string
		why     string
	}
	results := make([]result, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		if pods.Pods[w.Name] == nil {
			continue // lab 08's tryout says why the pod does not start
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].answers, results[i].why = lookup(e, pods, w, name)
		}()
	}
	wg.Wait()
	// One finding per cause, naming every worker it hits: no CoreDNS
	// fails the pods of every worker alike.
	type cause struct{ lab, ev, fix string }
	var causes []cause
	failed := map[cause][]int{}
	for i, w := range workers {
		r := results[i]
		if pods.Pods[w.Name] == nil || (r.why == "" && slices.Contains(r.answers, want)) {
			continue
		}
		if r.why == "" {
			results[i].why = fmt.Sprintf("it answers %v, not the kubernetes Service's IP %s", r.answers, want)
		}
		var c cause
		c.lab, c.ev, c.fix = dnsCause(e, pods, w)
		if failed[c] == nil {
			causes = append(causes, c)
		}
		failed[c] = append(failed[c], i)
	}
	var out []labcheck.Mistake
	for _, c := range causes {
		is := failed[c]
		var on []string
		for _, i := range is {
			on = append(on, workers[i].Name)
		}
		node, where := on[0], "a pod on "+on[0]
		if len(on) > 1 {
			node, where = "", "pods on "+strings.Join(on, ", ")
		}
		out = append(out, labcheck.Mistake{Node: node, Lab: c.lab, Kind: grade.Breaks, Subject: "DNS from pods",
			What:     fmt.Sprintf("%s cannot resolve %s: %s", where, name, results[is[0]].why),
			Evidence: c.ev, Fix: c.fix})
	}
	return out, nil
}

// shell runs cmd in node's web pod (agnhost netexec's /shell) and returns
// its output, or what went wrong.
func shell(e *labcheck.Env, pods *labcheck.WebPods, node config.Node, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(e.Ctx, e.Live.Target.Scaled(15*time.Second, time.Minute))
	defer cancel()
	code, body, err := pods.Get(ctx, node, "/shell?"+url.Values{"cmd": {cmd}}.Encode())
	if err != nil {
		return "", err
	}
	var res struct{ Output, Error string }
	if jerr := json.Unmarshal([]byte(body), &res); jerr != nil {
		return "", fmt.Errorf("HTTP %d %q", code, body)
	}
	if res.Error != "" && res.Output == "" {
		return "", fmt.Errorf("%s", res.Error)
	}
	return res.Output, nil
}

// lookup resolves name in node's pod with nslookup and the pod's own
// resolv.conf, twice at most (a first query may meet a CoreDNS that has
// just started); why is "" when there was an answer to judge.
func lookup(e *labcheck.Env, pods *labcheck.WebPods, node config.Node, name string) (answers []string, why string) {
	for try := 0; try < 2; try++ {
		out, err := shell(e, pods, node, "nslookup "+name)
		if _, answers = smoketest.ParseNslookup(out); len(answers) > 0 {
			return answers, ""
		}
		why = strings.Join(strings.Fields(out), " ")
		if err != nil {
			why = labcheck.OneLine(err)
		}
		why = "nslookup " + name + ": " + why
		if try == 0 {
			select {
			case <-e.Ctx.Done():
				return nil, why
			case <-time.After(2 * time.Second):
			}
		}
	}
	return nil, why
}

// dnsCause reads the first thing on the path of a pod's DNS query that is
// wrong, and returns the lab it belongs to, the evidence and the fix: the
// nameserver in the pod's resolv.conf (the kubelet's clusterDNS, lab 07),
// CoreDNS's pods, the kube-dns Service's endpoints (lab 09); else what was
// read, pointing at the node's kube-proxy (lab 07).
func dnsCause(e *labcheck.Env, pods *labcheck.WebPods, node config.Node) (lab, evidence, fix string) {
	dns := e.Cluster.Kubernetes.ClusterDNS
	conf, err := shell(e, pods, node, "cat /etc/resolv.conf")
	if err == nil {
		if ns, _ := smoketest.ParseResolvConf(conf); !slices.Contains(ns, dns) {
			return labid.Workers, fmt.Sprintf("the pod's /etc/resolv.conf names nameserver %v, not the cluster DNS %s", ns, dns),
				fmt.Sprintf("set clusterDNS: [%s] in /var/lib/kubelet/kubelet-config.yaml on %s and restart kubelet; pods made before keep their resolv.conf", dns, node.Name)
		}
	}
	ctx, cancel := context.WithTimeout(e.Ctx, e.Live.Target.Scaled(10*time.Second, 30*time.Second))
	defer cancel()
	list, err := e.API.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		return labid.CoreDNS, "could not list CoreDNS's pods: " + labcheck.OneLine(err), "kubectl -n kube-system get pods -l k8s-app=kube-dns"
	}
	ready := 0
	for i := range list.Items {
		if smoketest.PodReady(&list.Items[i]) {
			ready++
		}
	}
	if ready == 0 {
		ev := "no CoreDNS pod (kube-system, k8s-app=kube-dns) is Ready"
		if len(list.Items) > 0 {
			ev += ": " + smoketest.DescribePods(list.Items)
		}
		return labid.CoreDNS, ev, "make CoreDNS run (khw lab 09 applies its Deployment; kubectl -n kube-system describe pods -l k8s-app=kube-dns says why it does not)"
	}
	eps, err := e.API.DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kube-dns"})
	if err == nil {
		n := 0
		for _, s := range eps.Items {
			n += len(s.Endpoints)
		}
		if n == 0 {
			return labid.CoreDNS, fmt.Sprintf("%d CoreDNS pod(s) Ready, but the Service kube-dns has no endpoints: its selector does not match them", ready),
				"give the Service kube-system/kube-dns the selector k8s-app: kube-dns (the label of CoreDNS's pods)"
		}
	}
	// CoreDNS forwards a name outside its kubernetes zones upstream
	// (forward . /etc/resolv.conf), where a cluster name gets no answer
	// or times out offline: not a lost query.
	if cm, err := e.API.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{}); err == nil {
		dom := strings.TrimSuffix(e.Cluster.Kubernetes.ClusterDomain, ".")
		if zones, found := kubernetesZones(cm.Data["Corefile"]); !found || (len(zones) > 0 && !containsFold(zones, dom)) {
			return labid.CoreDNS, fmt.Sprintf("%d CoreDNS pod(s) Ready and reached, but the Corefile's kubernetes plugin does not serve %s (zones %v): CoreDNS forwards the cluster's names to its upstream resolvers, which do not know them", ready, dom, zones),
				"kubernetes " + dom + " in-addr.arpa ip6.arpa in the Corefile (kubectl -n kube-system edit configmap coredns), then kubectl -n kube-system rollout restart deploy/coredns"
		}
		// A Corefile changed after every CoreDNS pod started may not be
		// loaded yet: the kubelet refreshes a mounted ConfigMap on its
		// sync period (about a minute) and the reload plugin looks every
		// 30 s (https://coredns.io/plugins/reload/).
		if changed := lastUpdate(cm.ManagedFields); !changed.IsZero() && e.Now.Sub(changed) < 3*time.Minute && startedBefore(list.Items, changed) {
			return labid.CoreDNS, fmt.Sprintf("the Corefile changed %s ago, after every CoreDNS pod started: they may still run the old one (the kubelet refreshes a mounted ConfigMap within about a minute, then the reload plugin reads it within 30 s)", e.Now.Sub(changed).Round(time.Second)),
				"wait a minute and check again, or load it now: kubectl -n kube-system rollout restart deploy/coredns"
		}
	}
	return labid.Workers, fmt.Sprintf("%d CoreDNS pod(s) Ready, the kube-dns Service has endpoints, the pod asks %s: the query is lost between the pod and CoreDNS", ready, dns),
		fmt.Sprintf("look at kube-proxy on %s (systemctl status kube-proxy; iptables -t nat -S KUBE-SERVICES | grep %s) and at pod traffic between workers (khw lab check 08)", node.Name, dns)
}

// lastUpdate is the newest time in an object's managedFields: when one of
// its writers last changed it (zero when none says).
func lastUpdate(fields []metav1.ManagedFieldsEntry) time.Time {
	var t time.Time
	for _, f := range fields {
		if f.Time != nil && f.Time.After(t) {
			t = f.Time.Time
		}
	}
	return t
}

// startedBefore reports whether every pod of pods started before t.
func startedBefore(pods []corev1.Pod, t time.Time) bool {
	for _, p := range pods {
		if p.Status.StartTime == nil || !p.Status.StartTime.Time.Before(t) {
			return false
		}
	}
	return len(pods) > 0
}
