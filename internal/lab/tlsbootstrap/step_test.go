package tlsbootstrap

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	tb "github.com/khw-dev/khw/internal/tlsbootstrap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// ctxClientset is a fake clientset whose Secret requests fail on a context
// that is done, as client-go's requests to a real apiserver do (the fake
// alone ignores the context, so a delete on a cancelled one would pass).
type ctxClientset struct{ *fake.Clientset }

func (c ctxClientset) CoreV1() corev1client.CoreV1Interface { return ctxCore{c.Clientset.CoreV1()} }

type ctxCore struct{ corev1client.CoreV1Interface }

func (c ctxCore) Secrets(ns string) corev1client.SecretInterface {
	return ctxSecrets{c.CoreV1Interface.Secrets(ns)}
}

type ctxSecrets struct{ corev1client.SecretInterface }

func (s ctxSecrets) Delete(ctx context.Context, name string, o metav1.DeleteOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.SecretInterface.Delete(ctx, name, o)
}

func (s ctxSecrets) List(ctx context.Context, o metav1.ListOptions) (*corev1.SecretList, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.SecretInterface.List(ctx, o)
}

// tokenSecrets returns the names of the bootstrap token Secrets in kube-system.
func tokenSecrets(t *testing.T, cs kubernetes.Interface) []string {
	t.Helper()
	l, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range l.Items {
		if s.Type == tb.SecretType {
			out = append(out, s.Name)
		}
	}
	return out
}

// TestTLSBootstrapJoinDeletesToken runs the step's join with a fake
// clientset and fake node operations and checks that the bootstrap token
// Secret it creates is gone from kube-system however the join ends: the
// kubelet never asking for a certificate (the wait times out), the context
// cancelled (Ctrl-C) while waiting, the token failing to install on the
// node, and success.
func TestTLSBootstrapJoinDeletesToken(t *testing.T) {
	c := config.Default("t", config.ArchAMD64, config.ProviderNspawn)
	if _, err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	nodes := bootstrapNodes(c)
	if len(nodes) != 1 {
		t.Fatalf("bootstrap nodes %v, want w3", nodes)
	}
	s := &Step{}
	type run struct {
		cs       kubernetes.Interface
		installs atomic.Int32
	}
	// ops: a node that needs a token; install checks that the Secret
	// exists then; missing reports no client certificate until certsAfter
	// checks (0: never, as when the kubelet issues no CSR).
	ops := func(t *testing.T, r *run, installErr error, certsAfter int32, onInstall func()) joinOps {
		var checks atomic.Int32
		return joinOps{
			needToken: func(context.Context, config.Node) (bool, error) { return true, nil },
			install: func(_ context.Context, n config.Node, tok tb.Token) error {
				r.installs.Add(1)
				if got := tokenSecrets(t, r.cs); len(got) != 1 || got[0] != tb.SecretPrefix+tok.ID {
					t.Errorf("while installing on %s: token Secrets %v, want %s%s", n.Name, got, tb.SecretPrefix, tok.ID)
				}
				if onInstall != nil {
					onInstall()
				}
				return installErr
			},
			setup: func(context.Context) error { return nil },
			missing: func(context.Context, config.Node) ([]string, error) {
				if certsAfter > 0 && checks.Add(1) >= certsAfter {
					return nil, nil
				}
				return []string{"the kubelet has no client certificate yet"}, nil
			},
			wait: 1500 * time.Millisecond,
		}
	}
	newEnv := func(t *testing.T) *steps.Env { return steps.NewEnv(c, state.New(t.TempDir(), c.Name)) }

	t.Run("kubelet never asks", func(t *testing.T) {
		r := &run{cs: ctxClientset{fake.NewClientset()}}
		err := s.join(context.Background(), newEnv(t), r.cs, nodes, time.Now(), ops(t, r, nil, 0, nil))
		if err == nil || !strings.Contains(err.Error(), "did not finish within") || !strings.Contains(err.Error(), "no client certificate") {
			t.Fatalf("join: %v, want the wait to time out naming the missing cert", err)
		}
		if r.installs.Load() != 1 {
			t.Fatalf("installs = %d", r.installs.Load())
		}
		if left := tokenSecrets(t, r.cs); len(left) != 0 {
			t.Errorf("after a failed join the bootstrap token stays valid: %v", left)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		r := &run{cs: ctxClientset{fake.NewClientset()}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		onInstall := func() { time.AfterFunc(200*time.Millisecond, cancel) }
		err := s.join(ctx, newEnv(t), r.cs, nodes, time.Now(), ops(t, r, nil, 0, onInstall))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("join: %v, want context.Canceled", err)
		}
		if left := tokenSecrets(t, r.cs); len(left) != 0 {
			t.Errorf("after Ctrl-C the bootstrap token stays valid: %v", left)
		}
	})
	t.Run("install fails", func(t *testing.T) {
		r := &run{cs: ctxClientset{fake.NewClientset()}}
		err := s.join(context.Background(), newEnv(t), r.cs, nodes, time.Now(), ops(t, r, errors.New("ssh: connection refused"), 0, nil))
		if err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("join: %v", err)
		}
		if left := tokenSecrets(t, r.cs); len(left) != 0 {
			t.Errorf("after a failed install the bootstrap token stays valid: %v", left)
		}
	})
	t.Run("done", func(t *testing.T) {
		r := &run{cs: ctxClientset{fake.NewClientset()}}
		if err := s.join(context.Background(), newEnv(t), r.cs, nodes, time.Now(), ops(t, r, nil, 2, nil)); err != nil {
			t.Fatal(err)
		}
		if left := tokenSecrets(t, r.cs); len(left) != 0 {
			t.Errorf("after the join the bootstrap token stays valid: %v", left)
		}
	})
}
