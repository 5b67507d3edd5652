package nodeplan

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/steps"
)

// WorkerWait bounds the worker steps' Apply: units active, images imported,
// nodes Ready.
const WorkerWait = 3 * time.Minute

// workerImages are the catalog images imported on every worker: the nodes
// pull nothing, so an offline classroom works (pause = the pod sandbox,
// CoreDNS, agnhost = the smoke tests' workload).
var workerImages = []string{"pause-image", "coredns-image", "agnhost-image"}

// ImagesExtra imports the worker images into containerd's k8s.io namespace
// (the one the CRI uses) when `ctr images ls` does not list them.
func (m *Machines) ImagesExtra(c *config.Cluster) NodeExtra {
	return NodeExtra{
		AfterUnits: true,
		Check: func(ctx context.Context, cl *remote.Client, w *NodeWant) ([]steps.Diff, error) {
			refs, err := imageRefs(c)
			if err != nil {
				return nil, err
			}
			have, err := importedImages(ctx, cl)
			if err != nil {
				// containerd not running yet: every image counts as missing.
				have = map[string]bool{}
			}
			var diffs []steps.Diff
			for _, ref := range refs {
				if !have[ref] {
					diffs = append(diffs, steps.Diff{Node: w.Node.Name, What: "image " + ref + " is not imported", Fix: "ctr -n k8s.io images import"})
				}
			}
			return diffs, nil
		},
		Fix: func(ctx context.Context, env *steps.Env, cl *remote.Client, w *NodeWant) error {
			imgs, err := m.Art.images(ctx, env, workerImages...)
			if err != nil {
				return err
			}
			have, err := importedImages(ctx, cl)
			if err != nil {
				return fmt.Errorf("list images (is containerd running?): %w", err)
			}
			for _, im := range imgs {
				if have[im.ref] {
					continue
				}
				data, err := im.load()
				if err != nil {
					return err
				}
				p := "/var/lib/khw/images/" + im.file
				if _, err := cl.Install(ctx, remote.File{Path: p, Data: data, Mode: 0o644}); err != nil {
					return err
				}
				if _, _, err := cl.Run(ctx, "ctr -n k8s.io images import "+quote(p), remote.RunOptions{Sudo: true}); err != nil {
					return fmt.Errorf("import %s: %w", im.ref, err)
				}
				fmt.Fprintf(env.NodeLog(w.Node.Name), "%s worker: imported %s\n", time.Now().Format(time.RFC3339), im.ref)
			}
			return nil
		},
		Commands: func(w *NodeWant) []steps.Command { return m.Art.imageCommands(context.Background(), c, w) },
	}
}

// imageCommands is the shell equivalent of the images' Fix on w's node:
// with a mirror, each image tarball copied from it to the jumpbox,
// checked against the digest the pinned mirror manifest lists for it (not
// the .sha256 file beside it, which whoever controls the mirror could
// change too; no digest: a check that fails and says why), copied to the
// node and imported; without one, each image pulled by the node itself.
func (a *artifacts) imageCommands(ctx context.Context, c *config.Cluster, w *NodeWant) []steps.Command {
	rs, err := resolve(c, workerImages)
	if err != nil {
		return nil
	}
	mirror := a.fetcher().Mirror
	var exp map[string]expected
	if mirror != "" {
		a.mu.Lock()
		exp = a.expectedOf(ctx, rs)
		a.mu.Unlock()
	}
	node, arch := w.Node.Name, nodeArch(c)
	var jump, copies, imports []string
	for _, r := range rs {
		p, err := components.ImageMirrorPath(r.Image, arch)
		src, isFile, merr := mirrorSource(mirror, "https://"+p)
		if mirror == "" || err != nil || merr != nil {
			imports = append(imports, "sudo ctr -n k8s.io images pull --platform linux/"+arch+" "+steps.Quote(r.Image))
			continue
		}
		name := strings.ReplaceAll(path.Base(r.Image), ":", "_") + ".tar"
		tar := steps.Quote(name)
		get := "curl -fL -o " + tar + " " + src
		if isFile {
			get = "cp " + src + " " + tar
		}
		check := refuseCommand(name, name+" ("+r.Image+"): no SHA-256 khw trusts to check it against: "+exp[components.CacheKey(r)].missing)
		if sum := exp[components.CacheKey(r)].sum; sum != "" {
			check = checkCommand(sum, name)
		}
		jump = append(jump, get, check)
		copies = append(copies, fmt.Sprintf(`scp -F "$KHW_SSH_CONFIG" %s %s:`, steps.Quote(path.Join(w.Downloads, name)), node))
		imports = append(imports, "sudo ctr -n k8s.io images import "+tar+" && rm -f "+tar)
	}
	var cmds []steps.Command
	if len(jump) > 0 {
		if w.Downloads != "" {
			jump = append([]string{"mkdir -p " + steps.Quote(w.Downloads), "cd " + steps.Quote(w.Downloads)}, jump...)
		}
		sh := strings.Join(jump, "\n")
		cmds = append(cmds,
			steps.Command{Why: "the node pulls nothing: take each image's tarball from the mirror and check it against the SHA-256 in the command, the one the pinned mirror manifest lists (khw-mirror.json, whose digest is $KHW_MIRROR_DIGEST), as khw does; never the .sha256 file beside it, which whoever can change the mirror can change too" + MirrorCredentialsNote(sh), Shell: sh},
			steps.Command{Why: fmt.Sprintf("copy the %d image(s) to %s", len(copies), node), Shell: strings.Join(copies, "\n")})
	}
	return append(cmds, steps.Command{Node: node, Why: "import the images into containerd's k8s.io namespace, the one the kubelet's CRI uses",
		Shell: strings.Join(imports, "\n") + "\nsudo crictl images"})
}

func imageRefs(c *config.Cluster) ([]string, error) {
	rs, err := resolve(c, workerImages)
	if err != nil {
		return nil, err
	}
	var refs []string
	for _, r := range rs {
		refs = append(refs, r.Image)
	}
	return refs, nil
}

// importedImages lists the image references in containerd's k8s.io
// namespace.
func importedImages(ctx context.Context, cl *remote.Client) (map[string]bool, error) {
	out, _, err := cl.Run(ctx, "ctr -n k8s.io images ls -q", remote.RunOptions{Sudo: true})
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, l := range strings.Fields(string(out)) {
		have[l] = true
	}
	return have, nil
}

// image is one worker image's tarball.
type image struct {
	ref, file string
	load      func() ([]byte, error)
}

// images fetches the named image artifacts (tarballs importable with ctr).
func (a *artifacts) images(ctx context.Context, env *steps.Env, names ...string) ([]image, error) {
	fetched, err := a.fetchNamed(ctx, env, names)
	if err != nil {
		return nil, err
	}
	var out []image
	for _, ft := range fetched {
		if ft.Err != nil {
			return nil, fmt.Errorf("fetch %s: %w", ft.Resolved.Image, ft.Err)
		}
		p := ft.Path
		out = append(out, image{ref: ft.Resolved.Image, file: ft.Resolved.Artifact.Name + "-" + ft.SHA256[:12] + ".tar",
			load: func() ([]byte, error) { return readFile(p) }})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ref < out[j].ref })
	return out, nil
}
