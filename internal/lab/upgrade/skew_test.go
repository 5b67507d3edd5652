package upgrade

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckSkew(t *testing.T) {
	cps := func(vs ...string) map[string]string {
		m := map[string]string{}
		for i, v := range vs {
			m[[]string{"cp1", "cp2", "cp3"}[i]] = v
		}
		return m
	}
	kls := func(vs ...string) map[string]string {
		m := map[string]string{}
		for i, v := range vs {
			m[[]string{"w1", "w2", "w3"}[i]] = v
		}
		return m
	}
	for _, tt := range []struct {
		name   string
		r      Running
		to     string
		oldest string // "" when refused
		want   string // error text
		rule   bool   // a *SkewError
	}{
		{"next minor", Running{cps("v1.36.3", "v1.36.3", "v1.36.3"), kls("v1.36.3", "v1.36.3", "v1.36.3")}, "v1.37.2", "1.36.3", "", false},
		{"patch", Running{cps("v1.37.0", "v1.37.0", "v1.37.0"), kls("v1.37.0", "v1.37.0", "v1.37.0")}, "v1.37.2", "1.37.0", "", false},
		{"resumed half-way", Running{cps("v1.37.2", "v1.36.3", "v1.36.3"), kls("v1.36.3", "v1.36.3", "v1.36.3")}, "v1.37.2", "1.36.3", "", false},
		{"resumed at the workers", Running{cps("v1.37.2", "v1.37.2", "v1.37.2"), kls("v1.37.2", "v1.36.3", "v1.36.3")}, "v1.37.2", "1.37.2", "", false},
		{"kubelets three minors older", Running{cps("v1.36.3"), kls("v1.34.4", "v1.35.4")}, "v1.37.2", "1.36.3", "", false},
		{"two minors", Running{cps("v1.35.4", "v1.35.4", "v1.35.4"), kls("v1.35.4")}, "v1.37.2", "", "upgrade one minor version at a time, first to v1.36.x", true},
		{"an apiserver left behind", Running{cps("v1.37.2", "v1.35.4", "v1.37.2"), nil}, "v1.37.2", "", "kube-apiserver on cp2 runs v1.35.4", true},
		{"downgrade", Running{cps("v1.37.2", "v1.37.2", "v1.37.2"), nil}, "v1.36.3", "", "not downgrades", true},
		{"patch downgrade", Running{cps("v1.37.2"), nil}, "v1.37.0", "", "not downgrades", true},
		{"kubelet four minors older", Running{cps("v1.36.3"), kls("v1.33.4")}, "v1.37.2", "", "the kubelet on w1 runs v1.33.4, more than three minor versions older", true},
		{"kubelet newer than apiserver", Running{cps("v1.36.3"), kls("v1.37.0")}, "v1.37.2", "", "newer than kube-apiserver on cp1", true},
		{"other major", Running{cps("v1.36.3"), nil}, "v2.0.0", "", "within major version 1 only", true},
		{"no v", Running{cps("v1.36.3"), nil}, "1.37.2", "", `--to "1.37.2": give a Kubernetes release such as v1.37.2`, false},
		{"pre-release", Running{cps("v1.36.3"), nil}, "v1.37.0-rc.1", "", "give a Kubernetes release", false},
		{"no apiserver", Running{nil, nil}, "v1.37.2", "", "no kube-apiserver answered /version", false},
		{"bad reported version", Running{cps("unknown"), nil}, "v1.37.2", "", "kube-apiserver on cp1 reports version", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			oldest, err := Check(tt.r, tt.to)
			if tt.want == "" {
				if err != nil || oldest.String() != tt.oldest {
					t.Fatalf("Check = %v, %v; want %s", oldest, err, tt.oldest)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Check error = %v, want %q", err, tt.want)
			}
			var se *SkewError
			if errors.As(err, &se) != tt.rule {
				t.Errorf("a *SkewError: %v, want %v", errors.As(err, &se), tt.rule)
			}
		})
	}
}
