package render

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml"

	"github.com/khw-dev/khw/internal/config"
)

// kubeletConfigFields are top-level fields of KubeletConfiguration
// kubelet.config.k8s.io/v1beta1 (k8s.io/kubelet/config/v1beta1/types.go,
// field names only), so a misspelt key in the template fails here rather than
// at the kubelet's strict decoding on the node.
var kubeletConfigFields = strings.Fields(`apiVersion kind address authentication authorization cgroupDriver
	cgroupsPerQOS clusterDNS clusterDomain containerRuntimeEndpoint failCgroupV1 failSwapOn hairpinMode
	healthzBindAddress healthzPort maxOpenFiles maxPods oomScoreAdj podCIDR port registerNode resolvConf
	rotateCertificates runtimeRequestTimeout serverTLSBootstrap staticPodPath tlsCertFile tlsPrivateKeyFile
	evictionHard imageGCHighThresholdPercent`)

// kubeProxyConfigFields: KubeProxyConfiguration kubeproxy.config.k8s.io/v1alpha1.
var kubeProxyConfigFields = strings.Fields(`apiVersion kind bindAddress clientConnection clusterCIDR conntrack
	detectLocalMode healthzBindAddress hostnameOverride iptables metricsBindAddress mode nftables oomScoreAdj`)

func checkKnown(t *testing.T, what string, m map[string]any, known []string) {
	t.Helper()
	for k := range m {
		if !contains(known, k) {
			t.Errorf("%s: unknown top-level field %q", what, k)
		}
	}
}

// TestKubeletConfig checks, for every worker and every combination of facts,
// the fields cluster-facts.md asks for and that the node-specific ones appear
// exactly when they should: TLS files only on cert-issued workers, bootstrap
// settings only on w3, failCgroupV1 only on cgroup v1, container limits only
// in system containers.
func TestKubeletConfig(t *testing.T) {
	c := defaultCluster(t, config.ProviderLibvirt, nil)
	factsCases := []NodeFacts{
		{ResolvConf: ResolvConfSystemd},
		{CgroupV1: true, ResolvConf: ResolvConfPlain},
		{Container: true, ResolvConf: ResolvConfPlain},
		{CgroupV1: true, Container: true, ResolvConf: ResolvConfPlain},
	}
	for _, w := range c.Workers() {
		for _, f := range factsCases {
			t.Run(fmt.Sprintf("%s/%+v", w.Name, f), func(t *testing.T) {
				files := nodeFiles(t, c, w.Name, f)
				unitFile := parseUnit(t, mustFile(t, files, "/etc/systemd/system/kubelet.service"))
				cfgPath := unitFile.flag(t, "--config")
				cfg := yamlMap(t, mustFile(t, files, cfgPath))
				checkKnown(t, cfgPath, cfg, kubeletConfigFields)

				want := map[string]any{
					"apiVersion":               "kubelet.config.k8s.io/v1beta1",
					"kind":                     "KubeletConfiguration",
					"cgroupDriver":             "systemd",
					"containerRuntimeEndpoint": "unix:///var/run/containerd/containerd.sock",
					"clusterDomain":            "cluster.local",
					"clusterDNS":               []any{"10.32.0.10"},
					"podCIDR":                  w.PodCIDR,
					"resolvConf":               f.ResolvConf,
					"registerNode":             true,
				}
				for k, v := range want {
					if !reflect.DeepEqual(cfg[k], v) {
						t.Errorf("%s = %#v, want %#v", k, cfg[k], v)
					}
				}
				for path, v := range map[string]any{
					"authentication.anonymous.enabled": false,
					"authentication.webhook.enabled":   true,
					"authentication.x509.clientCAFile": "/var/lib/kubernetes/ca.pem",
					"authorization.mode":               "Webhook",
				} {
					if got, _ := dig(cfg, strings.Split(path, ".")...); got != v {
						t.Errorf("%s = %#v, want %#v", path, got, v)
					}
				}

				has := keysOf(cfg)
				if w.TLSBootstrap {
					if cfg["rotateCertificates"] != true || cfg["serverTLSBootstrap"] != true {
						t.Errorf("TLS-bootstrap worker: rotateCertificates=%v serverTLSBootstrap=%v, want true", cfg["rotateCertificates"], cfg["serverTLSBootstrap"])
					}
					if has["tlsCertFile"] || has["tlsPrivateKeyFile"] {
						t.Error("TLS-bootstrap worker must not name serving cert files: its serving cert comes from a CSR")
					}
					if unitFile.flag(t, "--bootstrap-kubeconfig") != "/var/lib/kubelet/bootstrap-kubeconfig" ||
						unitFile.flag(t, "--cert-dir") != "/var/lib/kubelet/pki" {
						t.Error("TLS-bootstrap worker: wrong --bootstrap-kubeconfig or --cert-dir")
					}
				} else {
					if cfg["tlsCertFile"] != "/var/lib/kubelet/kubelet.pem" || cfg["tlsPrivateKeyFile"] != "/var/lib/kubelet/kubelet-key.pem" {
						t.Errorf("cert-issued worker: tlsCertFile=%v tlsPrivateKeyFile=%v", cfg["tlsCertFile"], cfg["tlsPrivateKeyFile"])
					}
					if has["rotateCertificates"] || has["serverTLSBootstrap"] {
						t.Error("cert-issued worker must not enable certificate rotation or serverTLSBootstrap")
					}
					if unitFile.has("--bootstrap-kubeconfig") || unitFile.has("--cert-dir") {
						t.Error("cert-issued worker must not have bootstrap flags")
					}
				}
				if got := unitFile.flag(t, "--kubeconfig"); got != "/var/lib/kubelet/kubeconfig" {
					t.Errorf("--kubeconfig=%s", got)
				}
				if unitFile.flag(t, "--hostname-override") != w.Name || unitFile.flag(t, "--node-ip") != w.IP {
					t.Error("kubelet must run as its node name and IP")
				}
				if got := unitFile.sections["Unit"]["Requires"]; len(got) != 1 || got[0] != "containerd.service" {
					t.Errorf("kubelet Requires=%q, want containerd.service", got)
				}
				if got := unitFile.sections["Unit"]["After"]; len(got) != 1 || got[0] != "containerd.service" {
					t.Errorf("kubelet After=%q, want containerd.service", got)
				}

				if has["failCgroupV1"] != f.CgroupV1 {
					t.Errorf("failCgroupV1 present = %v, want it exactly on cgroup v1 nodes (CgroupV1=%v)", has["failCgroupV1"], f.CgroupV1)
				}
				if f.CgroupV1 && cfg["failCgroupV1"] != false {
					t.Errorf("failCgroupV1 = %v, want false", cfg["failCgroupV1"])
				}
				if has["maxOpenFiles"] != f.Container || has["oomScoreAdj"] != f.Container {
					t.Errorf("maxOpenFiles/oomScoreAdj present = %v/%v, want %v (system container)", has["maxOpenFiles"], has["oomScoreAdj"], f.Container)
				}
				if has["evictionHard"] != f.Container || has["imageGCHighThresholdPercent"] != f.Container {
					t.Errorf("evictionHard/imageGCHighThresholdPercent present = %v/%v, want %v (a system container shares the host's disk)", has["evictionHard"], has["imageGCHighThresholdPercent"], f.Container)
				}
				if f.Container && (cfg["maxOpenFiles"] != float64(20000) || cfg["oomScoreAdj"] != float64(0)) {
					t.Errorf("maxOpenFiles=%v oomScoreAdj=%v, want 20000 and 0", cfg["maxOpenFiles"], cfg["oomScoreAdj"])
				}
			})
		}
	}
}

// TestContainerdAndProxy checks containerd's config.toml (parsed as TOML),
// containerd.service and kube-proxy's config against the facts.
func TestContainerdAndProxy(t *testing.T) {
	for _, cni := range []string{config.CNIBridge, config.CNIMyBridge} {
		c := defaultCluster(t, config.ProviderLibvirt, func(c *config.Cluster) { c.Kubernetes.CNI = cni })
		for _, f := range []NodeFacts{libvirtFacts(), nspawnFacts()} {
			t.Run(fmt.Sprintf("%s/container=%v", cni, f.Container), func(t *testing.T) {
				files := nodeFiles(t, c, "w2", f)
				tree, err := toml.Load(mustFile(t, files, "/etc/containerd/config.toml"))
				if err != nil {
					t.Fatalf("config.toml is not TOML: %v", err)
				}
				get := func(keys ...string) any { return tree.GetPath(keys) }
				const rt, img = "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"
				checks := []struct {
					keys []string
					want any
				}{
					{[]string{"version"}, int64(3)},
					{[]string{"plugins", img, "pinned_images", "sandbox"}, "registry.k8s.io/pause:" + config.DefaultVersions.Pause},
					{[]string{"plugins", rt, "containerd", "runtimes", "runc", "runtime_type"}, "io.containerd.runc.v2"},
					{[]string{"plugins", rt, "containerd", "runtimes", "runc", "options", "SystemdCgroup"}, true},
					{[]string{"plugins", rt, "containerd", "runtimes", "runc", "options", "BinaryName"}, "/usr/local/bin/runc"},
					{[]string{"plugins", rt, "cni", "conf_dir"}, "/etc/cni/net.d"},
				}
				for _, ch := range checks {
					if got := get(ch.keys...); !reflect.DeepEqual(got, ch.want) {
						t.Errorf("%s = %#v, want %#v", strings.Join(ch.keys, "."), got, ch.want)
					}
				}
				if got := get("plugins", rt, "cni", "bin_dirs"); !reflect.DeepEqual(got, []any{"/opt/cni/bin"}) {
					t.Errorf("cni.bin_dirs = %#v", got)
				}
				restrict := get("plugins", rt, "restrict_oom_score_adj")
				if (restrict == true) != f.Container || (restrict != nil && restrict != true) {
					t.Errorf("restrict_oom_score_adj = %v, want true exactly in system containers (%v)", restrict, f.Container)
				}
				maxConf, internalLo := get("plugins", rt, "cni", "max_conf_num"), get("plugins", rt, "cni", "use_internal_loopback")
				if cni == config.CNIMyBridge {
					if maxConf != int64(2) || internalLo != true {
						t.Errorf("mybridge: max_conf_num=%v use_internal_loopback=%v, want 2 and true", maxConf, internalLo)
					}
				} else if maxConf != nil || internalLo != nil {
					t.Errorf("bridge: max_conf_num=%v use_internal_loopback=%v, want containerd's defaults", maxConf, internalLo)
				}

				u := parseUnit(t, mustFile(t, files, "/etc/systemd/system/containerd.service"))
				if u.flag(t, "--config") != "/etc/containerd/config.toml" || u.sections["Service"]["Delegate"][0] != "yes" {
					t.Error("containerd.service: wrong --config or no Delegate=yes")
				}
				_, oom := u.sections["Service"]["OOMScoreAdjust"]
				_, nproc := u.sections["Service"]["LimitNPROC"]
				if oom == f.Container || nproc == f.Container {
					t.Errorf("containerd.service OOMScoreAdjust=%v LimitNPROC=%v; want them only outside system containers", oom, nproc)
				}

				pu := parseUnit(t, mustFile(t, files, "/etc/systemd/system/kube-proxy.service"))
				pcfgPath := pu.flag(t, "--config")
				pcfg := yamlMap(t, mustFile(t, files, pcfgPath))
				checkKnown(t, pcfgPath, pcfg, kubeProxyConfigFields)
				if pcfg["kind"] != "KubeProxyConfiguration" || pcfg["apiVersion"] != "kubeproxy.config.k8s.io/v1alpha1" ||
					pcfg["mode"] != "iptables" || pcfg["clusterCIDR"] != "10.200.0.0/16" || pcfg["hostnameOverride"] != "w2" {
					t.Errorf("kube-proxy config: %v", pcfg)
				}
				if v, _ := dig(pcfg, "clientConnection", "kubeconfig"); v != "/var/lib/kube-proxy/kubeconfig" {
					t.Errorf("kube-proxy clientConnection.kubeconfig = %v", v)
				}
				maxPerCore, ok := dig(pcfg, "conntrack", "maxPerCore")
				if ok != f.Container || (ok && maxPerCore != float64(0)) {
					t.Errorf("kube-proxy conntrack.maxPerCore = %v (set: %v), want 0 exactly in system containers", maxPerCore, ok)
				}
			})
		}
	}
}

// TestCNIConfigs parses the CNI configs of every worker as JSON and checks
// each carries its own podCIDR, for both CNI choices.
func TestCNIConfigs(t *testing.T) {
	for _, cni := range []string{config.CNIBridge, config.CNIMyBridge} {
		c := defaultCluster(t, config.ProviderLibvirt, func(c *config.Cluster) { c.Kubernetes.CNI = cni })
		for _, w := range c.Workers() {
			files := nodeFiles(t, c, w.Name, libvirtFacts())
			var confs []string
			for p := range files {
				if strings.HasPrefix(p, "/etc/cni/net.d/") {
					confs = append(confs, p)
				}
			}
			parse := func(p string) map[string]any {
				var m map[string]any
				if err := json.Unmarshal([]byte(mustFile(t, files, p)), &m); err != nil {
					t.Fatalf("%s %s is not JSON: %v", w.Name, p, err)
				}
				if m["cniVersion"] != "1.0.0" {
					t.Errorf("%s %s cniVersion %v", w.Name, p, m["cniVersion"])
				}
				return m
			}
			switch cni {
			case config.CNIBridge:
				if len(confs) != 2 {
					t.Errorf("%s: CNI configs %v, want 10-bridge.conf and 99-loopback.conf", w.Name, confs)
				}
				b := parse("/etc/cni/net.d/10-bridge.conf")
				subnet, _ := dig(b, "ipam", "ranges")
				if b["type"] != "bridge" || b["bridge"] != "cni0" || b["isGateway"] != true || b["ipMasq"] != true {
					t.Errorf("%s 10-bridge.conf: %v", w.Name, b)
				}
				if got := fmt.Sprint(subnet); got != fmt.Sprintf("[[map[subnet:%s]]]", w.PodCIDR) {
					t.Errorf("%s 10-bridge.conf ranges %s, want its podCIDR %s", w.Name, got, w.PodCIDR)
				}
				if l := parse("/etc/cni/net.d/99-loopback.conf"); l["type"] != "loopback" {
					t.Errorf("%s 99-loopback.conf type %v", w.Name, l["type"])
				}
				if _, ok := files["/opt/cni/bin/mybridge"]; ok {
					t.Errorf("%s: mybridge rendered with cni=bridge", w.Name)
				}
			case config.CNIMyBridge:
				if len(confs) != 2 {
					t.Errorf("%s: CNI configs %v, want 10-mybridge.conf and 99-myloopback.conf", w.Name, confs)
				}
				b := parse("/etc/cni/net.d/10-mybridge.conf")
				if b["type"] != "mybridge" || b["subnet"] != w.PodCIDR || b["clusterCIDR"] != "10.200.0.0/16" {
					t.Errorf("%s 10-mybridge.conf: %v (podCIDR %s)", w.Name, b, w.PodCIDR)
				}
				if l := parse("/etc/cni/net.d/99-myloopback.conf"); l["type"] != "myloopback" {
					t.Errorf("%s 99-myloopback.conf type %v", w.Name, l["type"])
				}
				for _, s := range []string{"/opt/cni/bin/mybridge", "/opt/cni/bin/myloopback"} {
					if f, ok := files[s]; !ok || f.Mode != ScriptMode {
						t.Errorf("%s %s: rendered=%v mode=%v, want mode %v", w.Name, s, ok, f.Mode, ScriptMode)
					}
				}
			}
		}
	}
}

func TestWorkerHostPrep(t *testing.T) {
	c := defaultCluster(t, config.ProviderLibvirt, nil)
	files := nodeFiles(t, c, "w1", libvirtFacts())
	var mods []string
	for _, l := range strings.Split(mustFile(t, files, "/etc/modules-load.d/k8s.conf"), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			mods = append(mods, l)
		}
	}
	if strings.Join(mods, ",") != "overlay,br_netfilter" {
		t.Errorf("modules %v", mods)
	}
	sysctls := map[string]string{}
	for _, l := range strings.Split(mustFile(t, files, "/etc/sysctl.d/k8s.conf"), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			k, v, _ := strings.Cut(l, "=")
			sysctls[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	want := map[string]string{"net.bridge.bridge-nf-call-iptables": "1", "net.bridge.bridge-nf-call-ip6tables": "1", "net.ipv4.ip_forward": "1"}
	if !reflect.DeepEqual(sysctls, want) {
		t.Errorf("sysctls %v, want %v", sysctls, want)
	}
}
