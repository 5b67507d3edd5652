package controlplane

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"

	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/pki"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// apiserverUnit reads kube-apiserver.service on node; a missing unit is a
// Mistake.
func apiserverUnit(e *labcheck.Env, node string) (labcheck.UnitCmd, []labcheck.Mistake, error) {
	u, ok, err := e.ReadUnit(node, "kube-apiserver.service")
	if err != nil || ok {
		return u, nil, err
	}
	return u, []labcheck.Mistake{{Lab: labid.ControlPlane, Node: node, What: "kube-apiserver.service is not known to systemd (or has no ExecStart)",
		Evidence: "`systemctl cat kube-apiserver.service` printed no ExecStart", Fix: "write /etc/systemd/system/kube-apiserver.service, then systemctl daemon-reload && systemctl enable --now kube-apiserver"}}, nil
}

// apiserverCerts checks the files each apiserver is started with: its
// serving cert (--tls-cert-file) has the SANs its clients dial and matches
// --tls-private-key-file; --client-ca-file is the cluster CA (else no
// client cert authenticates); the etcd and kubelet client certs are client
// certs from the cluster CA; the ServiceAccount signing key
// (--service-account-signing-key-file) is the private half of a key in
// --service-account-key-file (else every token it signs is rejected).
// Upstream: https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/
// and https://kubernetes.io/docs/setup/best-practices/certificates/.
func apiserverCerts(e *labcheck.Env) ([]labcheck.Mistake, error) {
	const lab = labid.ControlPlane
	var out []labcheck.Mistake
	ca, caWhat, err := e.ClusterCA()
	if err != nil {
		return nil, err
	}
	for _, n := range e.Cluster.ControlPlanes() {
		u, ms, err := apiserverUnit(e, n.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
		if len(u.Argv) == 0 {
			continue
		}
		if p, ok := u.Flag("client-ca-file"); ok {
			ms, err := e.CheckCAFile(lab, n.Name, p, "the apiserver (--client-ca-file)")
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		} else {
			out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: "kube-apiserver has no --client-ca-file: no client cert authenticates, every component and kubectl gets 401",
				Evidence: u.Evidence("client-ca-file"), Fix: "--client-ca-file=/var/lib/kubernetes/ca.pem"})
		}
		certs := []struct {
			certFlag, keyFlag, what string
			want                    labcheck.CertWant
		}{
			{"tls-cert-file", "tls-private-key-file", "apiserver serving cert", labcheck.CertWant{SANs: labcheck.APIServerSANs(e.Cluster, n.Name), Server: true}},
			{"etcd-certfile", "etcd-keyfile", "apiserver's etcd client cert", labcheck.CertWant{Client: true}},
			{"kubelet-client-certificate", "kubelet-client-key", "apiserver's kubelet client cert", labcheck.CertWant{Client: true}},
		}
		for _, c := range certs {
			p, ok := u.Flag(c.certFlag)
			if !ok {
				if c.certFlag == "tls-cert-file" {
					out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: "kube-apiserver has no --tls-cert-file: it serves a self-signed cert no client trusts",
						Evidence: u.Evidence(c.certFlag), Fix: "--tls-cert-file=/var/lib/kubernetes/kubernetes.pem --tls-private-key-file=/var/lib/kubernetes/kubernetes-key.pem"})
				}
				continue
			}
			fix := "copy $KHW_STATE_DIR/$KHW_CLUSTER/pki/kubernetes.pem and kubernetes-key.pem to /var/lib/kubernetes/ on " + n.Name + " and restart kube-apiserver"
			cert, ms, err := e.LoadCert(labid.ControlPlane, n.Name, p, c.what+" (--"+c.certFlag+")", fix)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
			if cert == nil {
				continue
			}
			w := c.want
			// admin: an apiserver's client certs may carry a privileged
			// group (kubeadm gives its kubelet client cert one); the RBAC
			// detector judges what the kubelet client cert may do.
			w.Lab, w.What, w.CA, w.CAWhat, w.Fix, w.Admin = labid.PKI, c.what+" "+p, ca, caWhat, fix, true
			out = append(out, e.CheckCert(n.Name, p, cert, w)...)
			if kp, ok := u.Flag(c.keyFlag); ok {
				ms, err := e.CheckKey(lab, n.Name, p, kp, cert, fix)
				if err != nil {
					return nil, err
				}
				out = append(out, ms...)
			}
		}
		ms, err = serviceAccountKeys(e, n.Name, u)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	return out, nil
}

// serviceAccountKeys: the signing key's public half must be in
// --service-account-key-file (a cert or a key; without the flag the
// apiserver uses --tls-private-key-file), or the apiserver rejects the
// tokens it signs itself. --service-account-signing-key-file is required
// (https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/).
func serviceAccountKeys(e *labcheck.Env, node string, u labcheck.UnitCmd) ([]labcheck.Mistake, error) {
	const lab = labid.ControlPlane
	kf, ok := u.Flag("service-account-key-file")
	if !ok {
		kf, ok = u.Flag("tls-private-key-file")
	}
	sf, ok2 := u.Flag("service-account-signing-key-file")
	if !ok2 {
		return []labcheck.Mistake{{Lab: lab, Node: node, What: "kube-apiserver has no --service-account-signing-key-file: it does not start (the flag is required, with --service-account-issuer)",
			Evidence: u.Evidence("service-account-signing-key-file"),
			Fix:      "--service-account-key-file=/var/lib/kubernetes/service-account.pem --service-account-signing-key-file=/var/lib/kubernetes/service-account-key.pem"}}, nil
	}
	if !ok {
		return nil, nil // no verification key at all: apiserverCerts reports the missing TLS flags
	}
	pubData, ok, err := e.Read(node, kf)
	if err != nil {
		return nil, err
	}
	if !ok {
		return []labcheck.Mistake{labcheck.Missing(lab, node, kf, "the ServiceAccount token verification key", "copy $KHW_STATE_DIR/$KHW_CLUSTER/pki/service-account.pem there")}, nil
	}
	keyData, ok, err := e.Read(node, sf)
	if err != nil {
		return nil, err
	}
	if !ok {
		return []labcheck.Mistake{labcheck.Missing(lab, node, sf, "the ServiceAccount token signing key", "copy $KHW_STATE_DIR/$KHW_CLUSTER/pki/service-account-key.pem there")}, nil
	}
	key, perr := labcheck.ParseKey(keyData)
	if perr != nil {
		return []labcheck.Mistake{{Lab: lab, Node: node, What: sf + " is not a private key", Evidence: sf + ": " + perr.Error(), Fix: "copy $KHW_STATE_DIR/$KHW_CLUSTER/pki/service-account-key.pem there"}}, nil
	}
	var pub any
	if c, err := labcheck.FirstCert(pubData); err == nil {
		pub = c.PublicKey
	} else if k, err := labcheck.ParseKey(pubData); err == nil {
		pub = k.Public()
	} else if p, err := parsePublicKey(pubData); err == nil {
		pub = p
	}
	if pub == nil || !labcheck.SamePublic(key, pub) {
		return []labcheck.Mistake{{Lab: lab, Node: node, What: "the ServiceAccount signing key is not the pair of the verification key: every token this apiserver signs is rejected (401)",
			Evidence: fmt.Sprintf("--service-account-signing-key-file=%s (%s) vs --service-account-key-file=%s", sf, pki.KeyDesc(key.Public()), kf),
			Fix:      "copy service-account.pem and service-account-key.pem from the same $KHW_STATE_DIR/$KHW_CLUSTER/pki to every control plane"}}, nil
	}
	return nil, nil
}

// apiserverKubeletRBAC checks that the user the apiserver is when it calls
// kubelets (the CN of --kubelet-client-certificate; its O are groups) may
// use nodes/proxy: kubelets with authorization mode Webhook ask the
// apiserver (a SubjectAccessReview), and without a ClusterRoleBinding for
// that user `kubectl logs/exec/port-forward` get 403. Upstream:
// https://kubernetes.io/docs/reference/access-authn-authz/kubelet-authn-authz/
// (the built-in ClusterRole system:kubelet-api-admin grants the same).
func apiserverKubeletRBAC(e *labcheck.Env) ([]labcheck.Mistake, error) {
	const lab = labid.ControlPlane
	if e.API == nil {
		return nil, labcheck.ErrNoAPI
	}
	type ident struct {
		node, path, cn string
		orgs           []string
	}
	var ids []ident
	for _, n := range e.Cluster.ControlPlanes() {
		u, _, err := apiserverUnit(e, n.Name)
		if err != nil {
			return nil, err
		}
		p, ok := u.Flag("kubelet-client-certificate")
		if !ok {
			continue
		}
		data, ok, err := e.Read(n.Name, p)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // apiserverCerts reports it
		}
		if c, err := labcheck.FirstCert(data); err == nil {
			ids = append(ids, ident{n.Name, p, c.Subject.CommonName, c.Subject.Organization})
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	roles, err := e.API.RbacV1().ClusterRoles().List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list ClusterRoles: %w", err)
	}
	granting := map[string]bool{}
	for _, r := range roles.Items {
		if grantsNodesProxy(r.Rules) {
			granting[r.Name] = true
		}
	}
	bindings, err := e.API.RbacV1().ClusterRoleBindings().List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list ClusterRoleBindings: %w", err)
	}
	var out []labcheck.Mistake
	for _, id := range ids {
		if slices.Contains(id.orgs, labcheck.GroupMasters) {
			continue // system:masters bypasses authorization
		}
		var seen []string
		ok := false
		for _, b := range bindings.Items {
			if b.RoleRef.Kind != "ClusterRole" || !granting[b.RoleRef.Name] {
				continue
			}
			seen = append(seen, b.Name+" → "+labcheck.SubjectsText(b.Subjects))
			for _, s := range b.Subjects {
				if (s.Kind == rbacv1.UserKind && s.Name == id.cn) || (s.Kind == rbacv1.GroupKind && slices.Contains(id.orgs, s.Name)) {
					ok = true
				}
			}
		}
		if ok {
			continue
		}
		ev := fmt.Sprintf("%s: --kubelet-client-certificate=%s has CN=%q O=%v", id.node, id.path, id.cn, id.orgs)
		if len(seen) == 0 {
			ev += "; no ClusterRoleBinding grants a ClusterRole with nodes/proxy"
		} else {
			ev += "; ClusterRoleBindings granting nodes/proxy: " + strings.Join(seen, "; ")
		}
		out = append(out, labcheck.Mistake{Lab: lab, Node: id.node,
			What:     fmt.Sprintf("the apiserver calls kubelets as user %q, but no ClusterRoleBinding gives that user nodes/proxy: kubectl logs, exec and port-forward fail with 403", id.cn),
			Evidence: ev,
			Fix:      fmt.Sprintf("bind the user of the cert: kubectl create clusterrolebinding apiserver-to-kubelet --clusterrole=system:kube-apiserver-to-kubelet --user=%s (or make the subject of your binding User %s)", id.cn, id.cn)})
	}
	return dedupeBy(out, func(m labcheck.Mistake) string { return m.What }), nil
}

func grantsNodesProxy(rules []rbacv1.PolicyRule) bool {
	for _, r := range rules {
		group := slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")
		res := slices.Contains(r.Resources, "nodes/proxy") || slices.Contains(r.Resources, "*") || slices.Contains(r.Resources, "nodes/*")
		verb := slices.Contains(r.Verbs, "*") || slices.Contains(r.Verbs, "get") || slices.Contains(r.Verbs, "create")
		if group && res && verb {
			return true
		}
	}
	return false
}

// dedupeBy keeps the first mistake per key.
func dedupeBy(ms []labcheck.Mistake, key func(labcheck.Mistake) string) []labcheck.Mistake {
	seen := map[string]bool{}
	var out []labcheck.Mistake
	for _, m := range ms {
		if k := key(m); !seen[k] {
			seen[k] = true
			out = append(out, m)
		}
	}
	return out
}

// encConfig is an EncryptionConfiguration, loosely typed so that a wrong
// kind or an unknown provider is reported rather than refused.
type encConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Resources  []struct {
		Resources []string                     `json:"resources"`
		Providers []map[string]json.RawMessage `json:"providers"`
	} `json:"resources"`
}

type encKeys struct {
	Keys []struct {
		Name   string `json:"name"`
		Secret string `json:"secret"`
	} `json:"keys"`
}

// Key sizes in bytes per provider
// (https://kubernetes.io/docs/tasks/administer-cluster/encrypt-data/#providers).
var encKeySizes = map[string][]int{"aescbc": {16, 24, 32}, "aesgcm": {16, 24, 32}, "secretbox": {32}}

// encryptionConfig checks that every apiserver encrypts Secrets at rest:
// --encryption-provider-config is set on all of them (one without it
// writes Secrets in clear and cannot read the encrypted ones), the files
// are the same everywhere (keys differ: one apiserver cannot read what
// another wrote), the kind is EncryptionConfiguration in
// apiserver.config.k8s.io/v1 (the legacy EncryptionConfig is refused),
// secrets are covered, the first provider (the one that writes) is not
// identity, and each key decodes from base64 to a size the provider
// accepts. Upstream: https://kubernetes.io/docs/tasks/administer-cluster/encrypt-data/.
func encryptionConfig(e *labcheck.Env) ([]labcheck.Mistake, error) {
	const lab = labid.ControlPlane
	var out []labcheck.Mistake
	var with, without []string
	sums := map[string][]string{}
	for _, n := range e.Cluster.ControlPlanes() {
		u, _, err := apiserverUnit(e, n.Name)
		if err != nil {
			return nil, err
		}
		if len(u.Argv) == 0 {
			continue // apiserverCerts reports it
		}
		p, ok := u.Flag("encryption-provider-config")
		if !ok {
			without = append(without, n.Name)
			continue
		}
		with = append(with, n.Name)
		data, found, err := e.Read(n.Name, p)
		if err != nil {
			return nil, err
		}
		if !found {
			out = append(out, labcheck.Missing(lab, n.Name, p, "--encryption-provider-config; the apiserver does not start", "scp $KHW_STATE_DIR/$KHW_CLUSTER/encryption-config.yaml "+n.Name+":"+p))
			continue
		}
		sum := sha256.Sum256(data)
		k := base64.StdEncoding.EncodeToString(sum[:8])
		sums[k] = append(sums[k], n.Name)
		out = append(out, judgeEncryption(lab, n.Name, p, data)...)
	}
	for _, n := range without {
		ev := n + ": kube-apiserver.service has no --encryption-provider-config"
		if len(with) > 0 {
			ev += " (" + strings.Join(with, ", ") + " have it)"
		}
		out = append(out, labcheck.Mistake{Lab: lab, Node: n, What: "the apiserver on " + n + " does not encrypt Secrets: what it writes lands in etcd in clear, and it cannot read Secrets the others encrypted",
			Evidence: ev, Fix: "add --encryption-provider-config=/var/lib/kubernetes/encryption-config.yaml (the same file as on the others), restart kube-apiserver, then rewrite the Secrets: kubectl get secrets -A -o json | kubectl replace -f -"})
	}
	if len(sums) > 1 {
		var parts []string
		for _, k := range labcheck.SortedKeys(sums) {
			parts = append(parts, strings.Join(sums[k], ", "))
		}
		out = append(out, labcheck.Mistake{Lab: lab, What: "the control planes have different encryption configs: a Secret written through one apiserver may not decrypt on another",
			Evidence: "encryption config contents differ between the groups: " + strings.Join(parts, " | "), Fix: "copy one file ($KHW_STATE_DIR/$KHW_CLUSTER/encryption-config.yaml) to every control plane and restart the apiservers"})
	}
	return out, nil
}

// judgeEncryption checks one EncryptionConfiguration file. Evidence never
// holds a key: only names and decoded lengths.
func judgeEncryption(lab, node, path string, data []byte) []labcheck.Mistake {
	mk := func(what, ev, fix string) labcheck.Mistake {
		return labcheck.Mistake{Lab: lab, Node: node, What: what, Evidence: path + ": " + ev, Fix: fix}
	}
	var cfg encConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return []labcheck.Mistake{mk("the encryption config is not valid YAML: the apiserver does not start", "it does not parse", "rewrite it (see $KHW_STATE_DIR/$KHW_CLUSTER/encryption-config.yaml)")}
	}
	var out []labcheck.Mistake
	if cfg.Kind != "EncryptionConfiguration" || cfg.APIVersion != "apiserver.config.k8s.io/v1" {
		what := "the encryption config is not kind EncryptionConfiguration, apiVersion apiserver.config.k8s.io/v1: the apiserver refuses it"
		if cfg.Kind == "EncryptionConfig" {
			what = "the encryption config uses the legacy kind EncryptionConfig, which current apiservers refuse"
		}
		out = append(out, mk(what, fmt.Sprintf("kind: %q, apiVersion: %q", cfg.Kind, cfg.APIVersion), "set apiVersion: apiserver.config.k8s.io/v1 and kind: EncryptionConfiguration"))
	}
	covered := false
	for i, r := range cfg.Resources {
		if !slices.Contains(r.Resources, "secrets") && !slices.Contains(r.Resources, "*.*") && !slices.Contains(r.Resources, "*.") {
			continue
		}
		covered = true
		if len(r.Providers) == 0 {
			out = append(out, mk("the encryption config lists no provider for secrets", fmt.Sprintf("resources[%d].providers is empty", i), "providers: [{aescbc: {keys: [{name: key1, secret: <32 random bytes, base64>}]}}, {identity: {}}]"))
			continue
		}
		for j, p := range r.Providers {
			for _, kind := range labcheck.SortedKeys(p) {
				if j == 0 && kind == "identity" {
					out = append(out, mk("identity is the first provider for secrets: new Secrets are written in clear (the first provider writes, the others only read)",
						fmt.Sprintf("resources[%d].providers[0] is identity", i), "put aescbc (with its key) first and identity last, restart the apiservers, then rewrite the Secrets: kubectl get secrets -A -o json | kubectl replace -f -"))
				}
				sizes, ok := encKeySizes[kind]
				if !ok {
					continue
				}
				var ks encKeys
				if err := json.Unmarshal(p[kind], &ks); err != nil || len(ks.Keys) == 0 {
					out = append(out, mk("provider "+kind+" has no keys", fmt.Sprintf("resources[%d].providers[%d].%s.keys is empty", i, j, kind), "add a key: head -c 32 /dev/urandom | base64"))
					continue
				}
				for _, k := range ks.Keys {
					raw, err := base64.StdEncoding.DecodeString(k.Secret)
					switch {
					case err != nil:
						out = append(out, mk(fmt.Sprintf("key %q of %s is not valid base64: the apiserver does not start", k.Name, kind),
							fmt.Sprintf("resources[%d].providers[%d].%s key %q (secret not shown)", i, j, kind, k.Name), "secret: $(head -c 32 /dev/urandom | base64)"))
					case !slices.Contains(sizes, len(raw)):
						out = append(out, mk(fmt.Sprintf("key %q of %s is %d bytes after base64 decoding; %s needs %s bytes: the apiserver does not start", k.Name, kind, len(raw), kind, joinSizes(sizes)),
							fmt.Sprintf("resources[%d].providers[%d].%s key %q decodes to %d bytes (secret not shown)", i, j, kind, k.Name, len(raw)), "secret: $(head -c 32 /dev/urandom | base64) (32 random bytes, base64-encoded once)"))
					}
				}
			}
		}
	}
	if !covered {
		out = append(out, mk("the encryption config does not cover secrets: they are stored in clear", "no resources entry lists secrets", "resources: [{resources: [secrets], providers: [...]}]"))
	}
	return out
}

func joinSizes(s []int) string {
	var p []string
	for _, n := range s {
		p = append(p, fmt.Sprint(n))
	}
	return strings.Join(p, "/")
}

// parsePublicKey parses a PEM PUBLIC KEY block.
func parsePublicKey(data []byte) (any, error) {
	rest := data
	for {
		b, r := pem.Decode(rest)
		if b == nil {
			return nil, fmt.Errorf("no PUBLIC KEY block")
		}
		rest = r
		if b.Type == "PUBLIC KEY" {
			return x509.ParsePKIXPublicKey(b.Bytes)
		}
	}
}

// controlPlaneKubeconfigs checks who the controller-manager and the
// scheduler are on each control plane: the kubeconfig each one runs with
// (--kubeconfig, or the scheduler's clientConnection.kubeconfig in its
// --config) must reach an apiserver (on a control plane 127.0.0.1 is
// right), trust the cluster CA and hold a client cert for
// system:kube-controller-manager / system:kube-scheduler, the users the
// built-in ClusterRoleBindings of the same names grant their rights
// (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#core-component-roles).
func controlPlaneKubeconfigs(e *labcheck.Env) ([]labcheck.Mistake, error) {
	const lab = labid.ControlPlane
	var out []labcheck.Mistake
	for _, n := range e.Cluster.ControlPlanes() {
		for _, comp := range []struct{ unit, user string }{
			{"kube-controller-manager.service", "system:kube-controller-manager"},
			{"kube-scheduler.service", "system:kube-scheduler"},
		} {
			u, ok, err := e.ReadUnit(n.Name, comp.unit)
			if err != nil {
				return nil, err
			}
			if !ok {
				out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: comp.unit + " is not known to systemd (or has no ExecStart)",
					Evidence: "`systemctl cat " + comp.unit + "` printed no ExecStart", Fix: "write /etc/systemd/system/" + comp.unit + ", then systemctl daemon-reload && systemctl enable --now " + comp.unit})
				continue
			}
			kc, ok := u.Flag("kubeconfig")
			if !ok {
				if cp, set := u.Flag("config"); set {
					data, found, err := e.Read(n.Name, cp)
					if err != nil {
						return nil, err
					}
					var c struct {
						ClientConnection struct {
							Kubeconfig string `json:"kubeconfig"`
						} `json:"clientConnection"`
					}
					if found && yaml.Unmarshal(data, &c) == nil {
						kc = c.ClientConnection.Kubeconfig
					}
				}
			}
			if kc == "" {
				out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, What: comp.unit + " runs without a kubeconfig: it has no credentials and cannot reach the apiserver",
					Evidence: u.Evidence("kubeconfig"), Fix: "--kubeconfig=/var/lib/kubernetes/" + strings.TrimSuffix(comp.unit, ".service") + ".kubeconfig"})
				continue
			}
			ms, err := e.ComponentKubeconfig(lab, n.Name, kc, "the kubeconfig of "+strings.TrimSuffix(comp.unit, ".service"), comp.user, "", "", false, labcheck.OnCP)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
	}
	return out, nil
}

// controlPlaneDetectors are the detectors of lab ControlPlane, in the order they run.
var Detectors = []labcheck.Detector{
	{Name: "apiserver-certs", Lab: labid.ControlPlane, Doc: "each apiserver's serving cert SANs, client CA, etcd/kubelet client certs, ServiceAccount key pair", Run: apiserverCerts},
	{Name: "apiserver-kubelet-rbac", Lab: labid.ControlPlane, Doc: "the CN of --kubelet-client-certificate is bound to a ClusterRole with nodes/proxy (API)", Run: apiserverKubeletRBAC},
	{Name: "controlplane-kubeconfigs", Lab: labid.ControlPlane, Doc: "controller-manager and scheduler kubeconfigs: an apiserver they can reach, the cluster CA, their own user", Run: controlPlaneKubeconfigs},
	{Name: "encryption-config", Lab: labid.ControlPlane, Doc: "--encryption-provider-config on every apiserver, same file, kind/apiVersion, identity not first, key sizes", Run: encryptionConfig},
	{Name: "apiserver-stored-secret", Lab: labid.ControlPlane, Doc: "tries it live: a Secret written through each apiserver is read back through every other; a failing one named with its cause", Run: storedSecret},
}
