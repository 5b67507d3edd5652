package config

import (
	"strings"
	"testing"
)

// kubernetes.clusterName goes unquoted into the shell commands khw shows;
// shell metacharacters and overlong names are refused.
func TestKubeconfigClusterNameIsAShellWord(t *testing.T) {
	for name, ok := range map[string]bool{"kubernetes-the-hard-way": true, "khw_1.lab": true, "a$(id)": false, "x;rm": false, "`x`": false, "-x": false, strings.Repeat("a", 64): false, "": false} {
		c := Default("khw", ArchAMD64, ProviderNspawn)
		c.Kubernetes.ClusterName = name
		_, err := c.Validate()
		if (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "kubernetes.clusterName")) {
			t.Errorf("%q: %v", name, err)
		}
	}
}
