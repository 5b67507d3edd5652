#!/usr/bin/env bash
# check-size.sh: the two size limits `make lint` keeps (make size).
#
#   - cmd/khw is the command line's wiring (cobra commands, flags, usage
#     errors, help texts, calls into the packages): its non-test .go files
#     hold at most MAX_LOC_PER_COMMAND lines of code per command, counting
#     the lines that are neither blank nor comment-only, and the commands
#     as the pages of the generated CLI reference (docs/cli/khw*.md, which
#     TestCLIReference keeps equal to the command tree). Wiring grows with
#     the commands; logic does not belong here: an operation's lives in
#     the package that owns it.
#   - No Go file in the repository, tests included, has more than
#     MAX_FILE_LINES lines: a longer one is split along its concerns.
#
# It prints cmd/khw's count against its limit and every file over the
# other, and exits 1 when either limit is broken.
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_LOC_PER_COMMAND=${MAX_LOC_PER_COMMAND:-41}
commands=$(find docs/cli -maxdepth 1 -name 'khw*.md' | wc -l)
MAX_CMD_LOC=$((MAX_LOC_PER_COMMAND * commands))
MAX_FILE_LINES=${MAX_FILE_LINES:-650}
failed=0

loc=0
for f in cmd/khw/*.go; do
  case $f in *_test.go) continue ;; esac
  # grep exits 1 when it selects nothing (a file of comments only): 0 lines.
  n=$(grep -v '^[[:space:]]*//' "$f" | grep -cv '^[[:space:]]*$' || true)
  loc=$((loc + n))
done
if [ "$loc" -gt "$MAX_CMD_LOC" ]; then
  echo "cmd/khw: $loc lines of code, over the limit of $MAX_CMD_LOC ($MAX_LOC_PER_COMMAND per command, $commands commands): move the logic into the package that owns the operation (cmd/khw keeps cobra wiring, flags, usage errors and calls)"
  failed=1
else
  echo "cmd/khw: $loc lines of code (limit $MAX_CMD_LOC: $MAX_LOC_PER_COMMAND per command, $commands commands)"
fi

over=0
while IFS= read -r -d '' f; do
  n=$(wc -l <"$f")
  if [ "$n" -gt "$MAX_FILE_LINES" ]; then
    echo "${f#./}: $n lines, over the limit of $MAX_FILE_LINES: split it along its concerns"
    over=$((over + 1))
  fi
done < <(find . -path ./.git -prune -o -name '*.go' -type f -print0 | sort -z)
if [ "$over" -gt 0 ]; then
  failed=1
else
  echo "Go files: none over $MAX_FILE_LINES lines"
fi
exit "$failed"
