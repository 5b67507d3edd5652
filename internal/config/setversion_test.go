package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSetVersionKeepsTheFile(t *testing.T) {
	c := Default(DefaultName, ArchAMD64, ProviderNspawn)
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	data = append([]byte("# my own comment\n\n"), data...)
	data = bytes.Replace(data, []byte("kubernetes: "+c.Versions.Kubernetes+"\n"), []byte("kubernetes: \""+c.Versions.Kubernetes+"\"   # pinned\n\n"), 1)
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := SetVersion(path, "kubernetes", "v1.36.3"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if want := strings.Replace(string(data), "\""+c.Versions.Kubernetes+"\"", "v1.36.3", 1); string(got) != want {
		t.Errorf("SetVersion changed more than the value:\n%s\nwant:\n%s", got, want)
	}
	after, _, err := Parse(got, path)
	if err != nil || after.Versions.Kubernetes != "v1.36.3" || after.Versions.Etcd != c.Versions.Etcd {
		t.Fatalf("after SetVersion: %+v, %v", after.Versions, err)
	}
	// A plain value, with a comment after it.
	if err := SetVersion(path, "kubernetes", "v1.37.0"); err != nil {
		t.Fatal(err)
	}
	if got2, _ := os.ReadFile(path); string(got2) != strings.Replace(string(got), "kubernetes: v1.36.3   # pinned", "kubernetes: v1.37.0   # pinned", 1) {
		t.Errorf("plain value with a comment:\n%s", got2)
	}
	if err := SetVersion(path, "kubernetes", "v1.36.3"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# my own comment\n\n", "# Component versions;", "kubernetes: v1.36.3   # pinned\n\n"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the file lost %q:\n%s", want, got)
		}
	}
	// A value that does not validate is not written.
	if err := SetVersion(path, "kubernetes", "latest"); err == nil {
		t.Error("SetVersion accepted kubernetes: latest")
	}
	if again, _ := os.ReadFile(path); string(again) != string(got) {
		t.Error("a refused SetVersion changed the file")
	}
	if err := SetVersion(path, "nope", "v1"); err == nil || !strings.Contains(err.Error(), "has no versions.nope") {
		t.Errorf("unknown component: %v", err)
	}
}
