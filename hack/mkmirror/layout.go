package main

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// mirrorRelPath maps an official download URL to its place in a mirror:
// https://HOST/PATH -> HOST/PATH (slash-separated, relative). This is the rule
// stated at the top of internal/components/catalog.yaml. Errors: a URL that
// does not parse, is not http(s), has no host, or has a ".." segment (which
// would escape the mirror).
func mirrorRelPath(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("URL %q: %w", rawURL, err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return "", fmt.Errorf("URL %q: scheme %q is not http(s)", rawURL, u.Scheme)
	}
	if u.Host == "" || strings.ContainsAny(u.Host, "/\\") {
		return "", fmt.Errorf("URL %q has no usable host", rawURL)
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == ".." {
			return "", fmt.Errorf("URL %q: path has a \"..\" segment, which would leave the mirror directory", rawURL)
		}
	}
	p := strings.TrimPrefix(path.Clean("/"+u.Path), "/")
	if p == "" {
		return "", fmt.Errorf("URL %q has no file path", rawURL)
	}
	return u.Host + "/" + p, nil
}

// imageRelPath maps an image reference to its tarball in a mirror:
// REGISTRY/REPO/TAG/image-linux-ARCH.tar, e.g. registry.k8s.io/pause:3.10.2
// and amd64 -> registry.k8s.io/pause/3.10.2/image-linux-amd64.tar. The
// reference must name its registry and tag explicitly (no Docker Hub
// defaulting, no digest-only references).
func imageRelPath(ref, arch string) (string, error) {
	if arch != "amd64" && arch != "arm64" {
		return "", fmt.Errorf("image %s: arch %q: use amd64 or arm64", ref, arch)
	}
	t, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w (want REGISTRY/REPO:TAG)", ref, err)
	}
	first := strings.SplitN(ref, "/", 2)[0]
	if !strings.ContainsAny(first, ".:") && first != "localhost" {
		return "", fmt.Errorf("image reference %q does not start with a registry host (want e.g. registry.k8s.io/pause:3.10.2)", ref)
	}
	return path.Join(t.RegistryStr(), t.RepositoryStr(), t.TagStr(), "image-linux-"+arch+".tar"), nil
}

// abs joins a slash-separated mirror-relative path onto the mirror root.
func abs(root, rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }

// cacheRoot is $XDG_CACHE_HOME/khw (or ~/.cache/khw, os.UserCacheDir).
func cacheRoot() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory: %w (fix: set XDG_CACHE_HOME or HOME, or pass --cache)", err)
	}
	return filepath.Join(d, "khw"), nil
}

// buildDir is where the builds of one component version for one arch live:
// CACHE/build/COMPONENT/VERSION/linux-ARCH. Binaries sit at the top, derived
// files (archives, image tarballs) in dist/.
func buildDir(cache, component, version, arch string) string {
	return filepath.Join(cache, "build", component, version, "linux-"+arch)
}
