package render

import (
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/pki"
)

// TestKubeletClientUserIsTheAPIServerCertCN ties the apiserver→kubelet RBAC
// subject to the cert the apiserver presents to kubelets: the binding only
// works if its user is that cert's CN (a mistake people make by hand).
func TestKubeletClientUserIsTheAPIServerCertCN(t *testing.T) {
	c := config.Default("khw", config.ArchAMD64, config.ProviderNspawn)
	for _, s := range pki.Specs(c) {
		if s.Name == "kubernetes" {
			if s.CN != KubeletClientUser {
				t.Fatalf("RBAC binds user %q but the apiserver's kubelet client cert has CN %q", KubeletClientUser, s.CN)
			}
			return
		}
	}
	t.Fatal("no kubernetes cert in pki.Specs")
}
