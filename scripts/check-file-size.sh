#!/usr/bin/env bash
# Checks that no C++ source file git tracks under libps/ and launcher/ is longer than
# 600 lines (a longer one is to be split by responsibility). Prints each offender with
# its line count and exits 1; prints how many files it checked and exits 0 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
max=600
mapfile -t files < <(git ls-files -- 'libps/*.cc' 'libps/*.h' 'launcher/*.cc' 'launcher/*.h')
[ ${#files[@]} -gt 0 ] || { echo "check-file-size: no C++ files found (not a git checkout?)"; exit 1; }
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue  # deleted in the work tree, not yet in the index
  n=$(wc -l < "$f")
  [ "$n" -gt "$max" ] && bad+=("$(printf '%6d  %s' "$n" "$f")")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'check-file-size: over %d lines (split each by responsibility):\n' "$max"
  printf '%s\n' "${bad[@]}"
  exit 1
fi
echo "check-file-size: ${#files[@]} files of at most $max lines"
