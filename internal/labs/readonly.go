package labs

import (
	"fmt"
	"path"
	"strings"
)

// CheckReadOnly reports whether shell, a POSIX sh snippet of a lab's Observe
// section, only looks: it returns an error listing every command that would
// change something (or would not return quickly), or nil.
//
// It is a conservative lexical check, not a shell: it splits the text into
// simple commands at ; & | && || newlines, `…` and $(…); it checks the
// content of every quoted word again as a script of its own (so a command
// handed to `ssh node '…'` or `sh -c '…'` is checked too, and an awk or
// jsonpath program must not contain what looks like a file redirect); it
// skips sudo, env, timeout, xargs and VAR=value prefixes. Then:
//
//   - output redirects are refused unless into /dev/null or another file
//     descriptor (>&2); >> and >(…) always;
//   - kubectl, systemctl, etcdctl, crictl, ctr, ip and khw may only use their
//     reading subcommands (kubectl get/describe/logs/top/version/explain/
//     api-resources/cluster-info/auth can-i|whoami/config view; systemctl
//     status/is-active/is-enabled/is-failed/show/cat/list-*; etcdctl member
//     list, endpoint status|health, get, version, alarm list …), and no
//     watch or follow mode (kubectl -w, journalctl -f, tail -f);
//   - curl may not send data, use another method than GET/HEAD, or write
//     files; sed may not edit in place; openssl may not write -out files;
//     sysctl may not set values; iptables may only list; find may not
//     -delete, -exec or write files;
//   - commands that only change state (rm, mv, cp, tee, chmod, modprobe,
//     swapoff, kill, reboot, scp, wget, sh/bash as a command, eval …) are
//     refused outright.
func CheckReadOnly(shell string) error {
	var c checker
	c.script(shell, 0)
	if len(c.problems) == 0 {
		return nil
	}
	return fmt.Errorf("not a read-only command: %s", strings.Join(c.problems, "; "))
}

type checker struct {
	problems []string
}

func (c *checker) add(format string, args ...any) {
	p := fmt.Sprintf(format, args...)
	for _, q := range c.problems {
		if q == p {
			return
		}
	}
	c.problems = append(c.problems, p)
}

// maxDepth bounds the re-parsing of quoted words inside quoted words.
const maxDepth = 4

// script lexes one sh text into simple commands and checks each; the
// content of every quoted word is checked again as a script.
func (c *checker) script(s string, depth int) {
	if depth > maxDepth {
		return
	}
	var (
		cmds    [][]string
		cmd     []string
		word    strings.Builder
		inWord  bool
		nested  []string
		runes   = []rune(s)
		endWord = func() {
			if inWord {
				cmd = append(cmd, word.String())
				word.Reset()
				inWord = false
			}
		}
		endCmd = func() {
			endWord()
			if len(cmd) > 0 {
				cmds = append(cmds, cmd)
				cmd = nil
			}
		}
	)
	for i := 0; i < len(runes); i++ {
		r := runes[i]
		switch {
		case r == '\\':
			if i+1 < len(runes) {
				i++
				if runes[i] != '\n' {
					word.WriteRune(runes[i])
					inWord = true
				}
			}
		case r == '\'':
			j := i + 1
			for j < len(runes) && runes[j] != '\'' {
				j++
			}
			content := string(runes[i+1 : min(j, len(runes))])
			word.WriteString(content)
			inWord = true
			nested = append(nested, content)
			i = j
		case r == '"':
			var b strings.Builder
			j := i + 1
			for ; j < len(runes) && runes[j] != '"'; j++ {
				if runes[j] == '\\' && j+1 < len(runes) {
					j++
				}
				b.WriteRune(runes[j])
			}
			word.WriteString(b.String())
			inWord = true
			nested = append(nested, b.String())
			i = j
		case r == '#' && !inWord:
			for i < len(runes) && runes[i] != '\n' {
				i++
			}
			endCmd()
		case r == '$' && i+1 < len(runes) && runes[i+1] == '{':
			j := i + 2
			for j < len(runes) && runes[j] != '}' {
				j++
			}
			word.WriteString(string(runes[i:min(j+1, len(runes))]))
			inWord = true
			i = j
		case r == '$' && i+1 < len(runes) && runes[i+1] == '(':
			// Command substitution: its commands are commands of their own.
			endCmd()
			i++
		case r == '>':
			// A digit right before > is a file descriptor, not an argument.
			if inWord && strings.Trim(word.String(), "0123456789") == "" {
				word.Reset()
				inWord = false
			}
			endWord()
			c.redirect(runes, &i)
		case r == '<':
			endWord()
			if i+1 < len(runes) && runes[i+1] == '(' {
				i++ // <(…): its commands are checked like any others
				endCmd()
			}
		case r == ';' || r == '&' || r == '|' || r == '\n' || r == '(' || r == ')' || r == '`':
			endCmd()
		case r == ' ' || r == '\t' || r == '\r':
			endWord()
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	endCmd()
	for _, cm := range cmds {
		c.command(cm, depth)
	}
	for _, n := range nested {
		// A quoted single word ("." for tr, '{.spec}' for jsonpath) is an
		// argument; in command position command() already saw it.
		if strings.ContainsAny(n, " \t\n;&|<>()$`") {
			c.script(n, depth+1)
		}
	}
}

// redirect checks the output redirect at runes[*i] ('>') and moves *i to
// its last rune.
func (c *checker) redirect(runes []rune, i *int) {
	j := *i + 1
	if j < len(runes) && runes[j] == '>' {
		c.add("'>>' appends to a file")
		*i = j
		return
	}
	if j < len(runes) && runes[j] == '(' {
		c.add("'>(…)' feeds a command that is not checked")
		*i = j
		return
	}
	if j < len(runes) && runes[j] == '|' {
		j++
	}
	if j < len(runes) && runes[j] == '&' {
		// >&2, 2>&1, >&-: to (or closing) another file descriptor.
		for j+1 < len(runes) && (runes[j+1] >= '0' && runes[j+1] <= '9' || runes[j+1] == '-') {
			j++
		}
		*i = j
		return
	}
	for j < len(runes) && (runes[j] == ' ' || runes[j] == '\t') {
		j++
	}
	k := j
	for k < len(runes) && !strings.ContainsRune(" \t\n;&|()<>`", runes[k]) {
		k++
	}
	target := strings.Trim(string(runes[j:k]), `"'`)
	if target != "/dev/null" {
		if target == "" {
			target = "(nothing)"
		}
		c.add("'>' writes into the file %s (only >/dev/null and >&N are allowed)", target)
	}
	*i = k - 1
}

// Commands refused whatever their arguments.
var denied = map[string]string{
	"rm": "removes files", "rmdir": "removes directories", "mv": "moves files", "cp": "copies files",
	"dd": "writes files", "tee": "writes files", "touch": "creates files", "mkdir": "creates directories",
	"ln": "creates links", "chmod": "changes modes", "chown": "changes owners", "chgrp": "changes groups",
	"install": "installs files", "truncate": "truncates files", "shred": "destroys files",
	"mount": "mounts", "umount": "unmounts", "modprobe": "loads kernel modules", "rmmod": "unloads kernel modules",
	"insmod": "loads kernel modules", "swapoff": "turns swap off", "reboot": "reboots", "shutdown": "shuts down",
	"poweroff": "powers off", "halt": "halts", "kill": "kills processes", "pkill": "kills processes",
	"killall": "kills processes", "useradd": "adds users", "userdel": "removes users", "passwd": "changes passwords",
	"apt": "installs packages", "apt-get": "installs packages", "dpkg": "installs packages",
	"eval": "runs an unchecked string", "exec": "replaces the shell", "source": "runs an unchecked file",
	".": "runs an unchecked file", "sh": "runs an unchecked script", "bash": "runs an unchecked script",
	"zsh": "runs an unchecked script", "scp": "copies files", "rsync": "copies files", "wget": "downloads into files",
	"systemd-run": "starts units", "nsenter": "enters namespaces", "crontab": "edits cron jobs",
	"iptables-restore": "replaces firewall rules", "ip6tables-restore": "replaces firewall rules",
	"cfssljson": "writes key files", "sleep": "only waits", "watch": "never returns", "virsh": "drives VMs",
	"docker": "drives containers", "mkfs": "formats disks", "fdisk": "partitions disks", "parted": "partitions disks",
	"su": "switches user", "kubeadm": "changes the cluster",
}

// Words that start no command of their own.
var shellWords = map[string]bool{
	"if": true, "then": true, "else": true, "elif": true, "fi": true, "do": true, "done": true,
	"while": true, "until": true, "!": true, "{": true, "}": true, "time": true,
}

// command checks one simple command (its words, after lexing).
func (c *checker) command(words []string, depth int) {
	words = stripPrefixes(words)
	if len(words) == 0 || strings.ContainsAny(words[0], " \t\n") {
		// Nothing, or a quoted script as the command word: script checks
		// its content.
		return
	}
	name := path.Base(words[0])
	args := words[1:]
	if why, ok := denied[name]; ok {
		c.add("%s %s", name, why)
		return
	}
	if strings.HasPrefix(name, "mkfs.") {
		c.add("%s formats disks", name)
		return
	}
	switch name {
	case "for", "case":
		return // a loop header or case: its list runs nothing
	case "ssh":
		if rest := sshRemote(args); len(rest) > 0 {
			c.command(rest, depth)
		}
	case "kubectl":
		c.kubectl(args)
	case "systemctl":
		verb := firstArg(args, nil)
		switch {
		case verb == "" && hasFlag(args, "--version"):
		case verb == "status", verb == "is-active", verb == "is-enabled", verb == "is-failed", verb == "show",
			verb == "cat", strings.HasPrefix(verb, "list-"):
		default:
			c.add("systemctl %s changes units (only status, is-active, is-enabled, is-failed, show, cat, list-* are allowed)", orEmpty(verb))
		}
	case "journalctl":
		for _, a := range args {
			if a == "-f" || a == "--follow" || strings.HasPrefix(a, "--vacuum") || a == "--rotate" || a == "--flush" ||
				(len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsRune(a, 'f')) {
				c.add("journalctl %s follows or changes the journal", a)
			}
		}
	case "tail":
		for _, a := range args {
			if a == "-f" || a == "-F" || a == "--follow" || (len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsAny(a, "fF")) {
				c.add("tail %s never returns", a)
			}
		}
	case "etcdctl":
		c.etcdctl(args)
	case "crictl":
		verb := firstArg(args, map[string]bool{"-r": true, "--runtime-endpoint": true, "-i": true, "--image-endpoint": true, "-t": true, "--timeout": true, "-c": true, "--config": true})
		switch verb {
		case "ps", "pods", "images", "img", "info", "version", "inspect", "inspecti", "inspectp", "stats", "statsp", "imagefsinfo":
		case "logs":
			if hasFlag(args, "-f") || hasFlag(args, "--follow") {
				c.add("crictl logs -f never returns")
			}
		default:
			c.add("crictl %s changes containers or images (only ps, pods, images, info, version, inspect*, stats, logs are allowed)", orEmpty(verb))
		}
	case "ctr":
		c.ctr(args)
	case "ip":
		c.ip(args)
	case "iptables", "ip6tables", "iptables-legacy", "iptables-nft":
		for _, a := range args {
			switch a {
			case "-A", "--append", "-I", "--insert", "-D", "--delete", "-F", "--flush", "-X", "--delete-chain",
				"-N", "--new-chain", "-P", "--policy", "-R", "--replace", "-Z", "--zero", "-E", "--rename-chain":
				c.add("%s %s changes firewall rules (only -L/-S are allowed)", name, a)
			}
		}
	case "sysctl":
		for _, a := range args {
			if a == "-w" || a == "--write" || a == "-p" || a == "--load" || a == "--system" || strings.Contains(a, "=") {
				c.add("sysctl %s sets kernel values", a)
			}
		}
	case "swapon":
		if !hasFlag(args, "--show") && !hasFlag(args, "-s") && !hasFlag(args, "--summary") {
			c.add("swapon without --show turns swap on")
		}
	case "sed":
		for _, a := range args {
			if a == "--in-place" || strings.HasPrefix(a, "--in-place=") || (len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsRune(a, 'i')) {
				c.add("sed %s edits a file in place", a)
			}
		}
	case "openssl":
		for _, a := range args {
			if a == "-out" || a == "-keyout" || a == "-genkey" {
				c.add("openssl %s writes a file", a)
			}
		}
	case "curl":
		c.curl(args)
	case "find":
		for _, a := range args {
			switch a {
			case "-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls":
				c.add("find %s changes files or runs an unchecked command", a)
			}
		}
	case "khw":
		switch firstArg(args, map[string]bool{"--state-dir": true, "--cluster": true, "-c": true}) {
		case "status", "version", "help", "":
		default:
			c.add("khw %s changes the cluster (only khw status is allowed)", orEmpty(firstArg(args, map[string]bool{"--state-dir": true, "--cluster": true, "-c": true})))
		}
	case "cfssl":
		if firstArg(args, nil) != "certinfo" {
			c.add("cfssl %s writes certificates (only cfssl certinfo is allowed)", orEmpty(firstArg(args, nil)))
		}
	}
}

// stripPrefixes drops shell reserved words, VAR=value assignments and the
// wrappers sudo, env, timeout, nice, nohup, command, stdbuf and xargs (with
// their options), leaving the command they run.
func stripPrefixes(w []string) []string {
	for len(w) > 0 {
		first := w[0]
		switch {
		case shellWords[first]:
			w = w[1:]
		case isAssignment(first):
			w = w[1:]
		case first == "sudo":
			w = skipOpts(w[1:], map[string]bool{"-u": true, "-g": true, "-C": true, "-D": true, "-h": true, "-p": true, "-r": true, "-t": true, "-U": true})
		case first == "env":
			w = skipOpts(w[1:], map[string]bool{"-u": true, "--unset": true, "-C": true, "--chdir": true, "-S": true})
		case first == "timeout":
			w = skipOpts(w[1:], map[string]bool{"-s": true, "--signal": true, "-k": true, "--kill-after": true})
			if len(w) > 0 {
				w = w[1:] // the duration
			}
		case first == "nice":
			w = skipOpts(w[1:], map[string]bool{"-n": true, "--adjustment": true})
		case first == "nohup", first == "command":
			w = w[1:]
		case first == "stdbuf":
			w = skipOpts(w[1:], nil)
		case first == "xargs":
			w = skipOpts(w[1:], map[string]bool{"-I": true, "-n": true, "-P": true, "-L": true, "-d": true, "-E": true, "-s": true, "-a": true})
		default:
			return w
		}
	}
	return w
}

// skipOpts drops leading options (words starting with -); those in withValue
// take the next word as their value.
func skipOpts(w []string, withValue map[string]bool) []string {
	for len(w) > 0 && strings.HasPrefix(w[0], "-") && w[0] != "-" {
		if w[0] == "--" {
			return w[1:]
		}
		if withValue[w[0]] && len(w) > 1 {
			w = w[2:]
			continue
		}
		w = w[1:]
	}
	for len(w) > 0 && isAssignment(w[0]) {
		w = w[1:]
	}
	return w
}

func isAssignment(s string) bool {
	name, _, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// firstArg returns the first word that is not an option (or an option's
// value, for the options in withValue; --opt=value is one word).
func firstArg(args []string, withValue map[string]bool) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") && a != "-" {
			if withValue[a] {
				i++
			}
			continue
		}
		return a
	}
	return ""
}

// nonOptions returns the words that are neither options nor their values.
func nonOptions(args []string, withValue map[string]bool) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") && a != "-" {
			if withValue[a] {
				i++
			}
			continue
		}
		if strings.HasPrefix(a, "$") {
			continue // an unexpanded variable: options (etcdctl $FLAGS get …)
		}
		out = append(out, a)
	}
	return out
}

func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

func orEmpty(s string) string {
	if s == "" {
		return "(no subcommand)"
	}
	return s
}

// sshRemote returns the remote command words of an ssh command line.
func sshRemote(args []string) []string {
	withValue := map[string]bool{"-F": true, "-o": true, "-i": true, "-p": true, "-l": true, "-J": true, "-b": true,
		"-c": true, "-D": true, "-E": true, "-L": true, "-R": true, "-m": true, "-O": true, "-Q": true, "-S": true, "-W": true, "-w": true, "-e": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			if withValue[a] {
				i++
			}
			continue
		}
		return args[i+1:] // a is the host
	}
	return nil
}

var kubectlValueFlags = map[string]bool{
	"-n": true, "--namespace": true, "--kubeconfig": true, "--server": true, "-s": true, "--context": true,
	"--cluster": true, "--user": true, "--request-timeout": true, "-o": true, "--output": true, "-l": true,
	"--selector": true, "--field-selector": true, "--raw": true, "--tail": true, "--since": true, "-c": true,
	"--container": true, "--sort-by": true, "--as": true, "--as-group": true, "--token": true, "-v": true,
	"--certificate-authority": true, "--client-certificate": true, "--client-key": true, "--subresource": true,
	"-L": true, "--label-columns": true, "--template": true, "--chunk-size": true,
}

func (c *checker) kubectl(args []string) {
	words := nonOptions(args, kubectlValueFlags)
	verb := ""
	if len(words) > 0 {
		verb = words[0]
	}
	switch verb {
	case "get":
		if hasFlag(args, "-w") || hasFlag(args, "--watch") || hasFlag(args, "--watch-only") {
			c.add("kubectl get --watch never returns")
		}
	case "describe", "top", "version", "explain", "api-resources", "api-versions", "cluster-info", "events":
	case "logs":
		if hasFlag(args, "-f") || hasFlag(args, "--follow") {
			c.add("kubectl logs -f never returns")
		}
	case "auth":
		if len(words) < 2 || (words[1] != "can-i" && words[1] != "whoami") {
			c.add("kubectl auth %s changes RBAC (only auth can-i and auth whoami are allowed)", strings.Join(words[1:], " "))
		}
	case "config":
		if len(words) < 2 {
			c.add("kubectl config needs a reading subcommand (view, get-contexts, current-context)")
			break
		}
		switch words[1] {
		case "view", "get-contexts", "current-context", "get-clusters", "get-users":
		default:
			c.add("kubectl config %s changes a kubeconfig (only view, get-* and current-context are allowed)", words[1])
		}
	default:
		c.add("kubectl %s changes the cluster or does not return (only get, describe, logs, top, version, explain, api-resources, cluster-info, events, auth can-i|whoami, config view are allowed)", orEmpty(verb))
	}
}

func (c *checker) etcdctl(args []string) {
	words := nonOptions(args, map[string]bool{"-w": true, "--write-out": true, "--endpoints": true, "--cacert": true,
		"--cert": true, "--key": true, "--dial-timeout": true, "--command-timeout": true, "--user": true, "--limit": true})
	joined := strings.Join(words, " ")
	switch {
	case joined == "version", joined == "member list", joined == "alarm list",
		joined == "endpoint status", joined == "endpoint health", joined == "endpoint hashkv",
		len(words) > 0 && words[0] == "get":
	default:
		c.add("etcdctl %s changes etcd or does not return (only member list, endpoint status|health|hashkv, get, alarm list, version are allowed)", orEmpty(joined))
	}
}

func (c *checker) ctr(args []string) {
	words := nonOptions(args, map[string]bool{"-n": true, "--namespace": true, "-a": true, "--address": true, "--timeout": true})
	if len(words) == 1 && words[0] == "version" {
		return
	}
	if len(words) >= 2 {
		obj, verb := words[0], words[1]
		reads := verb == "ls" || verb == "list" || (verb == "info" && (obj == "containers" || obj == "container" || obj == "c"))
		switch obj {
		case "images", "image", "i", "containers", "container", "c", "tasks", "task", "t", "namespaces", "namespace", "ns", "plugins", "plugin":
			if reads {
				return
			}
		}
	}
	c.add("ctr %s changes containerd (only <object> ls and version are allowed)", orEmpty(strings.Join(words, " ")))
}

func (c *checker) ip(args []string) {
	words := nonOptions(args, map[string]bool{"-n": true, "-netns": true, "-f": true, "-family": true})
	if len(words) == 0 {
		return
	}
	if len(words) == 1 {
		return // ip route, ip addr …: list
	}
	switch words[1] {
	case "show", "list", "ls", "lst", "get", "sh", "s", "l":
		return
	}
	if words[0] == "netns" && words[1] == "identify" {
		return
	}
	c.add("ip %s %s changes the network (only show/list/get are allowed)", words[0], words[1])
}

func (c *checker) curl(args []string) {
	for i, a := range args {
		switch {
		case a == "-X" || a == "--request":
			if i+1 < len(args) && args[i+1] != "GET" && args[i+1] != "HEAD" {
				c.add("curl %s %s sends a changing request", a, args[i+1])
			}
		case strings.HasPrefix(a, "--request="):
			if m := strings.TrimPrefix(a, "--request="); m != "GET" && m != "HEAD" {
				c.add("curl %s sends a changing request", a)
			}
		case a == "-d" || strings.HasPrefix(a, "--data") || a == "-F" || strings.HasPrefix(a, "--form") ||
			a == "-T" || a == "--upload-file" || a == "--json":
			c.add("curl %s sends data", a)
		case a == "-o" || a == "-O" || a == "--output" || a == "--remote-name" || a == "--remote-name-all" ||
			strings.HasPrefix(a, "--output="):
			c.add("curl %s writes a file", a)
		case len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsAny(a[1:], "dFTOo") && !strings.ContainsAny(a[1:], "="):
			// a cluster of short options such as -sO
			c.add("curl %s sends data or writes a file", a)
		}
	}
}
