package libvirt

import (
	"context"
	"errors"
	"fmt"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/khw-dev/khw/internal/config"
)

// Snapshots of every node's domain, for khw lab reset.

// Snapshot makes snapshot name of every node (SnapshotXML: vda internal in
// its qcow2; a running node's memory too). When one node fails, the
// snapshots this call made on the others are deleted again, so a checkpoint
// exists on all nodes or on none.
func (p *Provider) Snapshot(ctx context.Context, name string) error {
	sx, err := SnapshotXML(name, "khw checkpoint "+name+" of cluster "+p.c.Name)
	if err != nil {
		return err
	}
	doc, err := sx.Marshal()
	if err != nil {
		return err
	}
	l, err := p.connect()
	if err != nil {
		return err
	}
	doms, err := p.allDomains(l)
	if err != nil {
		return err
	}
	var made []golibvirt.DomainSnapshot
	for i, d := range doms {
		if _, err := l.DomainSnapshotLookupByName(d, name, 0); err == nil {
			err = fmt.Errorf("node %s: snapshot %q exists already; delete it first (khw lab reset uses it as it is)", p.c.Nodes[i].Name, name)
			return errors.Join(err, p.undo(l, made))
		}
		s, err := l.DomainSnapshotCreateXML(d, doc, 0)
		if err != nil {
			err = fmt.Errorf("node %s: snapshot %q of %s: %w", p.c.Nodes[i].Name, name, d.Name, err)
			return errors.Join(err, p.undo(l, made))
		}
		made = append(made, s)
	}
	return nil
}

func (p *Provider) undo(l *golibvirt.Libvirt, made []golibvirt.DomainSnapshot) error {
	var errs []error
	for _, s := range made {
		if err := l.DomainSnapshotDelete(s, 0); err != nil {
			errs = append(errs, fmt.Errorf("remove partial snapshot %s of %s: %w", s.Name, s.Dom.Name, err))
		}
	}
	return errors.Join(errs...)
}

// allDomains returns the domains of every node, failing when one is
// missing.
func (p *Provider) allDomains(l *golibvirt.Libvirt) ([]golibvirt.Domain, error) {
	var out []golibvirt.Domain
	for _, n := range p.c.Nodes {
		d, found, err := p.lookupDomain(l, n.Name)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("node %s: no libvirt domain %s; run Create (khw up) first", n.Name, p.DomainName(n.Name))
		}
		out = append(out, d)
	}
	return out, nil
}

// Revert puts every node back to snapshot name: disk, and for a snapshot
// of a running node its memory, so the node runs on from that moment. SSH
// connections opened before are dead without the client noticing (no FIN
// reaches it): close the remote.Pool and dial again. Every node must have
// the snapshot.
func (p *Provider) Revert(ctx context.Context, name string) error {
	l, err := p.connect()
	if err != nil {
		return err
	}
	doms, err := p.allDomains(l)
	if err != nil {
		return err
	}
	snaps := make([]golibvirt.DomainSnapshot, len(doms))
	for i, d := range doms {
		s, err := l.DomainSnapshotLookupByName(d, name, 0)
		if err != nil {
			return fmt.Errorf("node %s: no snapshot %q (%v); list them with virsh snapshot-list %s", p.c.Nodes[i].Name, name, err, d.Name)
		}
		snaps[i] = s
	}
	for i, s := range snaps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := l.DomainRevertToSnapshot(s, 0); err != nil {
			return fmt.Errorf("node %s: revert %s to snapshot %q: %w", p.c.Nodes[i].Name, doms[i].Name, name, err)
		}
	}
	return nil
}

// DeleteSnapshot removes snapshot name from every node that has it.
func (p *Provider) DeleteSnapshot(ctx context.Context, name string) error {
	l, err := p.connect()
	if err != nil {
		return err
	}
	return errors.Join(p.eachNodeDomain(l, func(n config.Node, d golibvirt.Domain, found bool) []error {
		if !found {
			return nil
		}
		s, err := l.DomainSnapshotLookupByName(d, name, 0)
		if isLibvirtErr(err, golibvirt.ErrNoDomainSnapshot) {
			return nil
		}
		if err == nil {
			err = l.DomainSnapshotDelete(s, 0)
		}
		if err != nil {
			return []error{fmt.Errorf("node %s: delete snapshot %q: %w", n.Name, name, err)}
		}
		return nil
	})...)
}
