#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy at the root) on every C++ source in libps/ and launcher/,
# prints each finding and then "lint: N findings"; exits 1 when there are any.
# Needs a configured build (compile_commands.json): PSTRAIN_BUILD, default ./build.
# LINT_JOBS parallel clang-tidy processes (default: the core count). Takes about
# half an hour of CPU for the whole tree; name files to check only those.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${PSTRAIN_BUILD:-build}
command -v clang-tidy >/dev/null || { echo "lint: clang-tidy is not installed (apt-get install clang-tidy)"; exit 1; }
[ -f "$BUILD/compile_commands.json" ] || { echo "lint: no $BUILD/compile_commands.json (run scripts/setup.sh first)"; exit 1; }
# A unity build's compile commands name the unity files, not the sources.
if meson introspect "$BUILD" --buildoptions | grep -q '"name": "lib_unity", "value": true'; then
  echo "lint: $BUILD compiles the libraries as unity files: meson configure $BUILD -Dlib_unity=false, then ninja -C $BUILD"
  exit 1
fi
if [ $# -gt 0 ]; then files=("$@"); else mapfile -t files < <(git ls-files 'libps/*.cc' 'launcher/*.cc'); fi
out=$(mktemp); trap 'rm -f "$out"' EXIT
# GCC-only warning flags in the compile commands are not clang's business.
printf '%s\0' "${files[@]}" |
  xargs -0 -n 1 -P "${LINT_JOBS:-$(nproc)}" clang-tidy -p "$BUILD" --quiet \
    --extra-arg=-Wno-unknown-warning-option --extra-arg=-Wno-c99-extensions 2>/dev/null |
  grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error):' | sed 's#^[^ ]*/\.\./##' | sort -u > "$out"
cat "$out"
n=$(wc -l < "$out")
echo "lint: $n findings in ${#files[@]} files"
[ "$n" -eq 0 ]
