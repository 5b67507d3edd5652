package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// imageSpec describes a single-platform, single-layer image.
type imageSpec struct {
	// Ref is the full reference written into the tarball's manifest.json
	// RepoTags, e.g. registry.k8s.io/pause:3.10.2; `ctr images import` names
	// the image after it.
	Ref string
	// Arch is amd64 or arm64 (config "architecture"; arm64 also gets
	// variant v8 like the upstream manifests).
	Arch string
	// Files make the one layer, in order; names are relative to / without a
	// leading slash ("pause", "etc/passwd", "tmp/").
	Files []entry
	// Config is the runtime config (Entrypoint, Cmd, User, WorkingDir, Env,
	// ExposedPorts).
	Config v1.Config
	// CreatedBy is recorded in the layer's history.
	CreatedBy string
}

// buildImage assembles the image: OCI manifest and config media types, a
// single gzip layer holding spec.Files, os linux and spec.Arch, created at
// the Unix epoch (so the same inputs give the same digests).
func buildImage(spec imageSpec) (v1.Image, error) {
	var layerTar bytes.Buffer
	if err := writeTar(&layerTar, spec.Files); err != nil {
		return nil, fmt.Errorf("image %s: layer: %w", spec.Ref, err)
	}
	data := layerTar.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image %s: layer: %w", spec.Ref, err)
	}
	cfg := &v1.ConfigFile{
		Architecture: spec.Arch,
		OS:           "linux",
		Created:      v1.Time{Time: epoch},
		Config:       spec.Config,
		RootFS:       v1.RootFS{Type: "layers"},
	}
	if spec.Arch == "arm64" {
		cfg.Variant = "v8"
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: spec.CreatedBy, Comment: "khw hack/mkmirror"},
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	return img, nil
}

// writeImageTarball writes img as an image tarball (the `docker save` layout
// with manifest.json and RepoTags that go-containerregistry's tarball package
// writes and `ctr -n k8s.io images import` reads) to path, through a
// temporary file and rename.
func writeImageTarball(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image %s -> %s: %w", ref, path, err)
	}
	return os.Rename(tmp, path)
}

// capNetBindService is the security.capability xattr value that
// `setcap cap_net_bind_service=+ep` writes (struct vfs_cap_data, revision 2,
// little-endian): magic_etc = VFS_CAP_REVISION_2|VFS_CAP_FLAGS_EFFECTIVE,
// permitted[0] = 1<<CAP_NET_BIND_SERVICE (10), everything else 0. Source:
// linux include/uapi/linux/capability.h. CoreDNS's Dockerfile sets it so the
// non-root process can bind port 53.
func capNetBindService() string {
	var b [20]byte
	binary.LittleEndian.PutUint32(b[0:], 0x02000000|0x1)
	binary.LittleEndian.PutUint32(b[4:], 1<<10)
	return string(b[:])
}

// defaultPath is the PATH Docker/BuildKit put into image configs.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// pauseImage mirrors build/pause/Dockerfile in k8s.io/kubernetes: FROM
// scratch, ADD the binary as /pause, USER 65535:65535, ENTRYPOINT ["/pause"].
func pauseImage(ref, arch, bin string) imageSpec {
	return imageSpec{
		Ref: ref, Arch: arch, CreatedBy: "ADD pause /pause",
		Files:  []entry{{Name: "pause", Mode: 0o755, Src: bin}},
		Config: v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535", Env: []string{defaultPath}},
	}
}

// corednsImage mirrors CoreDNS's Dockerfile: distroless static nonroot base
// (here only what CoreDNS uses from it: /etc/passwd and /etc/group naming
// nonroot 65532, /tmp, the CA bundle if given), /coredns with the file
// capability cap_net_bind_service=+ep, USER nonroot (numeric here, so no name
// lookup is needed), WORKDIR /, ENTRYPOINT ["/coredns"], EXPOSE 53 53/udp.
func corednsImage(ref, arch, bin, caBundle string) imageSpec {
	files := []entry{
		{Name: "etc/", Mode: 0o755},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Name: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{Name: "home/", Mode: 0o755},
		{Name: "home/nonroot/", Mode: 0o700, UID: 65532, GID: 65532},
		{Name: "tmp/", Mode: 0o777 | os.ModeSticky},
	}
	env := []string{defaultPath}
	if caBundle != "" {
		files = append(files, entry{Name: "etc/ssl/", Mode: 0o755}, entry{Name: "etc/ssl/certs/", Mode: 0o755},
			entry{Name: "etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Src: caBundle})
		env = append(env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
	}
	files = append(files, entry{Name: "coredns", Mode: 0o755, Src: bin,
		Xattrs: map[string]string{"security.capability": capNetBindService()}})
	return imageSpec{
		Ref: ref, Arch: arch, CreatedBy: "COPY coredns /coredns (setcap cap_net_bind_service=+ep)",
		Files: files,
		Config: v1.Config{Entrypoint: []string{"/coredns"}, User: "65532:65532", WorkingDir: "/", Env: env,
			ExposedPorts: map[string]struct{}{"53/tcp": {}, "53/udp": {}}},
	}
}

// agnhostImage mirrors test/images/agnhost/Dockerfile in k8s.io/kubernetes
// as far as the Go binary goes: /agnhost, the /agnhost-2 symlink, /uploads,
// porter's localhost.crt/.key, user-defined-in-image (1000) in
// group-defined-in-image (50000), ENTRYPOINT ["/agnhost"], CMD ["pause"],
// EXPOSE 80 8080 8081 9376 5000. The alpine userland (dig, curl, nc, bash)
// is replaced by busybox when busybox is given: /bin/busybox plus applet
// links (sh, nslookup, wget, nc, …).
func agnhostImage(ref, arch, bin string, porterDir, busybox string) imageSpec {
	files := []entry{
		{Name: "agnhost", Mode: 0o755, Src: bin},
		{Name: "agnhost-2", Mode: 0o777, Link: "agnhost"},
		{Name: "uploads/", Mode: 0o755},
		{Name: "etc/", Mode: 0o755},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/sbin/nologin\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")},
		{Name: "etc/group", Mode: 0o644, Data: []byte("root:x:0:root\nnobody:x:65534:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n")},
		{Name: "home/", Mode: 0o755},
		{Name: "home/user-defined-in-image/", Mode: 0o755, UID: 1000, GID: 1000},
		{Name: "root/", Mode: 0o700},
		{Name: "tmp/", Mode: 0o777 | os.ModeSticky},
	}
	if porterDir != "" {
		files = append(files,
			entry{Name: "localhost.crt", Mode: 0o644, Src: filepath.Join(porterDir, "localhost.crt")},
			entry{Name: "localhost.key", Mode: 0o644, Src: filepath.Join(porterDir, "localhost.key")})
	}
	if busybox != "" {
		files = append(files, entry{Name: "bin/", Mode: 0o755}, entry{Name: "bin/busybox", Mode: 0o755, Src: busybox})
		for _, a := range busyboxApplets {
			files = append(files, entry{Name: "bin/" + a, Mode: 0o777, Link: "busybox"})
		}
	}
	return imageSpec{
		Ref: ref, Arch: arch, CreatedBy: "ADD agnhost agnhost",
		Files: files,
		Config: v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: []string{defaultPath},
			ExposedPorts: map[string]struct{}{"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {}}},
	}
}

// busyboxApplets are the busybox links the agnhost image gets: a shell and
// the network tools smoke tests and debugging use.
var busyboxApplets = []string{"sh", "ash", "cat", "echo", "env", "grep", "head", "hostname", "id", "ip", "ls",
	"nc", "nslookup", "ping", "ps", "sleep", "tail", "wget"}
