package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/khw-dev/khw/internal/etcdsnap"
	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/certrenew"
	"github.com/khw-dev/khw/internal/lab/etcdbackup"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/upgrade"
	"github.com/khw-dev/khw/internal/steps"
)

// operate runs the operation of Operation lab l (lab.UI.Operate) under
// the lab's lock.
func operate(ctx context.Context, a *app, e *labEnv, l lab.Lab) error {
	switch l.ID {
	case labid.EtcdBackup:
		return etcdBackupLab(ctx, a, e)
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

// etcdBackupLab is lab 13 done by khw: the objects the snapshot must hold,
// a snapshot from etcd's leader into <state>/etcd-snapshots/, the changes
// it must undo, then khw etcd restore from it. Each part prints what it
// stands for (the by-hand commands are in khw lab 13 --by-hand).
func etcdBackupLab(ctx context.Context, a *app, e *labEnv) error {
	s := e.course.S
	cfg, err := s.AdminRESTConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "── part 1: what the snapshot must hold\n%s\n", steps.Indent(shellLines(etcdbackup.MakeObjectsCommand()), "  $ "))
	if err := etcdbackup.MakeObjects(ctx, cs); err != nil {
		return err
	}
	path := filepath.Join(etcdbackup.SnapshotsDir(e.d), labid.EtcdBackup+"-"+time.Now().UTC().Format("20060102-150405")+".db")
	fmt.Fprintf(a.out, "── part 1: the snapshot (khw etcd snapshot save %s: etcdctl snapshot save through the etcd client, from the leader)\n", path)
	res, err := etcdsnap.Save(ctx, s.Target(), path, false)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "  revision %d from %s, %s, sha256 %s\n", res.Revision, res.Member, sizeText(res.Size), res.SHA256)
	fmt.Fprintf(a.out, "── part 2: changes after the snapshot\n%s\n", steps.Indent(shellLines(etcdbackup.ChangeCommand()), "  $ "))
	if err := etcdbackup.Change(ctx, cs); err != nil {
		return err
	}
	r, err := etcdbackup.New(e.c, path, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "── part 3: khw etcd restore %s\n", path)
	return restoreEtcd(ctx, a, e.d, e.c, r)
}

// shellLines is c's shell text without a trailing newline.
func shellLines(c steps.Command) string { return strings.TrimRight(c.Shell, "\n") }
