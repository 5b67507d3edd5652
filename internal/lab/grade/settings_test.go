package grade

import (
	"strings"
	"testing"
)

// What `systemctl cat` prints for a unit with a drop-in that replaces its
// command line.
const catWithDropIn = `# /etc/systemd/system/kubelet.service
[Service]
ExecStart=/usr/local/bin/kubelet \
  --config=/var/lib/kubelet/kubelet-config.yaml \
  --v=2

# /etc/systemd/system/kubelet.service.d/10-mine.conf
[Service]
ExecStart=
ExecStart=-/usr/local/bin/kubelet --config /etc/k.yaml \
  # a comment inside the continuation
  -v=4 --node-labels "a=b c" --fail-swap-on
`

func TestExecStartAndFlag(t *testing.T) {
	argv := ExecStart(catWithDropIn)
	if len(argv) == 0 || argv[0] != "/usr/local/bin/kubelet" {
		t.Fatalf("argv %q", argv)
	}
	for _, c := range []struct{ flag, want string }{
		{"config", "/etc/k.yaml"}, {"v", "4"}, {"node-labels", "a=b c"}, {"fail-swap-on", "true"},
	} {
		if v, ok := Flag(argv, c.flag); !ok || v != c.want {
			t.Errorf("--%s = %q, %v; want %q", c.flag, v, ok, c.want)
		}
	}
	if _, ok := Flag(argv, "kubeconfig"); ok {
		t.Error("--kubeconfig found")
	}
	if v, _ := Flag([]string{"etcd", "--name=a", "--name", "b"}, "name"); v != "b" {
		t.Errorf("last wins: got %q", v)
	}
	if ExecStart("[Unit]\nDescription=x\n") != nil {
		t.Error("a unit without ExecStart has an argv")
	}
}

// A unit's flags carry the physical line they are on.
func TestUnitFlagLines(t *testing.T) {
	c, err := Parse("/etc/systemd/system/x.service", []byte("[Service]\nExecStart=/bin/x \\\n  --a=1 \\\n  --b 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range c.Settings {
		got = append(got, s.Key+"="+s.Value+"@"+string(rune('0'+s.Line)))
	}
	if strings.Join(got, " ") != "ExecStart=/bin/x@2 --a=1@3 --b=2@4" {
		t.Errorf("settings %v", got)
	}
}
