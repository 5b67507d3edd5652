package encryption

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"
)

// parse decodes data strictly into the v1 type after checking kind and
// apiVersion. Decoder errors name fields and types, never values.
func parse(path string, data []byte) (*apiserverv1.EncryptionConfiguration, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &ValidationError{Path: path, Errors: []*FieldError{{Field: "(file)", Problem: "is empty",
			Fix: "restore it from your backup; only if no apiserver ever used it, delete it and let khw create a new one"}}}
	}
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return nil, &ValidationError{Path: path, Errors: []*FieldError{{Field: "(file)", Problem: "is not valid YAML: " + err.Error(),
			Fix: "correct the syntax; do not regenerate the keys"}}}
	}
	if fe := checkTypeMeta(tm); fe != nil {
		return nil, &ValidationError{Path: path, Errors: []*FieldError{fe}}
	}
	obj, _, err := codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return nil, &ValidationError{Path: path, Errors: []*FieldError{{Field: "(file)", Problem: fmt.Sprintf("does not decode as %s %s: %v", APIVersion, Kind, err),
			Fix: "remove or rename the fields named"}}}
	}
	cfg, ok := obj.(*apiserverv1.EncryptionConfiguration)
	if !ok {
		return nil, fmt.Errorf("encryption config %s decodes to %T, not %s", path, obj, Kind)
	}
	cfg.TypeMeta = tm
	return cfg, nil
}

func checkTypeMeta(tm metav1.TypeMeta) *FieldError {
	if tm.Kind == legacyKind {
		return &FieldError{
			Field: "kind", Value: tm.Kind,
			Problem: "is the pre-v1.13 name of this file; current apiservers decode it only as a compatibility alias " +
				"with apiVersion: v1 (k8s.io/apiserver pkg/apis/apiserver/v1/register.go) and reject it under " + APIVersion,
			Fix: "set `apiVersion: " + APIVersion + "` and `kind: " + Kind + "`; the keys stay as they are",
		}
	}
	if tm.Kind != Kind {
		return &FieldError{Field: "kind", Value: tm.Kind, Problem: "is not " + Kind,
			Fix: "set `kind: " + Kind + "` (with `apiVersion: " + APIVersion + "`)"}
	}
	if tm.APIVersion != APIVersion {
		return &FieldError{Field: "apiVersion", Value: tm.APIVersion, Problem: "is not " + APIVersion,
			Fix: "set `apiVersion: " + APIVersion + "`; the keys stay as they are"}
	}
	return nil
}

// providerKinds names the providers set in one list item.
func providerKinds(p apiserverv1.ProviderConfiguration) []string {
	var out []string
	if p.AESGCM != nil {
		out = append(out, ProviderAESGCM)
	}
	if p.AESCBC != nil {
		out = append(out, ProviderAESCBC)
	}
	if p.Secretbox != nil {
		out = append(out, ProviderSecretbox)
	}
	if p.Identity != nil {
		out = append(out, ProviderIdentity)
	}
	if p.KMS != nil {
		out = append(out, ProviderKMS)
	}
	return out
}

func providerKeys(p apiserverv1.ProviderConfiguration, kind string) []apiserverv1.Key {
	switch kind {
	case ProviderAESCBC:
		return p.AESCBC.Keys
	case ProviderAESGCM:
		return p.AESGCM.Keys
	case ProviderSecretbox:
		return p.Secretbox.Keys
	}
	return nil
}

// coversSecrets reports whether a resources list matches core/v1 Secrets:
// "secrets", "*." (every core resource) or "*.*" (everything).
func coversSecrets(resources []string) bool {
	for _, r := range resources {
		if r == "secrets" || r == "*." || r == "*.*" {
			return true
		}
	}
	return false
}

// validate applies the apiserver's own checks that matter here (one provider
// per list item, keys present, named, base64, of an allowed length) and khw's
// (Secrets covered, encrypted with a local key first, unique key names).
func validate(path string, cfg *apiserverv1.EncryptionConfiguration) (*file, error) {
	var errs []*FieldError
	add := func(field, value, problem, fix string) {
		errs = append(errs, &FieldError{Field: field, Value: value, Problem: problem, Fix: fix})
	}
	if len(cfg.Resources) == 0 {
		add("resources", "", "is empty, so nothing is encrypted",
			"add an entry with resources [secrets] and providers [aescbc with one key, identity {}]")
	}
	for i, rc := range cfg.Resources {
		base := fmt.Sprintf("resources[%d]", i)
		if len(rc.Resources) == 0 {
			add(base+".resources", "", "is empty", "list the resources this entry encrypts, e.g. secrets")
		}
		if len(rc.Providers) == 0 {
			add(base+".providers", "", "is empty", "list the providers, the write provider first, e.g. aescbc then identity {}")
		}
		for j, p := range rc.Providers {
			pf := fmt.Sprintf("%s.providers[%d]", base, j)
			kinds := providerKinds(p)
			switch {
			case len(kinds) == 0:
				add(pf, "", "names no provider", "write exactly one of aescbc, aesgcm, secretbox, kms or identity per list item")
				continue
			case len(kinds) > 1:
				add(pf, strings.Join(kinds, "+"), "names more than one provider in one list item (the apiserver rejects it)",
					"split them into separate list items, in the order the apiserver should try them")
				continue
			}
			sizes, keyed := keySizes[kinds[0]]
			if !keyed {
				continue
			}
			kf := pf + "." + kinds[0] + ".keys"
			keys := providerKeys(p, kinds[0])
			if len(keys) == 0 {
				add(kf, "", "is empty", "restore the keys from your backup")
				continue
			}
			seen := map[string]int{}
			for k, key := range keys {
				f := fmt.Sprintf("%s[%d]", kf, k)
				if key.Name == "" {
					add(f+".name", "", "is empty", "name each key (key1, key2 …); the name is part of the stored prefix k8s:enc:"+kinds[0]+":v1:<name>:")
				} else if prev, dup := seen[key.Name]; dup {
					add(f+".name", key.Name, fmt.Sprintf("is also the name of %s[%d]; the apiserver picks a key by the name in the stored prefix, so one of the two can never decrypt", kf, prev),
						"give the newer key a name not used in this provider, e.g. "+nextKeyName(keys))
				} else {
					seen[key.Name] = k
				}
				if key.Secret == "" {
					add(f+".secret", "", "is empty", "restore the key from your backup")
					continue
				}
				raw, err := base64.StdEncoding.DecodeString(key.Secret)
				if err != nil {
					add(f+".secret", "", "is not standard base64 (with padding)", "restore the key from your backup; a new key cannot decrypt existing Secrets")
					continue
				}
				if !containsInt(sizes, len(raw)) {
					add(f+".secret", "", fmt.Sprintf("decodes to %d bytes; %s needs %s bytes", len(raw), kinds[0], joinInts(sizes)),
						"restore the key from your backup; a new key (`head -c 32 /dev/urandom | base64`) cannot decrypt existing Secrets")
				}
			}
		}
	}
	cover := -1
	for i, rc := range cfg.Resources {
		if coversSecrets(rc.Resources) {
			cover = i
			break
		}
	}
	f := &file{path: path, cfg: cfg, entry: cover}
	if cover < 0 && len(cfg.Resources) > 0 {
		add("resources[*].resources", "", "no entry lists secrets (or *. / *.*), so Secrets are stored in plain text in etcd",
			"add secrets to resources[0].resources")
	}
	if cover >= 0 && len(cfg.Resources[cover].Providers) > 0 {
		provs := cfg.Resources[cover].Providers
		pf := fmt.Sprintf("resources[%d].providers", cover)
		local := false
		for _, p := range provs {
			if k := providerKinds(p); len(k) == 1 && keySizes[k[0]] != nil {
				local = true
			}
		}
		first := providerKinds(provs[0])
		switch {
		case !local:
			add(pf, "", "has no aescbc, aesgcm or secretbox provider, so khw has no local key encrypting Secrets",
				"put an aescbc provider with one 32-byte key first and identity {} last")
		case len(first) == 1 && first[0] == ProviderIdentity:
			add(pf+"[0]", ProviderIdentity, "is first, so the apiserver writes Secrets in plain text (writes use the first provider)",
				"move `identity: {}` to the end of the list, after the aescbc provider; the keys stay as they are")
		case len(first) == 1 && first[0] == ProviderKMS:
			add(pf+"[0]", ProviderKMS, "is first; khw manages only local keys (aescbc, aesgcm, secretbox) and cannot check or rotate a KMS provider",
				"put the local-key provider first, or manage this file without khw")
		case len(first) == 1:
			f.provider = first[0]
		}
	}
	if len(errs) > 0 {
		return nil, &ValidationError{Path: path, Errors: errs}
	}
	return f, nil
}

func containsInt(xs []int, v int) bool {
	for _, x := range xs {
		if x == v {
			return true
		}
	}
	return false
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
