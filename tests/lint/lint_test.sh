#!/usr/bin/env bash
# The tree's scripts through a linter, run from the source root (so that `# shellcheck source=`
# paths resolve); a finding fails the test.
#   Mode shellcheck (Debian: shellcheck): the files named *.sh (sourced fragments declare
#     `# shellcheck shell=bash`) and every other file whose first line runs sh or bash (.ci/run, the
#     Debian maintainer scripts), at shellcheck's default severity. A deliberate exception is a
#     `# shellcheck disable=SCnnnn` with its reason on the same line.
#   Mode pyflakes (Debian: python3-pyflakes): the files named *.py and every other file whose first line
#     runs python3. pyflakes reports what is certainly wrong (an undefined name, an unused import or
#     variable, a redefinition), never style.
# First a file with a known finding must fail, so that a lint that checks nothing cannot pass.
# scripts/install-deps.sh installs both tools.
# Usage: lint_test.sh shellcheck|pyflakes SOURCE_DIR
set -euo pipefail
mode="${1:?shellcheck or pyflakes}"
src="$(cd "${2:?source dir}" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
case "$mode" in
  shellcheck)
    tool=shellcheck package=shellcheck suffix=sh min_files=20
    shebang='^#!(/usr/bin/env )?(/bin/|/usr/bin/)?(ba)?sh( |$)'
    lint() { shellcheck --external-sources --source-path=SCRIPTDIR --source-path=. --format=gcc "$@"; }
    # shellcheck disable=SC2016  # the bad script's own $f, written literally
    printf '#!/bin/bash\nf=$1\nrm -rf $f/cache\n' > "$tmp/bad.sh"
    expected=(SC2086) ;;
  pyflakes)
    tool=pyflakes3 package=python3-pyflakes suffix=py min_files=15
    shebang='^#!(/usr/bin/env )?(/usr/bin/)?python3?( |$)'
    lint() { pyflakes3 "$@"; }
    printf 'import os\n\ndef f():\n    return undefined_name\n' > "$tmp/bad.py"
    expected=("undefined name 'undefined_name'" "'os' imported but unused") ;;
  *) echo "lint_test.sh: unknown linter '$mode' (shellcheck or pyflakes)" >&2; exit 2 ;;
esac
command -v "$tool" >/dev/null || { echo "FAILED: $tool is not installed ($package; scripts/install-deps.sh installs it)" >&2; exit 1; }

if lint "$tmp/bad.$suffix" > "$tmp/bad.out" 2>&1; then
  echo "FAILED: $tool passed a file with known findings: $(cat "$tmp/bad.$suffix")" >&2; exit 1
fi
for e in "${expected[@]}"; do
  grep -qF "$e" "$tmp/bad.out" || { echo "FAILED: $tool did not report $e: $(cat "$tmp/bad.out")" >&2; exit 1; }
done

cd "$src"
files=()
while IFS= read -r -d '' f; do
  f="${f#./}"
  case "$f" in
    *."$suffix") files+=("$f") ;;
    *) if head -c 64 "$f" | head -n 1 | grep -Eq "$shebang"; then files+=("$f"); fi ;;
  esac
done < <(find . \( -path ./.git -o -path './build*' -o -path ./out -o -path './obj-*' -o -path ./debian/.debhelper \
                   -o -path ./debian/haltpolld -o -path './debian/libhaltpoll*' -o -path ./debian/tmp \
                   -o -name __pycache__ \) -prune \
              -o -type f \( -name "*.$suffix" -o -perm -u+x -o -path './debian/*' -o -path './.ci/*' \) -print0)
[ "${#files[@]}" -ge "$min_files" ] || { echo "FAILED: only ${#files[@]} files for $tool under $src: ${files[*]}" >&2; exit 1; }
if ! lint "${files[@]}" > "$tmp/out" 2>&1; then
  cat "$tmp/out" >&2
  echo "FAILED: $tool findings in $(cut -d: -f1 "$tmp/out" | sort -u | wc -l) of ${#files[@]} files" >&2
  exit 1
fi
echo "$tool: ${#files[@]} files clean: ${files[*]}"
