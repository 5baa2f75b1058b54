#!/usr/bin/env bash
# Configures and builds Precast into build/<type> (default Release). Used by demo.sh and test.sh.
# Usage: tools/build.sh [Release|Debug|RelWithDebInfo]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
type=${1:-Release}
dir="$root/build/$(echo "$type" | tr '[:upper:]' '[:lower:]')"
jobs=${PRECAST_BUILD_JOBS:-$(nproc)}

launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi

cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" \
  -DPRECAST_WARNINGS_AS_ERRORS="$werror" "${launcher[@]}" >/dev/null
# Progress and errors go to stderr: stdout is only the build directory, for scripts.
cmake --build "$dir" -j "$jobs" >&2
echo "$dir"
