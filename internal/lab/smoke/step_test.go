package smoke

import (
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/smoketest"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

func TestSmokeDiffs(t *testing.T) {
	rep := &smoketest.Report{Checks: []smoketest.Check{
		{Name: smoketest.CheckEncryption, OK: true, Evidence: "k8s:enc:aescbc:v1:key1: …"},
		{Name: smoketest.CheckNodePort, Err: "NodePort 30080 did not answer on w3", Evidence: "w1: 200; w3: connection refused"},
		{Name: smoketest.CheckBootstrapNode, Node: "w3", Err: "Node w3 is not registered"},
	}}
	diffs := smokeDiffs(rep)
	if len(diffs) != 2 || diffs[0].What != "smoke check nodeport failed: NodePort 30080 did not answer on w3 (seen: w1: 200; w3: connection refused)" ||
		diffs[1].Node != "w3" || !strings.Contains(diffs[1].What, "tls-bootstrap-node failed: Node w3 is not registered") {
		t.Fatalf("diffs %+v", diffs)
	}
}

func TestSmokeCommands(t *testing.T) {
	c := config.Default("t", config.ArchAMD64, config.ProviderNspawn)
	if _, err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	env := steps.NewEnv(c, state.New(t.TempDir(), c.Name))
	img, err := smoketest.AgnhostImage(c)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, cmd := range NewStep(nil).Commands(env, nil) {
		all = append(all, cmd.String())
	}
	text := strings.Join(all, "\n")
	bw, _ := smoketest.BootstrapWorker(c)
	for _, want := range []string{
		"create secret generic kubernetes-the-hard-way --from-literal=mykey=mydata",
		"get /registry/secrets/khw-smoke/kubernetes-the-hard-way | hexdump -C",
		"create deployment khw-smoke-web --image=" + img + " -- /agnhost netexec --http-port=80",
		"nslookup kubernetes.default.svc." + c.Kubernetes.ClusterDomain + " " + c.Kubernetes.ClusterDNS,
		`"nodeName":"` + bw.Name + `"`,
		bw.IP + ":10250",
		"delete namespace khw-smoke",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("smoke commands lack %q:\n%s", want, text)
		}
	}
	for _, w := range c.Workers() {
		if !strings.Contains(text, " "+w.IP) {
			t.Errorf("the NodePort loop misses %s", w.IP)
		}
	}
}
