package pki

import (
	"slices"
	"testing"
)

func TestSpecsDefault(t *testing.T) {
	c := defaultCluster(t)
	specs := Specs(c)
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
		if s.Purpose == "" || len(s.Access) == 0 {
			t.Errorf("%s: Purpose/Access not documented", s.Name)
		}
		w, ok := wantDefault[s.Name]
		if !ok {
			continue
		}
		if s.CN != w.cn || !slices.Equal(nonEmpty(s.O), w.o) {
			t.Errorf("%s: CN/O = %q/%q, want %q/%q", s.Name, s.CN, s.O, w.cn, w.o)
		}
	}
	if !slices.Equal(names, allNames) {
		t.Errorf("Specs order = %v, want %v (w3 joins by TLS bootstrap and has none)", names, allNames)
	}
	if got := APIServerSANs(c); !slices.Equal(got, kubernetesSANs) || len(got) != 18 {
		t.Errorf("APIServerSANs = %q (%d), want the 18 of cluster-facts.md %q", got, len(got), kubernetesSANs)
	}
}

func TestSpecsFollowConfig(t *testing.T) {
	c := defaultCluster(t)
	c.Network.Domain = "lab.example"
	c.Kubernetes.ServiceCIDR = "10.96.0.0/24"
	c.Kubernetes.ClusterDNS = "10.96.0.10"
	c.Kubernetes.ClusterDomain = "corp.local"
	got := APIServerSANs(c)
	for _, want := range []string{"10.96.0.1", "cp2.lab.example", "lb.lab.example", "kubernetes.default.svc.corp.local"} {
		if !slices.Contains(got, want) {
			t.Errorf("APIServerSANs lacks %s: %q", want, got)
		}
	}
	for _, bad := range []string{"10.32.0.1", "cp2.kubernetes.local", "kubernetes.default.svc.cluster.local"} {
		if slices.Contains(got, bad) {
			t.Errorf("APIServerSANs still has %s: %q", bad, got)
		}
	}
}
