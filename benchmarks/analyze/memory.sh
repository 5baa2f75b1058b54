#!/usr/bin/env bash
# The issue's analysis speed figures, with the full pipeline (lowering, train step, remat,
# sharding, buffer plan, and on OOM the verified suggestions):
#   1. llama3.1-405b on v5p-1024: wall time and peak RSS (targets: < 1 s, < 1 GiB);
#   2. every shipped model x five topologies, total wall time (target: < 60 s);
#   3. `precast fit` for llama2-70b on v5p-128 (target: < 10 s).
# Usage: benchmarks/analyze/memory.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/release}
precast="$build/tools/precast/precast"
cd "$root"

measure() {  # prints "seconds rss_mib exit_code"; runs the command once
  local rc=0 seconds kib
  /usr/bin/time -o /tmp/precast_bench_time -f "%e %M" "$@" >/dev/null 2>&1 || rc=$?
  read -r seconds kib < <(tail -n 1 /tmp/precast_bench_time)
  echo "$seconds $((kib / 1024)) $rc"
}

printf '| case | wall s | peak RSS MiB | exit | target |\n|---|---|---|---|---|\n'
read -r s m rc < <(measure "$precast" analyze configs/base.yml model_name=llama3.1-405b \
  compile_topology=v5p-1024 per_device_batch_size=1 max_target_length=8192)
printf '| analyze llama3.1-405b v5p-1024 (batch 1, T 8192) | %s | %s | %s | < 1 s, < 1024 MiB |\n' "$s" "$m" "$rc"
read -r s m rc < <(measure "$precast" fit configs/base.yml model_name=llama2-70b compile_topology=v5p-128)
printf '| fit llama2-70b v5p-128 | %s | %s | %s | < 10 s |\n' "$s" "$m" "$rc"

start=$(date +%s%N)
count=0
oom=0
for model in $(ls configs/models | grep -v unsupported | sed 's/\.yml$//'); do
  for topology in v5p-128 v6e-256 v5e-8 h100-8 cpu-4; do
    rc=0
    "$precast" analyze configs/base.yml "model_name=$model" "compile_topology=$topology" \
      >/dev/null 2>&1 || rc=$?
    count=$((count + 1))
    if [ "$rc" -eq 3 ]; then oom=$((oom + 1)); fi
  done
done
end=$(date +%s%N)
printf '| analyze %d configs (20 models x 5 topologies; %d out of memory, with suggestions) | %.1f | - | - | < 60 s |\n' \
  "$count" "$oom" "$(echo "($end - $start) / 1000000000" | bc -l)"
