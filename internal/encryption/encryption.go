// Package encryption manages the kube-apiserver's encryption-at-rest file
// (--encryption-provider-config): an EncryptionConfiguration of
// apiserver.config.k8s.io/v1 that encrypts Secrets in etcd with a local
// aescbc key.
//
// The rules come from the upstream task "Encrypting Confidential Data at Rest"
// (https://kubernetes.io/docs/tasks/administer-cluster/encrypt-data/) and the
// apiserver code that reads the file (k8s.io/apiserver
// pkg/server/options/encryptionconfig/config.go and
// pkg/apis/apiserver/validation/validation_encryption.go):
//
//   - the apiserver writes with the FIRST provider of the resources entry that
//     matches a resource, using that provider's FIRST key;
//   - it reads by trying each provider whose prefix matches the stored value
//     (k8s:enc:<provider>:v1:<key name>:), so old keys must stay listed until
//     every object they encrypted has been rewritten;
//   - identity {} writes plain text, so it belongs last (it lets the apiserver
//     read Secrets stored before encryption was turned on).
//
// khw creates the file once and afterwards only validates it: a key is never
// regenerated silently, because a new key makes every Secret encrypted with
// the old one unreadable. Rotation (Rotate or Stage+Promote, then Prune) is
// explicit. Key secrets never appear in any error, Result or String.
package encryption

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
)

// Identity of the document and of the file in the state directory.
const (
	// APIVersion and Kind of the document khw writes and accepts.
	APIVersion = "apiserver.config.k8s.io/v1"
	Kind       = "EncryptionConfiguration"
	// FileName is the file's name in the cluster state directory and on each
	// control plane (next to the apiserver's certs).
	FileName = "encryption-config.yaml"
	// DocURL is the upstream task this package follows.
	DocURL = "https://kubernetes.io/docs/tasks/administer-cluster/encrypt-data/"
	// KeyBytes is the length of every key khw generates: 32 random bytes,
	// i.e. AES-256 for aescbc/aesgcm, and the only size secretbox accepts.
	KeyBytes = 32
	// RewriteCommand rewrites every Secret through the apiserver so it is
	// stored again with the current write key (from DocURL).
	RewriteCommand = "kubectl get secrets -A -o json | kubectl replace -f -"
)

// Provider names as they appear in the file.
const (
	ProviderAESCBC    = "aescbc"
	ProviderAESGCM    = "aesgcm"
	ProviderSecretbox = "secretbox"
	ProviderIdentity  = "identity"
	ProviderKMS       = "kms"
)

// legacyKind is the name the file had before Kubernetes v1.13 (with
// apiVersion: v1).
const legacyKind = "EncryptionConfig"

// keySizes are the decoded key lengths in bytes each keyed provider accepts
// (aes.NewCipher: AES-128/192/256; nacl/secretbox: 32), as enforced by
// validation_encryption.go (aesKeySizes, secretBoxKeySizes).
var keySizes = map[string][]int{
	ProviderAESCBC:    {16, 24, 32},
	ProviderAESGCM:    {16, 24, 32},
	ProviderSecretbox: {32},
}

// header is written above the YAML. Comments are not preserved when khw
// rewrites a file (Rotate, Prune), so it is re-added each time.
const header = `# kube-apiserver --encryption-provider-config, managed by khw.
# Writes use the first provider's first key; reads try every provider by prefix.
# The keys are secrets: keep this file 0600 and back it up. Losing a key makes
# every Secret it encrypted unreadable. Upstream: ` + DocURL + `
`

// Action says what a call did to the file.
type Action string

const (
	// Created: the file did not exist and was written with a new key.
	Created Action = "created"
	// Kept: the file is valid and nothing was written.
	Kept Action = "kept"
	// Updated: the file was changed (key added, promoted or pruned, or its
	// mode tightened to 0600).
	Updated Action = "updated"
)

// Result describes the file after a call. It holds key NAMES only, never a key
// secret, so it is safe to print or log.
type Result struct {
	// Path is the file.
	Path string
	// Action is what the call did.
	Action Action
	// Reason explains an Updated action, e.g. "added key2 first" or
	// "mode was 0644, now 0600"; empty otherwise.
	Reason string
	// Provider is the write provider of Secrets (aescbc, aesgcm or secretbox).
	Provider string
	// KeyNames are that provider's key names in file order; KeyNames[0]
	// encrypts every new write, the rest only decrypt.
	KeyNames []string
	// Added is the key a Rotate or Stage added.
	Added string
	// Removed are the keys a Prune dropped.
	Removed []string
	// NextSteps is the manual work left after Rotate, Stage, Promote or Prune
	// (copy the file to the control planes, restart the apiservers, rewrite
	// Secrets); empty otherwise.
	NextSteps string
}

// String is a one-line summary plus NextSteps. It contains no secret.
func (r *Result) String() string {
	if r == nil {
		return "<nil>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", r.Path, r.Action)
	if r.Reason != "" {
		fmt.Fprintf(&b, " (%s)", r.Reason)
	}
	if len(r.KeyNames) > 0 {
		fmt.Fprintf(&b, "; Secrets are written with %s key %s (keys: %s)", r.Provider, r.KeyNames[0], strings.Join(r.KeyNames, ", "))
	}
	if r.NextSteps != "" {
		b.WriteString("\n")
		b.WriteString(r.NextSteps)
	}
	return b.String()
}

// WriteKey returns the name of the key that encrypts new writes.
func (r *Result) WriteKey() string {
	if r == nil || len(r.KeyNames) == 0 {
		return ""
	}
	return r.KeyNames[0]
}

// FieldError is one problem with one field of the file, the same shape as
// cluster.yaml's: Field is the path in the document (e.g.
// "resources[0].providers[0].aescbc.keys[1].secret"), Value the offending
// value (never a key secret; empty for secrets and absent fields), Problem
// what is wrong and what the apiserver would do with it, Fix what to change.
type FieldError = config.FieldError

// ValidationError lists every problem found in one file, so all can be fixed
// in one pass. khw never repairs such a file by regenerating keys.
type ValidationError struct {
	Path   string
	Errors []*FieldError
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s is not a usable EncryptionConfiguration (%d problem", e.Path, len(e.Errors))
	if len(e.Errors) != 1 {
		b.WriteString("s")
	}
	b.WriteString("; khw never replaces existing keys, see " + DocURL + "):")
	for _, fe := range e.Errors {
		b.WriteString("\n  - ")
		b.WriteString(fe.Error())
	}
	return b.String()
}

// Field returns the first problem whose Field equals field, or nil.
func (e *ValidationError) Field(field string) *FieldError {
	for _, fe := range e.Errors {
		if fe.Field == field {
			return fe
		}
	}
	return nil
}

// Reconcile makes sure path holds a valid EncryptionConfiguration.
//
// Absent file: it writes (0600, atomically) resources [secrets] with providers
// [aescbc {keys: [{name: key1, secret: base64(32 bytes read from rnd)}]},
// identity {}] — identity last, because the apiserver writes with the first
// provider. rnd nil means crypto/rand.Reader.
//
// Present file: it parses it strictly and validates it (see Check). A problem
// is returned as a *ValidationError naming each field and its fix; the file is
// left untouched and no key is ever regenerated, since that would strand the
// Secrets encrypted with the old key. A valid file is kept byte for byte; only
// a mode other than 0600 is tightened.
func Reconcile(path string, rnd io.Reader) (*Result, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return create(path, rnd)
	}
	if err != nil {
		return nil, fmt.Errorf("encryption config %s: %w", path, err)
	}
	f, err := load(path)
	if err != nil {
		return nil, err
	}
	res := f.result(Kept)
	if m := st.Mode().Perm(); m != fsutil.SecretMode {
		if err := os.Chmod(path, fsutil.SecretMode); err != nil {
			return nil, fmt.Errorf("encryption config %s: tighten mode %04o to %04o: %w", path, m, fsutil.SecretMode, err)
		}
		res.Action = Updated
		res.Reason = fmt.Sprintf("mode was %04o, now %04o", m, fsutil.SecretMode)
	}
	return res, nil
}

// Check reads and validates path without writing anything. It fails when the
// file is missing (fix: run Reconcile / `khw` to create it), does not parse
// strictly, has problems (a *ValidationError: wrong kind/apiVersion — the
// legacy `kind: EncryptionConfig` included —, a key whose base64 secret does
// not decode to an allowed length, duplicate key names in one provider,
// identity first, no aescbc/aesgcm/secretbox provider, Secrets not covered by
// any entry), or is not mode 0600.
func Check(path string) (*Result, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("encryption config %s does not exist (fix: run `khw encryption` to create it; it needs no input)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("encryption config %s: %w", path, err)
	}
	f, err := load(path)
	if err != nil {
		return nil, err
	}
	if m := st.Mode().Perm(); m != fsutil.SecretMode {
		return nil, fmt.Errorf("encryption config %s has mode %04o; it holds keys and must be %04o (fix: chmod 600 %s)", path, m, fsutil.SecretMode, path)
	}
	return f.result(Kept), nil
}

// Rotate adds a new 32-byte key from rnd (nil: crypto/rand.Reader) FIRST in
// the write provider of Secrets and keeps the old keys after it, so the
// apiserver encrypts new writes with the new key and still decrypts old data.
// The new key is named keyN, N one more than the highest keyN in that
// provider (a name is never reused: data stored as …:key1: must not meet a
// different key1). The file must exist and be valid.
//
// Result.NextSteps tells what remains by hand: copy the file to every control
// plane, restart each kube-apiserver, rewrite every Secret with
// RewriteCommand, then Prune. On a cluster with several apiservers the
// upstream order is safer: Stage, restart all, Promote, restart all (an
// apiserver that has not loaded the new key cannot read what another one
// wrote with it).
func Rotate(path string, rnd io.Reader) (*Result, error) {
	return addKey(path, rnd, true)
}

// Stage is the first half of the upstream HA rotation: it adds a new key
// (named as in Rotate) SECOND in the write provider, so every apiserver can
// decrypt with it before any of them encrypts with it. Then copy the file to
// every control plane, restart each kube-apiserver, and call Promote.
func Stage(path string, rnd io.Reader) (*Result, error) {
	return addKey(path, rnd, false)
}

// Promote moves the key called name to the front of the write provider, so
// it encrypts new writes; the other keys keep their order. Promoting the key
// already first is a no-op (Kept). An unknown name is an error listing the
// key names.
func Promote(path, name string) (*Result, error) {
	f, err := loadExisting(path)
	if err != nil {
		return nil, err
	}
	keys := f.keys()
	idx := -1
	for i, k := range *keys {
		if k.Name == name {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("encryption config %s: %s has no key %q (fix: use one of %s)", path, f.keysField(), name, strings.Join(f.keyNames(), ", "))
	}
	if idx == 0 {
		return f.result(Kept), nil
	}
	k := (*keys)[idx]
	rest := append(append([]apiserverv1.Key{}, (*keys)[:idx]...), (*keys)[idx+1:]...)
	*keys = append([]apiserverv1.Key{k}, rest...)
	if err := f.write(); err != nil {
		return nil, err
	}
	res := f.result(Updated)
	res.Reason = "promoted " + name + " to first key"
	res.NextSteps = afterPromote(f, name)
	return res, nil
}

// Prune drops every key of the write provider except the first one (the
// current write key) and reports the dropped names in Result.Removed. A
// provider with one key is Kept. Call it only after every Secret has been
// rewritten with the first key (RewriteCommand): a Secret still stored with a
// removed key can no longer be read. khw cannot verify that from this file.
func Prune(path string) (*Result, error) {
	f, err := loadExisting(path)
	if err != nil {
		return nil, err
	}
	keys := f.keys()
	if len(*keys) <= 1 {
		return f.result(Kept), nil
	}
	var removed []string
	for _, k := range (*keys)[1:] {
		removed = append(removed, k.Name)
	}
	*keys = (*keys)[:1]
	if err := f.write(); err != nil {
		return nil, err
	}
	res := f.result(Updated)
	res.Removed = removed
	res.Reason = "removed " + strings.Join(removed, ", ")
	res.NextSteps = fmt.Sprintf(`Old keys removed: %s. Remaining step by hand (%s):
  Run khw up: it copies this file to every control plane and restarts the apiservers one at a time (by hand: copy it and restart each kube-apiserver).
  A Secret still encrypted with a removed key can no longer be read; if one shows up, put the key back from your backup.`,
		strings.Join(removed, ", "), DocURL)
	return res, nil
}

// EtcdPrefix returns the prefix the apiserver puts before every Secret it
// writes with the current configuration:
// "k8s:enc:<provider>:v1:<first key name>:", e.g. "k8s:enc:aescbc:v1:key1:"
// (prefix constants and key-name suffix in k8s.io/apiserver
// pkg/server/options/encryptionconfig/config.go). A smoke test compares the
// raw etcd value of a Secret with it. The file must exist and be valid.
func EtcdPrefix(path string) (string, error) {
	f, err := loadExisting(path)
	if err != nil {
		return "", err
	}
	return "k8s:enc:" + f.provider + ":v1:" + (*f.keys())[0].Name + ":", nil
}

// ---- internals ----

// file is a parsed, validated configuration and where Secrets' write key is.
type file struct {
	path     string
	cfg      *apiserverv1.EncryptionConfiguration
	entry    int    // index in cfg.Resources of the entry covering secrets
	provider string // write provider of that entry (providers[0])
}

func (f *file) keys() *[]apiserverv1.Key {
	p := &f.cfg.Resources[f.entry].Providers[0]
	switch f.provider {
	case ProviderAESCBC:
		return &p.AESCBC.Keys
	case ProviderAESGCM:
		return &p.AESGCM.Keys
	default:
		return &p.Secretbox.Keys
	}
}

func (f *file) keysField() string {
	return fmt.Sprintf("resources[%d].providers[0].%s.keys", f.entry, f.provider)
}

func (f *file) keyNames() []string {
	var out []string
	for _, k := range *f.keys() {
		out = append(out, k.Name)
	}
	return out
}

func (f *file) result(a Action) *Result {
	return &Result{Path: f.path, Action: a, Provider: f.provider, KeyNames: f.keyNames()}
}

func (f *file) write() error {
	data, err := marshal(f.cfg)
	if err != nil {
		return fmt.Errorf("encryption config %s: %w", f.path, err)
	}
	if _, err := fsutil.WriteIfChanged(f.path, data, fsutil.SecretMode); err != nil {
		return fmt.Errorf("encryption config %s: %w", f.path, err)
	}
	return nil
}

func create(path string, rnd io.Reader) (*Result, error) {
	secret, err := newSecret(rnd)
	if err != nil {
		return nil, fmt.Errorf("encryption config %s: %w", path, err)
	}
	cfg := &apiserverv1.EncryptionConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind},
		Resources: []apiserverv1.ResourceConfiguration{{
			Resources: []string{"secrets"},
			Providers: []apiserverv1.ProviderConfiguration{
				{AESCBC: &apiserverv1.AESConfiguration{Keys: []apiserverv1.Key{{Name: "key1", Secret: secret}}}},
				{Identity: &apiserverv1.IdentityConfiguration{}},
			},
		}},
	}
	f := &file{path: path, cfg: cfg, entry: 0, provider: ProviderAESCBC}
	if err := f.write(); err != nil {
		return nil, err
	}
	return f.result(Created), nil
}

// newSecret reads KeyBytes from rnd and returns them base64-encoded
// (standard encoding with padding, as the apiserver decodes it).
func newSecret(rnd io.Reader) (string, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	b := make([]byte, KeyBytes)
	if _, err := io.ReadFull(rnd, b); err != nil {
		return "", fmt.Errorf("read %d random bytes for a new key: %w", KeyBytes, err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

func addKey(path string, rnd io.Reader, first bool) (*Result, error) {
	f, err := loadExisting(path)
	if err != nil {
		return nil, err
	}
	secret, err := newSecret(rnd)
	if err != nil {
		return nil, fmt.Errorf("encryption config %s: %w", path, err)
	}
	keys := f.keys()
	name := nextKeyName(*keys)
	nk := apiserverv1.Key{Name: name, Secret: secret}
	old := f.keyNames()
	if first {
		*keys = append([]apiserverv1.Key{nk}, *keys...)
	} else {
		*keys = append([]apiserverv1.Key{(*keys)[0], nk}, (*keys)[1:]...)
	}
	if err := f.write(); err != nil {
		return nil, err
	}
	res := f.result(Updated)
	res.Added = name
	if first {
		res.Reason = "added " + name + " first"
		res.NextSteps = afterRotate(f, name, old)
	} else {
		res.Reason = "staged " + name + " as a decrypt-only key"
		res.NextSteps = fmt.Sprintf(`Key %s is staged: every apiserver that loads this file can decrypt with it, none encrypts with it yet.
Remaining steps (HA rotation, %s):
  1. Run khw up: it copies this file to every control plane and restarts the apiservers one at a time (by hand: copy it and restart each kube-apiserver).
  2. Promote %s (it becomes the first key), run khw up again.
  3. Rewrite every Secret with %s:
       %s
  4. Prune the old keys (%s), run khw up again.`,
			name, DocURL, name, name, RewriteCommand, strings.Join(old, ", "))
	}
	return res, nil
}

func afterRotate(f *file, name string, old []string) string {
	return fmt.Sprintf(`Key %s now encrypts new writes; the old keys (%s) stay listed to decrypt what they wrote.
Remaining steps by hand (%s):
  1. Run khw up: it copies this file to every control plane and restarts the apiservers one at a time (by hand: copy it and restart each kube-apiserver).
     (With several apiservers, one restarted first writes with %s while the others cannot read it yet;
     Stage then Promote avoids that window.)
  2. Rewrite every Secret so it is stored with %s:
       %s
  3. Check that the raw etcd value of a Secret starts with k8s:enc:%s:v1:%s:
  4. Prune the old keys (%s), run khw up again.`,
		name, strings.Join(old, ", "), DocURL, name, name, RewriteCommand, f.provider, name, strings.Join(old, ", "))
}

func afterPromote(f *file, name string) string {
	others := f.keyNames()[1:]
	return fmt.Sprintf(`Key %s now encrypts new writes. Remaining steps by hand (%s):
  1. Run khw up: it copies this file to every control plane and restarts the apiservers one at a time (by hand: copy it and restart each kube-apiserver).
  2. Rewrite every Secret so it is stored with %s:
       %s
  3. Check that the raw etcd value of a Secret starts with k8s:enc:%s:v1:%s:
  4. Prune the old keys (%s), run khw up again.`,
		name, DocURL, name, RewriteCommand, f.provider, name, strings.Join(others, ", "))
}

// nextKeyName returns key<N+1> for the highest N among names "key<N>" (key1
// when there is none).
func nextKeyName(keys []apiserverv1.Key) string {
	max := 0
	for _, k := range keys {
		if n, ok := strings.CutPrefix(k.Name, "key"); ok {
			if i, err := strconv.Atoi(n); err == nil && i > max {
				max = i
			}
		}
	}
	return "key" + strconv.Itoa(max+1)
}

func loadExisting(path string) (*file, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("encryption config %s does not exist (fix: create it first with `khw encryption`)", path)
	}
	return load(path)
}

// codecs decodes with the same scheme registrations the apiserver uses for
// this file (apiserverv1.AddToScheme), strictly: unknown and duplicate fields
// are errors.
var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	if err := apiserverv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict)
}()

func load(path string) (*file, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("encryption config %s: %w", path, err)
	}
	cfg, err := parse(path, data)
	if err != nil {
		return nil, err
	}
	return validate(path, cfg)
}

// marshal renders cfg as YAML (sigs.k8s.io/yaml, the JSON field names of the
// apiserver types) after the header comment.
func marshal(cfg *apiserverv1.EncryptionConfiguration) ([]byte, error) {
	cfg.TypeMeta = metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind}
	body, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return append([]byte(header), body...), nil
}
