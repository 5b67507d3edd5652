package steps

import "strings"

// Quote returns s as one word for a POSIX shell: as it is when every
// character is one no shell treats specially (letters, digits and
// - _ . / : = @ % + ,), else in single quotes, each single quote in s
// closed, escaped and reopened (the empty string: two single quotes).
// Every path or URL written into a Command goes through it: a state
// directory or mirror named "a b" or "$(…)" stays a name when the learner
// runs the command, never a second word or a command.
func Quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
