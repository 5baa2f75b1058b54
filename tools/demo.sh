#!/usr/bin/env bash
# The main job, from nothing: install missing packages, build (Release), then analyse the default
# model (MaxText's published setting) for three targets, llama3.1-405b, and a `precast fit`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
dir=$("$root/tools/build.sh" Release | tail -n 1)
precast="$dir/tools/precast/precast"

run() {
  echo
  echo "\$ precast $*"
  local rc=0
  "$precast" "$@" || rc=$?
  # Exit 3 is an answer (the step does not fit; the report says why), not a failure.
  if [ "$rc" -eq 3 ]; then echo "(exit 3: does not fit)"; elif [ "$rc" -ne 0 ]; then exit "$rc"; fi
}

common=(configs/base.yml per_device_batch_size=1 max_target_length=2048)
cd "$root"
run analyze "${common[@]}" compile_topology=v5p-128
run analyze "${common[@]}" compile_topology=v6e-32 ici_fsdp_parallelism=32
run analyze "${common[@]}" compile_topology=cpu-4
run analyze configs/base.yml model_name=llama3.1-405b compile_topology=v5p-1024 \
  per_device_batch_size=2 max_target_length=8192 --timing
run fit configs/base.yml model_name=llama2-70b compile_topology=v5p-128
