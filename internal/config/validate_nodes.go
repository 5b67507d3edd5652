package config

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// nodeRef names nodes[i] in a field path: "nodes[4] (w1)", or "nodes[4]"
// when the name is empty, longer than MaxNodeNameLen or would need quoting
// (the name's own error shows it, clipped).
func (c *Cluster) nodeRef(i int) string {
	name := c.Nodes[i].Name
	if name == "" || len(name) > MaxNodeNameLen || strconv.Quote(name) != `"`+name+`"` {
		return fmt.Sprintf("nodes[%d]", i)
	}
	return fmt.Sprintf("nodes[%d] (%s)", i, name)
}

// exampleNodeName is a free name for a node of role in c, for a Fix: lb, cpN
// or wN with the smallest N no node has.
func (c *Cluster) exampleNodeName(role string) string {
	prefix := map[string]string{RoleLoadBalancer: "lb", RoleControlPlane: "cp"}[role]
	if prefix == "" {
		prefix = "w"
	}
	if _, taken := c.Node(prefix); role == RoleLoadBalancer && !taken {
		return prefix
	}
	for i := 1; ; i++ {
		if _, taken := c.Node(prefix + strconv.Itoa(i)); !taken {
			return prefix + strconv.Itoa(i)
		}
	}
}

func (c *Cluster) validateNodes(v *validator, nodeNet netip.Prefix, nodeNetOK bool, gw netip.Addr, gwOK bool, pods netip.Prefix, podsOK bool) {
	if len(c.Nodes) == 0 {
		v.add("nodes", "", "is empty", "list the machines: one loadbalancer, an odd number of controlplanes, and workers (see `khw init`)")
		return
	}
	nc := &nodeChecker{c: c, v: v, nodeNet: nodeNet, nodeNetOK: nodeNetOK, gw: gw, gwOK: gwOK, pods: pods, podsOK: podsOK,
		names: map[string]int{}, ips: map[netip.Addr]int{}}
	counts := map[string]int{}
	for i, n := range c.Nodes {
		f := func(s string) string { return c.nodeRef(i) + "." + s }
		nc.name(i, n, f)
		roleOK := v.oneOf(f("role"), n.Role, RoleLoadBalancer, RoleControlPlane, RoleWorker)
		if roleOK {
			counts[n.Role]++
		}
		nc.ip(i, n, f)
		nc.podCIDRAndKubelet(i, n, f, roleOK)
		nc.size(n, f)
	}
	if got := counts[RoleLoadBalancer]; got != 1 {
		v.add("nodes", strconv.Itoa(got)+" loadbalancer nodes", "the cluster needs exactly one node with role loadbalancer (HAProxy in front of the apiservers)",
			"keep exactly one `role: loadbalancer` node")
	}
	switch cps := counts[RoleControlPlane]; {
	case cps == 0:
		v.add("nodes", "0 controlplane nodes", "the cluster needs at least one control plane", "add `role: controlplane` nodes (3 for HA)")
	case cps%2 == 0:
		q := cps/2 + 1
		v.warn("nodes", fmt.Sprintf("%d control planes: etcd quorum is %d of %d, so the cluster survives %d failure(s), no more than %d control planes would; use an odd number",
			cps, q, cps, cps-q, cps-1))
	}
	if counts[RoleWorker] == 0 {
		v.add("nodes", "0 worker nodes", "the cluster needs at least one worker", "add `role: worker` nodes with a podCIDR each")
	}
}

// nodeChecker checks the nodes of cluster.yaml one by one, remembering
// what must be unique across them.
type nodeChecker struct {
	c         *Cluster
	v         *validator
	nodeNet   netip.Prefix
	nodeNetOK bool
	gw        netip.Addr
	gwOK      bool
	pods      netip.Prefix
	podsOK    bool

	names   map[string]int
	ips     map[netip.Addr]int
	podNets []podNet
}

// podNet is a worker's podCIDR and the node's index.
type podNet struct {
	idx int
	p   netip.Prefix
}

// name: a DNS label, not a name khw's own files take, short enough for
// nspawn and the FQDN, unique.
func (nc *nodeChecker) name(i int, n Node, f func(string) string) {
	c, v := nc.c, nc.v
	if !dnsLabelRE.MatchString(n.Name) || len(n.Name) > MaxNodeNameLen {
		v.add(f("name"), n.Name, "is not a valid host name",
			fmt.Sprintf("use a DNS label: 1-%d lowercase letters, digits and '-', e.g. %s", MaxNodeNameLen, c.exampleNodeName(n.Role)))
	} else if why := ReservedNodeName(n.Name); why != "" {
		v.add(f("name"), n.Name, "collides with a file khw writes for the cluster (a node's cert, key and kubeconfig are named after the node): "+why,
			"rename the node, e.g. to "+c.exampleNodeName(n.Role)+"; taken are "+strings.Join(reservedBases, ", ")+" and names ending in -key, -csr or -bootstrap")
	} else if c.Provider == ProviderNspawn && ValidName(c.Name) == nil && len(c.Name)+1+len(n.Name) > MaxMachineNameLen {
		v.add(f("name"), n.Name, fmt.Sprintf("makes the nspawn machine name %s-%s %d characters long, over the %d systemd-nspawn allows (HOST_NAME_MAX)",
			c.Name, n.Name, len(c.Name)+1+len(n.Name), MaxMachineNameLen),
			fmt.Sprintf("shorten the node name to at most %d characters (or the cluster name)", MaxMachineNameLen-1-len(c.Name)))
	} else if validDNSName(c.Network.Domain) && len(n.Name)+1+len(c.Network.Domain) > maxDNSName {
		v.add(f("name"), n.Name, fmt.Sprintf("makes the FQDN %s.%s longer than %d characters (a DNS name, and a SAN of the node's certs)", n.Name, c.Network.Domain, maxDNSName),
			"shorten the node name or network.domain")
	} else if j, dup := nc.names[n.Name]; dup {
		v.add(f("name"), n.Name, fmt.Sprintf("duplicates nodes[%d]", j), "give every node its own name")
	} else {
		nc.names[n.Name] = i
	}
}

// ip: inside network.cidr, not the gateway, unique.
func (nc *nodeChecker) ip(i int, n Node, f func(string) string) {
	c, v := nc.c, nc.v
	if a, ok := v.addr(f("ip"), n.IP); ok {
		switch {
		case nc.nodeNetOK && !hostAddr(nc.nodeNet, a):
			v.add(f("ip"), n.IP, "is outside network.cidr "+nc.nodeNet.String()+" (or is its network/broadcast address)",
				"use a host address inside "+nc.nodeNet.String()+", or change network.cidr")
		case nc.gwOK && a == nc.gw:
			v.add(f("ip"), n.IP, "is network.gateway, the jumpbox's own address", "give the node another address")
		default:
			if j, dup := nc.ips[a]; dup {
				v.add(f("ip"), n.IP, "duplicates "+c.nodeRef(j), "give every node its own IP")
			} else {
				nc.ips[a] = i
			}
		}
	}
}

// podCIDRAndKubelet: a worker's own podCIDR inside clusterCIDR; no pod or
// kubelet settings on other roles; a pre-issued kubelet cert that exists.
func (nc *nodeChecker) podCIDRAndKubelet(i int, n Node, f func(string) string, roleOK bool) {
	c, v := nc.c, nc.v
	if n.Role == RoleWorker {
		if n.PodCIDR == "" {
			inside := "kubernetes.clusterCIDR"
			if nc.podsOK {
				inside += " " + nc.pods.String()
			}
			v.add(f("podCIDR"), "", "is missing: every worker needs its own pod subnet",
				"add podCIDR: a free /24 inside "+inside)
		} else if p, ok := v.prefix(f("podCIDR"), n.PodCIDR); ok {
			switch {
			case nc.podsOK && !(nc.pods.Contains(p.Addr()) && p.Bits() >= nc.pods.Bits()):
				v.add(f("podCIDR"), n.PodCIDR, "is not inside kubernetes.clusterCIDR "+nc.pods.String(),
					"use a /24 inside "+nc.pods.String())
			case p.Bits() > 28:
				v.add(f("podCIDR"), n.PodCIDR, "is too small for the pods of a node", "use a /24")
			default:
				for _, o := range nc.podNets {
					if o.p.Overlaps(p) {
						v.add(f("podCIDR"), n.PodCIDR, fmt.Sprintf("overlaps the podCIDR %s of %s", o.p, c.nodeRef(o.idx)),
							"give every worker its own, non-overlapping podCIDR")
						break
					}
				}
				nc.podNets = append(nc.podNets, podNet{i, p})
			}
		}
	} else if roleOK {
		// Only a known role: the role error already covers the rest.
		if n.PodCIDR != "" {
			v.add(f("podCIDR"), n.PodCIDR, "is set on a "+n.Role+" node, which runs no pods", "remove it (only workers have a podCIDR)")
		}
		if n.TLSBootstrap {
			v.add(f("tlsBootstrap"), "true", "is set on a "+n.Role+" node; only a worker's kubelet joins by TLS bootstrap", "remove it")
		}
		if n.KubeletCert != nil {
			v.add(f("kubeletCert"), "", "is set on a "+n.Role+" node, which runs no kubelet", "remove it")
		}
	}
	if n.TLSBootstrap && n.KubeletCert != nil {
		v.add(f("kubeletCert"), n.KubeletCert.Cert,
			"a TLS-bootstrap worker gets its kubelet cert from the cluster through a CSR, so it cannot also have a pre-issued cert",
			"remove kubeletCert, or set tlsBootstrap: false to install the pre-issued cert")
	}
	if n.KubeletCert != nil && (n.KubeletCert.Cert == "" || n.KubeletCert.Key == "") {
		v.add(f("kubeletCert"), "", "needs both cert and key", "give the paths of the PEM cert and its private key")
	} else if n.KubeletCert != nil {
		for _, x := range []struct{ field, path string }{{"kubeletCert.cert", n.KubeletCert.Cert}, {"kubeletCert.key", n.KubeletCert.Key}} {
			if st, err := os.Stat(x.path); err != nil || !st.Mode().IsRegular() {
				v.add(f(x.field), x.path, "is not a readable file", "give the path of the PEM file on this machine (absolute, or relative to where you run khw)")
			}
		}
	}
}

// size: CPUs, memory and disk in range.
func (nc *nodeChecker) size(n Node, f func(string) string) {
	v := nc.v
	if n.CPUs < 1 || n.CPUs > 64 {
		v.add(f("cpus"), strconv.Itoa(n.CPUs), "is out of range", "use 1-64")
	}
	if n.MemoryMiB < 256 || n.MemoryMiB > 1<<20 {
		v.add(f("memoryMiB"), strconv.Itoa(n.MemoryMiB), "is out of range", "use 512-1048576 (MiB); 2048 for control planes and workers")
	}
	if n.DiskGiB < 4 || n.DiskGiB > 1<<16 {
		v.add(f("diskGiB"), strconv.Itoa(n.DiskGiB), "is out of range", "use 4-65536 (GiB); 20 is comfortable")
	}
}
