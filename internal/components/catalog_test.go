package components

import (
	"net/url"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
)

func TestCatalogResolvesForBothArches(t *testing.T) {
	cat, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	c := config.Default("khw", config.ArchARM64, config.ProviderNspawn)
	for _, arch := range []string{config.ArchAMD64, config.ArchARM64} {
		rs, err := cat.Resolve(c, arch)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]Resolved{}
		for _, r := range rs {
			byName[r.Artifact.Name] = r
			if strings.Contains(r.URL+r.Image+r.ChecksumURL, "{{") {
				t.Errorf("%s: unexpanded template", r.Artifact.Name)
			}
			if r.Artifact.Format != FormatImage {
				if u, err := url.Parse(r.URL); err != nil || u.Scheme != "https" || u.Host == "" {
					t.Errorf("%s: bad URL %q", r.Artifact.Name, r.URL)
				}
				if r.ChecksumURL == "" && r.SHA256 == "" {
					t.Errorf("%s: no way to verify", r.Artifact.Name)
				}
				if r.ChecksumFormat != ChecksumHex && r.ChecksumFormat != ChecksumSHA256Sum {
					t.Errorf("%s: checksum format %q", r.Artifact.Name, r.ChecksumFormat)
				}
			} else if r.Image == "" {
				t.Errorf("%s: image without reference", r.Artifact.Name)
			}
			if !strings.Contains(r.URL+r.Image, arch) && r.Artifact.Format != FormatImage {
				t.Errorf("%s: URL %s does not name the arch %s", r.Artifact.Name, r.URL, arch)
			}
			for _, f := range r.Files {
				if f.Mode != 0o755 || !strings.HasPrefix(f.Target, "/") {
					t.Errorf("%s: file %+v", r.Artifact.Name, f)
				}
			}
		}
		want := map[string]string{
			"kube-apiserver": "https://dl.k8s.io/release/v1.37.2/bin/linux/" + arch + "/kube-apiserver",
			"etcd":           "https://github.com/etcd-io/etcd/releases/download/v3.7.4/etcd-v3.7.4-linux-" + arch + ".tar.gz",
			"containerd":     "https://github.com/containerd/containerd/releases/download/v2.3.7/containerd-2.3.7-linux-" + arch + ".tar.gz",
			"runc":           "https://github.com/opencontainers/runc/releases/download/v1.5.3/runc." + arch,
			"cni-plugins":    "https://github.com/containernetworking/plugins/releases/download/v1.9.1/cni-plugins-linux-" + arch + "-v1.9.1.tgz",
			"crictl":         "https://github.com/kubernetes-sigs/cri-tools/releases/download/v1.37.0/crictl-v1.37.0-linux-" + arch + ".tar.gz",
		}
		for name, u := range want {
			if byName[name].URL != u {
				t.Errorf("%s: URL %q, want %q", name, byName[name].URL, u)
			}
		}
		if got := byName["pause-image"].Image; got != "registry.k8s.io/pause:3.10.2" {
			t.Errorf("pause image %q", got)
		}
		if got := byName["etcd"].Files[0].Path; got != "etcd-v3.7.4-linux-"+arch+"/etcd" {
			t.Errorf("etcd archive path %q", got)
		}
		if len(ForRole(rs, config.RoleControlPlane)) != 5 || len(ForRole(rs, config.RoleWorker)) != 9 {
			t.Errorf("roles: %d cp, %d worker artifacts", len(ForRole(rs, config.RoleControlPlane)), len(ForRole(rs, config.RoleWorker)))
		}
	}
	// A version set in cluster.yaml flows into the URLs.
	c.Versions.Etcd = "v3.7.3"
	rs, _ := cat.Resolve(c, config.ArchAMD64)
	for _, r := range rs {
		if r.Artifact.Name == "etcd" && !strings.Contains(r.URL, "/v3.7.3/etcd-v3.7.3-linux-amd64.tar.gz") {
			t.Errorf("override ignored: %s", r.URL)
		}
	}
	if _, err := cat.Resolve(c, "riscv64"); err == nil {
		t.Error("unknown arch accepted")
	}
}
