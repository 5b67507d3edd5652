package smoketest

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestSmokeOutput(t *testing.T) {
	rep := &Report{Cluster: "lab", Namespace: Namespace, Checks: []Check{
		{Name: CheckEncryption, OK: true, Evidence: `etcd … = "k8s:enc:aescbc:v1:key1:" + 5e 0b`, Duration: 420 * time.Millisecond},
		{Name: CheckNodePort, Err: "NodePort 30080 did not answer on w3", Evidence: "w1: 200; w3: connection refused", Duration: time.Minute},
		{Name: CheckBootstrapNode, OK: true, Skipped: true, Evidence: "skipped: no worker in cluster.yaml has tlsBootstrap: true"},
	}}
	var b bytes.Buffer
	for _, c := range rep.Checks {
		WriteCheck(&b, c)
	}
	WriteSummary(&b, rep)
	want := "✓ encryption         etcd … = \"k8s:enc:aescbc:v1:key1:\" + 5e 0b (400ms)\n" +
		"✗ nodeport           NodePort 30080 did not answer on w3 (1m0s)\n" +
		"                     seen: w1: 200; w3: connection refused\n" +
		"- tls-bootstrap-node skipped: no worker in cluster.yaml has tlsBootstrap: true (0s)\n" +
		"2 of 3 checks passed; namespace khw-smoke deleted\n"
	if b.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", b.String(), want)
	}
	if err := rep.Err("lab"); err == nil || err.Error() != "cluster lab: 1 of 3 smoke checks failed: nodeport" {
		t.Errorf("result %v", err)
	}
	rep.Checks = rep.Checks[:1]
	rep.Kept = true
	b.Reset()
	WriteSummary(&b, rep)
	if err := rep.Err("lab"); err != nil || !strings.Contains(b.String(), "1 of 1 checks passed; namespace khw-smoke kept") {
		t.Errorf("all passed: %v %q", err, b.String())
	}
}

// A check's error and evidence come from the cluster (a pod's output, a
// node's answer): their control characters are escaped.
func TestWriteCheckEscapesClusterText(t *testing.T) {
	var b bytes.Buffer
	WriteCheck(&b, Check{Name: CheckNodePort, Err: "w1 said x\x1b[2J\ry", Evidence: "w3: \x1b]0;owned\x07"})
	want := "✗ nodeport           w1 said x\\x1b[2J\\x0dy (0s)\n" +
		"                     seen: w3: \\x1b]0;owned\\x07\n"
	if b.String() != want {
		t.Errorf("output:\n%q\nwant:\n%q", b.String(), want)
	}
}
