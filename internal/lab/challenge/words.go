package challenge

// words are the lines khw challenge prints around the texts, by language
// (English when a language lacks one); the texts themselves are in
// labs/challenges/ and labs/ko/challenges/. Format verbs in the order of
// the English.
var words = map[string]map[string]string{
	"ko": {
		"clock":     "지금부터 시간을 잽니다. khw shell에서 작업한 뒤:\n  khw challenge check    고친 결과를 채점합니다(무언가 잘못된 동안은 어디를 볼지만 알려 줍니다)\n  khw challenge hint     힌트를 하나 더 봅니다(어디를 볼까, 무엇이 잘못됐나, 고치는 법)\n  khw challenge give-up  답을 보고, 클러스터를 원래대로 되돌립니다\n",
		"hint":      "힌트 %d/%d · %s",
		"next":      "\nkhw challenge hint로 다음 힌트를 봅니다.\n",
		"nomore":    "힌트가 더 없습니다. 마지막 힌트가 고치는 법이었습니다.\n",
		"nomore2":   "khw challenge check로 채점하고, khw challenge give-up은 답을 보여 주고 클러스터를 되돌립니다.\n",
		"solved":    "\n✓ 도전 과제 %s를 %s 만에 풀었습니다. 힌트 %d개.\n",
		"unhealthy": "✗ 클러스터가 아직 정상이 아닙니다:\n",
		"back":      "클러스터가 도전 과제 전으로 돌아왔습니다. 남은 과제는 khw challenge list로 봅니다.\n",
		"running":   "도전 과제 %s(실습 %s, 수준 %d): %s째 진행 중, 힌트 %d개, 채점 %d번.\n",
		"level":     "실습 %s, 수준 %d.",
		"nexthint":  "khw challenge hint(힌트를 하나 더), 고친 뒤에는 khw challenge check",
		"peeked":    "  답은 이것으로도 보였습니다: %s(결과에 남습니다).\n",
	},
}

var english = map[string]string{
	"clock":     "The clock runs from now. Work in khw shell; then:\n  khw challenge check    grade the repair (it says where to look while something is wrong)\n  khw challenge hint     one more hint (where to look, what is wrong, the fix)\n  khw challenge give-up  the answer, and the cluster back as it was\n",
	"hint":      "Hint %d of %d · %s",
	"next":      "\nkhw challenge hint gives the next one.\n",
	"nomore":    "No more hints: the last one was the fix.\n",
	"nomore2":   "khw challenge check grades it; khw challenge give-up shows the answer and restores the cluster.\n",
	"solved":    "\n✓ Challenge %s solved in %s with %d hint(s).\n",
	"unhealthy": "✗ the cluster is not healthy yet:\n",
	"back":      "The cluster is back as it was before the challenge. khw challenge list shows what is left.\n",
	"running":   "Challenge %s (lab %s, level %d): running for %s; %d hint(s) taken, %d check(s).\n",
	"level":     "Lab %s, level %d.",
	"nexthint":  "khw challenge hint (one more hint); after a fix, khw challenge check",
	"peeked":    "  The answer was also seen through: %s (kept in the result).\n",
}

// word is the line key in e's language.
func (e *Env) word(key string) string {
	if w, ok := words[e.Lang][key]; ok {
		return w
	}
	return english[key]
}
