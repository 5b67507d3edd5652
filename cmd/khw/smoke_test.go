package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/smoketest"
)

func TestSmokeOutput(t *testing.T) {
	rep := &smoketest.Report{Cluster: "lab", Namespace: smoketest.Namespace, Checks: []smoketest.Check{
		{Name: smoketest.CheckEncryption, OK: true, Evidence: `etcd … = "k8s:enc:aescbc:v1:key1:" + 5e 0b`, Duration: 420 * time.Millisecond},
		{Name: smoketest.CheckNodePort, Err: "NodePort 30080 did not answer on w3", Evidence: "w1: 200; w3: connection refused", Duration: time.Minute},
		{Name: smoketest.CheckBootstrapNode, OK: true, Skipped: true, Evidence: "skipped: no worker in cluster.yaml has tlsBootstrap: true"},
	}}
	var b bytes.Buffer
	for _, c := range rep.Checks {
		printSmokeCheck(&b, c)
	}
	printSmokeSummary(&b, rep)
	want := "✓ encryption         etcd … = \"k8s:enc:aescbc:v1:key1:\" + 5e 0b (400ms)\n" +
		"✗ nodeport           NodePort 30080 did not answer on w3 (1m0s)\n" +
		"                     seen: w1: 200; w3: connection refused\n" +
		"- tls-bootstrap-node skipped: no worker in cluster.yaml has tlsBootstrap: true (0s)\n" +
		"2 of 3 checks passed; namespace khw-smoke deleted\n"
	if b.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", b.String(), want)
	}
	err := smokeResult("lab", rep)
	if err == nil || err.Error() != "cluster lab: 1 of 3 smoke checks failed: nodeport" || exitCode(err) != exitFailed {
		t.Errorf("result %v (exit %d)", err, exitCode(err))
	}
	rep.Checks = rep.Checks[:1]
	rep.Kept = true
	b.Reset()
	printSmokeSummary(&b, rep)
	if err := smokeResult("lab", rep); err != nil || !strings.Contains(b.String(), "1 of 1 checks passed; namespace khw-smoke kept") {
		t.Errorf("all passed: %v %q", err, b.String())
	}
}

func TestSmokeFlags(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, errOut, code := run(t, base, "init", "--name", "lab", "--provider", "nspawn"); code != 0 {
		t.Fatal(errOut)
	}
	for _, args := range [][]string{{"smoke", "-o", "yaml"}, {"smoke", "--wait", "0s"}, {"smoke", "extra"}} {
		if _, errOut, code := run(t, base, args...); code != exitUsage {
			t.Errorf("%v: exit %d (%s), want %d", args, code, errOut, exitUsage)
		}
	}
	// No PKI yet: the command names what is missing instead of trying.
	_, errOut, code := run(t, base, "smoke")
	if code != exitFailed || !strings.Contains(errOut, "admin.kubeconfig") {
		t.Errorf("smoke before khw kubeconfig: exit %d, %s", code, errOut)
	}
}
