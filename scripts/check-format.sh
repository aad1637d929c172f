#!/usr/bin/env bash
# Checks that every C++ file git tracks is formatted as .clang-format says.
# Prints the files that are not and exits 1; `clang-format -i FILE` mends one.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check-format: clang-format is not installed (scripts/setup.sh installs it)"; exit 1; }
mapfile -t files < <(git ls-files '*.cc' '*.h')
[ ${#files[@]} -gt 0 ] || { echo "check-format: no C++ files found (not a git checkout?)"; exit 1; }
# One clang-format per 40 files; its diagnostics start with the file's path.
mapfile -t bad < <(printf '%s\0' "${files[@]}" |
  xargs -0 -n 40 clang-format --dry-run -Werror 2>&1 | grep -oE '^[^: ]+\.(cc|h):' | sort -u | tr -d ':')
if [ ${#bad[@]} -gt 0 ]; then
  printf 'check-format: not formatted (run clang-format -i on each):\n'; printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
