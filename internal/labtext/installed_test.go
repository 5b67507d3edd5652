package labtext

import (
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/render"
)

// namedElsewhere are flags, paths and settings that a lab's explaining
// sections name although khw's templates do not install them, each with the
// reason. Anything else a lab names must be in the files khw installs.
var namedElsewhere = map[string]string{
	"--authentication-config":                         "05 names it as the upstream way to limit anonymous requests; khw keeps the defaults",
	"--server":                                        "a kubectl flag in 05's Observe",
	"/etc/kubernetes/pki/etcd/ca.crt":                 "kubeadm's etcd CA, named in 02 as the production practice",
	"/etc/kubernetes/admin.kubeconfig":                "installed by 03 from the kubeconfig step's table, not rendered from a template",
	"/var/lib/apt/lists":                              "the node's apt state (06)",
	"/etc/os-release":                                 "the node's distribution (06)",
	"/var/cache/khw/debs/":                            "where khw puts the mirror's .debs before apt installs them (06)",
	"/etc/fstab":                                      "the node's own file; 07 turns swap off in it",
	"/var/lib/cni/mybridge":                           "the mybridge plugin's IPAM state, made when a pod starts (08)",
	"/var/lib/kubelet/pki/kubelet-client-current.pem": "written by w3's kubelet after the TLS bootstrap (10)",
	"identity: {}":                                    "in encryption-config.yaml, written by 03 (internal/encryption), not from a template",
	"leaderElection.leaderElect: true":                "a dotted path: kube-scheduler.yaml has leaderElection: then leaderElect: true",
	"clusterDNS: [10.32.0.10]":                        "kubelet-config.yaml spells the list as a block",
	"kubernetes.cni: mybridge":                        "a cluster.yaml setting, not a node file",
	"pki.certValidity: 8760h":                         "a cluster.yaml setting (14), its default",
	"pki.certValidity: 2h":                            "a cluster.yaml setting (14) for short certificates in class",
	"pki.renewBefore: 30m":                            "a cluster.yaml setting (14) for short certificates in class",
	"dnsPolicy: ClusterFirst":                         "the pod default, named to explain it",
	"--client-cert-allowed-cn":                        "04 says etcd 3.7 no longer has it",
	"loadBalancer.healthCheck: tcp":                   "a cluster.yaml setting, not a node file",
	"/etc/crictl.yaml":                                "07 says it does not exist, so crictl needs --runtime-endpoint",
	"--runtime-endpoint":                              "a crictl flag in 07's Observe",
	"--for":                                           "a flag of khw break (12)",
	"--force":                                         "a flag of khw break (12)",
	"inter 5s fall 3":                                 "the original blog guide's HAProxy timing, named in 06 and 12 to compare",
	"timeout connect 5s":                              "what 06 compares khw's timeout connect 1s with",
	"--encryption-provider-config-automatic-reload":   "an apiserver flag 03 says khw does not set",
	"--bump-revision":                                 "an etcdutl snapshot restore flag khw etcd restore runs (13, internal/lab/etcdbackup)",
	"--mark-compacted":                                "an etcdutl snapshot restore flag khw etcd restore runs (13, internal/lab/etcdbackup)",
	"--by-hand":                                       "a flag of khw lab (13)",
	"--ignore-daemonsets":                             "a kubectl drain flag the by-hand upgrade runs (15, upgrade.ByHand)",
	"--delete-emptydir-data":                          "a kubectl drain flag the by-hand upgrade runs (15, upgrade.ByHand)",
	"--version":                                       "the flag each Kubernetes binary answers with its release (15, upgrade.ObserveLab)",
	"/var/lib/etcd.restored":                          "where khw etcd restore has etcdutl write each member (13, etcdbackup.RestoredDir)",
	"/var/lib/etcd.before-restore":                    "where khw etcd restore moves each member's old data (13, etcdbackup.OldDataDir)",
}

var (
	tickRE   = regexp.MustCompile("`([^`\n]+)`")
	flagRE   = regexp.MustCompile(`^--[a-z0-9-]+(=\S+)?$`)
	nodePath = regexp.MustCompile(`^/(etc|var|usr|opt|run)/[A-Za-z0-9._/{},-]*$`)
	// directiveRE: a config line with a number, like `timeout check 2s`
	// (commands, named by their first word, are not config).
	directiveRE = regexp.MustCompile(`^[a-z][a-z-]*( [a-z0-9./-]+)+$`)
	settingRE   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._]*(: | = )[^\s,]+$`)
	shellPath   = regexp.MustCompile(`(?:^|[\s'"=])(/(?:etc|var|usr|opt)/[A-Za-z0-9._/*-]+)`)
)

// expandBraces turns /etc/etcd/{ca,kubernetes}.pem into both paths (one
// brace group, as the lab texts write them).
func expandBraces(p string) []string {
	open, end := strings.IndexByte(p, '{'), strings.IndexByte(p, '}')
	if open < 0 || end < open {
		return []string{p}
	}
	var out []string
	for _, alt := range strings.Split(p[open+1:end], ",") {
		out = append(out, p[:open]+alt+p[end+1:])
	}
	return out
}

// isCommand says whether tok is a shell command line rather than config.
func isCommand(tok string) bool {
	first, _, _ := strings.Cut(tok, " ")
	switch first {
	case "khw", "ip", "kubectl", "ssh", "systemctl", "etcdctl", "crictl":
		return true
	}
	return false
}

// globMatches says whether the shell pattern p (a path with *) matches one
// of paths.
func globMatches(p string, paths map[string]bool) bool {
	if !strings.Contains(p, "*") {
		return false
	}
	for q := range paths {
		if ok, _ := path.Match(p, q); ok {
			return true
		}
	}
	return false
}

// installed returns the text of every file khw renders for the default
// cluster (every node, both providers' facts, and the manifests) and the set
// of node paths it installs (rendered files and render.Inputs).
func installed(t *testing.T) (string, map[string]bool) {
	t.Helper()
	var all strings.Builder
	paths := map[string]bool{}
	for _, provider := range []string{config.ProviderLibvirt, config.ProviderNspawn} {
		c := config.Default("khw", config.ArchAMD64, provider)
		f, err := render.DefaultFacts(provider)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range c.Nodes {
			files, err := render.Node(c, n.Name, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, fl := range files {
				all.Write(fl.Data)
				paths[fl.Path] = true
			}
			ins, err := render.Inputs(c, n.Name)
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range ins {
				paths[in.Path] = true
			}
		}
		ms, err := render.Manifests(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			all.Write(m.Data)
		}
	}
	return all.String(), paths
}

// TestLabTextsMatchTheInstalledFiles: every flag, node path, setting and
// config line with a number (`timeout connect 1s`) that
// a lab's Why, What and Observe sections name is in the files khw installs
// for the default cluster, a flag given with its value with that value; the
// only exceptions are in namedElsewhere, each with its reason. So a text
// cannot promise `timeout connect 5s` while the template says 1s.
func TestLabTextsMatchTheInstalledFiles(t *testing.T) {
	all, paths := installed(t)
	labs, err := All()
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	known := func(tok string) bool {
		if _, ok := namedElsewhere[tok]; ok {
			used[tok] = true
			return true
		}
		return false
	}
	checked := 0
	for _, l := range labs {
		text := l.Sections[SectionWhy] + "\n" + l.Sections[SectionWhat] + "\n" + l.Sections[SectionObserve]
		var toks []string
		for _, m := range tickRE.FindAllStringSubmatch(text, -1) {
			toks = append(toks, m[1])
		}
		for _, b := range l.Observe {
			for _, m := range shellPath.FindAllStringSubmatch(b.Shell, -1) {
				toks = append(toks, strings.TrimRight(m[1], "."))
			}
		}
		for _, tok := range toks {
			switch {
			case flagRE.MatchString(tok), settingRE.MatchString(tok),
				directiveRE.MatchString(tok) && strings.ContainsAny(tok, "0123456789") && !isCommand(tok):
				checked++
				if !known(tok) && !strings.Contains(all, tok) {
					t.Errorf("%s names `%s`, which no file khw installs has (fix the text or the template; or add it to namedElsewhere with the reason)", l.ID, tok)
				}
			case nodePath.MatchString(tok):
				for _, p := range expandBraces(tok) {
					checked++
					if !known(tok) && !paths[p] && !strings.Contains(all, p) && !globMatches(p, paths) {
						t.Errorf("%s names the path %s, which khw neither installs nor names in a file it installs", l.ID, p)
					}
				}
			}
		}
	}
	t.Logf("%d flags, paths, settings and config lines checked", checked)
	if checked < 100 {
		t.Errorf("only %d flags, paths and settings found in the lab texts: the extraction is broken", checked)
	}
	for tok := range namedElsewhere {
		if !used[tok] {
			t.Errorf("namedElsewhere lists %q, which no lab names any more: remove it", tok)
		}
	}
}
