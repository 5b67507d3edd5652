// Package labid names the labs. Each lab's ID is written here and nowhere
// else in khw's code; its order, text, step and grading are in the
// catalogue (package lab), which the steps and detectors cannot import, so
// they name their lab through these constants.
//
// An ID is "NN-name": two digits that give the lab's place in the course
// and a lowercase name, the same as the lab text's file name (labs/NN-name.md).
package labid

// The labs, in the order of the course (shared design: 01-machines …
// 12-failover; then day 2 from 13-etcd-backup).
const (
	Machines     = "01-machines"
	PKI          = "02-pki"
	Kubeconfig   = "03-kubeconfig"
	Etcd         = "04-etcd"
	ControlPlane = "05-control-plane"
	LB           = "06-lb"
	Workers      = "07-workers"
	PodNetwork   = "08-pod-network"
	CoreDNS      = "09-coredns"
	TLSBootstrap = "10-tls-bootstrap"
	Smoke        = "11-smoke"
	Failover     = "12-failover"
	EtcdBackup   = "13-etcd-backup"
	CertRenewal  = "14-cert-renewal"
	Upgrade      = "15-upgrade"
)
