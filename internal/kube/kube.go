// Package kube holds khw's few client-go helpers: building a client from a
// kubeconfig and applying multi-document manifests with server-side apply,
// the way `kubectl apply --server-side` does, without shelling out to kubectl.
package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

// FieldManager is the server-side apply field manager of every object khw
// applies (`kubectl get -o yaml --show-managed-fields` shows it).
const FieldManager = "khw"

// RESTConfig loads a kubeconfig file (its current context). server, if not
// empty, replaces the server URL (e.g. to reach one apiserver directly).
func RESTConfig(kubeconfigPath, server string) (*rest.Config, error) {
	overrides := &clientcmd.ConfigOverrides{}
	if server != "" {
		overrides.ClusterInfo.Server = server
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfigPath}, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfigPath, err)
	}
	cfg.UserAgent = "khw"
	return cfg, nil
}

// Clientset is kubernetes.NewForConfig with the khw user agent.
func Clientset(cfg *rest.Config) (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(cfg)
}

// Applied is the outcome for one object of a manifest.
type Applied struct {
	// Kind/Namespace/Name identify the object, e.g. ClusterRoleBinding//khw:kubelet-bootstrap.
	Kind, Namespace, Name string
	// Action is "created", "configured" (changed) or "unchanged".
	Action string
}

func (a Applied) String() string {
	id := a.Kind + "/" + a.Name
	if a.Namespace != "" {
		id = a.Kind + "/" + a.Namespace + "/" + a.Name
	}
	return id + " " + a.Action
}

// Decode splits a multi-document YAML (or JSON) manifest into objects,
// skipping empty documents. Each object must have apiVersion and kind.
func Decode(manifest []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for i := 0; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" {
			return nil, fmt.Errorf("document %d: missing apiVersion or kind", i+1)
		}
		out = append(out, u)
	}
}

// Apply server-side-applies every object of manifest (multi-document YAML)
// with field manager FieldManager and force (khw owns what it applies), in
// order, and reports for each whether it was created, changed or unchanged
// (by comparing resourceVersion before and after). It stops at the first
// error, which names the object.
func Apply(ctx context.Context, cfg *rest.Config, manifest []byte) ([]Applied, error) {
	return apply(ctx, cfg, manifest, false)
}

// ApplyDryRun is Apply with dryRun=All: the apiserver runs admission and
// computes each object's result without persisting it. Action is "created"
// for an object that does not exist, "configured" when the result differs
// from the stored object (metadata that the server maintains, such as
// resourceVersion and managedFields, and status ignored), else "unchanged". It is how
// khw checks whether a manifest is applied without changing anything
// (https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run).
// The objects are asked for at once, in any order; on an error (the first
// one, naming its object) no result is returned.
func ApplyDryRun(ctx context.Context, cfg *rest.Config, manifest []byte) ([]Applied, error) {
	return apply(ctx, cfg, manifest, true)
}

// serverOwned are metadata fields the apiserver maintains.
var serverOwned = []string{"managedFields", "resourceVersion", "generation", "creationTimestamp", "uid"}

// sameObject compares the stored object with a dry run's result, without
// the metadata the apiserver maintains and without status: an apply never
// changes status, while a controller may update it between the Get and the
// dry run (a new Deployment's rollout), which is not the manifest's doing.
func sameObject(a, b *unstructured.Unstructured) bool {
	ac, bc := a.DeepCopy(), b.DeepCopy()
	for _, f := range serverOwned {
		unstructured.RemoveNestedField(ac.Object, "metadata", f)
		unstructured.RemoveNestedField(bc.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(ac.Object, "status")
	unstructured.RemoveNestedField(bc.Object, "status")
	return equality.Semantic.DeepEqual(ac.Object, bc.Object)
}

// sameAsNow says whether a dry run's result res equals the object as it is
// stored now: a controller that wrote the object between the Get and the dry
// run (a new Deployment gets its revision annotation) made the difference,
// not the manifest.
func sameAsNow(ctx context.Context, ri dynamic.ResourceInterface, res *unstructured.Unstructured) bool {
	now, err := ri.Get(ctx, res.GetName(), metav1.GetOptions{})
	return err == nil && sameObject(now, res)
}

func apply(ctx context.Context, cfg *rest.Config, manifest []byte, dryRun bool) ([]Applied, error) {
	objs, err := Decode(manifest)
	if err != nil {
		return nil, err
	}
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		// Two requests per object of one manifest: client-go's default
		// limit (5/s after a burst of 10) would only add waiting.
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = -1, 0
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if dryRun {
		// Nothing is stored, so no object depends on another being
		// applied first: ask for all of them at once.
		out := make([]Applied, len(objs))
		var g errgroup.Group
		for i, u := range objs {
			g.Go(func() (err error) {
				out[i], err = applyOne(ctx, mapper, dyn, u, true)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		return out, nil
	}
	var out []Applied
	for _, u := range objs {
		a, err := applyOne(ctx, mapper, dyn, u, false)
		if err != nil {
			return out, err
		}
		out = append(out, a)
	}
	return out, nil
}

// applyOne applies u by server-side apply (a dry run when dryRun) and says
// what it did to it.
func applyOne(ctx context.Context, mapper meta.RESTMapper, dyn dynamic.Interface, u *unstructured.Unstructured, dryRun bool) (Applied, error) {
	gvk := u.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return Applied{}, fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := u.GetNamespace()
		if ns == "" {
			ns = "default"
		}
		ri = dyn.Resource(m.Resource).Namespace(ns)
	}
	before := ""
	var cur *unstructured.Unstructured
	if cur, err = ri.Get(ctx, u.GetName(), metav1.GetOptions{}); err == nil {
		before = cur.GetResourceVersion()
	} else if !apierrors.IsNotFound(err) {
		return Applied{}, fmt.Errorf("get %s %s: %w", gvk.Kind, u.GetName(), err)
	}
	data, err := u.MarshalJSON()
	if err != nil {
		return Applied{}, err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: &force}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	res, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data, opts)
	if err != nil {
		return Applied{}, fmt.Errorf("apply %s %s: %w", gvk.Kind, u.GetName(), err)
	}
	a := Applied{Kind: gvk.Kind, Namespace: res.GetNamespace(), Name: res.GetName()}
	switch {
	case before == "":
		a.Action = "created"
	case dryRun && (sameObject(cur, res) || sameAsNow(ctx, ri, res)):
		a.Action = "unchanged"
	case dryRun:
		a.Action = "configured"
	case before == res.GetResourceVersion():
		a.Action = "unchanged"
	default:
		a.Action = "configured"
	}
	return a, nil
}
