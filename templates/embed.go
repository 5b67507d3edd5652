// Package templates holds the sources of every file khw writes onto a node or
// applies to the cluster, embedded into the binary so `khw` needs nothing but
// itself:
//
//	node/<role>/*.tmpl   text/template sources of node files (systemd units,
//	                     component configs, /etc/hosts, CNI configs); <role> is
//	                     all, controlplane, loadbalancer or worker
//	manifests/*.tmpl     text/template sources of cluster manifests (RBAC,
//	                     CoreDNS) applied through the API
//	files/*              files copied verbatim (the mybridge/myloopback CNI
//	                     plugins, bash scripts)
//
// Package internal/render decides which template becomes which file at which
// target path, and with which values; these files only hold the text. Each
// template is written to be read by a student: short comments explain every
// flag or field that is not obvious.
package templates

import "embed"

// FS holds the node, manifests and files trees described in the package doc.
//
//go:embed node manifests files
var FS embed.FS
