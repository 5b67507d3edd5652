package grade

import (
	"fmt"
	"path"
	"strings"
)

// Rungs is how many hints a finding's ladder has.
const Rungs = 3

// Ladder is a hint ladder for one finding, from the least given away to the
// most: where to look (a log, a command), what is wrong there (the file or
// setting and what was read), and the fix. A student who did a lab by hand
// climbs it one rung at a time (khw lab hint), so that the check teaches
// where to look before it tells the answer.
type Ladder [Rungs]string

// LadderOf builds f's ladder in English (LadderIn).
func LadderOf(f Finding, look string) Ladder { return LadderIn(f, look, "en") }

// LadderIn builds f's ladder in language lang ("en", "ko"; English words
// for another): the framing is lang's, while the finding's own text, the
// commands, paths and flags stay as they are. look is where to look for
// mistakes of f's lab: commands, with "{node}" standing for the node the
// evidence was read on (the catalogue's Look); "" when the lab has none.
func LadderIn(f Finding, look, lang string) Ladder {
	w := func(key string) string { return word(lang, key) }
	var l Ladder
	where := w("cluster")
	switch f.Node {
	case "":
	case "jumpbox":
		where = w("jumpbox")
	default:
		where = fmt.Sprintf(w("on"), f.Node)
	}
	node := f.Node
	if node == "" || node == "jumpbox" {
		node = "NODE"
	}
	look = lookAt(f, look, lang)
	look = strings.ReplaceAll(look, "{node}", node)
	if look == "" {
		look = fmt.Sprintf(w("nolook"), f.Lab)
	}
	l[0] = fmt.Sprintf(w("rung1"), where, f.Lab, look)
	second := f.What
	if f.Evidence != "" {
		second += w("read") + f.Evidence
	}
	if f.Why != "" {
		second += w("why") + f.Why
	}
	l[1] = second
	l[2] = w("fix") + f.Fix
	if f.Fix == "" {
		l[2] = fmt.Sprintf(w("nofix"), f.Lab, f.Lab)
	}
	return l
}

// ladderWords frame a hint ladder, by language; English is the fallback.
var ladderWords = map[string]map[string]string{
	"en": {
		"cluster": "in the cluster (the API)", "jumpbox": "in the state directory on the jumpbox", "on": "on %s",
		"rung1":  "Something is wrong %s (lab %s). Look: %s",
		"nolook": "read the logs of what lab %s installs there, and compare its files with the lab's text",
		"read":   "\n  what was read: ", "why": "\n  why it matters: ", "fix": "Fix: ",
		"nofix":     "Fix: make it what lab %s's text describes (khw lab %s --plain shows it)",
		"unitflags": "` (the unit and the flags it runs with), and ", "and": "`, and ",
		"thenfiles": "; then the files lab %s installs there",
		"sysctl":    "` (the kernel settings lab 07 sets), and /etc/sysctl.d/ there",
		"modules":   "` (the kernel modules lab 07 loads), and /etc/modules-load.d/ there",
	},
	"ko": {
		"cluster": "클러스터(API)에서", "jumpbox": "점프박스의 상태 디렉터리에서", "on": "%s에서",
		"rung1":  "%s 무언가 잘못됐습니다(실습 %s). 볼 곳: %s",
		"nolook": "실습 %s가 그곳에 설치하는 것의 로그를 읽고, 그 파일을 실습 본문과 비교하세요",
		"read":   "\n  읽은 것: ", "why": "\n  왜 중요한가: ", "fix": "고치는 법: ",
		"nofix":     "고치는 법: 실습 %s의 본문이 설명하는 대로 만드세요(khw lab %s --plain이 보여 줍니다)",
		"unitflags": "`(유닛과 그 플래그), 그리고 ", "and": "`, 그리고 ",
		"thenfiles": "; 그다음 실습 %s가 그곳에 설치하는 파일",
		"sysctl":    "`(실습 07이 설정하는 커널 설정), 그리고 그곳의 /etc/sysctl.d/",
		"modules":   "`(실습 07이 올리는 커널 모듈), 그리고 그곳의 /etc/modules-load.d/",
	},
}

func word(lang, key string) string {
	if w, ok := ladderWords[lang][key]; ok {
		return w
	}
	return ladderWords["en"][key]
}

// lookAt says where on its node a finding's evidence is, without saying
// what it is, from its Subject: a unit file ("/etc/systemd/system/x.service"
// or "… --flag") is read with systemctl cat, a unit with systemctl status,
// a sysctl or a kernel module with the command that shows it; for another
// node file, the lab's log (labLook) and then the lab's files. labLook when
// the Subject says nothing of where (free text, an API object, a file on
// the jumpbox).
func lookAt(f Finding, labLook, lang string) string {
	if f.Node == "" || f.Node == "jumpbox" {
		return labLook
	}
	ssh := "`ssh -F \"$KHW_SSH_CONFIG\" {node} "
	file, _, _ := strings.Cut(f.Subject, " ")
	switch {
	case strings.HasPrefix(file, "/etc/systemd/system/") && strings.HasSuffix(file, ".service"):
		unit := path.Base(file)
		return ssh + "systemctl cat " + unit + word(lang, "unitflags") + ssh + "sudo journalctl -u " + unit + " -n 30 --no-pager`"
	case strings.HasPrefix(file, "/") && labLook != "":
		// Naming the file would be the second hint: the log first.
		return labLook + fmt.Sprintf(word(lang, "thenfiles"), f.Lab)
	case strings.HasSuffix(f.Subject, ".service") && !strings.Contains(f.Subject, " "):
		return ssh + "systemctl status " + f.Subject + word(lang, "and") + ssh + "sudo journalctl -u " + f.Subject + " -n 30 --no-pager`"
	case strings.HasPrefix(f.Subject, "sysctl "):
		return ssh + "sudo sysctl net.ipv4 net.bridge" + word(lang, "sysctl")
	case strings.HasPrefix(f.Subject, "kernel module "):
		return ssh + "lsmod" + word(lang, "modules")
	}
	return labLook
}
