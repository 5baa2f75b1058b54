#!/usr/bin/env bash
# tools/lint_scope_strings.sh flags exactly the lines of scope_strings_fixture.cpp marked FLAG
# (and exits 1 for them), and passes the repository's compiler logic (exit 0).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
lint="$root/tools/lint_scope_strings.sh"
fixture="$root/tests/lint/scope_strings_fixture.cpp"

out=$("$lint" "$fixture" 2>/dev/null)
rc=$?
if [ "$rc" -ne 1 ]; then
  echo "FAIL: the lint exited $rc on the fixture, expected 1"
  exit 1
fi
got=$(echo "$out" | sed -E 's/^[^:]*:([0-9]+):.*/\1/' | sort -n | tr '\n' ' ')
want=$(grep -n '// FLAG' "$fixture" | cut -d: -f1 | sort -n | tr '\n' ' ')
if [ "$got" != "$want" ]; then
  echo "FAIL: flagged lines [$got], expected [$want]"
  echo "$out"
  exit 1
fi
echo "PASS: fixture lines $want flagged"
