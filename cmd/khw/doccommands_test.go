package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// docCommandPages are the pages whose shell blocks must hold only khw command
// lines that parse against the CLI: the READMEs and the getting-started
// pages, which a newcomer copies from. Other docs pages are checked too (see
// TestDocCommandsParse), except that a placeholder such as NAME may stand
// for an argument there.
var docCommandPages = []string{
	"../../README.md",
	"../../README.ko.md",
	"../../docs/getting-started.md",
	"../../docs/ko/getting-started.md",
}

// khwCommand is one khw command line found in a Markdown shell block.
type khwCommand struct {
	where string   // file:line
	args  []string // the words after the khw program
}

var shellFence = regexp.MustCompile("^\\s*```\\s*(sh|bash|shell|console|zsh)?\\s*$")

// docCommands returns the khw command lines of the shell blocks of a Markdown
// file: fenced blocks marked sh, bash, shell, console or zsh, and unmarked
// ones. A line may continue with a trailing backslash; `$ ` prompts are
// dropped; a command may follow env assignments and sudo.
func docCommands(path, text string) []khwCommand {
	var out []khwCommand
	in, shell := false, false
	var cont string
	contLine := 0
	for i, l := range strings.Split(text, "\n") {
		trim := strings.TrimSpace(l)
		if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
			if in {
				in = false
				continue
			}
			in, shell = true, shellFence.MatchString(l)
			continue
		}
		if !in || !shell {
			continue
		}
		if cont == "" {
			contLine = i + 1
		}
		if strings.HasSuffix(trim, "\\") {
			cont += strings.TrimSuffix(trim, "\\") + " "
			continue
		}
		line := cont + trim
		cont = ""
		line = strings.TrimPrefix(line, "$ ")
		for _, seg := range shellSegments(line) {
			if args, ok := khwArgs(seg); ok {
				out = append(out, khwCommand{where: fmt.Sprintf("%s:%d", strings.TrimPrefix(path, "../../"), contLine), args: args})
			}
		}
	}
	return out
}

// shellSegments splits a shell line into simple commands: words between the
// operators && || | ; & and the parentheses of $( ) and <( ); quotes are
// removed from words, a word starting with # ends the line, and a
// redirection drops its file name.
func shellSegments(line string) [][]string {
	var segs [][]string
	var cur []string
	var word strings.Builder
	inWord, skipNext := false, false
	flushWord := func() {
		if !inWord {
			return
		}
		if skipNext {
			skipNext = false
		} else {
			cur = append(cur, word.String())
		}
		word.Reset()
		inWord = false
	}
	flushSeg := func() {
		flushWord()
		if len(cur) > 0 {
			segs = append(segs, cur)
		}
		cur = nil
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\'' || r == '"':
			inWord = true
			j := i + 1
			for j < len(rs) && rs[j] != r {
				word.WriteRune(rs[j])
				j++
			}
			i = j
		case r == '\\' && i+1 < len(rs):
			inWord = true
			word.WriteRune(rs[i+1])
			i++
		case r == ' ' || r == '\t':
			flushWord()
		case r == '#' && !inWord:
			flushSeg()
			return segs
		case (r == '$' || r == '<') && i+1 < len(rs) && rs[i+1] == '(':
			flushSeg()
			i++
		case r == '(' || r == ')' || r == ';' || r == '|' || r == '&':
			flushSeg()
		case r == '>' || r == '<':
			if inWord && word.Len() == 1 && (word.String() == "2" || word.String() == "1") {
				word.Reset()
				inWord = false
			} else {
				flushWord()
			}
			if i+1 < len(rs) && (rs[i+1] == '>' || rs[i+1] == '&') {
				i++
			}
			skipNext = true
		default:
			inWord = true
			word.WriteRune(r)
		}
	}
	flushSeg()
	return segs
}

// envAssign is a NAME=value word before a command.
var envAssign = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// khwArgs returns the arguments of a simple command that runs khw (khw,
// bin/khw or ./bin/khw, after NAME=value assignments and sudo with its
// options).
func khwArgs(words []string) ([]string, bool) {
	i := 0
	for i < len(words) && envAssign.MatchString(words[i]) {
		i++
	}
	if i < len(words) && words[i] == "sudo" {
		i++
		for i < len(words) && strings.HasPrefix(words[i], "-") {
			i++
		}
	}
	if i >= len(words) {
		return nil, false
	}
	switch words[i] {
	case "khw", "bin/khw", "./bin/khw":
		return words[i+1:], true
	}
	return nil, false
}

// parseKHW parses args as `khw ARGS` would be, without running anything: the
// command path must exist, every flag must be one of that command's, and,
// when strict, the arguments must pass the command's own argument check.
func parseKHW(args []string, strict bool) error {
	root := newRootCmd(&bytes.Buffer{}, &bytes.Buffer{})
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	c, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if err := c.ParseFlags(rest); errors.Is(err, pflag.ErrHelp) {
		return nil
	} else if err != nil {
		return fmt.Errorf("%s: %w", c.CommandPath(), err)
	}
	if help, _ := c.Flags().GetBool("help"); help {
		return nil
	}
	pos := c.Flags().Args()
	if !c.Runnable() {
		if len(pos) > 0 {
			return fmt.Errorf("unknown command %q for %q", pos[0], c.CommandPath())
		}
		return nil
	}
	if strict {
		if err := c.ValidateArgs(pos); err != nil {
			return fmt.Errorf("%s: %w", c.CommandPath(), err)
		}
	}
	return nil
}

func TestDocCommandsParse(t *testing.T) {
	strict := map[string]bool{}
	for _, p := range docCommandPages {
		strict[p] = true
	}
	files := append([]string{}, docCommandPages...)
	more, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, more...)
	files = append(files, "../../CONTRIBUTING.md")
	total := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if os.IsNotExist(err) && !strict[f] {
			continue
		}
		if err != nil {
			t.Errorf("%v (a getting-started page the docs link to)", err)
			continue
		}
		cmds := docCommands(f, string(b))
		if strict[f] && len(cmds) == 0 {
			t.Errorf("%s shows no khw command; the block parser is broken or the page lost its commands", f)
		}
		for _, c := range cmds {
			total++
			if err := parseKHW(c.args, strict[f]); err != nil {
				t.Errorf("%s: khw %s: %v", c.where, strings.Join(c.args, " "), err)
			}
		}
	}
	t.Logf("%d khw command lines parsed", total)
}

// TestDocCommandsParserCatchesMistakes pins the parser on lines a page could
// hold, so that a broken parser cannot pass every page.
func TestDocCommandsParserCatchesMistakes(t *testing.T) {
	page := "```sh\n" +
		"sudo -E bin/khw up --dry-run   # what would change\n" +
		"source <(bin/khw completion bash)\n" +
		"KHW_LANG=ko bin/khw lab quiz 04 2>/dev/null | less\n" +
		"bin/khw status --certs \\\n  -o json\n" +
		"bin/khw --help\n" +
		"make up\n" +
		"```\n" +
		"```text\nkhw bogus output line\n```\n"
	cmds := docCommands("p.md", page)
	var got []string
	for _, c := range cmds {
		got = append(got, c.where+" "+strings.Join(c.args, " "))
	}
	want := []string{"p.md:2 up --dry-run", "p.md:3 completion bash", "p.md:4 lab quiz 04", "p.md:5 status --certs -o json", "p.md:7 --help"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("docCommands =\n%q\nwant\n%q", got, want)
	}
	for _, c := range cmds {
		if err := parseKHW(c.args, true); err != nil {
			t.Errorf("%v: %v", c.args, err)
		}
	}
	for _, bad := range [][]string{
		{"upp"},
		{"up", "--dryrun"},
		{"etcd", "snapshoot"},
		{"lab", "check", "04", "--hint"},
		{"pki", "renew", "--all", "--new-key"},
	} {
		if err := parseKHW(bad, true); err == nil {
			t.Errorf("khw %s parsed; it must not", strings.Join(bad, " "))
		}
	}
	if err := parseKHW([]string{"status", "extra"}, true); err == nil {
		t.Errorf("khw status extra passed the strict argument check")
	}
}
