package pki

import (
	"fmt"
	"slices"
	"strings"
)

// describe says what a cert with this subject is for and what its identity
// may do. The apiserver maps a client cert to user = CN and groups = O
// (k8s.io/apiserver/pkg/authentication/request/x509/x509.go,
// CommonNameUserConversion); what that user may do comes from the Node
// authorizer and the built-in RBAC policy
// (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go). isCA, server
// and client say whether the cert is a CA and may serve or authenticate TLS
// (from its basic constraints and EKUs). Specs and Inspect share it, so a
// hand-made cert is explained by the same rules as khw's own.
func describe(cn string, orgs []string, isCA, server, client bool) (purpose string, access []string) {
	inGroup := func(g string) bool { return slices.Contains(orgs, g) }
	node, isNodeCN := strings.CutPrefix(cn, nodeUserPrefix)
	switch {
	case isCA:
		return "cluster root CA: every component trusts it (kube-apiserver --client-ca-file, etcd --trusted-ca-file, " +
				"kubeconfig certificate-authority-data, /var/lib/kubernetes/ca.pem) and the controller-manager signs " +
				"kubelet CSRs with it (--cluster-signing-cert-file)",
			[]string{"not a client identity: a CA cert authenticates nobody; whoever holds its key (ca-key.pem) can " +
				"sign a cert for any user or group, system:masters included, so the key stays on the jumpbox and the control planes"}

	case cn == userSigner:
		return "ServiceAccount token signer: kube-apiserver signs ServiceAccount JWTs with service-account-key.pem " +
				"(--service-account-signing-key-file) and verifies them with this cert's public key (--service-account-key-file); " +
				"the controller-manager gets the key as --service-account-private-key-file",
			[]string{"service-accounts → not a client identity: no kubeconfig carries it and no binding names it; its key " +
				"signs ServiceAccount JWTs, so whoever holds service-account-key.pem can mint a token for any ServiceAccount"}

	case inGroup(groupMasters):
		access = append(access, fmt.Sprintf("%s in system:masters → cluster-admin (bound by the built-in ClusterRoleBinding "+
			"cluster-admin); the apiserver also allows system:masters before RBAC is asked (pkg/kubeapiserver/authorizer), "+
			"so no RBAC change can take it away: only the cert's expiry or a new CA ends it", cn))
		purpose = "cluster administrator: kubectl on the jumpbox and the control planes (admin.kubeconfig)"

	case isNodeCN && inGroup(groupNodes):
		access = append(access, fmt.Sprintf("%s in system:nodes → Node authorizer + NodeRestriction: only its own node's "+
			"objects (its Node and Lease, the pods bound to %s, and the secrets, configmaps, PVCs and ServiceAccount tokens "+
			"those pods use); plugin/pkg/auth/authorizer/node and plugin/pkg/admission/noderestriction", cn, node))
		purpose = fmt.Sprintf("kubelet of node %s: its client cert to the apiserver (kubeconfig)", node)
		if server {
			purpose += " and its serving cert on :10250 (KubeletConfiguration tlsCertFile), which the apiserver checks when it calls the kubelet"
		}

	case isNodeCN:
		access = append(access, fmt.Sprintf("CN names node %s but O lacks system:nodes: the Node authorizer only acts on "+
			"group system:nodes, so this identity may do only what every authenticated user may (fix: O=system:nodes)", node))
		purpose = fmt.Sprintf("meant for the kubelet of node %s", node)

	case inGroup(groupNodes):
		access = append(access, fmt.Sprintf("%s is in system:nodes without a CN of the form system:node:<name>: the Node "+
			"authorizer cannot tell which node it is and denies it (fix: CN=system:node:<node name>)", cn))
		purpose = "meant for a kubelet"

	case cn == userKCM:
		access = append(access, "system:kube-controller-manager → ClusterRole system:kube-controller-manager (the built-in "+
			"ClusterRoleBinding of the same name binds the user); with --use-service-account-credentials each controller "+
			"then acts as its own ServiceAccount in kube-system")
		purpose = "kube-controller-manager's client cert (kube-controller-manager.kubeconfig, https://127.0.0.1:6443 on each control plane)"

	case cn == userScheduler:
		access = append(access, "system:kube-scheduler → ClusterRoles system:kube-scheduler and system:volume-scheduler "+
			"(the built-in ClusterRoleBindings of the same names bind the user)")
		purpose = "kube-scheduler's client cert (kube-scheduler.kubeconfig, https://127.0.0.1:6443 on each control plane)"

	case cn == userKubeProxy:
		access = append(access, "system:kube-proxy → ClusterRole system:node-proxier (the built-in ClusterRoleBinding "+
			"system:node-proxier binds the user system:kube-proxy; the O does not matter): watch Services, EndpointSlices "+
			"and Nodes, write Events")
		purpose = "kube-proxy's client cert on every worker (kube-proxy.kubeconfig, through the load balancer)"

	case cn == userAPIServer:
		access = append(access,
			"kubernetes → apiserver's client identity to kubelets, needs the apiserver-to-kubelet ClusterRole (nodes/proxy, "+
				"nodes/stats, nodes/log, nodes/spec, nodes/metrics, nodes/pods, nodes/healthz, nodes/configz) bound to user kubernetes for logs, exec and port-forward "+
				"(--kubelet-client-certificate); no built-in binding grants it (the built-in ClusterRole system:kubelet-api-admin is not bound)",
			"etcd accepts it as a client because it chains to the CA (--client-cert-auth) and has the DNS SAN kubernetes "+
				"(--client-cert-allowed-hostname=kubernetes), and as a peer by its CN (--peer-cert-allowed-cn=kubernetes): "+
				"no other cert khw issues passes")
		purpose = "kube-apiserver serving cert (--tls-cert-file), etcd server and peer cert, and the apiserver's client cert " +
			"to etcd (--etcd-certfile) and to kubelets (--kubelet-client-certificate)"

	default:
		who := fmt.Sprintf("user %q", cn)
		if len(orgs) > 0 {
			who += fmt.Sprintf(" and groups %s", strings.Join(orgs, ", "))
		}
		access = append(access, fmt.Sprintf("no built-in binding names %s: it is authenticated (group "+
			"system:authenticated: API discovery and self-reviews) but may do nothing else until a RoleBinding or "+
			"ClusterRoleBinding grants it", who))
		if server {
			purpose = "a TLS server cert for its SANs"
		} else {
			purpose = fmt.Sprintf("a client cert of user %q", cn)
		}
	}
	if !client {
		access = append(access, "no client auth EKU: the apiserver's x509 authenticator rejects it as a client cert")
	}
	return purpose, access
}
