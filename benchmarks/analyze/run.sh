#!/usr/bin/env bash
# Wall time of `precast analyze` (whole process: start-up, config layering, topology, mesh,
# formulas, lowering the train step, remat, sharding, buffer plan, and on OOM the verified
# suggestions), against the 1 s target, for several models and topologies.
# Peer, measured in the same run: Python start-up plus PyYAML loading the same base and model
# YAML files, a lower bound of what MaxText's config step alone costs before any tracing.
# Usage: benchmarks/analyze/run.sh [BUILD_DIR] [RUNS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/release}
runs=${2:-20}
precast="$build/tools/precast/precast"
cd "$root"

# Median and min of a command's wall time in ms over $runs runs.
time_command() {
  local samples=()
  for _ in $(seq "$runs"); do
    local start end
    start=$(date +%s%N)
    "$@" >/dev/null 2>&1 || true  # exit 3 (does not fit) is a result, not a failure
    end=$(date +%s%N)
    samples+=($(((end - start) / 1000)))
  done
  printf '%s\n' "${samples[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.1f %.1f\n", a[int((NR+1)/2)]/1000, a[1]/1000}'
}

cases=(
  "llama3.1-405b v5p-1024 per_device_batch_size=2 max_target_length=8192"
  "llama2-70b v5p-128 per_device_batch_size=4 max_target_length=4096"
  "gemma2-27b v6e-256 per_device_batch_size=1 max_target_length=8192"
  "gpt3-175b v5p-1024 per_device_batch_size=1"
  "default cpu-4 per_device_batch_size=1 max_target_length=2048"
)

printf '| model | topology | precast analyze median ms | min ms | PyYAML peer median ms | peer / precast | under 1 s |\n'
printf '|---|---|---|---|---|---|---|\n'
for c in "${cases[@]}"; do
  read -r model topology rest <<<"$c"
  read -r median min < <(time_command "$precast" analyze configs/base.yml "model_name=$model" \
    "compile_topology=$topology" $rest)
  model_file=configs/models/$model.yml
  [ -f "$model_file" ] || model_file=configs/base.yml
  read -r peer _ < <(time_command /usr/bin/python3 -c \
    "import yaml,sys; [yaml.safe_load(open(f)) for f in sys.argv[1:]]" configs/base.yml "$model_file")
  ratio=$(awk -v a="$peer" -v b="$median" 'BEGIN {printf "%.1fx", a/b}')
  verdict=$(awk -v m="$median" 'BEGIN {print (m < 1000) ? "yes" : "NO"}')
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$model" "$topology" "$median" "$min" "$peer" "$ratio" "$verdict"
done
