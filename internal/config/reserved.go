package config

import (
	"slices"
	"strings"
)

// Base names of the files khw writes in the state directory's pki/ and
// kubeconfigs/ that do not belong to a node. internal/pki (Specs, the cfssl
// file names) and internal/kubeconfig (Specs) name their files with these
// constants, so the names a node may not take (ReservedNodeName) are the
// names the writers use. A worker's own files are named after the node:
// pki/<node>.pem, pki/<node>-key.pem, pki/<node>-csr.json,
// kubeconfigs/<node>.kubeconfig and kubeconfigs/<node>-bootstrap.kubeconfig.
const (
	// CertCA is the cluster CA: pki/ca.pem, pki/ca-key.pem, pki/ca-csr.json.
	CertCA = "ca"
	// CertAdmin is the admin client cert (pki/admin*.pem) and the jumpbox's
	// kubeconfigs/admin.kubeconfig.
	CertAdmin = "admin"
	// CertControllerManager, CertScheduler and CertKubeProxy are the
	// component client certs and their kubeconfigs (kubeconfigs/<name>.kubeconfig).
	CertControllerManager = "kube-controller-manager"
	CertScheduler         = "kube-scheduler"
	CertKubeProxy         = "kube-proxy"
	// CertAPIServer is the apiserver and etcd serving cert (pki/kubernetes.pem).
	CertAPIServer = "kubernetes"
	// CertServiceAccount is the ServiceAccount token signing key
	// (pki/service-account-key.pem).
	CertServiceAccount = "service-account"
	// CAConfigBase is cfssl's signing config, pki/ca-config.json.
	CAConfigBase = "ca-config"
	// KubeconfigAdminCP is kubeconfigs/admin-cp.kubeconfig, the admin
	// kubeconfig of the control planes.
	KubeconfigAdminCP = "admin-cp"
)

// Suffixes the writers append to a base name.
const (
	// KeySuffix: pki/<name>-key.pem holds the private key of <name>.pem.
	KeySuffix = "-key"
	// CSRSuffix: pki/<name>-csr.json is the cfssl CSR JSON of <name>.pem.
	CSRSuffix = "-csr"
	// BootstrapSuffix: kubeconfigs/<node>-bootstrap.kubeconfig is the
	// bootstrap kubeconfig of a TLS-bootstrap worker.
	BootstrapSuffix = "-bootstrap"
)

// reservedBases are the base names of non-node files, in the order the
// writers list them (pki Specs, then ca-config, then kubeconfig-only names).
var reservedBases = []string{
	CertCA, CertAdmin, CertControllerManager, CertScheduler, CertKubeProxy, CertAPIServer, CertServiceAccount,
	CAConfigBase, KubeconfigAdminCP,
}

// ReservedNodeName says why name cannot be a node name, or returns "" when
// it can. A node's files (see the constants above) must not be, or look like,
// another file of pki/ or kubeconfigs/:
//   - a base name in reservedBases: a worker "ca" would write its cert over
//     pki/ca.pem, a worker "admin" its kubeconfig over admin.kubeconfig;
//   - a name ending in -key: a worker "ca-key" would write its cert over
//     pki/ca-key.pem, the CA's private key (and "w1-key" over w1's key);
//   - a name ending in -csr: pki/<x>-csr.pem would sit next to
//     pki/<x>-csr.json, the CSR of <x>, and read as one (no file is
//     overwritten, but a student could not tell them apart);
//   - a name ending in -bootstrap: a worker "w3-bootstrap" would write
//     kubeconfigs/w3-bootstrap.kubeconfig, w3's bootstrap kubeconfig.
//
// The answer is a clause naming the file, e.g. "its cert would be
// pki/ca-key.pem, the private key of pki/ca.pem".
func ReservedNodeName(name string) string {
	if slices.Contains(reservedBases, name) {
		switch name {
		case CAConfigBase:
			return "it is the name of pki/" + CAConfigBase + ".json, cfssl's signing config"
		case KubeconfigAdminCP:
			return "its kubeconfig would be kubeconfigs/" + name + ".kubeconfig, the control planes' admin kubeconfig"
		case CertAdmin, CertControllerManager, CertScheduler, CertKubeProxy:
			return "its cert and kubeconfig would be pki/" + name + ".pem and kubeconfigs/" + name + ".kubeconfig, the " + name + " client's"
		}
		return "its cert and key would be pki/" + name + ".pem and pki/" + name + KeySuffix + ".pem, the " + name + " cert's"
	}
	if base, ok := strings.CutSuffix(name, KeySuffix); ok {
		return "its cert would be pki/" + name + ".pem, the private key of pki/" + base + ".pem"
	}
	if base, ok := strings.CutSuffix(name, CSRSuffix); ok {
		return "its cert pki/" + name + ".pem would read as pki/" + name + ".json, the cfssl CSR of pki/" + base + ".pem"
	}
	if base, ok := strings.CutSuffix(name, BootstrapSuffix); ok {
		return "its kubeconfig would be kubeconfigs/" + name + ".kubeconfig, the bootstrap kubeconfig of node " + base
	}
	return ""
}
