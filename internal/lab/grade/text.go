package grade

// This file reads HAProxy configs, sysctl.d files and line lists.

import "strings"

// haproxyTwoWord are the HAProxy keywords whose second word is part of the
// setting's name ("timeout connect", "option redispatch").
var haproxyTwoWord = map[string]bool{"timeout": true, "option": true, "stats": true, "http-check": true,
	"tcp-check": true, "http-request": true, "tcp-request": true, "http-response": true}

// haproxyParams are the server/default-server parameters that take a value
// (https://docs.haproxy.org/2.8/configuration.html#5.2); the others are
// bare words such as check, check-ssl, backup.
var haproxyParams = map[string]bool{"inter": true, "fastinter": true, "downinter": true, "fall": true, "rise": true,
	"verify": true, "port": true, "addr": true, "weight": true, "maxconn": true, "maxqueue": true, "minconn": true,
	"on-marked-down": true, "on-marked-up": true, "on-error": true, "slowstart": true, "ca-file": true, "crt": true,
	"sni": true, "check-sni": true, "resolvers": true, "init-addr": true, "observe": true, "error-limit": true,
	"agent-port": true, "agent-inter": true, "proto": true, "alpn": true, "check-alpn": true}

// haproxySections are the keywords that open a section; HAProxy does not
// care about indentation.
var haproxySections = map[string]bool{"global": true, "defaults": true, "frontend": true, "backend": true,
	"listen": true, "peers": true, "resolvers": true, "userlist": true, "cache": true, "program": true,
	"http-errors": true, "ring": true, "mailers": true}

// parseHAProxy reads sections (a section keyword and its name) and
// their directives; server and default-server lines are split into one
// setting per parameter ("backend b: server cp1 inter").
func (c *Config) parseHAProxy() {
	section := ""
	for i, raw := range c.lines {
		l := strings.TrimSpace(raw)
		if l == "" || isComment(l) {
			continue
		}
		if j := strings.IndexAny(l, "#"); j > 0 && (l[j-1] == ' ' || l[j-1] == '\t') {
			l = strings.TrimSpace(l[:j])
		}
		f := strings.Fields(l)
		line := i + 1
		if haproxySections[f[0]] {
			section = strings.Join(f, " ")
			continue
		}
		neg := ""
		if f[0] == "no" && len(f) > 1 {
			neg, f = "no ", f[1:]
		}
		name, rest := f[0], f[1:]
		if haproxyTwoWord[name] && len(rest) > 0 {
			name, rest = name+" "+rest[0], rest[1:]
		}
		key := section + ": " + neg + name
		switch name {
		case "server":
			if len(rest) < 2 {
				break
			}
			key += " " + rest[0]
			c.Settings = append(c.Settings, Setting{Key: key, Value: rest[1], Line: line})
			c.Settings = append(c.Settings, haproxyServerParams(key, rest[2:], line)...)
			continue
		case "default-server":
			c.Settings = append(c.Settings, haproxyServerParams(key, rest, line)...)
			continue
		}
		value := strings.Join(rest, " ")
		if value == "" {
			value = "on"
		}
		c.Settings = append(c.Settings, Setting{Key: key, Value: value, Line: line})
	}
}

func haproxyServerParams(key string, words []string, line int) []Setting {
	var out []Setting
	for i := 0; i < len(words); i++ {
		v := "on"
		if haproxyParams[words[i]] && i+1 < len(words) {
			v = words[i+1]
			out = append(out, Setting{Key: key + " " + words[i], Value: v, Line: line, parent: line})
			i++
			continue
		}
		out = append(out, Setting{Key: key + " " + words[i], Value: v, Line: line, parent: line})
	}
	return out
}

func (c *Config) parseSysctl() {
	for i, raw := range c.lines {
		l := strings.TrimSpace(raw)
		if l == "" || isComment(l) || strings.HasPrefix(l, ";") {
			continue
		}
		k, v, _ := strings.Cut(l, "=")
		// sysctl.d(5): "/" separates like "."; a leading "-" only says
		// that a failure to set it is ignored.
		k = strings.ReplaceAll(strings.TrimPrefix(strings.TrimSpace(k), "-"), "/", ".")
		c.Settings = append(c.Settings, Setting{Key: k, Value: strings.TrimSpace(v), Line: i + 1})
	}
}

func (c *Config) parseLines() {
	for i, raw := range c.lines {
		l := strings.TrimSpace(raw)
		if l == "" || isComment(l) {
			continue
		}
		c.Settings = append(c.Settings, Setting{Key: l, Value: "present", Line: i + 1})
	}
}
