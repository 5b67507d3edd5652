package tlsbootstrap

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func tokenNames(t *testing.T, cs kubernetes.Interface) []string {
	t.Helper()
	l, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range l.Items {
		if s.Type == SecretType {
			out = append(out, s.Name)
		}
	}
	return out
}

// TestWithTokens: the tokens a join creates are gone after it, whether it
// returns nil, fails or panics; an earlier token with the same description
// is replaced, another node's token and other Secrets are left alone; a
// Secret that cannot be deleted is an error naming it and the kubectl fix.
func TestWithTokens(t *testing.T) {
	other, err := Token{ID: "zzz999", Secret: "0123456789abcdef"}.SecretObject(time.Now().Add(time.Hour), "khw: TLS bootstrap of w4", nil)
	if err != nil {
		t.Fatal(err)
	}
	earlier, _ := Token{ID: "aaa111", Secret: "0123456789abcdef"}.SecretObject(time.Now().Add(time.Hour), "khw: TLS bootstrap of w3", nil)
	plain := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "keep", Namespace: metav1.NamespaceSystem}}
	desc := "khw: TLS bootstrap of w3"

	for _, end := range []string{"nil", "error", "panic"} {
		t.Run(end, func(t *testing.T) {
			cs := fake.NewClientset(other.DeepCopy(), earlier.DeepCopy(), plain.DeepCopy())
			var notes []string
			notef := func(f string, a ...any) { notes = append(notes, f) }
			var tok Token
			join := func(ctx context.Context, toks *Tokens) error {
				var exp time.Time
				var err error
				tok, exp, err = toks.Create(ctx, desc)
				if err != nil {
					return err
				}
				if d := time.Until(exp); d < 59*time.Minute || d > time.Hour {
					t.Errorf("expiration in %v, want the ttl (1h)", d)
				}
				got := strings.Join(tokenNames(t, cs), ",")
				if got != "bootstrap-token-"+tok.ID+",bootstrap-token-zzz999" && got != "bootstrap-token-zzz999,bootstrap-token-"+tok.ID {
					t.Errorf("during the join: %s, want the new token and w4's (the earlier w3 one deleted)", got)
				}
				switch end {
				case "error":
					return errors.New("kubelet never asked")
				case "panic":
					panic("boom")
				}
				return nil
			}
			func() {
				defer func() {
					if r := recover(); (r != nil) != (end == "panic") {
						t.Errorf("recover() = %v", r)
					}
				}()
				err := WithTokens(context.Background(), cs, time.Hour, nil, notef, join)
				if (err != nil) != (end == "error") {
					t.Errorf("WithTokens: %v", err)
				}
			}()
			if got := strings.Join(tokenNames(t, cs), ","); got != "bootstrap-token-zzz999" {
				t.Errorf("after the join (%s): token Secrets %s, want only w4's", end, got)
			}
			if _, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).Get(context.Background(), "keep", metav1.GetOptions{}); err != nil {
				t.Errorf("another Secret was deleted: %v", err)
			}
			if len(notes) != 1 {
				t.Errorf("notes %v, want one deletion", notes)
			}
		})
	}

	t.Run("delete refused", func(t *testing.T) {
		cs := fake.NewClientset()
		cs.PrependReactor("delete", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("etcdserver: request timed out")
		})
		var name string
		err := WithTokens(context.Background(), cs, time.Hour, nil, nil, func(ctx context.Context, toks *Tokens) error {
			tok, _, err := toks.Create(ctx, desc)
			name = SecretPrefix + tok.ID
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "kube-system/"+name+" is still valid") || !strings.Contains(err.Error(), "kubectl -n kube-system delete secret "+name) {
			t.Errorf("a token left valid: %v, want its name and the kubectl fix", err)
		}
	})

	// A join that needs no new token (the node has its certificates)
	// still removes the tokens an earlier one left for the descriptions it
	// is given, and no other.
	t.Run("nothing created", func(t *testing.T) {
		cs := fake.NewClientset(earlier.DeepCopy(), other.DeepCopy())
		if err := WithTokens(context.Background(), cs, time.Hour, []string{desc}, nil, func(context.Context, *Tokens) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(tokenNames(t, cs), ","); got != "bootstrap-token-zzz999" {
			t.Errorf("after a join that made no token: %s, want only w4's", got)
		}
	})
}
