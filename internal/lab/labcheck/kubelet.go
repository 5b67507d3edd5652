package labcheck

import (
	"strings"

	"sigs.k8s.io/yaml"
)

// kubeletConfig is the part of a KubeletConfiguration the detectors read
// (https://kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1/).
type kubeletConfig struct {
	CgroupDriver       string   `json:"cgroupDriver"`
	ClusterDNS         []string `json:"clusterDNS"`
	FailSwapOn         *bool    `json:"failSwapOn"`
	TLSCertFile        string   `json:"tlsCertFile"`
	TLSPrivateKeyFile  string   `json:"tlsPrivateKeyFile"`
	ServerTLSBootstrap bool     `json:"serverTLSBootstrap"`
	ResolvConf         *string  `json:"resolvConf"`
}

// Kubelet is what the kubelet on a node runs with.
type Kubelet struct {
	Unit       UnitCmd
	Config     kubeletConfig
	ConfigPath string
	cfgEv      string
	Kubeconfig string
}

// ReadKubelet reads kubelet.service and its --config on node. Deprecated
// flags that duplicate a config field win over it, as in the kubelet.
func (e *Env) ReadKubelet(lab, node string) (*Kubelet, []Mistake, error) {
	u, ok, err := e.ReadUnit(node, "kubelet.service")
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, []Mistake{{Lab: lab, Node: node, What: "kubelet.service is not known to systemd (or has no ExecStart)", Evidence: "`systemctl cat kubelet.service` printed no ExecStart",
			Fix: "write /etc/systemd/system/kubelet.service (ExecStart=/usr/local/bin/kubelet --config=/var/lib/kubelet/kubelet-config.yaml --kubeconfig=/var/lib/kubelet/kubeconfig …), then systemctl daemon-reload && systemctl enable --now kubelet"}}, nil
	}
	k := &Kubelet{Unit: u}
	k.Kubeconfig, _ = u.Flag("kubeconfig")
	p, ok := u.Flag("config")
	if !ok {
		return k, []Mistake{{Lab: lab, Node: node, What: "the kubelet runs without --config: every setting falls back to its default (cgroupfs driver, no clusterDNS, anonymous auth on)",
			Evidence: u.Evidence("config"), Fix: "--config=/var/lib/kubelet/kubelet-config.yaml with a KubeletConfiguration"}}, nil
	}
	k.ConfigPath = p
	data, found, err := e.Read(node, p)
	if err != nil {
		return nil, nil, err
	}
	if !found {
		return k, []Mistake{Missing(lab, node, p, "the kubelet's --config; it does not start", "write a KubeletConfiguration there")}, nil
	}
	if err := yaml.Unmarshal(data, &k.Config); err != nil {
		return k, []Mistake{{Lab: lab, Node: node, What: p + " is not a valid KubeletConfiguration: the kubelet does not start", Evidence: p + ": " + err.Error(), Fix: "fix its YAML"}}, nil
	}
	k.cfgEv = p
	if v, ok := u.Flag("cgroup-driver"); ok {
		k.Config.CgroupDriver = v
		k.cfgEv = "kubelet.service --cgroup-driver"
	}
	if v, ok := u.Flag("cluster-dns"); ok {
		k.Config.ClusterDNS = strings.Split(v, ",")
	}
	if v, ok := u.Flag("tls-cert-file"); ok {
		k.Config.TLSCertFile = v
	}
	return k, nil, nil
}

func OrDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
