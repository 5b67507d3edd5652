package etcd

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/pki"
	"github.com/khw-dev/khw/internal/render"
	"sigs.k8s.io/yaml"
)

// etcdOpts are etcd's settings on one node: the flags of etcd.service, or
// the keys of its --config-file (same names without dashes), as etcd reads
// them (https://etcd.io/docs/latest/op-guide/configuration/).
type etcdOpts struct {
	unit labcheck.UnitCmd
	conf map[string]any
	from string // "etcd.service" or the config file path
}

// etcdConfTLS maps TLS flags to their place in an etcd config file, where
// they live under client-transport-security and peer-transport-security
// (etcd.conf.yml.sample in the etcd repository).
var etcdConfTLS = map[string][2]string{
	"cert-file":             {"client-transport-security", "cert-file"},
	"key-file":              {"client-transport-security", "key-file"},
	"trusted-ca-file":       {"client-transport-security", "trusted-ca-file"},
	"client-cert-auth":      {"client-transport-security", "client-cert-auth"},
	"peer-cert-file":        {"peer-transport-security", "cert-file"},
	"peer-key-file":         {"peer-transport-security", "key-file"},
	"peer-trusted-ca-file":  {"peer-transport-security", "trusted-ca-file"},
	"peer-client-cert-auth": {"peer-transport-security", "client-cert-auth"},
	// The allowlists (embed/config.go securityConfig: allowed-cn,
	// allowed-hostname). A config file may set a client CN list, which the
	// command line of etcd 3.7 no longer can.
	"client-cert-allowed-hostname": {"client-transport-security", "allowed-hostname"},
	"client-cert-allowed-cn":       {"client-transport-security", "allowed-cn"},
	"peer-cert-allowed-hostname":   {"peer-transport-security", "allowed-hostname"},
	"peer-cert-allowed-cn":         {"peer-transport-security", "allowed-cn"},
}

func (o etcdOpts) get(name string) (string, bool) {
	if o.conf == nil {
		return o.unit.Flag(name)
	}
	v, ok := o.conf[name]
	if where, nested := etcdConfTLS[name]; nested {
		sec, _ := o.conf[where[0]].(map[string]any)
		v, ok = sec[where[1]]
	}
	if !ok || v == nil {
		return "", false
	}
	if l, isList := v.([]any); isList {
		parts := make([]string, len(l))
		for i, x := range l {
			parts[i] = fmt.Sprint(x)
		}
		return strings.Join(parts, ","), true
	}
	return fmt.Sprint(v), true
}

// setting is how to set option name to value where etcd reads its
// options: --name=value, or the YAML key of the config file.
func (o etcdOpts) setting(name, value string) string {
	if o.conf == nil {
		return "--" + name + "=" + value
	}
	key := name
	if where, nested := etcdConfTLS[name]; nested {
		key = where[0] + "." + where[1]
		if strings.Contains(name, "allowed") {
			value = "[" + value + "]"
		}
	}
	return key + ": " + value + " in " + o.from
}

// list returns a comma-separated option (a YAML list in a config file) as
// its non-empty items, as etcd's flags.StringsFromFlag splits it.
func (o etcdOpts) list(name string) []string {
	v, _ := o.get(name)
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// getOr returns the option or etcd's default.
func (o etcdOpts) getOr(name, def string) string {
	if v, ok := o.get(name); ok {
		return v
	}
	return def
}

func (o etcdOpts) evidence(name string) string {
	key := name
	if where, nested := etcdConfTLS[name]; nested && o.conf != nil {
		key = where[0] + "." + where[1]
	}
	if v, ok := o.get(name); ok {
		return o.from + ": " + key + "=" + v
	}
	return o.from + ": no " + key + " (etcd's default applies)"
}

// readEtcd reads etcd's settings on node; found is false without a unit.
func readEtcd(e *labcheck.Env, node string) (etcdOpts, bool, []labcheck.Mistake, error) {
	u, ok, err := e.ReadUnit(node, "etcd.service")
	if err != nil || !ok {
		if err != nil {
			return etcdOpts{}, false, nil, err
		}
		return etcdOpts{}, false, []labcheck.Mistake{{Lab: labid.Etcd, Node: node, What: "etcd.service is not known to systemd (or has no ExecStart)",
			Evidence: "`systemctl cat etcd.service` printed no ExecStart", Fix: "write /etc/systemd/system/etcd.service, then systemctl daemon-reload && systemctl enable --now etcd"}}, nil
	}
	o := etcdOpts{unit: u, from: "etcd.service"}
	if p, ok := u.Flag("config-file"); ok {
		data, found, err := e.Read(node, p)
		if err != nil {
			return o, false, nil, err
		}
		if !found {
			return o, false, []labcheck.Mistake{labcheck.Missing(labid.Etcd, node, p, "etcd's --config-file", "write it or drop --config-file")}, nil
		}
		if err := yaml.Unmarshal(data, &o.conf); err != nil {
			return o, false, []labcheck.Mistake{{Lab: labid.Etcd, Node: node, What: "etcd's config file " + p + " is not YAML", Evidence: p + ": " + err.Error(), Fix: "fix its YAML (etcd.conf.yml.sample in the etcd repository)"}}, nil
		}
		o.from = p
	}
	return o, true, nil, nil
}

// parseInitialCluster parses name=url,name=url into name → URLs.
func parseInitialCluster(s string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, u, ok := strings.Cut(part, "=")
		if !ok || n == "" || u == "" {
			return nil, fmt.Errorf("entry %q is not name=URL", part)
		}
		out[n] = append(out[n], u)
	}
	return out, nil
}

func urlHosts(list string) []string {
	var out []string
	for _, s := range strings.Split(list, ",") {
		if u, err := url.Parse(strings.TrimSpace(s)); err == nil && u.Hostname() != "" {
			out = append(out, u.Hostname())
		}
	}
	return out
}

func canonURLs(urls []string) string {
	s := slices.Clone(urls)
	sort.Strings(s)
	return strings.Join(s, ",")
}

// etcdCluster checks each member's identity and the shared member list:
// --name must be a key of --initial-cluster and its URLs must equal
// --initial-advertise-peer-urls (etcd refuses to start otherwise:
// server/embed/config.go PeerURLsMapAndToken, server/etcdserver/bootstrap.go),
// every member must be started with the same --initial-cluster, which must
// list exactly the control planes at their IPs (a member that never comes
// counts against the quorum), and client and peer cert auth must be on
// (https://etcd.io/docs/latest/op-guide/security/).
func etcdCluster(e *labcheck.Env) ([]labcheck.Mistake, error) {
	const lab = labid.Etcd
	var out []labcheck.Mistake
	cps := e.Cluster.ControlPlanes()
	groups := map[string][]string{} // canonical --initial-cluster → members
	raws := map[string]string{}
	for _, n := range cps {
		o, ok, ms, err := readEtcd(e, n.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
		if !ok {
			continue
		}
		name := o.getOr("name", "default")
		icRaw := o.getOr("initial-cluster", "default=http://localhost:2380")
		ic, perr := parseInitialCluster(icRaw)
		if perr != nil {
			out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: "--initial-cluster does not parse: " + perr.Error(), Evidence: o.evidence("initial-cluster"), Fix: "--initial-cluster=" + wantInitialCluster(e)})
			continue
		}
		if name != n.Name {
			out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("etcd on %s is named %q, not %q: its member name will not match cluster.yaml", n.Name, name, n.Name),
				Evidence: o.evidence("name"), Fix: "--name=" + n.Name + " (and the same name in --initial-cluster)"})
		}
		if _, ok := ic[name]; !ok {
			out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("--name %q is not in --initial-cluster: etcd exits with \"couldn't find local name %q in the initial cluster configuration\"", name, name),
				Evidence: o.evidence("name") + "; " + o.evidence("initial-cluster"), Fix: "--initial-cluster=" + wantInitialCluster(e)})
		} else {
			adv := o.getOr("initial-advertise-peer-urls", "http://localhost:2380")
			if canonURLs(strings.Split(adv, ",")) != canonURLs(ic[name]) {
				out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("--initial-advertise-peer-urls differs from the URLs of %q in --initial-cluster: etcd refuses to start", name),
					Evidence: o.evidence("initial-advertise-peer-urls") + "; " + o.evidence("initial-cluster"), Fix: "--initial-advertise-peer-urls=https://" + n.IP + ":2380"})
			}
		}
		// The member list against cluster.yaml.
		for _, m := range labcheck.SortedKeys(ic) {
			cp, known := e.Cluster.Node(m)
			switch {
			case !known || !slices.ContainsFunc(cps, func(x config.Node) bool { return x.Name == m }):
				out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("--initial-cluster lists member %q, which is not a control plane of the cluster: the new cluster waits for it and counts it in the quorum", m),
					Evidence: o.evidence("initial-cluster"), Fix: "--initial-cluster=" + wantInitialCluster(e)})
			default:
				for _, h := range urlHosts(strings.Join(ic[m], ",")) {
					if h != cp.IP && h != cp.Name && h != e.Cluster.FQDN(cp) {
						out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("--initial-cluster gives member %s the address %s, but %s is at %s", m, h, m, cp.IP),
							Evidence: o.evidence("initial-cluster"), Fix: "--initial-cluster=" + wantInitialCluster(e)})
					}
				}
			}
		}
		for _, cp := range cps {
			if _, ok := ic[cp.Name]; !ok {
				out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: fmt.Sprintf("--initial-cluster does not list the control plane %s", cp.Name),
					Evidence: o.evidence("initial-cluster"), Fix: "--initial-cluster=" + wantInitialCluster(e)})
			}
		}
		canon := canonIC(ic)
		groups[canon] = append(groups[canon], n.Name)
		raws[n.Name] = icRaw
		for _, f := range []string{"client-cert-auth", "peer-client-cert-auth"} {
			if v, ok := o.get(f); !ok || v != "true" {
				out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: "etcd runs without --" + f + ": whoever reaches it can read every Secret and every key without a cert from the CA",
					Evidence: o.evidence(f), Fix: "add --" + f + " (with --trusted-ca-file / --peer-trusted-ca-file=/etc/etcd/ca.pem)"})
			}
		}
		allow, err := etcdAllowlists(e, n.Name, o)
		if err != nil {
			return nil, err
		}
		out = append(out, allow...)
	}
	if len(groups) > 1 {
		// The list most members share (or the one cluster.yaml implies)
		// is the reference; every member started otherwise is named.
		want, _ := parseInitialCluster(wantInitialCluster(e))
		ref := ""
		for _, k := range labcheck.SortedKeys(groups) {
			if ref == "" || len(groups[k]) > len(groups[ref]) || (len(groups[k]) == len(groups[ref]) && k == canonIC(want)) {
				ref = k
			}
		}
		for _, k := range labcheck.SortedKeys(groups) {
			if k == ref {
				continue
			}
			for _, n := range groups[k] {
				out = append(out, labcheck.Mistake{Lab: lab, Node: n, What: "the members were started with different --initial-cluster lists: they cannot agree on the cluster",
					Evidence: fmt.Sprintf("%s has %s; %s have %s", n, raws[n], strings.Join(groups[ref], ", "), raws[groups[ref][0]]), Fix: "use the same --initial-cluster=" + wantInitialCluster(e) + " on every member, then remove /var/lib/etcd and start them together"})
			}
		}
	}
	return out, nil
}

func canonIC(ic map[string][]string) string {
	var parts []string
	for _, k := range labcheck.SortedKeys(ic) {
		parts = append(parts, k+"="+canonURLs(ic[k]))
	}
	return strings.Join(parts, ",")
}

func wantInitialCluster(e *labcheck.Env) string {
	return render.EtcdInitialCluster(e.Cluster.ControlPlanes())
}

// etcdCerts checks the certs etcd is started with: the peer cert must have
// the host of this member's peer URL as a SAN (the other members dial it
// and verify it), the server cert every host of its client URLs (the
// apiservers and etcdctl dial them), each key must match, and both must be
// signed by the CA etcd trusts, the cluster CA
// (https://etcd.io/docs/latest/op-guide/security/).
func etcdCerts(e *labcheck.Env) ([]labcheck.Mistake, error) {
	const lab = labid.Etcd
	var out []labcheck.Mistake
	ca, caWhat, err := e.ClusterCA()
	if err != nil {
		return nil, err
	}
	for _, n := range e.Cluster.ControlPlanes() {
		o, ok, _, err := readEtcd(e, n.Name)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // etcdCluster reports it
		}
		caSeen := map[string]bool{}
		for _, f := range []string{"trusted-ca-file", "peer-trusted-ca-file"} {
			if p, ok := o.get(f); ok && !caSeen[p] {
				caSeen[p] = true
				ms, err := e.CheckCAFile(lab, n.Name, p, "etcd (--"+f+")")
				if err != nil {
					return nil, err
				}
				out = append(out, ms...)
			}
		}
		var listen []string
		for _, h := range urlHosts(o.getOr("listen-client-urls", "")) {
			if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
				listen = append(listen, h)
			}
		}
		// The server and peer cert are often one file (the kubernetes
		// cert): it is judged once, against the hosts of both.
		type use struct {
			what, keyPath string
			hosts         []string
		}
		uses := map[string]*use{}
		var order []string
		for _, p := range []struct {
			cert, key, what string
			hosts           []string
		}{
			{"peer-cert-file", "peer-key-file", "etcd peer cert", urlHosts(o.getOr("initial-advertise-peer-urls", ""))},
			{"cert-file", "key-file", "etcd server cert", append(urlHosts(o.getOr("advertise-client-urls", "")), listen...)},
		} {
			certPath, ok := o.get(p.cert)
			if !ok {
				out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: "etcd has no --" + p.cert + ": it speaks plain HTTP there, and TLS clients and peers (https://…) cannot connect",
					Evidence: o.evidence(p.cert), Fix: "--" + p.cert + "=/etc/etcd/kubernetes.pem --" + p.key + "=/etc/etcd/kubernetes-key.pem"})
				continue
			}
			keyPath, ok := o.get(p.key)
			if !ok {
				out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: "etcd has --" + p.cert + " but no --" + p.key, Evidence: o.evidence(p.key), Fix: "--" + p.key + "=/etc/etcd/kubernetes-key.pem"})
			}
			if u, ok := uses[certPath]; ok {
				u.what = "etcd server and peer cert"
				u.hosts = append(u.hosts, p.hosts...)
				continue
			}
			uses[certPath] = &use{what: p.what, keyPath: keyPath, hosts: p.hosts}
			order = append(order, certPath)
		}
		for _, certPath := range order {
			u := uses[certPath]
			fix := "copy the kubernetes cert (whose SANs hold every control-plane IP and 127.0.0.1) to " + certPath + " and restart etcd"
			cert, ms, err := e.LoadCert(lab, n.Name, certPath, u.what, fix)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
			if cert == nil {
				continue
			}
			var sans []labcheck.SANWant
			seen := map[string]bool{}
			for _, h := range u.hosts {
				if !seen[h] {
					seen[h] = true
					sans = append(sans, labcheck.SANWant{Host: h, Why: "a host of etcd's peer or client URLs, which peers and clients dial"})
				}
			}
			w := labcheck.CertWant{Lab: labid.PKI, What: u.what + " " + certPath, SANs: sans, Server: true, Client: true, CA: ca, CAWhat: caWhat, Fix: fix}
			out = append(out, e.CheckCert(n.Name, certPath, cert, w)...)
			if u.keyPath != "" {
				ms, err := e.CheckKey(lab, n.Name, certPath, u.keyPath, cert, fix)
				if err != nil {
					return nil, err
				}
				out = append(out, ms...)
			}
		}
	}
	return out, nil
}

// etcdCertHolder is a cert the cluster CA signs for someone other than the
// apiserver, which etcd must refuse.
type etcdCertHolder struct {
	what string
	cert *x509.Certificate
}

// etcdOthers returns the client certs the cluster CA signs besides the
// apiserver's: every cert of D/pki with client auth (admin, the kubelets,
// controller-manager, scheduler, kube-proxy), and for each TLS-bootstrap
// worker the client cert the controller-manager issues to it, which has
// CN system:node:<name>, O system:nodes and no SANs (the
// kube-apiserver-client-kubelet signer refuses SANs: k8s.io/kubernetes
// pkg/apis/certificates/helpers.go ValidateKubeletClientCSR). Files that
// are missing or do not parse are left out (pki-certs reports them).
func etcdOthers(e *labcheck.Env) ([]etcdCertHolder, error) {
	var out []etcdCertHolder
	for _, s := range pki.Specs(e.Cluster) {
		if s.Name == "kubernetes" || (s.Profile != pki.ProfileKubernetes && s.Profile != pki.ProfileClient) {
			continue
		}
		data, ok, err := e.Read(labcheck.Jumpbox, "pki/"+s.Name+".pem")
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if c, err := labcheck.FirstCert(data); err == nil && clientAuth(c) {
			out = append(out, etcdCertHolder{"pki/" + s.Name + ".pem (" + c.Subject.CommonName + ")", c})
		}
	}
	for _, n := range e.Cluster.Workers() {
		if n.TLSBootstrap {
			out = append(out, etcdCertHolder{n.Name + "'s kubelet client cert from its bootstrap token (" + labcheck.NodeUserPrefix + n.Name + ")",
				&x509.Certificate{Subject: pkix.Name{CommonName: labcheck.NodeUserPrefix + n.Name, Organization: []string{labcheck.GroupNodes}}}})
		}
	}
	return out, nil
}

// clientAuth reports whether a TLS server accepts c as a client cert by its
// EKUs (crypto/tls verifies client certs for ExtKeyUsageClientAuth; no EKU
// at all means any use).
func clientAuth(c *x509.Certificate) bool {
	return len(c.ExtKeyUsage) == 0 || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny)
}

// etcdAllows is etcd's own test of a client or peer cert that chains to its
// CA (go.etcd.io/etcd/client/pkg/v3 transport/listener.go, baseConfig):
// with hostnames, the cert passes when VerifyHostname succeeds for one of
// them (a DNS or IP SAN); else with CNs, when its CN is one of them
// (exactly); with neither, every cert passes.
func etcdAllows(c *x509.Certificate, hostnames, cns []string) bool {
	switch {
	case len(hostnames) > 0:
		return slices.ContainsFunc(hostnames, func(h string) bool { return c.VerifyHostname(h) == nil })
	case len(cns) > 0:
		return slices.Contains(cns, c.Subject.CommonName)
	}
	return true
}

// etcdAllowlists checks that etcd on node accepts only the apiserver's
// cert: as a client (--client-cert-allowed-hostname=kubernetes, a DNS SAN
// of the kubernetes cert alone) and as a peer (--peer-cert-allowed-cn=
// kubernetes). --client-cert-auth only checks that a cert chains to
// ca.pem, and ca.pem also signs the kubelet and kube-proxy certs on every
// worker and every CSR the controller-manager approves: each would read and
// write every key, Secrets included, bypassing RBAC
// (https://etcd.io/docs/latest/op-guide/security/). The certs are judged as
// etcd judges them (etcdAllows) against the certs of D/pki.
func etcdAllowlists(e *labcheck.Env, node string, o etcdOpts) ([]labcheck.Mistake, error) {
	const lab = labid.Etcd
	var out []labcheck.Mistake
	others, err := etcdOthers(e)
	if err != nil {
		return nil, err
	}
	var apiserver *x509.Certificate
	if data, ok, err := e.Read(labcheck.Jumpbox, "pki/kubernetes.pem"); err != nil {
		return nil, err
	} else if ok {
		apiserver, _ = labcheck.FirstCert(data)
	}
	if o.conf == nil {
		if _, ok := o.get("client-cert-allowed-cn"); ok {
			out = append(out, labcheck.Mistake{Lab: lab, Node: node, What: "etcd 3.7 has no --client-cert-allowed-cn: it exits with \"flag provided but not defined\"",
				Evidence: o.evidence("client-cert-allowed-cn"), Fix: "replace it by --client-cert-allowed-hostname=kubernetes (a DNS SAN only the apiserver's cert has)"})
		}
	}
	for _, side := range []struct {
		port, authFlag, hostFlag, cnFlag, fix, risk string
	}{
		{"client", "client-cert-auth", "client-cert-allowed-hostname", "client-cert-allowed-cn",
			o.setting("client-cert-allowed-hostname", "kubernetes") + " (a DNS SAN only the apiserver's cert has)",
			"read and write every key, every Secret included, bypassing RBAC"},
		{"peer", "peer-client-cert-auth", "peer-cert-allowed-hostname", "peer-cert-allowed-cn",
			o.setting("peer-cert-allowed-cn", "kubernetes") + " (the CN of the cert the members show each other)",
			"talk to it on the peer port (2380) as a member"},
	} {
		hosts, cns := o.list(side.hostFlag), o.list(side.cnFlag)
		if side.port == "client" && o.conf == nil {
			cns = nil // not a flag of etcd 3.7: reported above
		}
		ev := o.evidence(side.hostFlag) + "; " + o.evidence(side.cnFlag)
		if side.port == "client" && o.conf == nil {
			ev = o.evidence(side.hostFlag)
		}
		if len(hosts) > 0 && len(cns) > 0 {
			out = append(out, labcheck.Mistake{Lab: lab, Node: node, What: "etcd refuses to start: allowed CNs and allowed hostnames of its " + side.port + " certs are mutually exclusive",
				Evidence: ev, Fix: "keep only " + side.fix})
			continue
		}
		var admitted []string
		for _, h := range others {
			if etcdAllows(h.cert, hosts, cns) {
				admitted = append(admitted, h.what)
			}
		}
		switch {
		case len(admitted) > 0 && len(hosts)+len(cns) == 0:
			out = append(out, labcheck.Mistake{Lab: lab, Node: node,
				What:     fmt.Sprintf("etcd trusts every %s cert the cluster CA signs (--%s only checks the chain): %s can %s", side.port, side.authFlag, strings.Join(admitted, ", "), side.risk),
				Evidence: ev, Fix: "add " + side.fix + " and restart etcd"})
		case len(admitted) > 0:
			out = append(out, labcheck.Mistake{Lab: lab, Node: node,
				What:     fmt.Sprintf("etcd's %s allowlist also admits %s, which can then %s", side.port, strings.Join(admitted, ", "), side.risk),
				Evidence: ev, Fix: "allow only the apiserver's cert: " + side.fix + ", and restart etcd"})
		}
		if apiserver != nil && !etcdAllows(apiserver, hosts, cns) {
			what := "etcd refuses the apiserver's cert (pki/kubernetes.pem) as a client: kube-apiserver cannot reach etcd"
			if side.port == "peer" {
				what = "etcd refuses the kubernetes cert (pki/kubernetes.pem) as a peer: the members cannot form a cluster"
			}
			out = append(out, labcheck.Mistake{Lab: lab, Node: node, What: what + " (\"client certificate authentication failed\")",
				Evidence: ev + "; pki/kubernetes.pem: " + labcheck.Describe(apiserver), Fix: side.fix + ", and restart etcd"})
		}
	}
	return out, nil
}

// etcdDetectors are the detectors of lab Etcd, in the order they run.
var Detectors = []labcheck.Detector{
	{Name: "etcd-initial-cluster", Lab: labid.Etcd, Doc: "--name in --initial-cluster, same list on every member, only the control planes at their IPs, cert auth on", Run: etcdCluster},
	{Name: "etcd-certs", Lab: labid.Etcd, Doc: "etcd's server and peer certs: SANs of its URLs, keys, the cluster CA", Run: etcdCerts},
	{Name: "etcd-stored-data", Lab: labid.Etcd, Doc: "tries it live: a key written to etcd is read back through every member; a failing one named with its cause", Run: storedData},
}
