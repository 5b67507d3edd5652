package libvirt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/vm"
)

// Power: start, stop, status, addresses and destroy.

// Start powers node on (virsh start). A running node is left alone.
func (p *Provider) Start(ctx context.Context, node string) error {
	if _, err := p.node(node); err != nil {
		return err
	}
	l, err := p.connect()
	if err != nil {
		return err
	}
	d, found, err := p.lookupDomain(l, node)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("node %s: no libvirt domain %s; run Create (khw up) first", node, p.DomainName(node))
	}
	st, err := domainState(l, d)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	switch st {
	case golibvirt.DomainRunning:
		return nil
	case golibvirt.DomainPaused:
		if err := l.DomainResume(d); err != nil {
			return fmt.Errorf("node %s: resume %s: %w", node, d.Name, err)
		}
		return nil
	}
	if err := l.DomainCreate(d); err != nil {
		return fmt.Errorf("node %s: start domain %s: %w", node, d.Name, err)
	}
	return nil
}

// Stop powers node off. Graceful: an ACPI power-button press (re-sent every
// 10 s, as one sent while the guest boots is lost), then wait until libvirt
// reports the domain shut off or ctx ends (then an error naming the force
// option). Force: virsh destroy, at once.
func (p *Provider) Stop(ctx context.Context, node string, force bool) error {
	if _, err := p.node(node); err != nil {
		return err
	}
	l, err := p.connect()
	if err != nil {
		return err
	}
	d, found, err := p.lookupDomain(l, node)
	if err != nil || !found {
		return err
	}
	st, err := domainState(l, d)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	if st == golibvirt.DomainShutoff {
		return nil
	}
	if force {
		if err := l.DomainDestroy(d); err != nil && !isLibvirtErr(err, golibvirt.ErrOperationInvalid) {
			return fmt.Errorf("node %s: power off (destroy) %s: %w", node, d.Name, err)
		}
		return nil
	}
	var lastPress time.Time
	for {
		if time.Since(lastPress) >= 10*time.Second {
			if err := l.DomainShutdownFlags(d, golibvirt.DomainShutdownAcpiPowerBtn); err != nil && !isLibvirtErr(err, golibvirt.ErrOperationInvalid) {
				return fmt.Errorf("node %s: ACPI shutdown of %s: %w", node, d.Name, err)
			}
			lastPress = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: still shutting down: %w; stop it with force (power off)", node, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
		st, err := domainState(l, d)
		if err != nil {
			return fmt.Errorf("node %s: %w", node, err)
		}
		if st == golibvirt.DomainShutoff {
			return nil
		}
	}
}

// Status reports each node: running (libvirt running or paused), stopped
// (defined, shut off) or absent. PID is 0 (libvirt does not expose the QEMU
// process id over its API).
func (p *Provider) Status(ctx context.Context) ([]vm.NodeStatus, error) {
	l, err := p.connect()
	if err != nil {
		return nil, err
	}
	var out []vm.NodeStatus
	for _, n := range p.c.Nodes {
		s := vm.NodeStatus{Name: n.Name, IP: n.Addr(), State: vm.StateAbsent}
		d, found, err := p.lookupDomain(l, n.Name)
		var foreign *vm.ForeignOwnerError
		switch {
		case errors.As(err, &foreign):
			// Another state directory's VM: absent for this cluster.
		case err != nil:
			return nil, err
		case found:
			st, err := domainState(l, d)
			if err != nil {
				return nil, fmt.Errorf("node %s: %w", n.Name, err)
			}
			if st == golibvirt.DomainRunning || st == golibvirt.DomainPaused {
				s.State = vm.StateRunning
			} else {
				s.State = vm.StateStopped
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// Addresses maps node names to their cluster.yaml IPs.
func (p *Provider) Addresses() map[string]netip.Addr { return vm.Addresses(p.c) }

// Dialer connects directly (the host routes the node network through the
// libvirt bridge), or from inside Options.NetnsPath when set.
func (p *Provider) Dialer() remote.DialFunc {
	if p.opts.NetnsPath != "" {
		return vm.NetnsDialer(p.opts.NetnsPath)
	}
	var d net.Dialer
	return d.DialContext
}

// eachNodeDomain calls fn for every node of cluster.yaml with its domain
// (found false when it has none) and returns the errors of the lookups and
// of fn, in node order. A node whose lookup fails (e.g. a domain of
// another state directory) is not passed to fn.
func (p *Provider) eachNodeDomain(l *golibvirt.Libvirt, fn func(n config.Node, d golibvirt.Domain, found bool) []error) []error {
	var errs []error
	for _, n := range p.c.Nodes {
		d, found, err := p.lookupDomain(l, n.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, fn(n, d, found)...)
	}
	return errs
}

// Destroy powers off and undefines every node domain (with its NVRAM and
// snapshot metadata), deletes the node volumes (overlay with its internal
// snapshots, seed), and the network when khw made it for this cluster (its
// metadata names this state directory). The pool and the base image
// volumes stay (a shared cache). Missing objects are skipped.
func (p *Provider) Destroy(ctx context.Context) error {
	l, err := p.connect()
	if err != nil {
		return err
	}
	errs := p.eachNodeDomain(l, func(n config.Node, d golibvirt.Domain, found bool) []error {
		if found {
			if st, _ := domainState(l, d); st != golibvirt.DomainShutoff {
				if err := l.DomainDestroy(d); err != nil && !isLibvirtErr(err, golibvirt.ErrOperationInvalid) {
					return []error{fmt.Errorf("node %s: power off %s: %w", n.Name, d.Name, err)}
				}
			}
			flags := golibvirt.DomainUndefineManagedSave | golibvirt.DomainUndefineSnapshotsMetadata |
				golibvirt.DomainUndefineNvram | golibvirt.DomainUndefineCheckpointsMetadata
			if err := l.DomainUndefineFlags(d, flags); err != nil {
				return []error{fmt.Errorf("node %s: undefine %s: %w", n.Name, d.Name, err)}
			}
		}
		return p.deleteVolumes(l, n.Name)
	})
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := p.deleteOwnNetwork(l); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(p.opts.StateDir, "libvirt"))
}
