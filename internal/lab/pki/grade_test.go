package pki

import (
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labcheck/labchecktest"
)

// TestDetectorsPKI breaks one thing at a time in a good cluster and
// expects lab 02-pki's detectors to name it.
func TestDetectorsPKI(t *testing.T) {
	cases := []struct {
		name   string
		lab    string
		break_ func(t *testing.T, f *labchecktest.Fixture)
		want   []labchecktest.Want
	}{
		{"admin cert without system:masters", "02-pki", func(t *testing.T, f *labchecktest.Fixture) {
			f.ReplaceCert(t, labcheck.Jumpbox, "pki/admin.pem", "pki/admin-key.pem", labchecktest.CertSpec{CN: "admin", Client: true})
		}, []labchecktest.Want{{"02-pki", labcheck.Jumpbox, "want O=system:masters"}}},
		{"node cert CN without system:node: prefix", "02-pki", func(t *testing.T, f *labchecktest.Fixture) {
			f.ReplaceCert(t, labcheck.Jumpbox, "pki/w1.pem", "pki/w1-key.pem", labchecktest.CertSpec{CN: "w1", Org: []string{"system:nodes"}, IPs: []string{"192.168.122.21"}, Server: true, Client: true})
		}, []labchecktest.Want{{"02-pki", labcheck.Jumpbox, `want CN="system:node:w1"`}}},
		{"node cert without its IP", "02-pki", func(t *testing.T, f *labchecktest.Fixture) {
			f.ReplaceCert(t, labcheck.Jumpbox, "pki/w2.pem", "pki/w2-key.pem", labchecktest.CertSpec{CN: "system:node:w2", Org: []string{"system:nodes"}, DNS: []string{"w2"}, Server: true, Client: true})
		}, []labchecktest.Want{{"02-pki", labcheck.Jumpbox, "lacks the SANs 192.168.122.22"}}},
		{"apiserver cert without service IP and lb", "02-pki", func(t *testing.T, f *labchecktest.Fixture) {
			dns, ips := f.KubernetesSANs()
			f.ReplaceCert(t, labcheck.Jumpbox, "pki/kubernetes.pem", "pki/kubernetes-key.pem", labchecktest.CertSpec{CN: "kubernetes", DNS: labchecktest.Without(dns, "lb"), IPs: labchecktest.Without(ips, "10.32.0.1"), Server: true, Client: true})
		}, []labchecktest.Want{{"02-pki", labcheck.Jumpbox, "lacks the SANs 10.32.0.1"}, {"02-pki", labcheck.Jumpbox, "; lb ("}}},
		{"controller-manager in system:nodes (the seed's table)", "02-pki", func(t *testing.T, f *labchecktest.Fixture) {
			f.ReplaceCert(t, labcheck.Jumpbox, "pki/kube-controller-manager.pem", "pki/kube-controller-manager-key.pem", labchecktest.CertSpec{CN: "system:kube-controller-manager", Org: []string{"system:nodes"}, Client: true})
		}, []labchecktest.Want{{"02-pki", labcheck.Jumpbox, "has O=system:nodes"}}},
		{"kube-proxy cert from another CA", "02-pki", func(t *testing.T, f *labchecktest.Fixture) {
			f.ReplaceCert(t, labcheck.Jumpbox, "pki/kube-proxy.pem", "pki/kube-proxy-key.pem", labchecktest.CertSpec{CN: "system:kube-proxy", Client: true, SelfSigned: true})
		}, []labchecktest.Want{{"02-pki", labcheck.Jumpbox, "is not signed by the cluster CA"}}},
		{"scheduler key of another cert", "02-pki", func(t *testing.T, f *labchecktest.Fixture) {
			f.Src.Set(labcheck.Jumpbox, "pki/kube-scheduler-key.pem", f.Src.Get(t, labcheck.Jumpbox, "pki/kube-proxy-key.pem"))
		}, []labchecktest.Want{{"02-pki", labcheck.Jumpbox, "pki/kube-scheduler-key.pem is not the key of pki/kube-scheduler.pem"}}},
		{"expired admin cert", "02-pki", func(t *testing.T, f *labchecktest.Fixture) {
			f.ReplaceCert(t, labcheck.Jumpbox, "pki/admin.pem", "pki/admin-key.pem", labchecktest.CertSpec{CN: "admin", Org: []string{"system:masters"}, Client: true, NotAfter: labchecktest.Now.Add(-time.Hour)})
		}, []labchecktest.Want{{"02-pki", labcheck.Jumpbox, "expired"}}},
		{"missing cert", "02-pki", func(t *testing.T, f *labchecktest.Fixture) { f.Src.Del(labcheck.Jumpbox, "pki/kube-proxy.pem") },
			[]labchecktest.Want{{"02-pki", labcheck.Jumpbox, "pki/kube-proxy.pem is missing"}}},
		{"server-only EKU on the apiserver cert", "02-pki", func(t *testing.T, f *labchecktest.Fixture) {
			dns, ips := f.KubernetesSANs()
			f.ReplaceCert(t, labcheck.Jumpbox, "pki/kubernetes.pem", "pki/kubernetes-key.pem", labchecktest.CertSpec{CN: "kubernetes", DNS: dns, IPs: ips, Server: true})
		}, []labchecktest.Want{{"02-pki", labcheck.Jumpbox, "lacks the extended key usage client auth"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { labchecktest.RunCase(t, Detectors, tc.break_, tc.want) })
	}
}
