// Package tlsbootstrap is what khw does for a worker that joins by TLS
// bootstrap (w3 by default): the bootstrap token and its Secret, and the
// check that decides whether a kubelet-serving CSR may be approved.
//
// Upstream references: https://kubernetes.io/docs/reference/access-authn-authz/bootstrap-tokens/
// and https://kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/.
package tlsbootstrap

import (
	"crypto/rand"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Formats of a bootstrap token and its extra groups, as the apiserver's
// bootstrap token authenticator checks them
// (k8s.io/cluster-bootstrap/token/api: BootstrapTokenPattern,
// BootstrapGroupPattern).
var (
	TokenIDRE     = regexp.MustCompile(`\A[a-z0-9]{6}\z`)
	TokenSecretRE = regexp.MustCompile(`\A[a-z0-9]{16}\z`)
	ExtraGroupRE  = regexp.MustCompile(`\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z`)
)

// Names and keys of the bootstrap token Secret (k8s.io/cluster-bootstrap/token/api).
const (
	SecretType            = corev1.SecretType("bootstrap.kubernetes.io/token")
	SecretPrefix          = "bootstrap-token-"
	KeyTokenID            = "token-id"
	KeyTokenSecret        = "token-secret"
	KeyExpiration         = "expiration"
	KeyDescription        = "description"
	KeyUsageAuth          = "usage-bootstrap-authentication"
	KeyUsageSigning       = "usage-bootstrap-signing"
	KeyExtraGroups        = "auth-extra-groups"
	BootstrappersGroup    = "system:bootstrappers"
	BootstrapUserPrefix   = "system:bootstrap:"
	tokenAlphabet         = "abcdefghijklmnopqrstuvwxyz0123456789"
	tokenAlphabetLen      = byte(len(tokenAlphabet))
	maxUnbiasedTokenValue = 256 - 256%36
)

// Token is a bootstrap token "<id>.<secret>". Its String method never shows
// the secret; use Value for the credential itself.
type Token struct {
	ID     string
	Secret string
}

// NewToken draws a token from r (crypto/rand when nil) without modulo bias.
func NewToken(r io.Reader) (Token, error) {
	if r == nil {
		r = rand.Reader
	}
	draw := func(n int) (string, error) {
		out := make([]byte, 0, n)
		buf := make([]byte, 1)
		for len(out) < n {
			if _, err := io.ReadFull(r, buf); err != nil {
				return "", fmt.Errorf("bootstrap token: %w", err)
			}
			if buf[0] >= maxUnbiasedTokenValue {
				continue
			}
			out = append(out, tokenAlphabet[buf[0]%tokenAlphabetLen])
		}
		return string(out), nil
	}
	id, err := draw(6)
	if err != nil {
		return Token{}, err
	}
	secret, err := draw(16)
	if err != nil {
		return Token{}, err
	}
	return Token{ID: id, Secret: secret}, nil
}

// Value is the credential "<id>.<secret>" for a bootstrap kubeconfig.
func (t Token) Value() string { return t.ID + "." + t.Secret }

// String shows the token id only.
func (t Token) String() string { return t.ID + ".<secret hidden>" }

// User is the user name the apiserver gives the token: system:bootstrap:<id>.
func (t Token) User() string { return BootstrapUserPrefix + t.ID }

// SecretObject returns the kube-system Secret that makes t valid until expiration:
// type bootstrap.kubernetes.io/token, usable for authentication only, with
// optional extra groups (each must match ExtraGroupRE).
func (t Token) SecretObject(expiration time.Time, description string, extraGroups []string) (*corev1.Secret, error) {
	if !TokenIDRE.MatchString(t.ID) || !TokenSecretRE.MatchString(t.Secret) {
		return nil, fmt.Errorf("bootstrap token %s: id must be [a-z0-9]{6} and secret [a-z0-9]{16}", t)
	}
	data := map[string]string{
		KeyTokenID:     t.ID,
		KeyTokenSecret: t.Secret,
		KeyExpiration:  expiration.UTC().Format(time.RFC3339),
		KeyUsageAuth:   "true",
	}
	if description != "" {
		data[KeyDescription] = description
	}
	if len(extraGroups) > 0 {
		g := ""
		for i, e := range extraGroups {
			if !ExtraGroupRE.MatchString(e) {
				return nil, fmt.Errorf("bootstrap token extra group %q must match %s", e, ExtraGroupRE)
			}
			if i > 0 {
				g += ","
			}
			g += e
		}
		data[KeyExtraGroups] = g
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretPrefix + t.ID, Namespace: metav1.NamespaceSystem},
		Type:       SecretType,
		StringData: data,
	}, nil
}

// CheckSecret reports every way s is not a usable bootstrap token Secret at
// time now: wrong type or name, malformed id/secret, an expiration that is
// missing, unparsable or past, authentication usage off, bad extra groups.
// An empty result means the apiserver will accept the token.
func CheckSecret(s *corev1.Secret, now time.Time) []string {
	var probs []string
	get := func(k string) string {
		if v, ok := s.StringData[k]; ok {
			return v
		}
		return string(s.Data[k])
	}
	if s.Namespace != metav1.NamespaceSystem {
		probs = append(probs, fmt.Sprintf("namespace is %q; bootstrap token Secrets must be in kube-system", s.Namespace))
	}
	if s.Type != SecretType {
		probs = append(probs, fmt.Sprintf("type is %q, want %s", s.Type, SecretType))
	}
	id := get(KeyTokenID)
	if !TokenIDRE.MatchString(id) {
		probs = append(probs, fmt.Sprintf("token-id %q must be 6 characters of [a-z0-9]", id))
	} else if s.Name != SecretPrefix+id {
		probs = append(probs, fmt.Sprintf("name %q must be %s%s", s.Name, SecretPrefix, id))
	}
	if !TokenSecretRE.MatchString(get(KeyTokenSecret)) {
		probs = append(probs, "token-secret must be 16 characters of [a-z0-9]")
	}
	if exp := get(KeyExpiration); exp != "" {
		t, err := time.Parse(time.RFC3339, exp)
		switch {
		case err != nil:
			probs = append(probs, fmt.Sprintf("expiration %q is not RFC3339 (e.g. 2026-12-01T00:00:00Z)", exp))
		case !t.After(now):
			probs = append(probs, fmt.Sprintf("expiration %s is in the past: the token no longer authenticates (the tokencleaner controller deletes it)", exp))
		}
	}
	if get(KeyUsageAuth) != "true" {
		probs = append(probs, `usage-bootstrap-authentication must be "true" for the token to authenticate`)
	}
	if g := get(KeyExtraGroups); g != "" {
		for _, e := range strings.Split(g, ",") {
			if !ExtraGroupRE.MatchString(e) {
				probs = append(probs, fmt.Sprintf("auth-extra-groups entry %q must match system:bootstrappers:[a-z0-9:-]*[a-z0-9]", e))
			}
		}
	}
	return probs
}
