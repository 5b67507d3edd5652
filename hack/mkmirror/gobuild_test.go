package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestStagingModules(t *testing.T) {
	gomod := []byte(`module k8s.io/kubernetes

go 1.26.0

require (
	github.com/x/y v1.2.3
	k8s.io/api v0.0.0
	k8s.io/client-go v0.0.0
	k8s.io/klog/v2 v2.130.1
)

require k8s.io/cri-client v0.0.0 // indirect

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/sample-controller v0.0.0 => ./staging/src/k8s.io/sample-controller
)
replace k8s.io/sample-cli-plugin v0.0.0 => ./staging/src/k8s.io/sample-cli-plugin
`)
	if got := strings.Join(stagingModules(gomod), ","); got != "k8s.io/api,k8s.io/client-go,k8s.io/cri-client" {
		t.Errorf("stagingModules = %s", got)
	}
	for in, want := range map[string]string{"v1.37.2": "v0.37.2", "v1.38.0-beta.0": "v0.38.0-beta.0"} {
		if got, err := stagingVersion(in); err != nil || got != want {
			t.Errorf("stagingVersion(%s) = %s, %v", in, got, err)
		}
	}
	if _, err := stagingVersion("1.37.2"); err == nil {
		t.Error("stagingVersion without v: no error")
	}
}

func TestKubeLDFlags(t *testing.T) {
	f, err := kubeLDFlags("v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(f, " ")
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, kv := range []string{"gitVersion=v1.37.2", "gitMajor=1", "gitMinor=37", "gitTreeState=clean"} {
			if !strings.Contains(s, "-X "+pkg+"."+kv) {
				t.Errorf("ldflags lack -X %s.%s: %s", pkg, kv, s)
			}
		}
	}
	if f, _ := kubeLDFlags("v1.38.0-beta.0"); !strings.Contains(strings.Join(f, " "), "gitMinor=38+") {
		t.Errorf("pre-release minor: %v", f)
	}
	if _, err := kubeLDFlags("v1.37"); err == nil {
		t.Error("v1.37: no error")
	}
}

// goBuild against a throw-away module with no dependencies (offline): the
// binary is built with the ldflags, reused while its recipe holds, rebuilt
// when an ldflag changes; runCheck sees the version it prints.
func TestGoBuildRecipeCache(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go tool")
	}
	gv, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Skipf("no go tool: %v", err)
	}
	r := &run{cache: t.TempDir(), goVersion: strings.TrimSpace(string(gv))}
	r.goLine = goDirective(r.goVersion)
	m := goModule{Key: "hello-v1", Mains: []string{"khw.local/mkmirror/hello-v1/hello"}}
	src := filepath.Join(m.dir(r.cache), "hello")
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nvar version = \"unset\"\n\nfunc main() { println(\"hello\", version) }\n"), 0o644)
	lg, err := newJobLog(r.cache, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer lg.close()
	ctx := context.Background()
	digest, err := r.ensureModule(ctx, m, lg)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(r.cache, "out")
	bins := []goBinary{{"hi", "khw.local/mkmirror/hello-v1/hello"}}
	build := func(ver string) (string, time.Time) {
		g := goRecipe{LDFlags: []string{"-X", "main.version=" + ver}}
		if err := r.goBuild(ctx, m, digest, runtime.GOARCH, g, bins, out, lg); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(filepath.Join(out, "hi"))
		if err != nil {
			t.Fatal(err)
		}
		line, ran, err := runCheck(ctx, binCheck{Name: "hi", Path: filepath.Join(out, "hi"), Arch: runtime.GOARCH, Want: "hello " + ver})
		if err != nil || !ran {
			t.Fatalf("runCheck: %q ran=%v %v", line, ran, err)
		}
		return line, st.ModTime()
	}
	_, t1 := build("v1")
	time.Sleep(10 * time.Millisecond)
	if _, t2 := build("v1"); !t2.Equal(t1) {
		t.Error("same recipe: binary was rebuilt")
	}
	if d2, err := r.ensureModule(ctx, m, lg); err != nil || d2 != digest {
		t.Errorf("ensureModule again: digest %s vs %s, %v", d2, digest, err)
	}
	build("v2")
	if _, _, err := runCheck(ctx, binCheck{Name: "hi", Path: filepath.Join(out, "hi"), Arch: runtime.GOARCH, Want: "hello v1"}); err == nil {
		t.Error("runCheck accepted output without the wanted version")
	}
}
