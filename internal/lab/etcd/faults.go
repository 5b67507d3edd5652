package etcd

import (
	"context"

	"github.com/khw-dev/khw/internal/lab/fault"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// Faults are lab 04's troubleshooting challenges (texts:
// labs/challenges/04-etcd.md).
func Faults() []fault.Fault {
	return []fault.Fault{
		{
			ID: "etcd-member-stopped", Lab: labid.Etcd, Level: 1,
			Source: fault.Source{Title: "etcd v3.4 operations guide, failure modes: clients lose connectivity to a failed member while the cluster keeps its quorum",
				URL: "https://etcd.io/docs/v3.4/op-guide/failures/"},
			Break: fault.OnNode("cp1", "systemctl disable --now etcd"),
			Named: []string{"[04-etcd] cp1: etcd.service is not running"},
		},
		{
			ID: "etcd-client-loopback", Lab: labid.Etcd, Level: 2,
			Source: fault.Source{Title: "etcd-io/etcd #4377: etcd listened on 127.0.0.1:2379, so it cannot be reached through another IP",
				URL: "https://github.com/etcd-io/etcd/issues/4377"},
			Break: fault.OnNode("cp3", `sed -i 's|--listen-client-urls=https://[0-9.]*:2379,|--listen-client-urls=|' /etc/systemd/system/etcd.service
grep -q -- '--listen-client-urls=https://127.0.0.1:2379 ' /etc/systemd/system/etcd.service
systemctl daemon-reload
systemctl restart etcd`),
			Named: []string{"[04-etcd] cp3: --listen-client-urls in etcd.service is https://127.0.0.1:2379: nothing listens on https://192.168.122.13:2379"},
		},
		{
			ID: "etcd-peer-ca", Lab: labid.Etcd, Level: 2,
			Source: fault.Source{Title: "etcd-io/etcd #10873: members refuse each other, \"x509: certificate signed by unknown authority\" and \"remote error: tls: bad certificate\"",
				URL: "https://github.com/etcd-io/etcd/issues/10873"},
			Break: func(ctx context.Context, a fault.Actions) error {
				ca, err := fault.NewCA("Kubernetes")
				if err != nil {
					return err
				}
				if err := a.Push(ctx, "cp2", "/etc/etcd/ca.pem", ca, 0o644); err != nil {
					return err
				}
				_, err = a.Run(ctx, "cp2", "systemctl restart --no-block etcd")
				return err
			},
			Named: []string{"[04-etcd] cp2:", "/etc/etcd/ca.pem"},
		},
	}
}
