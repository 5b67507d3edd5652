package tlsbootstrap

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/workers"
	tb "github.com/khw-dev/khw/internal/tlsbootstrap"
	certsv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const labTLS = labid.TLSBootstrap

// stuckAfter is how long a CSR may wait for the controller-manager before
// it counts as stuck (it approves and signs within seconds).
const stuckAfter = 2 * time.Minute

func bootstrapWorkers(e *labcheck.Env) []config.Node { return workers.WorkerSel(true)(e) }

// secretField reads key of a Secret (stringData wins, as the apiserver
// merges it into data).
func secretField(s *corev1.Secret, key string) string {
	if v, ok := s.StringData[key]; ok {
		return v
	}
	return string(s.Data[key])
}

// hideSecret replaces every occurrence of secret in s.
func hideSecret(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "<secret hidden>")
}

// bootstrapTokens checks the bootstrap token Secrets (type
// bootstrap.kubernetes.io/token or named bootstrap-token-*): namespace
// kube-system, name bootstrap-token-<token-id>, token-id [a-z0-9]{6},
// token-secret [a-z0-9]{16}, expiration RFC3339 in the future,
// usage-bootstrap-authentication "true", auth-extra-groups each matching
// system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]
// (https://kubernetes.io/docs/reference/access-authn-authz/bootstrap-tokens/;
// the rules are internal/tlsbootstrap.CheckSecret). It also checks that a
// worker still waiting for its cert holds a token that has a Secret.
// Evidence shows token ids, never token secrets.
func bootstrapTokens(e *labcheck.Env) ([]labcheck.Mistake, error) {
	nodes := bootstrapWorkers(e)
	if len(nodes) == 0 {
		return nil, nil
	}
	if e.API == nil {
		return nil, labcheck.ErrNoAPI
	}
	list, err := e.API.CoreV1().Secrets("").List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Secrets: %w", err)
	}
	var out []labcheck.Mistake
	valid := map[string]bool{} // token ids with a usable Secret
	for i := range list.Items {
		s := &list.Items[i]
		if s.Type != tb.SecretType && !strings.HasPrefix(s.Name, tb.SecretPrefix) {
			continue
		}
		secret, id := secretField(s, tb.KeyTokenSecret), secretField(s, tb.KeyTokenID)
		probs := tb.CheckSecret(s, e.Now)
		if len(probs) == 0 {
			valid[id] = true
			continue
		}
		// A whole "<id>.<secret>" pasted into token-id must not be shown.
		safeID := id
		if before, _, ok := strings.Cut(id, "."); ok {
			safeID = before + ".<hidden>"
		}
		hide := func(t string) string { return hideSecret(strings.ReplaceAll(t, id, safeID), secret) }
		for _, p := range probs {
			out = append(out, labcheck.Mistake{Lab: labTLS, What: "bootstrap token Secret " + s.Namespace + "/" + s.Name + " is not usable: " + hide(p),
				Evidence: hide(fmt.Sprintf("Secret %s/%s, type %s, token-id %q", s.Namespace, s.Name, s.Type, id)),
				Fix:      "recreate it: kubectl -n kube-system create secret generic bootstrap-token-<id> --type bootstrap.kubernetes.io/token --from-literal=token-id=<id> --from-literal=token-secret=<16 of [a-z0-9]> --from-literal=expiration=<RFC3339, in the future> --from-literal=usage-bootstrap-authentication=true"})
		}
	}
	// A worker not bootstrapped yet must hold a token that has a Secret.
	for _, n := range nodes {
		k, _, err := e.ReadKubelet(labTLS, n.Name)
		if err != nil {
			return nil, err
		}
		if k == nil {
			continue
		}
		if k.Kubeconfig != "" {
			if _, ok, err := e.Read(n.Name, k.Kubeconfig); err != nil {
				return nil, err
			} else if ok {
				continue // bootstrapped: the token is no longer used
			}
		}
		bk, ok := k.Unit.Flag("bootstrap-kubeconfig")
		if !ok {
			out = append(out, labcheck.Mistake{Lab: labTLS, Node: n.Name, What: "the kubelet has neither a kubeconfig nor --bootstrap-kubeconfig: it can never get a client cert",
				Evidence: k.Unit.Evidence("bootstrap-kubeconfig") + "; " + k.Unit.Evidence("kubeconfig"), Fix: "--bootstrap-kubeconfig=/var/lib/kubelet/bootstrap-kubeconfig --kubeconfig=/var/lib/kubelet/kubeconfig --cert-dir=/var/lib/kubelet/pki"})
			continue
		}
		kc, ms, err := e.LoadKubeconfig(labTLS, n.Name, bk, "the bootstrap kubeconfig", "make it with kubectl config set-credentials kubelet-bootstrap --token=<id>.<secret>")
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
		if kc == nil {
			continue
		}
		out = append(out, e.CheckServer(labTLS, n.Name, kc, labcheck.ViaLB, "")...)
		tok := kc.User.Token
		id, secret, _ := strings.Cut(tok, ".")
		switch {
		case tok == "":
			out = append(out, labcheck.Mistake{Lab: labTLS, Node: n.Name, What: bk + " holds no token: the kubelet cannot authenticate to ask for its cert",
				Evidence: bk + ": user has no token", Fix: "kubectl config set-credentials kubelet-bootstrap --token=<id>.<secret> --kubeconfig=" + bk})
		case !valid[id]:
			out = append(out, labcheck.Mistake{Lab: labTLS, Node: n.Name, What: fmt.Sprintf("the token in %s (id %s) has no usable Secret kube-system/bootstrap-token-%s: the apiserver answers 401 to the kubelet", bk, hideSecret(id, secret), hideSecret(id, secret)),
				Evidence: hideSecret(fmt.Sprintf("%s: token id %s; usable token Secrets: %v", bk, id, labcheck.SortedKeys(valid)), secret),
				Fix:      "create the Secret for this token (or a new token and put it in " + bk + "), with an expiration in the future"})
		}
	}
	return out, nil
}

// bindingFor reports whether a ClusterRoleBinding of role has a subject
// accepted by ok.
func bindingFor(bs []rbacv1.ClusterRoleBinding, role string, ok func(rbacv1.Subject) bool) ([]string, bool) {
	var names []string
	for _, b := range bs {
		if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != role {
			continue
		}
		names = append(names, b.Name+" → "+labcheck.SubjectsText(b.Subjects))
		if slices.ContainsFunc(b.Subjects, ok) {
			return names, true
		}
	}
	return names, false
}

// bootstrapRBAC checks the three bindings of TLS bootstrap
// (https://kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/):
// system:node-bootstrapper and …:nodeclient for the bootstrappers (group
// system:bootstrappers, or a bootstrap user/extra group), …:selfnodeclient
// for group system:nodes (renewals); and the control-plane flags they need:
// --enable-bootstrap-token-auth on every apiserver and the
// controller-manager's signing cert and key with csrapproving/csrsigning on.
func bootstrapRBAC(e *labcheck.Env) ([]labcheck.Mistake, error) {
	nodes := bootstrapWorkers(e)
	if len(nodes) == 0 {
		return nil, nil
	}
	var out []labcheck.Mistake
	for _, n := range e.Cluster.ControlPlanes() {
		u, ok, err := e.ReadUnit(n.Name, "kube-apiserver.service")
		if err != nil {
			return nil, err
		}
		if v, set := u.Flag("enable-bootstrap-token-auth"); ok && (!set || v != "true") {
			out = append(out, labcheck.Mistake{Lab: labid.ControlPlane, Node: n.Name, What: "kube-apiserver on " + n.Name + " does not accept bootstrap tokens: a bootstrapping kubelet that reaches it gets 401",
				Evidence: u.Evidence("enable-bootstrap-token-auth"), Fix: "--enable-bootstrap-token-auth=true in kube-apiserver.service, then restart it"})
		}
		k, ok, err := e.ReadUnit(n.Name, "kube-controller-manager.service")
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		for _, f := range []string{"cluster-signing-cert-file", "cluster-signing-key-file"} {
			if _, set := k.Flag(f); !set {
				out = append(out, labcheck.Mistake{Lab: labid.ControlPlane, Node: n.Name, What: "kube-controller-manager has no --" + f + ": approved CSRs are never signed, so the kubelet never gets its cert",
					Evidence: k.Evidence(f), Fix: "--cluster-signing-cert-file=/var/lib/kubernetes/ca.pem --cluster-signing-key-file=/var/lib/kubernetes/ca-key.pem"})
			}
		}
		if v, set := k.Flag("controllers"); set {
			for _, c := range []string{"csrapproving", "csrsigning"} {
				if slices.Contains(strings.Split(v, ","), "-"+c) {
					out = append(out, labcheck.Mistake{Lab: labid.ControlPlane, Node: n.Name, What: "kube-controller-manager runs with the " + c + " controller off: node CSRs are never " + map[string]string{"csrapproving": "approved", "csrsigning": "signed"}[c],
						Evidence: k.Evidence("controllers"), Fix: "--controllers=*,bootstrapsigner,tokencleaner"})
				}
			}
		}
	}
	if e.API == nil {
		return out, labcheck.ErrNoAPI
	}
	bl, err := e.API.RbacV1().ClusterRoleBindings().List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list ClusterRoleBindings: %w", err)
	}
	bootstrapper := func(s rbacv1.Subject) bool {
		return (s.Kind == rbacv1.GroupKind && (s.Name == tb.BootstrappersGroup || strings.HasPrefix(s.Name, tb.BootstrappersGroup+":"))) ||
			(s.Kind == rbacv1.UserKind && strings.HasPrefix(s.Name, tb.BootstrapUserPrefix))
	}
	selfNode := func(s rbacv1.Subject) bool {
		return (s.Kind == rbacv1.GroupKind && s.Name == labcheck.GroupNodes) || (s.Kind == rbacv1.UserKind && strings.HasPrefix(s.Name, labcheck.NodeUserPrefix))
	}
	needs := []struct {
		role, who, why, cmd string
		ok                  func(rbacv1.Subject) bool
	}{
		{"system:node-bootstrapper", "group system:bootstrappers", "a kubelet holding a bootstrap token may not create its CSR (403)",
			"kubectl create clusterrolebinding kubelet-bootstrap --clusterrole=system:node-bootstrapper --group=system:bootstrappers", bootstrapper},
		{"system:certificates.k8s.io:certificatesigningrequests:nodeclient", "group system:bootstrappers", "the first client-cert CSR of a bootstrapping kubelet stays Pending (nothing approves it)",
			"kubectl create clusterrolebinding node-autoapprove-bootstrap --clusterrole=system:certificates.k8s.io:certificatesigningrequests:nodeclient --group=system:bootstrappers", bootstrapper},
		{"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "group system:nodes", "a node's renewal of its client cert stays Pending, and the node drops out when the cert expires",
			"kubectl create clusterrolebinding node-autoapprove-certificate-rotation --clusterrole=system:certificates.k8s.io:certificatesigningrequests:selfnodeclient --group=system:nodes", selfNode},
	}
	for _, nd := range needs {
		found, ok := bindingFor(bl.Items, nd.role, nd.ok)
		if ok {
			continue
		}
		ev := "no ClusterRoleBinding of ClusterRole " + nd.role
		if len(found) > 0 {
			ev = "ClusterRoleBindings of " + nd.role + ": " + strings.Join(found, "; ") + " (none for " + nd.who + ")"
		}
		out = append(out, labcheck.Mistake{Lab: labTLS, What: "no ClusterRoleBinding gives " + nd.who + " the ClusterRole " + nd.role + ": " + nd.why, Evidence: ev, Fix: nd.cmd})
	}
	return out, nil
}

// bootstrapCSRs looks at the node CSRs: a kubelet-serving CSR that is
// Pending is never approved by anything upstream (the csrapproving
// controller approves only client certs: kubernetes/kubernetes#73356), so
// someone must check and approve it; a client CSR that waits or an approved
// CSR without a certificate means the controller-manager does not approve
// or sign (https://kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/,
// https://kubernetes.io/docs/reference/access-authn-authz/certificate-signing-requests/).
func bootstrapCSRs(e *labcheck.Env) ([]labcheck.Mistake, error) {
	if len(bootstrapWorkers(e)) == 0 {
		return nil, nil
	}
	if e.API == nil {
		return nil, labcheck.ErrNoAPI
	}
	list, err := e.API.CertificatesV1().CertificateSigningRequests().List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list CertificateSigningRequests: %w", err)
	}
	var out []labcheck.Mistake
	waiting := map[string]bool{} // nodes with a Pending serving CSR
	for i := range list.Items {
		csr := &list.Items[i]
		if st, _ := tb.State(csr); csr.Spec.SignerName == tb.ServingSigner && st == "Pending" {
			waiting[strings.TrimPrefix(csr.Spec.Username, labcheck.NodeUserPrefix)] = true
		}
	}
	// A bootstrapped kubelet without a serving certificate answers every
	// TLS handshake on 10250 with an alert: the apiserver's logs, exec
	// and port-forward to it fail (kubelet serverTLSBootstrap, https://kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/#certificate-rotation).
	for _, n := range bootstrapWorkers(e) {
		if waiting[n.Name] {
			continue
		}
		if _, joined, err := e.Read(n.Name, clientCurrent); err != nil || !joined {
			continue // not bootstrapped yet: bootstrap-identity says why
		}
		if _, found, err := e.Read(n.Name, servingCurrent); err == nil && !found {
			out = append(out, labcheck.Mistake{Lab: labTLS, Node: n.Name,
				What:     "the kubelet on " + n.Name + " has no serving certificate and no kubelet-serving CSR waits for approval: the apiserver's logs, exec and port-forward to " + n.Name + " fail with \"remote error: tls: internal error\"",
				Evidence: "no " + servingCurrent + " on " + n.Name + "; no Pending CSR of signer " + tb.ServingSigner + " from " + labcheck.NodeUserPrefix + n.Name,
				Fix:      "the kubelet asks for one by a CSR within seconds of its start (serverTLSBootstrap: true): kubectl get csr; if none comes, systemctl restart kubelet on " + n.Name + "; then read the CSR and approve it"})
		}
	}
	for i := range list.Items {
		csr := &list.Items[i]
		state, issued := tb.State(csr)
		age := e.Now.Sub(csr.CreationTimestamp.Time)
		ev := fmt.Sprintf("CSR %s: signer %s, requested by %s, %s, created %s ago", csr.Name, csr.Spec.SignerName, csr.Spec.Username, state, age.Round(time.Second))
		switch {
		case csr.Spec.SignerName == tb.ServingSigner && state == "Pending":
			node := strings.TrimPrefix(csr.Spec.Username, labcheck.NodeUserPrefix)
			sans := requestSANs(csr)
			ev += "; SANs " + sans
			fix := "check that the requestor is system:node:<node> and the SANs are exactly that node's name and IP, then kubectl certificate approve " + csr.Name
			if n, ok := e.Cluster.Node(node); ok {
				why := tb.CheckServingCSR(csr, tb.ServingExpect{Node: n.Name, DNSNames: []string{n.Name}, IPs: []string{n.IP}})
				if len(why) == 0 {
					fix = "it asks for exactly " + n.Name + "'s name and IP, requested by " + n.Name + " itself: kubectl certificate approve " + csr.Name
				} else {
					fix = "do not approve it as is (" + strings.Join(why, "; ") + "): kubectl certificate deny " + csr.Name + ", fix the kubelet's node name and address, restart it"
				}
			}
			out = append(out, labcheck.Mistake{Lab: labTLS, Node: node, What: "the kubelet serving CSR " + csr.Name + " is Pending: nothing approves kubelet-serving CSRs upstream (kubernetes/kubernetes#73356), so until someone does, logs and exec on this node fail",
				Evidence: ev, Fix: fix})
		case csr.Spec.SignerName == tb.ClientSigner && state == "Pending" && age > stuckAfter:
			out = append(out, labcheck.Mistake{Lab: labTLS, What: "the kubelet client CSR " + csr.Name + " is still Pending: the controller-manager did not auto-approve it (the nodeclient binding for its requestor, or the csrapproving controller, is missing)",
				Evidence: ev + fmt.Sprintf("; groups %v", csr.Spec.Groups), Fix: "bind system:certificates.k8s.io:certificatesigningrequests:nodeclient to group system:bootstrappers; then the next CSR is approved (or kubectl certificate approve " + csr.Name + ")"})
		case state == "Approved" && !issued && age > stuckAfter && (csr.Spec.SignerName == tb.ClientSigner || csr.Spec.SignerName == tb.ServingSigner):
			out = append(out, labcheck.Mistake{Lab: labTLS, What: "CSR " + csr.Name + " is approved but has no certificate: the controller-manager does not sign (--cluster-signing-cert-file/--cluster-signing-key-file missing or wrong, or csrsigning off)",
				Evidence: ev, Fix: "--cluster-signing-cert-file=/var/lib/kubernetes/ca.pem --cluster-signing-key-file=/var/lib/kubernetes/ca-key.pem on kube-controller-manager, restart it"})
		}
	}
	return out, nil
}

// The kubelet's current client and serving certificates when it got them
// by CSRs (its --cert-dir, /var/lib/kubelet/pki).
const (
	clientCurrent  = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	servingCurrent = "/var/lib/kubelet/pki/kubelet-server-current.pem"
)

// requestSANs lists the SANs of the CSR's PKCS#10 request.
func requestSANs(csr *certsv1.CertificateSigningRequest) string {
	b, _ := pem.Decode(csr.Spec.Request)
	if b == nil {
		return "(request does not parse)"
	}
	r, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return "(request does not parse)"
	}
	var s []string
	s = append(s, r.DNSNames...)
	for _, ip := range r.IPAddresses {
		s = append(s, ip.String())
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// tlsBootstrapDetectors are the detectors of lab TLSBootstrap, in the order they run.
var Detectors = []labcheck.Detector{
	{Name: "bootstrap-dns", Lab: labid.TLSBootstrap, Doc: "the TLS-bootstrap workers' clusterDNS (as worker-dns)", Run: workers.WorkerDNS(true)},
	{Name: "bootstrap-identity", Lab: labid.TLSBootstrap, Doc: "the TLS-bootstrap workers' node name and kubeconfigs once bootstrapped (as worker-identity)", Run: workers.WorkerIdentity(true)},
	{Name: "bootstrap-token", Lab: labid.TLSBootstrap, Doc: "bootstrap token Secrets: name, type, id/secret format, expiration, usage, extra groups; the worker's token has a Secret (API)", Run: bootstrapTokens},
	{Name: "bootstrap-rbac", Lab: labid.TLSBootstrap, Doc: "node-bootstrapper, nodeclient and selfnodeclient bindings; bootstrap token auth and CSR signing flags (API)", Run: bootstrapRBAC},
	{Name: "bootstrap-csrs", Lab: labid.TLSBootstrap, Doc: "a Pending kubelet-serving CSR (never auto-approved), a stuck client CSR, an approved CSR never signed (API)", Run: bootstrapCSRs},
}
