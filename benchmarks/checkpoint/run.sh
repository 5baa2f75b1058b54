#!/usr/bin/env bash
# Checkpoint cost: save and restore time and throughput, and what saving every CHECKPOINT_PERIOD
# steps (default 10) costs the training steps, asynchronously and synchronously.
#
# Compiles one model (default: the 110m config of benchmarks/train/throughput.sh — E 768, 12
# layers, 12 heads of 64, M 2048, V 32000, 134.1M parameters — in f32 at BATCH rows of SEQ tokens,
# default 1 x 256 so that a step takes about a second on 2 cores; the state, 3 x 536 MB with the
# Adam moments, does not depend on them) and runs STEPS steps (default 31) three ways, ROUNDS
# times (default 2) in turn:
#   none   no checkpoints
#   async  enable_checkpointing=true checkpoint_period=P (async_checkpointing=true, the default)
#   sync   the same with async_checkpointing=false
# then restores the last async checkpoint (a run of one more step). Per way: the median step time
# of steps 1..STEPS-1 (step 0 warms up) and the mean, whose difference to `none` is what
# checkpointing adds to the steps' seconds, and the whole run's wall time, whose difference to
# `none` is everything checkpointing costs; saves: the median `saved checkpoint ... in S s` and
# MB/s (an asynchronous save's time overlaps the steps).
# "others %" is the share of the machine other processes used meanwhile (benchmarks/train).
# Usage: benchmarks/checkpoint/run.sh [BUILD_DIR] [THREADS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
threads=${2:-2}
steps=${STEPS:-31}
period=${CHECKPOINT_PERIOD:-10}
rounds=${ROUNDS:-2}
batch=${BATCH:-1}
seq=${SEQ:-256}
read -r emb layers heads hd mlp vocab <<<"${DIMS:-768 12 12 64 2048 32000}"
export QUIET_WAIT=${QUIET_WAIT:-30} RETRIES=${RETRIES:-0}
results=${RESULTS_DIR:-$(mktemp -d /tmp/precast_checkpoint_bench.XXXXXX)}
mkdir -p "$results"
# shellcheck source=../train/common.sh
source "$root/benchmarks/train/common.sh"
snapshot_binaries "$results/bin" "$build/tools/precast/precast" "$build/tools/precast-run/precast-run"
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
cd "$root"

pcx="$results/step.pcx"
echo "== compiling (results in $results)" >&2
"$results/bin/precast" compile configs/base.yml base_emb_dim="$emb" base_num_decoder_layers="$layers" \
  base_num_query_heads="$heads" base_num_kv_heads="$heads" head_dim="$hd" base_mlp_dim="$mlp" \
  vocab_size="$vocab" per_device_batch_size="$batch" max_target_length="$seq" dtype=float32 \
  compile_topology=cpu-1 compiled_trainstep_file="$pcx" >"$results/compile.log" 2>&1 ||
  { cat "$results/compile.log" >&2; exit 1; }
params=$(sed -n 's/^number parameters: \([0-9.]*\) billion.*/\1/p' "$results/compile.log")

step_times() {  # LOG -> "median mean" of the seconds of steps >= 1
  sed -n 's/^completed step: \([0-9]*\), seconds: \([0-9.]*\),.*/\1 \2/p' "$1" |
    awk '$1 >= 1 { print $2 }' | sort -g |
    awk '{ v[NR] = $1; s += $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
           printf "%.4f %.4f\n", m, s / NR }'
}
saves() {  # LOG -> "count median_s median_MB/s" of the `saved checkpoint` lines
  local lines
  lines=$(sed -n 's/^saved checkpoint at step [0-9]* in \([0-9.]*\) s (\([0-9.]*\) MB\/s)$/\1 \2/p' "$1")
  if [ -z "$lines" ]; then echo "0 - -"; return; fi
  echo "$(echo "$lines" | wc -l) $(echo "$lines" | awk '{ print $1 }' | mid) $(echo "$lines" | awk '{ print $2 }' | mid)"
}
mid() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { printf "%s", v[int((NR + 1) / 2)] }'; }

declare -A median mean others save_s save_rate saves_n wall
for round in $(seq 1 "$rounds"); do
  for way in none async sync; do
    run_name="$way-$round"
    args=("$pcx" steps="$steps" num_threads="$threads" base_output_directory="$results/out"
          run_name="$run_name")
    case $way in
      async) args+=(enable_checkpointing=true checkpoint_period="$period") ;;
      sync) args+=(enable_checkpointing=true checkpoint_period="$period" async_checkpointing=false) ;;
    esac
    echo "== round $round/$rounds: $way" >&2
    log="$results/$run_name.log"
    measure_quietest "$log" "$results/bin/precast-run" "${args[@]}"
    [ "$MEASURED_RC" -eq 0 ] || { cat "$log" >&2; exit 1; }
    read -r md mn < <(step_times "$log")
    median[$way]+="$md "; mean[$way]+="$mn "; others[$way]+="$MEASURED_OTHERS "
    wall[$way]+="$MEASURED_WALL "
    if [ "$way" != none ]; then
      read -r n s r < <(saves "$log")
      saves_n[$way]=$n; save_s[$way]+="$s "; save_rate[$way]+="$r "
    fi
  done
done
echo "== restore" >&2
measure "$results/restore.log" "$results/bin/precast-run" "$pcx" steps=$((steps + 1)) \
  num_threads="$threads" base_output_directory="$results/out" run_name="async-$rounds" \
  enable_checkpointing=true checkpoint_period="$period"
restore=$(sed -n 's/^restored checkpoint in \([0-9.]*\) s (\([0-9.]*\) MB\/s.*/\1 s, \2 MB\/s/p' "$results/restore.log")

base_mean=$(echo "${mean[none]}" | mid)
base_wall=$(echo "${wall[none]}" | mid)
echo
echo "Model: ${params} billion parameters, ${batch} x ${seq} tokens per step, $threads threads, checkpoint_period=$period, $steps steps, $rounds rounds (median of the rounds)."
echo
echo "| way | step s (median) | step s (mean) | mean vs none | run wall s | wall vs none | saves | save s (median) | save MB/s | others % |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for way in none async sync; do
  m=$(echo "${mean[$way]}" | mid)
  w=$(echo "${wall[$way]}" | mid)
  pct=$(awk -v a="$m" -v b="$base_mean" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }')
  wpct=$(awk -v a="$w" -v b="$base_wall" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }')
  if [ "$way" = none ]; then
    n=- ss=- sr=-
  else
    n=${saves_n[$way]} ss=$(echo "${save_s[$way]}" | mid) sr=$(echo "${save_rate[$way]}" | mid)
  fi
  printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n" "$way" "$(echo "${median[$way]}" | mid)" \
    "$m" "$pct" "$w" "$wpct" "$n" "$ss" "$sr" "$(echo "${others[$way]}" | mid)"
done
echo
echo "Restore (read, SHA-256 verified, copied into the step's buffers): $restore"
