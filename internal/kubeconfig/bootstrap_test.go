package kubeconfig

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestWriteBootstrap(t *testing.T) {
	pkiDir, _ := newPKI(t)
	out := t.TempDir()
	c := defaultCluster()
	if _, err := Reconcile(c, pkiDir, out); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, "w3-bootstrap.kubeconfig")
	const id, secret = "abcdef", "0123456789abcdef"
	fr, err := WriteBootstrap(c, pkiDir, out, "w3", id, secret)
	if err != nil {
		t.Fatal(err)
	}
	if fr.Action != Updated || fr.Reason != "token changed" || strings.Contains(fr.String(), secret) {
		t.Errorf("result %v", fr)
	}
	cfg := checkFile(t, path, wantDefault["w3-bootstrap.kubeconfig"], c, pkiDir)
	if tok := cfg.AuthInfos["kubelet-bootstrap"].Token; tok != id+"."+secret || !bootstrapTokenFormat.MatchString(tok) {
		t.Errorf("token = %q", tok)
	}

	// Reconcile keeps the real token.
	snap := age(t, out)
	rep, err := Reconcile(c, pkiDir, out)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := rep.Lookup("w3-bootstrap.kubeconfig"); f.Action != Kept || !strings.Contains(f.Reason, "holds a bootstrap token") {
		t.Errorf("reconcile after WriteBootstrap: %v", f)
	}
	if got := snap.touched(t, out); len(got) != 0 {
		t.Errorf("touched %v", got)
	}
	if strings.Contains(rep.String(), secret) {
		t.Error("report shows the token secret")
	}
	// A server change keeps the token too.
	c2 := *c
	c2.Kubernetes.APIServerPort = 7443
	if _, err := Reconcile(&c2, pkiDir, out); err != nil {
		t.Fatal(err)
	}
	cfg, _ = clientcmd.LoadFromFile(path)
	if cfg.AuthInfos["kubelet-bootstrap"].Token != id+"."+secret || cfg.Clusters[c.Kubernetes.ClusterName].Server != "https://lb:7443" {
		t.Error("server change must keep the bootstrap token")
	}

	// Same token again: kept. New token: updated.
	if fr, err := WriteBootstrap(&c2, pkiDir, out, "w3", id, secret); err != nil || fr.Action != Kept {
		t.Errorf("same token: %v %v", fr, err)
	}
	if fr, err := WriteBootstrap(&c2, pkiDir, out, "w3", "zyxwvu", "ffffffffffffffff"); err != nil || fr.Action != Updated || fr.Reason != "token changed" {
		t.Errorf("new token: %v %v", fr, err)
	}

	bad := []struct {
		node, id, secret string
		want             string
	}{
		{"w1", id, secret, "not a worker with tlsBootstrap"},
		{"cp1", id, secret, "not a worker with tlsBootstrap"},
		{"w9", id, secret, `no node "w9"`},
		{"w3", "ABCDEF", secret, `token id "ABCDEF"`},
		{"w3", "abcde", secret, "token id"},
		{"w3", id, "0123456789ABCDEF", "token secret (not shown)"},
		{"w3", id, "short", "token secret (not shown)"},
	}
	before := read(t, path)
	for _, b := range bad {
		_, err := WriteBootstrap(c, pkiDir, out, b.node, b.id, b.secret)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("WriteBootstrap(%s, %s): %v, want %q", b.node, b.id, err, b.want)
			continue
		}
		if strings.Contains(err.Error(), b.secret) {
			t.Errorf("error shows the token secret: %v", err)
		}
	}
	if !bytes.Equal(before, read(t, path)) {
		t.Error("a refused WriteBootstrap changed the file")
	}
	if _, err := os.Stat(filepath.Join(out, "w1-bootstrap.kubeconfig")); !os.IsNotExist(err) {
		t.Error("a bootstrap file was written for w1")
	}
}
