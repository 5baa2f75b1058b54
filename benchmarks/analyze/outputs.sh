#!/usr/bin/env bash
# Writes `precast analyze`'s full text and --format=json output (and its exit code) for the issue
# 15/20 timing cases, MaxText's AOT cases (benchmarks/maxtext_aot/cases.txt) and the XLA
# reference rows (benchmarks/xla_reference/configs.txt) into OUT_DIR, one file per case, so that
# two binaries can be compared byte for byte: `diff -r OUT_A OUT_B` (a speed change must print
# the same figures). Not part of CI.
# Usage: benchmarks/analyze/outputs.sh PRECAST_BINARY OUT_DIR
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
precast=$1
out=$2
mkdir -p "$out"
cd "$root"

run_case() {  # name, then the key=value arguments
  local name=$1
  shift
  "$precast" analyze configs/base.yml "$@" >"$out/$name.txt" 2>&1
  echo "exit $?" >>"$out/$name.txt"
  "$precast" analyze configs/base.yml "$@" --format=json >"$out/$name.json" 2>&1
  echo "exit $?" >>"$out/$name.json"
}

run_case timing_405b model_name=llama3.1-405b compile_topology=v5p-1024
run_case timing_default compile_topology=v6e-32
run_case timing_deepseek3 model_name=deepseek3-671b compile_topology=v5p-1024
run_case timing_qwen3 model_name=qwen3-235b-a22b compile_topology=v5p-512
run_case timing_405b_b2 model_name=llama3.1-405b compile_topology=v5p-1024 per_device_batch_size=2 max_target_length=8192
while read -r name _ args; do
  case "$name" in '' | '#'*) continue ;; esac
  # shellcheck disable=SC2086  # whitespace-separated key=value words
  run_case "aot_$name" $args
done <benchmarks/maxtext_aot/cases.txt
while read -r name topology args; do
  case "$name" in '' | '#'*) continue ;; esac
  # shellcheck disable=SC2086
  run_case "xla_$name" compile_topology="$topology" $args
done <benchmarks/xla_reference/configs.txt
