package grade

import (
	"strings"
	"testing"
)

func TestLadderOf(t *testing.T) {
	f := Finding{Lab: "05-control-plane", Node: "cp2", Kind: Weakens,
		What:     "kube-apiserver.service on cp2: --authorization-mode=AlwaysAllow",
		Evidence: "/etc/systemd/system/kube-apiserver.service: --authorization-mode=AlwaysAllow",
		Why:      "every request is allowed",
		Fix:      "--authorization-mode=Node,RBAC, then systemctl restart kube-apiserver"}
	l := LadderOf(f, "ssh {node} sudo journalctl -u kube-apiserver")
	// Rung 1 says where, not what: no flag, no fix.
	if !strings.Contains(l[0], "on cp2") || !strings.Contains(l[0], "ssh cp2 sudo journalctl") || !strings.Contains(l[0], "05-control-plane") {
		t.Errorf("rung 1: %q", l[0])
	}
	if strings.Contains(l[0], "AlwaysAllow") || strings.Contains(l[0], "Node,RBAC") {
		t.Errorf("rung 1 gives the answer away: %q", l[0])
	}
	// Rung 2: what is wrong and what was read; still not the fix.
	if !strings.Contains(l[1], f.What) || !strings.Contains(l[1], f.Evidence) || !strings.Contains(l[1], f.Why) || strings.Contains(l[1], "Node,RBAC") {
		t.Errorf("rung 2: %q", l[1])
	}
	if l[2] != "Fix: "+f.Fix {
		t.Errorf("rung 3: %q", l[2])
	}

	// A cluster-wide finding names no node, and a look that needs one
	// says NODE; a finding without a fix points at the lab's text.
	c := LadderOf(Finding{Lab: "09-coredns", What: "no Service kube-dns"}, "ssh {node} x")
	if !strings.Contains(c[0], "in the cluster") || !strings.Contains(c[0], "ssh NODE x") {
		t.Errorf("cluster rung 1: %q", c[0])
	}
	if !strings.Contains(c[2], "khw lab 09-coredns --plain") {
		t.Errorf("no-fix rung 3: %q", c[2])
	}
	if j := LadderOf(Finding{Lab: "02-pki", Node: "jumpbox", What: "x"}, ""); !strings.Contains(j[0], "state directory") || !strings.Contains(j[0], "logs of what lab 02-pki installs") {
		t.Errorf("jumpbox rung 1 without a look: %q", j[0])
	}
}

// The first rung follows the finding's subject where that says where the
// mistake is, and still does not name the setting.
func TestLadderLooksWhereTheSubjectIs(t *testing.T) {
	look := "`ssh {node} sudo journalctl -u haproxy`"
	for _, c := range []struct {
		f          Finding
		want, deny string
	}{
		{Finding{Lab: "05-control-plane", Node: "cp2", Subject: "/etc/systemd/system/kube-apiserver.service --enable-admission-plugins"},
			"cp2 systemctl cat kube-apiserver.service", "admission"},
		{Finding{Lab: "07-workers", Node: "w1", Subject: "sysctl net.ipv4.ip_forward"}, "w1 sudo sysctl net.ipv4 net.bridge", "ip_forward"},
		{Finding{Lab: "07-workers", Node: "w1", Subject: "kernel module br_netfilter"}, "w1 lsmod", "br_netfilter"},
		{Finding{Lab: "04-etcd", Node: "cp3", Subject: "etcd.service"}, "cp3 systemctl status etcd.service", "listen"},
		{Finding{Lab: "06-lb", Node: "lb", Subject: "/etc/haproxy/haproxy.cfg backend kube-apiservers server cp3"},
			"ssh lb sudo journalctl -u haproxy`; then the files lab 06-lb installs there", "cp3"},
		{Finding{Lab: "06-lb", Node: "lb", Subject: "HAProxy server cp3"}, "ssh lb sudo journalctl -u haproxy", "6444"},
	} {
		got := LadderOf(c.f, look)[0]
		if !strings.Contains(got, c.want) || strings.Contains(got, c.deny) {
			t.Errorf("%+v: rung 1 %q, want it to contain %q and not %q", c.f, got, c.want, c.deny)
		}
	}
}

// TestLadderInKorean: the framing speaks Korean; the finding's own text
// and the commands stay as they are; every English phrase has a Korean one.
func TestLadderInKorean(t *testing.T) {
	f := Finding{Lab: "07-workers", Node: "w1", Subject: "/etc/systemd/system/kubelet.service --node-ip", What: "--node-ip in kubelet.service is 10.0.0.9", Evidence: "line 12", Fix: "set --node-ip=192.168.122.21"}
	l := LadderIn(f, "", "ko")
	if !strings.Contains(l[0], "w1에서 무언가 잘못됐습니다(실습 07-workers)") || !strings.Contains(l[0], "systemctl cat kubelet.service") {
		t.Errorf("rung 1 %q: want the Korean framing and the command as it is", l[0])
	}
	if !strings.HasPrefix(l[1], f.What) || !strings.Contains(l[1], "읽은 것: line 12") {
		t.Errorf("rung 2 %q", l[1])
	}
	if l[2] != "고치는 법: "+f.Fix {
		t.Errorf("rung 3 %q", l[2])
	}
	for k := range ladderWords["en"] {
		if _, ok := ladderWords["ko"][k]; !ok {
			t.Errorf("no Korean for %q", k)
		}
	}
	if LadderOf(f, "")[0] != LadderIn(f, "", "fr")[0] {
		t.Error("another language should fall back to English")
	}
}
