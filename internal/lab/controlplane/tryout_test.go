package controlplane

import (
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/lab/labcheck/labchecktest"
)

// A Secret one apiserver stores and another cannot read is blamed on
// their encryption configs when those differ, with both files' digests.
func TestReadCauseNamesDifferentEncryptionConfigs(t *testing.T) {
	f := labchecktest.NewFixture(t)
	cp1, _ := f.Cluster.Node("cp1")
	cp2, _ := f.Cluster.Node("cp2")
	ev, fix := readCause(f.Env(), cp1, cp2)
	if !strings.Contains(ev, "are the same") || !strings.Contains(fix, "journalctl -u kube-apiserver") {
		t.Errorf("same configs: evidence %q, fix %q", ev, fix)
	}
	const p = "/var/lib/kubernetes/encryption-config.yaml"
	data := f.Src.Get(t, "cp2", p)
	i := strings.Index(data, "secret: ")
	f.Src.Set("cp2", p, data[:i]+"secret: QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY="+data[strings.Index(data[i:], "\n")+i:])
	ev, fix = readCause(f.Env(), cp1, cp2)
	if !strings.Contains(ev, "cp1:"+p+" (sha256 ") || !strings.Contains(ev, ") differ") || !strings.Contains(fix, "same encryption config to every control plane") {
		t.Errorf("different configs: evidence %q, fix %q", ev, fix)
	}
}
