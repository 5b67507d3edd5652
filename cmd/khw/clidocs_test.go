package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
)

// The CLI reference in docs/cli (Markdown) and docs/man (man pages) is
// generated from the cobra command tree by cobra's doc generator, so it says
// what `khw --help` says. `make docs` rewrites it:
//
//	go test ./cmd/khw -run '^TestCLIReference$' -update-cli-docs
//
// Without the flag, TestCLIReference fails when a committed page differs
// from what the commands generate, or when a page is missing or left over.
var updateCLIDocs = flag.Bool("update-cli-docs", false, "rewrite docs/cli and docs/man from the command tree")

const (
	cliDocsDir = "../../docs/cli"
	manDocsDir = "../../docs/man"
)

// docDefaults are the flag defaults that depend on the machine generating the
// reference (the user's home directory), shown in the reference as the rule
// that computes them when the flag's environment variable, named in its
// usage, is not set (state.DefaultBase, components.DefaultCacheDir).
var docDefaults = map[string]string{
	"state-dir": "$XDG_STATE_HOME/khw, else ~/.local/state/khw",
	"cache-dir": "$XDG_CACHE_HOME/khw/artifacts, else ~/.cache/khw/artifacts",
}

// docEnv are the variables that set flag defaults; the reference is made
// with them empty, as on a new machine (make test sets KHW_MIRROR).
var docEnv = []string{"KHW_STATE_DIR", "KHW_CACHE_DIR", "KHW_MIRROR", "KHW_MIRROR_DIGEST", "KHW_CLUSTER", "XDG_STATE_HOME", "XDG_CACHE_HOME"}

// referenceTree is the command tree the reference is generated from: the
// real one, with docDefaults in place of machine-dependent defaults and
// cobra's "Auto generated on <date>" line off (it would make every page stale
// every day). Each long help text is put in a fenced block: they are laid
// out in columns for a terminal, which Markdown and the man page generator
// (Markdown too) would reflow, and the man generator drops <placeholders>
// outside code.
func referenceTree(t *testing.T, fence bool) *cobra.Command {
	t.Helper()
	for _, v := range docEnv {
		t.Setenv(v, "")
	}
	root := newRootCmd(&bytes.Buffer{}, &bytes.Buffer{})
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	home, _ := os.UserHomeDir()
	eachCommand(root, func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		if fence && c.Long != "" {
			c.Long = "```text\n" + strings.TrimRight(c.Long, "\n") + "\n```"
		}
		eachFlag(c, func(f *pflag.Flag) {
			if d, ok := docDefaults[f.Name]; ok {
				f.DefValue = d
			} else if home != "" && home != "/" && strings.Contains(f.DefValue, home) {
				t.Errorf("%s --%s: its default %q names this machine's home directory; add the rule that computes it to docDefaults", c.CommandPath(), f.Name, f.DefValue)
			}
		})
	})
	return root
}

// eachCommand calls fn on c and on every command below it, parents first.
func eachCommand(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, s := range c.Commands() {
		eachCommand(s, fn)
	}
}

// eachFlag calls fn on every flag c defines, local and persistent.
func eachFlag(c *cobra.Command, fn func(*pflag.Flag)) {
	c.Flags().VisitAll(fn)
	c.PersistentFlags().VisitAll(fn)
}

// generateReference writes the Markdown and man pages of khw into two new
// directories under tmp and returns them. The man pages' date is fixed here
// and ignored by sameMan, so that the reference changes only when a command
// does.
func generateReference(t *testing.T, tmp string) (mdDir, manDir string) {
	t.Helper()
	mdDir, manDir = filepath.Join(tmp, "cli"), filepath.Join(tmp, "man")
	for _, d := range []string{mdDir, manDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := doc.GenMarkdownTree(referenceTree(t, true), mdDir); err != nil {
		t.Fatalf("markdown reference: %v", err)
	}
	date := time.Now().UTC().Truncate(24 * time.Hour)
	hdr := &doc.GenManHeader{Title: "KHW", Section: "1", Source: "khw", Manual: "khw manual", Date: &date}
	man := referenceTree(t, true)
	// Flag usages are not fenced; a backslash keeps a <placeholder> literal
	// in the Markdown the man generator reads.
	escape := strings.NewReplacer("<", `\<`, ">", `\>`)
	eachCommand(man, func(c *cobra.Command) {
		eachFlag(c, func(f *pflag.Flag) { f.Usage = escape.Replace(f.Usage) })
	})
	if err := doc.GenManTree(man, hdr, manDir); err != nil {
		t.Fatalf("man pages: %v", err)
	}
	return mdDir, manDir
}

// manTH matches a man page's title line, which carries the date.
var manTH = regexp.MustCompile(`(?m)^\.TH .*$`)

// sameMan reports whether two man pages differ only in their .TH line.
func sameMan(a, b []byte) bool {
	return bytes.Equal(manTH.ReplaceAll(a, nil), manTH.ReplaceAll(b, nil))
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

func TestCLIReference(t *testing.T) {
	genMD, genMan := generateReference(t, t.TempDir())
	for _, set := range []struct {
		committed, generated string
		same                 func(a, b []byte) bool
	}{
		{cliDocsDir, genMD, bytes.Equal},
		{manDocsDir, genMan, sameMan},
	} {
		want, have := readDir(t, set.generated), readDir(t, set.committed)
		if *updateCLIDocs {
			updateDir(t, set.committed, want, have, set.same)
			continue
		}
		var stale []string
		for name, w := range want {
			if h, ok := have[name]; !ok {
				stale = append(stale, name+" (missing)")
			} else if !set.same(h, w) {
				stale = append(stale, name+" (differs)")
			}
		}
		for name := range have {
			if _, ok := want[name]; !ok {
				stale = append(stale, name+" (no such command)")
			}
		}
		if set.committed == manDocsDir {
			stale = append(stale, lostPlaceholders(t, genMD, genMan)...)
		}
		slices.Sort(stale)
		if len(stale) > 0 {
			t.Errorf("the CLI reference in %s is stale: %s\nfix: run `make docs` and commit the result", strings.TrimPrefix(set.committed, "../../"), strings.Join(stale, ", "))
		}
	}
}

// updateDir makes dir hold exactly want, leaving a file that is already the
// same (by same) untouched so that a man page keeps its date.
func updateDir(t *testing.T, dir string, want, have map[string][]byte, same func(a, b []byte) bool) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		if h, ok := have[name]; ok && same(h, w) {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), w, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", filepath.Join(dir, name))
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			t.Logf("removed %s", filepath.Join(dir, name))
		}
	}
}

// TestCLIReferenceSaysWhatHelpSays runs `khw … --help` for every command and
// checks that its page in the reference has the same description, examples
// and flags (each flag's usage line as --help prints it).
func TestCLIReferenceSaysWhatHelpSays(t *testing.T) {
	ref := referenceTree(t, false)
	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c != ref {
			return
		}
		cmds = append(cmds, c)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(ref)
	if len(cmds) < 30 {
		t.Fatalf("only %d commands in the tree; the walk is broken", len(cmds))
	}
	for _, c := range cmds {
		path := strings.Fields(c.CommandPath())[1:]
		var out bytes.Buffer
		root := newRootCmd(&out, &out)
		root.SetArgs(append(path, "--help"))
		if err := root.Execute(); err != nil {
			t.Fatalf("khw %s --help: %v", strings.Join(path, " "), err)
		}
		page, err := os.ReadFile(filepath.Join(cliDocsDir, strings.ReplaceAll(c.CommandPath(), " ", "_")+".md"))
		if err != nil {
			t.Errorf("%s: no reference page (run `make docs`): %v", c.CommandPath(), err)
			continue
		}
		help := out.String()
		for _, part := range []string{c.Long, c.Example} {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			if !strings.Contains(help, part) {
				t.Errorf("%s --help does not print its own text %q", c.CommandPath(), clipText(part))
			}
			if !strings.Contains(string(page), part) {
				t.Errorf("%s: the reference page does not say what --help says: %q (run `make docs`)", c.CommandPath(), clipText(part))
			}
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden {
				return
			}
			line := "--" + f.Name
			if !strings.Contains(help, line) || !strings.Contains(string(page), line) {
				t.Errorf("%s --%s: in --help %v, in the reference %v", c.CommandPath(), f.Name, strings.Contains(help, line), strings.Contains(string(page), line))
			}
			// pflag prints a usage without the backquotes that name its value.
			if usage := strings.ReplaceAll(f.Usage, "`", ""); !strings.Contains(string(page), usage) {
				t.Errorf("%s --%s: the reference lacks its usage %q (run `make docs`)", c.CommandPath(), f.Name, usage)
			}
		})
	}
}

func clipText(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// placeholder is a <word> such as <state> or <node> in a help text.
var placeholder = regexp.MustCompile(`<[a-z][a-z0-9 _.-]*>`)

// lostPlaceholders returns the man pages that lack a <placeholder> their
// Markdown page has: the man generator reads Markdown and drops what looks
// like an HTML tag outside code, which turned "<state>/ssh" into "/ssh".
func lostPlaceholders(t *testing.T, mdDir, manDir string) []string {
	t.Helper()
	var lost []string
	for name, md := range readDir(t, mdDir) {
		man, err := os.ReadFile(filepath.Join(manDir, strings.ReplaceAll(strings.TrimSuffix(name, ".md"), "_", "-")+".1"))
		if err != nil {
			lost = append(lost, name+" (no man page)")
			continue
		}
		for _, p := range placeholder.FindAllString(string(md), -1) {
			if !bytes.Contains(man, []byte(p)) {
				lost = append(lost, fmt.Sprintf("%s (man page lost %s)", name, p))
				break
			}
		}
	}
	return lost
}
