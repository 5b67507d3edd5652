package labcheck

import (
	"testing"

	"github.com/khw-dev/khw/internal/lab/grade"
)

func TestParseExecStart(t *testing.T) {
	unit := `# /etc/systemd/system/kubelet.service
[Unit]
ExecStart=/bin/false
[Service]
ExecStart=/usr/local/bin/kubelet \
  --config=/a.yaml \
  --kubeconfig /k
# /etc/systemd/system/kubelet.service.d/10-override.conf
[Service]
ExecStart=
ExecStart=-/usr/local/bin/kubelet --config=/b.yaml --hostname-override "w 1" --v
`
	u := UnitCmd{Unit: "kubelet.service", Argv: grade.ExecStart(unit)}
	for _, c := range []struct{ flag, want string }{{"config", "/b.yaml"}, {"hostname-override", "w 1"}, {"v", "true"}} {
		if v, ok := u.Flag(c.flag); !ok || v != c.want {
			t.Errorf("--%s = %q %v, want %q", c.flag, v, ok, c.want)
		}
	}
	if _, ok := u.Flag("kubeconfig"); ok {
		t.Errorf("--kubeconfig of the reset ExecStart must be gone")
	}
	if u.Argv[0] != "/usr/local/bin/kubelet" {
		t.Errorf("argv[0] = %q", u.Argv[0])
	}
}
