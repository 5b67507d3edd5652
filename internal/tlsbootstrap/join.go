package tlsbootstrap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// RevokeTimeout bounds the deletion of a join's token Secrets. It runs on a
// context of its own, since the join's context may be the one that ended it
// (Ctrl-C cancels it, a timeout expires it) and a request on it would fail
// before reaching the apiserver.
const RevokeTimeout = 30 * time.Second

// secretValue reads key from a Secret as the API returns it (Data) or as it
// was built (StringData, e.g. by SecretObject).
func secretValue(s *corev1.Secret, key string) string {
	if v, ok := s.StringData[key]; ok {
		return v
	}
	return string(s.Data[key])
}

// Find lists the bootstrap token Secrets in kube-system (type
// SecretType) whose description is desc.
func Find(ctx context.Context, cs kubernetes.Interface, desc string) ([]corev1.Secret, error) {
	l, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(SecretType)})
	if err != nil {
		return nil, fmt.Errorf("list bootstrap token Secrets: %w", err)
	}
	var out []corev1.Secret
	for _, s := range l.Items {
		if s.Type == SecretType && secretValue(&s, KeyDescription) == desc {
			out = append(out, s)
		}
	}
	return out, nil
}

// Revoke deletes every bootstrap token Secret in kube-system whose
// description is one of descs, on a context that keeps ctx's values but not
// its cancellation or deadline, bounded by RevokeTimeout: it runs after a
// join was interrupted too. A Secret already gone counts as deleted. It
// returns the ids of the tokens it deleted, and an error naming each Secret
// it could not list or delete, with the kubectl command that does.
func Revoke(ctx context.Context, cs kubernetes.Interface, descs ...string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RevokeTimeout)
	defer cancel()
	var deleted []string
	var errs []error
	for _, desc := range descs {
		secs, err := Find(ctx, cs, desc)
		if err != nil {
			errs = append(errs, fmt.Errorf("bootstrap tokens %q may still be valid: %w (kubectl -n kube-system get secrets --field-selector type=%s; delete khw's)", desc, err, SecretType))
			continue
		}
		for _, s := range secs {
			err := cs.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, s.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("bootstrap token Secret kube-system/%s is still valid: delete it: %w (kubectl -n kube-system delete secret %s)", s.Name, err, s.Name))
				continue
			}
			deleted = append(deleted, secretValue(&s, KeyTokenID))
		}
	}
	return deleted, errors.Join(errs...)
}

// Tokens creates the bootstrap tokens of one join and remembers their
// descriptions for WithTokens to revoke. Safe for concurrent use.
type Tokens struct {
	client kubernetes.Interface
	ttl    time.Duration

	mu    sync.Mutex
	descs []string
}

// Create deletes the Secrets of earlier tokens with description desc (left
// by a join that could not revoke them), then creates a fresh token Secret
// with desc, valid for the Tokens' ttl. desc is recorded before the Secret
// is created, so that a Create whose answer was lost is revoked too. It
// returns the token and its expiration.
func (t *Tokens) Create(ctx context.Context, desc string) (Token, time.Time, error) {
	t.mu.Lock()
	if !slices.Contains(t.descs, desc) {
		t.descs = append(t.descs, desc)
	}
	t.mu.Unlock()
	old, err := Find(ctx, t.client, desc)
	if err != nil {
		return Token{}, time.Time{}, err
	}
	for _, s := range old {
		if err := t.client.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return Token{}, time.Time{}, fmt.Errorf("delete the earlier bootstrap token Secret %s: %w", s.Name, err)
		}
	}
	tok, err := NewToken(nil)
	if err != nil {
		return Token{}, time.Time{}, err
	}
	exp := time.Now().Add(t.ttl)
	sec, err := tok.SecretObject(exp, desc, nil)
	if err != nil {
		return Token{}, time.Time{}, err
	}
	if _, err := t.client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		return Token{}, time.Time{}, fmt.Errorf("create bootstrap token Secret: %w", err)
	}
	return tok, exp, nil
}

// WithTokens runs join with a Tokens that creates tokens valid for ttl and,
// however join ends (nil, an error, its context cancelled or past its
// deadline, a panic), revokes every token Secret with one of descs or with
// a description passed to Create (Revoke, on a context of its own): a
// bootstrap token is a credential that lets anyone holding it ask for a
// node certificate, so none outlives the join that needed it, and none left
// by an earlier join that could not revoke it survives this one. notef
// (nil: none) is told of each token deleted. The result is join's error
// joined with Revoke's.
func WithTokens(ctx context.Context, cs kubernetes.Interface, ttl time.Duration, descs []string, notef func(format string, args ...any), join func(ctx context.Context, toks *Tokens) error) (err error) {
	toks := &Tokens{client: cs, ttl: ttl, descs: slices.Clone(descs)}
	returned := false // false in the deferred call: join panicked
	defer func() {
		toks.mu.Lock()
		descs := slices.Clone(toks.descs)
		toks.mu.Unlock()
		if len(descs) == 0 {
			return
		}
		deleted, rerr := Revoke(ctx, cs, descs...)
		if notef != nil {
			for _, id := range deleted {
				notef("deleted bootstrap token %s (%s)", id, joinOutcome(returned && err == nil))
			}
		}
		err = errors.Join(err, rerr)
	}()
	err = join(ctx, toks)
	returned = true
	return err
}

func joinOutcome(ok bool) string {
	if ok {
		return "its job is done"
	}
	return "the join failed; a new one makes a new token"
}
