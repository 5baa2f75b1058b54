#!/usr/bin/env bash
# The main job, from nothing: install missing packages, build (Release), then analyse the default
# model (MaxText's published setting) for three targets.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
dir=$("$root/tools/build.sh" Release | tail -n 1)
precast="$dir/tools/precast/precast"

run() {
  echo
  echo "\$ precast $*"
  "$precast" "$@"
}

common=(configs/base.yml per_device_batch_size=1 max_target_length=2048)
cd "$root"
run analyze "${common[@]}" compile_topology=v5p-128
run analyze "${common[@]}" compile_topology=v6e-32 ici_fsdp_parallelism=32
run analyze "${common[@]}" compile_topology=cpu-4
run analyze configs/base.yml model_name=llama3.1-405b compile_topology=v5p-1024 \
  per_device_batch_size=2 max_target_length=8192 --timing
