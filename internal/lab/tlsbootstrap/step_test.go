package tlsbootstrap

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	tb "github.com/khw-dev/khw/internal/tlsbootstrap"
	certsv1 "k8s.io/api/certificates/v1"
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

// servingCSR is a kubelet-serving CSR of system:node:<node> for the given
// SANs, made created ago.
func servingCSR(t *testing.T, name, node string, dns []string, ip string, ago time.Duration) *certsv1.CertificateSigningRequest {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		DNSNames: dns, IPAddresses: []net.IP{net.ParseIP(ip)},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certsv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Now().Add(-ago))},
		Spec: certsv1.CertificateSigningRequestSpec{
			Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), SignerName: tb.ServingSigner,
			Username: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"},
			Usages: []certsv1.KeyUsage{certsv1.UsageDigitalSignature, certsv1.UsageServerAuth},
		},
	}
}

// A serving CSR the kubelet sent before the step ran (its own rotation, or
// khw pki renew made it ask) is approved when it passes the checks; an old
// one that fails them is left alone instead of failing the step.
func TestWatchApprovesAServingCSRSentBefore(t *testing.T) {
	c := config.Default("t", config.ArchAMD64, config.ProviderNspawn)
	n, _ := c.Node("w3")
	good := servingCSR(t, "csr-good", "w3", []string{"w3"}, n.IP, 10*time.Minute)
	bad := servingCSR(t, "csr-bad", "w3", []string{"w3", "w1"}, n.IP, 20*time.Minute)
	cs := fake.NewClientset(good, bad)
	var checks atomic.Int32
	ops := joinOps{missing: func(context.Context, config.Node) ([]string, error) {
		if checks.Add(1) > 1 {
			return nil, nil
		}
		return []string{"no serving certificate yet"}, nil
	}, wait: 5 * time.Second}
	s := &Step{}
	if err := s.watchCSRs(context.Background(), steps.NewEnv(c, state.New(t.TempDir(), c.Name)), cs, n, time.Now(), ops); err != nil {
		t.Fatalf("watchCSRs: %v", err)
	}
	for name, want := range map[string]string{"csr-good": "Approved", "csr-bad": "Pending"} {
		got, err := cs.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := tb.State(got); st != want {
			t.Errorf("%s: %s, want %s", name, st, want)
		}
	}
}
