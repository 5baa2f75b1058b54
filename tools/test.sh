#!/usr/bin/env bash
# Set-up, build, then the whole suite through ctest. Fails when no test was collected.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
dir=$("$root/tools/build.sh" Release | tail -n 1)
cd "$dir"
count=$(ctest -N | sed -n 's/^Total Tests: \([0-9]*\)$/\1/p')
if [ -z "$count" ] || [ "$count" -eq 0 ]; then
  echo "test.sh: no tests collected" >&2
  exit 1
fi
ctest --output-on-failure -j "$(nproc)" --timeout 600
