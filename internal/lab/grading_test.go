package lab

import (
	"testing"

	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labcheck/labchecktest"
	"github.com/khw-dev/khw/internal/lab/labid"

	"context"
	"errors"
	"strings"

	"github.com/khw-dev/khw/internal/lab/labcheck"
)

// A hand-made variant that works must pass: one cert per control plane with
// only that node's IP, a TCP health check, a conflist CNI config.
func TestValidVariantsPass(t *testing.T) {
	f := labchecktest.NewFixture(t)
	dns, _ := f.KubernetesSANs()
	for i, n := range []string{"cp1", "cp2", "cp3"} {
		ip := "192.168.122.1" + string(rune('1'+i))
		c, k := f.Issue(t, labchecktest.CertSpec{CN: "kubernetes", DNS: dns, IPs: []string{"10.32.0.1", "127.0.0.1", "192.168.122.10", ip}, Server: true, Client: true})
		for _, p := range []string{"/var/lib/kubernetes/kubernetes", "/etc/etcd/kubernetes"} {
			f.Src.Set(n, p+".pem", string(c))
			f.Src.Set(n, p+"-key.pem", string(k))
		}
	}
	f.Src.Edit(t, "lb", "/etc/haproxy/haproxy.cfg", "option httpchk GET /readyz", "option tcp-check")
	f.Src.Edit(t, "lb", "/etc/haproxy/haproxy.cfg", "http-check expect status 200", "")
	f.Src.Del("w1", "/etc/cni/net.d/10-bridge.conf")
	f.Src.Set("w1", "/etc/cni/net.d/10-pods.conflist", `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.200.0.0/24"}]]}},{"type":"portmap","capabilities":{"portMappings":true}}]}`)
	for _, lab := range []string{"04-etcd", "05-control-plane", "06-lb", "07-workers"} {
		ms, err := f.Check(t, detectorsOf(lab))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			t.Errorf("%s: valid variant flagged:\n%s", lab, m)
		}
	}
}

func TestErrors(t *testing.T) {
	f := labchecktest.NewFixture(t)
	f.Src.Down = "cp2"
	if _, err := f.Check(t, detectorsOf("04-etcd")); err == nil || !strings.Contains(err.Error(), "cp2") {
		t.Errorf("node down: err = %v, want one naming cp2", err)
	}
	f.Src.Down = ""
	// Without the API the file detectors still run and report.
	f.Src.Edit(t, "cp3", "/etc/systemd/system/kube-apiserver.service", "  --encryption-provider-config=/var/lib/kubernetes/encryption-config.yaml \\\n", "")
	ms, err := labcheck.Check(context.Background(), detectorsOf("05-control-plane"), f.Cluster, f.Src, nil)
	if !errors.Is(err, labcheck.ErrNoAPI) || !strings.Contains(err.Error(), "apiserver-kubelet-rbac") {
		t.Errorf("no API: err = %v, want errNoAPI naming apiserver-kubelet-rbac", err)
	}
	if len(ms) != 1 || ms[0].Node != "cp3" {
		t.Errorf("no API: mistakes = %v, want the missing flag on cp3", ms)
	}
}

// detectorsOf is the detectors of the catalogue's lab id.
func detectorsOf(id string) []labcheck.Detector {
	for _, l := range catalogue {
		if l.ID == id {
			return l.Detectors()
		}
	}
	return nil
}

// TestGoodClusterHasNoMistakes runs every lab's detectors against the
// cluster khw itself builds: any mistake here is a false positive.
func TestGoodClusterHasNoMistakes(t *testing.T) {
	for _, l := range All() {
		t.Run(l.ID, func(t *testing.T) {
			f := labchecktest.NewFixture(t)
			ms, err := f.Check(t, l.Detectors())
			if err != nil {
				t.Fatalf("Check(%s): %v", l.ID, err)
			}
			for _, m := range ms {
				t.Errorf("false positive:\n%s", m)
			}
		})
	}
}

// TestAMistakeIsNotAlsoAVariant: a server line of haproxy.cfg on the wrong
// port is a mistake of the lb detector; grade also reads it as a changed
// setting, which must then not be listed as a working variant too. Another
// changed setting stays a variant.
func TestAMistakeIsNotAlsoAVariant(t *testing.T) {
	f := labchecktest.NewFixture(t)
	const cfg = "/etc/haproxy/haproxy.cfg"
	ref := f.Src.Get(t, "lb", cfg)
	f.Src.Edit(t, "lb", cfg, "timeout connect 1s", "timeout connect 2s")
	f.Src.Edit(t, "lb", cfg, "server cp3 192.168.122.13:6443 ", "server cp3 192.168.122.13:6444 ")
	lbNode, _ := f.Cluster.Node("lb")
	judged, err := grade.Judge(f.Cluster, []grade.File{{Lab: labid.LB, Node: lbNode, Path: cfg, Ref: []byte(ref), Got: []byte(f.Src.Get(t, "lb", cfg))}})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := f.Check(t, detectorsOf(labid.LB))
	if err != nil {
		t.Fatal(err)
	}
	g := &Grade{Mistakes: ms}
	for _, j := range judged {
		switch j.Kind {
		case grade.Variant:
			g.Variants = append(g.Variants, j)
		case grade.NotJudged:
			g.NotJudged = append(g.NotJudged, j)
		}
	}
	var before []string
	for _, v := range append(g.Variants, g.NotJudged...) {
		before = append(before, v.What)
	}
	g.dropJudgedVariants()
	var after []string
	for _, v := range append(g.Variants, g.NotJudged...) {
		after = append(after, v.What)
	}
	if len(after) != 1 || !strings.Contains(after[0], "timeout connect: 1s → 2s") || len(before) < 2 {
		t.Errorf("variants before %q, after %q: want only the timeout left", before, after)
	}
}
