package encryption

import (
	"bytes"
	"crypto/aes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/apis/apiserver"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"
)

// keyBytes returns n deterministic bytes starting at seed, so every test key
// is known and can be searched for in outputs.
func keyBytes(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i)*7
	}
	return b
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// readBack decodes the file with the v1 types (strict) and returns it.
func readBack(t *testing.T, path string) *apiserverv1.EncryptionConfiguration {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg apiserverv1.EncryptionConfiguration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("file does not decode strictly into apiserver v1 types: %v", err)
	}
	return &cfg
}

// apiserverDecode decodes data the way the apiserver's loader does
// (encryptionconfig.loadConfig): a strict codec over the internal and v1
// apiserver types, converting to the internal type.
func apiserverDecode(data []byte) (*apiserver.EncryptionConfiguration, error) {
	s := runtime.NewScheme()
	if err := apiserver.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := apiserverv1.AddToScheme(s); err != nil {
		return nil, err
	}
	obj, _, err := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	cfg, ok := obj.(*apiserver.EncryptionConfiguration)
	if !ok {
		return nil, fmt.Errorf("decoded %T", obj)
	}
	return cfg, nil
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func keyNames(keys []apiserverv1.Key) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.Name)
	}
	return out
}

func TestCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", FileName)
	k1 := keyBytes(1, KeyBytes)
	res, err := Reconcile(path, bytes.NewReader(k1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != Created || res.Provider != ProviderAESCBC || !reflect.DeepEqual(res.KeyNames, []string{"key1"}) {
		t.Fatalf("result = %+v", res)
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("mode = %04o, want 0600", m)
	}
	cfg := readBack(t, path)
	if cfg.APIVersion != "apiserver.config.k8s.io/v1" || cfg.Kind != "EncryptionConfiguration" {
		t.Errorf("apiVersion/kind = %q/%q", cfg.APIVersion, cfg.Kind)
	}
	if len(cfg.Resources) != 1 || !reflect.DeepEqual(cfg.Resources[0].Resources, []string{"secrets"}) {
		t.Fatalf("resources = %+v", cfg.Resources)
	}
	provs := cfg.Resources[0].Providers
	if len(provs) != 2 || provs[0].AESCBC == nil || provs[1].Identity == nil ||
		provs[0].Identity != nil || provs[1].AESCBC != nil || provs[0].AESGCM != nil || provs[0].Secretbox != nil || provs[0].KMS != nil {
		t.Fatalf("providers must be [aescbc, identity], got %+v", provs)
	}
	keys := provs[0].AESCBC.Keys
	if len(keys) != 1 || keys[0].Name != "key1" {
		t.Fatalf("keys = %v", keyNames(keys))
	}
	raw, err := base64.StdEncoding.DecodeString(keys[0].Secret)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 32 || !bytes.Equal(raw, k1) {
		t.Errorf("key1 decodes to %d bytes, want the 32 bytes read from rand", len(raw))
	}
	if _, err := aes.NewCipher(raw); err != nil {
		t.Errorf("key1 is not an AES key: %v", err)
	}

	// Independent witness: the apiserver's own scheme decodes the file
	// strictly into its internal type with the same content.
	ic, err := apiserverDecode(mustRead(t, path))
	if err != nil {
		t.Fatalf("apiserver scheme rejects the file: %v", err)
	}
	if len(ic.Resources) != 1 || ic.Resources[0].Providers[0].AESCBC == nil || ic.Resources[0].Providers[0].AESCBC.Keys[0].Secret != keys[0].Secret || ic.Resources[0].Providers[1].Identity == nil {
		t.Errorf("apiserver decode differs: %+v", ic.Resources)
	}

	p, err := EtcdPrefix(path)
	if err != nil || p != "k8s:enc:aescbc:v1:key1:" {
		t.Errorf("EtcdPrefix = %q, %v", p, err)
	}
	if _, err := Check(path); err != nil {
		t.Errorf("Check of a fresh file: %v", err)
	}
}

func TestCreateShortRandom(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if _, err := Reconcile(path, bytes.NewReader(make([]byte, 10))); err == nil {
		t.Fatal("a short random source must be an error")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no file may be written without a full key: %v", err)
	}
}

func TestRerunKeepsKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if _, err := Reconcile(path, bytes.NewReader(keyBytes(1, KeyBytes))); err != nil {
		t.Fatal(err)
	}
	before := mustRead(t, path)
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	// A different random source: a regenerated key would differ.
	res, err := Reconcile(path, bytes.NewReader(keyBytes(99, KeyBytes)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != Kept {
		t.Errorf("action = %s, want kept", res.Action)
	}
	if !bytes.Equal(before, mustRead(t, path)) {
		t.Error("file content changed on re-run")
	}
	st, _ := os.Stat(path)
	if !st.ModTime().Equal(old) {
		t.Errorf("mtime changed on re-run: %v", st.ModTime())
	}
}

func TestReconcileTightensMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if _, err := Reconcile(path, bytes.NewReader(keyBytes(1, KeyBytes))); err != nil {
		t.Fatal(err)
	}
	before := mustRead(t, path)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(path); err == nil || !strings.Contains(err.Error(), "0644") {
		t.Errorf("Check must reject mode 0644, got %v", err)
	}
	res, err := Reconcile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != Updated || !strings.Contains(res.Reason, "0644") {
		t.Errorf("result = %+v", res)
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("mode = %04o", m)
	}
	if !bytes.Equal(before, mustRead(t, path)) {
		t.Error("tightening the mode changed the content")
	}
}

// doc renders a test file: resources entries given as YAML fragments.
func doc(apiVersion, kind, body string) string {
	return "apiVersion: " + apiVersion + "\nkind: " + kind + "\n" + body
}

func TestInvalidFiles(t *testing.T) {
	k32 := b64(keyBytes(11, 32))
	k32b := b64(keyBytes(77, 32))
	k20 := b64(keyBytes(33, 20))
	k16 := b64(keyBytes(55, 16))
	secrets := []string{k32, k32b, k20, k16}
	aescbc := func(keys string) string {
		return "resources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n" + keys + "  - identity: {}\n"
	}
	key := func(name, secret string) string {
		return "      - name: " + name + "\n        secret: " + secret + "\n"
	}
	good := aescbc(key("key1", k32))

	tests := []struct {
		name      string
		content   string
		field     string // FieldError.Field, for *ValidationError
		value     string // FieldError.Value
		problem   string // substring of Problem
		fix       string // substring of Fix
		plainWant string // for non-ValidationError errors: substring
	}{
		{name: "legacy kind", content: doc("v1", "EncryptionConfig", good),
			field: "kind", value: "EncryptionConfig", problem: "pre-v1.13", fix: "kind: EncryptionConfiguration"},
		{name: "legacy kind in new group", content: doc(APIVersion, "EncryptionConfig", good),
			field: "kind", value: "EncryptionConfig", problem: "reject", fix: "apiVersion: apiserver.config.k8s.io/v1"},
		{name: "wrong kind", content: doc(APIVersion, "AuthenticationConfiguration", good),
			field: "kind", value: "AuthenticationConfiguration", fix: "kind: EncryptionConfiguration"},
		{name: "wrong apiVersion", content: doc("apiserver.config.k8s.io/v1beta1", Kind, good),
			field: "apiVersion", value: "apiserver.config.k8s.io/v1beta1", fix: "apiVersion: apiserver.config.k8s.io/v1"},
		{name: "key of 20 bytes", content: doc(APIVersion, Kind, aescbc(key("key1", k20))),
			field: "resources[0].providers[0].aescbc.keys[0].secret", problem: "decodes to 20 bytes; aescbc needs 16, 24 or 32", fix: "backup"},
		{name: "key not base64", content: doc(APIVersion, Kind, aescbc(key("key1", "not*base64!"))),
			field: "resources[0].providers[0].aescbc.keys[0].secret", problem: "base64"},
		{name: "empty secret", content: doc(APIVersion, Kind, aescbc(key("key1", `""`))),
			field: "resources[0].providers[0].aescbc.keys[0].secret", problem: "empty"},
		{name: "empty key name", content: doc(APIVersion, Kind, aescbc(key(`""`, k32))),
			field: "resources[0].providers[0].aescbc.keys[0].name", problem: "empty"},
		{name: "duplicate key names", content: doc(APIVersion, Kind, aescbc(key("key1", k32)+key("key1", k32b))),
			field: "resources[0].providers[0].aescbc.keys[1].name", value: "key1", problem: "keys[0]", fix: "key2"},
		{name: "secretbox 16-byte key", content: doc(APIVersion, Kind,
			"resources:\n- resources: [secrets]\n  providers:\n  - secretbox:\n      keys:\n"+key("key1", k16)),
			field: "resources[0].providers[0].secretbox.keys[0].secret", problem: "secretbox needs 32 bytes"},
		{name: "no keys", content: doc(APIVersion, Kind, "resources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys: []\n"),
			field: "resources[0].providers[0].aescbc.keys", problem: "empty"},
		{name: "identity first", content: doc(APIVersion, Kind,
			"resources:\n- resources: [secrets]\n  providers:\n  - identity: {}\n  - aescbc:\n      keys:\n"+key("key1", k32)),
			field: "resources[0].providers[0]", value: "identity", problem: "plain text", fix: "move `identity: {}` to the end"},
		{name: "identity only", content: doc(APIVersion, Kind, "resources:\n- resources: [secrets]\n  providers:\n  - identity: {}\n"),
			field: "resources[0].providers", problem: "no aescbc, aesgcm or secretbox", fix: "aescbc"},
		{name: "kms first", content: doc(APIVersion, Kind,
			"resources:\n- resources: [secrets]\n  providers:\n  - kms:\n      apiVersion: v2\n      name: vault\n      endpoint: unix:///run/kms.sock\n  - aescbc:\n      keys:\n"+key("key1", k32)),
			field: "resources[0].providers[0]", value: "kms", problem: "khw manages only local keys"},
		{name: "two providers in one item", content: doc(APIVersion, Kind,
			"resources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n"+key("key1", k32)+"    identity: {}\n"),
			field: "resources[0].providers[0]", value: "aescbc+identity", fix: "split"},
		{name: "empty provider item", content: doc(APIVersion, Kind,
			"resources:\n- resources: [secrets]\n  providers:\n  - {}\n  - aescbc:\n      keys:\n"+key("key1", k32)),
			field: "resources[0].providers[0]", problem: "names no provider"},
		{name: "secrets not covered", content: doc(APIVersion, Kind,
			"resources:\n- resources: [configmaps]\n  providers:\n  - aescbc:\n      keys:\n"+key("key1", k32)),
			field: "resources[*].resources", problem: "plain text", fix: "add secrets"},
		{name: "no resources", content: doc(APIVersion, Kind, "resources: []\n"),
			field: "resources", problem: "empty"},
		{name: "entry without providers", content: doc(APIVersion, Kind, "resources:\n- resources: [secrets]\n  providers: []\n"),
			field: "resources[0].providers", problem: "empty"},
		{name: "unknown field", content: doc(APIVersion, Kind, strings.Replace(good, "secret: ", "secrte: ", 1)),
			plainWant: "secrte"},
		{name: "empty file", content: "  \n", plainWant: "is empty"},
		{name: "broken yaml", content: "apiVersion: [\n" + k32, plainWant: "not valid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Reconcile(path, bytes.NewReader(keyBytes(200, KeyBytes)))
			if err == nil {
				t.Fatalf("Reconcile accepted:\n%s", tt.content)
			}
			if tt.plainWant != "" {
				if !strings.Contains(err.Error(), tt.plainWant) || !strings.Contains(err.Error(), path) {
					t.Errorf("error %q should name %s and contain %q", err, path, tt.plainWant)
				}
			} else {
				var ve *ValidationError
				if !errors.As(err, &ve) {
					t.Fatalf("want *ValidationError, got %T: %v", err, err)
				}
				fe := ve.Field(tt.field)
				if fe == nil {
					t.Fatalf("no problem on field %q in:\n%v", tt.field, err)
				}
				if fe.Value != tt.value {
					t.Errorf("value = %q, want %q", fe.Value, tt.value)
				}
				if !strings.Contains(fe.Problem, tt.problem) || !strings.Contains(fe.Fix, tt.fix) {
					t.Errorf("problem/fix = %q / %q, want to contain %q / %q", fe.Problem, fe.Fix, tt.problem, tt.fix)
				}
				if fe.Fix == "" {
					t.Error("every problem needs a fix")
				}
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) || strings.Contains(fmt.Sprintf("%+v", err), s) {
					t.Errorf("error leaks a key secret: %v", err)
				}
			}
			if got := mustRead(t, path); string(got) != tt.content {
				t.Error("an invalid file must never be rewritten")
			}
			// Every other entry point refuses the file too.
			if _, err := Rotate(path, bytes.NewReader(keyBytes(3, KeyBytes))); err == nil {
				t.Error("Rotate accepted an invalid file")
			}
			if _, err := Prune(path); err == nil {
				t.Error("Prune accepted an invalid file")
			}
			if _, err := EtcdPrefix(path); err == nil {
				t.Error("EtcdPrefix accepted an invalid file")
			}
			if _, err := Check(path); err == nil {
				t.Error("Check accepted an invalid file")
			}
			if got := mustRead(t, path); string(got) != tt.content {
				t.Error("an invalid file must never be rewritten")
			}
		})
	}
}

// The legacy form is still decoded by the apiserver's scheme (an alias kept
// "due to a docs bug"), which is why khw's message calls it an alias instead
// of claiming every apiserver rejects it; khw still requires the documented
// form.
func TestLegacyKindIsAnUpstreamAlias(t *testing.T) {
	k := b64(keyBytes(5, 32))
	legacy := doc("v1", "EncryptionConfig", "resources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n      - name: key1\n        secret: "+k+"\n")
	if _, err := apiserverDecode([]byte(legacy)); err != nil {
		t.Fatalf("upstream no longer decodes the legacy alias (update checkTypeMeta's message): %v", err)
	}
	inGroup := strings.Replace(legacy, "apiVersion: v1", "apiVersion: "+APIVersion, 1)
	if _, err := apiserverDecode([]byte(inGroup)); err == nil {
		t.Fatal("upstream decodes kind EncryptionConfig under apiserver.config.k8s.io/v1 (update checkTypeMeta's message)")
	}
}

func TestValidVariants(t *testing.T) {
	k32 := b64(keyBytes(11, 32))
	k16 := b64(keyBytes(12, 16))
	tests := []struct {
		name    string
		content string
		prefix  string
		keys    []string
	}{
		{"wildcard all", doc(APIVersion, Kind, "resources:\n- resources: ['*.*']\n  providers:\n  - aesgcm:\n      keys:\n      - name: a\n        secret: "+k16+"\n  - identity: {}\n"),
			"k8s:enc:aesgcm:v1:a:", []string{"a"}},
		{"secrets in second entry", doc(APIVersion, Kind, "resources:\n- resources: [events]\n  providers:\n  - identity: {}\n- resources: [configmaps, secrets]\n  providers:\n  - secretbox:\n      keys:\n      - name: sb2\n        secret: "+k32+"\n      - name: sb1\n        secret: "+k32+"\n  - identity: {}\n"),
			"k8s:enc:secretbox:v1:sb2:", []string{"sb2", "sb1"}},
		{"core wildcard", doc(APIVersion, Kind, "resources:\n- resources: ['*.']\n  providers:\n  - aescbc:\n      keys:\n      - name: key7\n        secret: "+k32+"\n"),
			"k8s:enc:aescbc:v1:key7:", []string{"key7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			res, err := Reconcile(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Action != Kept || !reflect.DeepEqual(res.KeyNames, tt.keys) {
				t.Errorf("result = %+v", res)
			}
			if p, err := EtcdPrefix(path); err != nil || p != tt.prefix {
				t.Errorf("EtcdPrefix = %q, %v; want %q", p, err, tt.prefix)
			}
			if string(mustRead(t, path)) != tt.content {
				t.Error("a valid foreign file must be kept byte for byte")
			}
		})
	}
}

func TestRotatePrune(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	k1, k2, k3, k4 := keyBytes(1, 32), keyBytes(2, 32), keyBytes(3, 32), keyBytes(4, 32)
	all := []string{b64(k1), b64(k2), b64(k3), b64(k4)}
	var outputs []string
	record := func(res *Result, err error) *Result {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, res.String(), fmt.Sprintf("%+v", res), fmt.Sprintf("%#v", res), fmt.Sprint(res))
		return res
	}
	record(Reconcile(path, bytes.NewReader(k1)))

	res := record(Rotate(path, bytes.NewReader(k2)))
	if res.Action != Updated || res.Added != "key2" || !reflect.DeepEqual(res.KeyNames, []string{"key2", "key1"}) {
		t.Fatalf("rotate result = %+v", res)
	}
	for _, want := range []string{RewriteCommand, "restart each kube-apiserver", "k8s:enc:aescbc:v1:key2:", "Prune", DocURL} {
		if !strings.Contains(res.NextSteps, want) {
			t.Errorf("NextSteps lacks %q:\n%s", want, res.NextSteps)
		}
	}
	cfg := readBack(t, path)
	provs := cfg.Resources[0].Providers
	keys := provs[0].AESCBC.Keys
	if !reflect.DeepEqual(keyNames(keys), []string{"key2", "key1"}) || keys[0].Secret != b64(k2) || keys[1].Secret != b64(k1) {
		t.Errorf("after rotate keys = %v (secrets must be new first, old kept)", keyNames(keys))
	}
	if len(provs) != 2 || provs[1].Identity == nil {
		t.Error("identity must stay last")
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("mode after rotate = %04o", m)
	}
	if p, _ := EtcdPrefix(path); p != "k8s:enc:aescbc:v1:key2:" {
		t.Errorf("EtcdPrefix after rotate = %q", p)
	}
	if _, err := apiserverDecode(mustRead(t, path)); err != nil {
		t.Errorf("apiserver scheme rejects the rotated file: %v", err)
	}

	res = record(Rotate(path, bytes.NewReader(k3)))
	if !reflect.DeepEqual(res.KeyNames, []string{"key3", "key2", "key1"}) {
		t.Errorf("second rotate keys = %v", res.KeyNames)
	}

	res = record(Prune(path))
	if res.Action != Updated || !reflect.DeepEqual(res.Removed, []string{"key2", "key1"}) || !reflect.DeepEqual(res.KeyNames, []string{"key3"}) {
		t.Errorf("prune result = %+v", res)
	}
	keys = readBack(t, path).Resources[0].Providers[0].AESCBC.Keys
	if len(keys) != 1 || keys[0].Name != "key3" || keys[0].Secret != b64(k3) {
		t.Errorf("after prune keys = %v", keyNames(keys))
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("mode after prune = %04o", m)
	}
	before := mustRead(t, path)
	res = record(Prune(path))
	if res.Action != Kept || len(res.Removed) != 0 || !bytes.Equal(before, mustRead(t, path)) {
		t.Errorf("second prune must keep the file: %+v", res)
	}

	// Names are never reused, even after the lower ones were pruned.
	res = record(Rotate(path, bytes.NewReader(k4)))
	if res.Added != "key4" {
		t.Errorf("rotate after prune added %q, want key4", res.Added)
	}

	for _, out := range outputs {
		for _, s := range all {
			if strings.Contains(out, s) {
				t.Fatalf("a key secret appears in a returned string:\n%s", out)
			}
		}
	}
}

func TestStagePromote(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	k1, k2 := keyBytes(1, 32), keyBytes(2, 32)
	if _, err := Reconcile(path, bytes.NewReader(k1)); err != nil {
		t.Fatal(err)
	}
	res, err := Stage(path, bytes.NewReader(k2))
	if err != nil {
		t.Fatal(err)
	}
	if res.Added != "key2" || !reflect.DeepEqual(res.KeyNames, []string{"key1", "key2"}) || !strings.Contains(res.NextSteps, "Promote") {
		t.Errorf("stage result = %+v", res)
	}
	if p, _ := EtcdPrefix(path); p != "k8s:enc:aescbc:v1:key1:" {
		t.Errorf("a staged key must not write yet; prefix = %q", p)
	}
	if _, err := Promote(path, "key9"); err == nil || !strings.Contains(err.Error(), "key1, key2") {
		t.Errorf("promoting an unknown key: %v", err)
	}
	res, err = Promote(path, "key2")
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != Updated || !reflect.DeepEqual(res.KeyNames, []string{"key2", "key1"}) || !strings.Contains(res.NextSteps, RewriteCommand) {
		t.Errorf("promote result = %+v", res)
	}
	keys := readBack(t, path).Resources[0].Providers[0].AESCBC.Keys
	if keys[0].Secret != b64(k2) || keys[1].Secret != b64(k1) {
		t.Error("promote must move the key with its secret")
	}
	before := mustRead(t, path)
	if res, err := Promote(path, "key2"); err != nil || res.Action != Kept || !bytes.Equal(before, mustRead(t, path)) {
		t.Errorf("promoting the first key again must keep the file: %+v %v", res, err)
	}
}

func TestMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	for name, call := range map[string]func() error{
		"Check":      func() error { _, err := Check(path); return err },
		"Rotate":     func() error { _, err := Rotate(path, nil); return err },
		"Stage":      func() error { _, err := Stage(path, nil); return err },
		"Promote":    func() error { _, err := Promote(path, "key1"); return err },
		"Prune":      func() error { _, err := Prune(path); return err },
		"EtcdPrefix": func() error { _, err := EtcdPrefix(path); return err },
	} {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), path) {
			t.Errorf("%s on a missing file: %v", name, err)
		}
		if _, serr := os.Stat(path); !errors.Is(serr, os.ErrNotExist) {
			t.Fatalf("%s created the file", name)
		}
	}
}

func TestNextKeyName(t *testing.T) {
	mk := func(names ...string) []apiserverv1.Key {
		var ks []apiserverv1.Key
		for _, n := range names {
			ks = append(ks, apiserverv1.Key{Name: n})
		}
		return ks
	}
	tests := []struct {
		keys []apiserverv1.Key
		want string
	}{
		{mk("key1"), "key2"},
		{mk("key2", "key1"), "key3"},
		{mk("key3"), "key4"},
		{mk("main"), "key1"},
		{mk("key10", "key9"), "key11"},
		{mk("keyx", "key2"), "key3"},
	}
	for _, tt := range tests {
		if got := nextKeyName(tt.keys); got != tt.want {
			t.Errorf("nextKeyName(%v) = %s, want %s", keyNames(tt.keys), got, tt.want)
		}
	}
}
