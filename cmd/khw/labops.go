package main

import (
	"context"
	"fmt"

	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/certrenew"
	"github.com/khw-dev/khw/internal/lab/etcdbackup"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/upgrade"
)

// operate runs the operation of Operation lab l (lab.UI.Operate) under
// the lab's lock.
func operate(ctx context.Context, a *app, e *labEnv, l lab.Lab) error {
	switch l.ID {
	case labid.EtcdBackup:
		return etcdbackup.RunLab(ctx, e.course.S, a.out)
	case labid.CertRenewal:
		r := certrenew.LabRenewal(e.c)
		fmt.Fprintf(a.out, "── %s (by hand: khw lab 14 --by-hand)\n", r.CommandLine())
		return r.Run(ctx, e.c, e.d, renewalOptions(a))
	case labid.Upgrade:
		st, ok, err := upgrade.LoadStart(e.d)
		if err != nil || !ok {
			return fmt.Errorf("lab %s has no start record (%v): khw lab reset %s, then khw lab %s", l.ID, err, l.ID, l.ID)
		}
		fmt.Fprintf(a.out, "── khw upgrade --to %s (by hand: khw lab 15 --by-hand)\n", st.To)
		return runUpgrade(ctx, a, upgradeOptions{to: st.To, yes: true, locked: true}, nil)
	}
	return fmt.Errorf("lab %s has no operation khw can run", l.ID)
}
