package jumpbox

import (
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// SplitKubectlArgs separates khw's flags from kubectl's. With
// DisableFlagParsing cobra hands the command every argument except its own
// name, so `khw --cluster a kubectl get` and `khw kubectl --cluster a get`
// (kubectl's --cluster) both arrive as [--cluster a get]. khwFlags are
// khw's persistent flags. raw is the command line cobra parsed (os.Args[1:]
// when khw's main runs it): the first occurrence of name whose removal
// gives args marks the split, as cobra removes the first non-flag name. When raw is not that command line
// (arguments set with SetArgs, as the tests do), the leading arguments that
// are khw persistent flags (with their values) are khw's.
func SplitKubectlArgs(name string, args, raw []string, khwFlags *pflag.FlagSet) (khw, kubectl []string) {
	if len(raw) == len(args)+1 {
		for i, tok := range raw {
			if tok == name && slices.Equal(raw[:i], args[:i]) && slices.Equal(raw[i+1:], args[i:]) {
				return args[:i], args[i:]
			}
		}
	}
	i := 0
	for i < len(args) {
		tok := args[i]
		if tok == "--" || tok == "-" || !strings.HasPrefix(tok, "-") {
			break
		}
		var f *pflag.Flag
		takesNext := false
		if strings.HasPrefix(tok, "--") {
			fname, _, hasValue := strings.Cut(tok[2:], "=")
			if fname == "help" {
				i++
				continue
			}
			if f = khwFlags.Lookup(fname); f == nil {
				break
			}
			takesNext = !hasValue && f.NoOptDefVal == ""
		} else {
			if tok[1:2] == "h" && len(tok) == 2 {
				i++
				continue
			}
			if f = khwFlags.ShorthandLookup(tok[1:2]); f == nil {
				break
			}
			takesNext = len(tok) == 2 && f.NoOptDefVal == ""
		}
		i++
		if takesNext {
			i++
		}
	}
	i = min(i, len(args))
	return args[:i], args[i:]
}
