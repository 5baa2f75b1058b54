#!/usr/bin/env bash
# Checkpoint cost: save and restore time and throughput, and what saving every CHECKPOINT_PERIOD
# steps (default 10) costs the training steps, asynchronously and synchronously.
#
# Compiles one model (default: the 110m config of benchmarks/train/throughput.sh — E 768, 12
# layers, 12 heads of 64, M 2048, V 32000, 134.1M parameters — in f32 at BATCH rows of SEQ tokens,
# default 1 x 256 so that a step takes about a second on 2 cores; the state, 3 x 536 MB with the
# Adam moments, does not depend on them) and runs STEPS steps (default 31) the WAYS (default all
# five), ROUNDS times (default 2) in turn:
#   none        no checkpoints
#   async       enable_checkpointing=true checkpoint_period=P (async_checkpointing=true, the
#               default; the state's 16 shards (state-000NN-of-00016.safetensors: 1.61 GB is over
#               the 256 MiB threshold) hashed together and written with O_DIRECT from the aligned
#               snapshot; the snapshot copy itself on the writer thread, beside the next step's
#               forward and backward passes, the step waiting before its first state write only
#               if the copy is unfinished)
#   async-caller the same with the copy on the training thread inside the save, as before
#               2026-11-25 (PRECAST_CHECKPOINT_COPY=caller, a benchmark knob)
#   async-idle  the same as async with the writer thread under SCHED_IDLE
#               (PRECAST_CHECKPOINT_WRITER_SCHED=idle, a benchmark knob)
#   sync        enable_checkpointing=true checkpoint_period=P async_checkpointing=false
# then restores the last async checkpoint (a run of one more step).
# Steps 1..STEPS-1 (step 0 warms up) are split, from the log's order of lines, into the steps
# "with a save": the step that carries a save's start (an asynchronous save's snapshot copy, a
# synchronous save's whole write) and every step that runs while an asynchronous save is still
# writing (from `Started saving ...` to its `saved checkpoint ...` line) — and the steps
# "without" one. Per way: the median and mean seconds of each group (the issue's figure: the
# async steps with a save against `none`'s steps), the mean of all steps against `none`, the
# end of run's wait for the last save (its own log line: it is in no step, and MaxText too waits
# for its last save), the whole run's wall time, the saves' median seconds and MB/s (an
# asynchronous save's time overlaps the steps), the first save's seconds in the step after it
# (perf/checkpoint_seconds: the snapshot copy when asynchronous, the whole save when not; the
# last save of a synchronous run follows the last step and is in no step either) and the
# snapshot buffer's allocation at start-up (outside the steps), and the run's CPU seconds
# (user + system of precast-run, /usr/bin/time; the kernel's writeback threads are not in it:
# an O_DIRECT write's work is, a buffered write's writeback is not).
# "each save inside the run" is the issue's figure measured within one run: (mean of the steps
# with a save - mean of those without) x their count / the saves that started before the last
# step, in seconds and as a share of checkpoint_period steps without a save. "copy wait s": the
# median of what the steps waited for the writer's copy (`copied the state of step N on the writer
# thread in C s; the next step waited W s for it`).
# "others %" is the share of the machine other processes used meanwhile (benchmarks/train).
# Usage: benchmarks/checkpoint/run.sh [BUILD_DIR] [THREADS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
threads=${2:-2}
steps=${STEPS:-31}
period=${CHECKPOINT_PERIOD:-10}
rounds=${ROUNDS:-2}
ways=${WAYS:-none async async-caller async-idle sync}
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
  step_groups "$1" | awk '{ print $2 }' | stats
}
# LOG -> one line per step >= 1: "step seconds with_save" (1: the step carries a save's start or
# runs while an asynchronous save writes; see the header).
step_groups() {
  awk '/^Started saving the checkpoint of step/ { inflight = 1; carry = 1 }
       /^saved checkpoint at step/ { if (inflight) inflight = 0; else carry = 1 }
       /^completed step: / { split($0, f, /[:,] */); s = f[2] + 0; sec = f[4] + 0
                             if (s >= 1) print s, sec, ((inflight || carry) ? 1 : 0); carry = 0 }' "$1"
}
stats() {  # numbers on stdin -> "median mean count" ("- - 0" when none)
  sort -g | awk '{ v[NR] = $1; s += $1 } END {
    if (NR == 0) { print "- - 0"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.4f %.4f %d\n", m, s / NR, NR }'
}
end_wait() {  # LOG -> the end-of-run wait's seconds (0 when no save was in flight)
  local w
  w=$(sed -n 's/^waited \([0-9.]*\) s at the end of the run.*/\1/p' "$1")
  echo "${w:-0}"
}
first_copy() {  # METRICS_JSONL -> perf/checkpoint_seconds of the first step that has any
  sed -n 's/.*"perf\/checkpoint_seconds": *\([0-9.e+-]*\).*/\1/p' "$1" |
    awk '$1 > 0 { printf "%.3f", $1; found = 1; exit } END { if (!found) printf "-" }'
}
saves() {  # LOG -> "count median_s median_MB/s" of the `saved checkpoint` lines
  local lines
  lines=$(sed -n 's/^saved checkpoint at step [0-9]* in \([0-9.]*\) s (\([0-9.]*\) MB\/s)$/\1 \2/p' "$1")
  if [ -z "$lines" ]; then echo "0 - -"; return; fi
  echo "$(echo "$lines" | wc -l) $(echo "$lines" | awk '{ print $1 }' | mid) $(echo "$lines" | awk '{ print $2 }' | mid)"
}
mid() { tr ' ' '\n' | { grep -v '^$' || true; } | sort -g | awk '{ v[NR] = $1 } END { printf "%s", v[int((NR + 1) / 2)] }'; }

declare -A median mean others save_s save_rate saves_n wall with_md with_mn with_n without_md \
  without_mn without_n final_wait copy alloc cpu per_save copy_wait
for round in $(seq 1 "$rounds"); do
  for way in $ways; do
    run_name="$way-$round"
    knobs=()
    args=("$pcx" steps="$steps" num_threads="$threads" base_output_directory="$results/out"
          run_name="$run_name")
    case $way in
      async) args+=(enable_checkpointing=true checkpoint_period="$period") ;;
      async-caller) args+=(enable_checkpointing=true checkpoint_period="$period")
        knobs=(PRECAST_CHECKPOINT_COPY=caller) ;;
      async-idle) args+=(enable_checkpointing=true checkpoint_period="$period")
        knobs=(PRECAST_CHECKPOINT_WRITER_SCHED=idle) ;;
      sync) args+=(enable_checkpointing=true checkpoint_period="$period" async_checkpointing=false) ;;
    esac
    echo "== round $round/$rounds: $way" >&2
    log="$results/$run_name.log"
    measure_quietest "$log" /usr/bin/time -o "$results/$run_name.cpu" -f "%U %S" \
      env "${knobs[@]}" "$results/bin/precast-run" "${args[@]}"
    [ "$MEASURED_RC" -eq 0 ] || { cat "$log" >&2; exit 1; }
    read -r md mn _ < <(step_times "$log")
    median[$way]+="$md "; mean[$way]+="$mn "; others[$way]+="$MEASURED_OTHERS "
    wall[$way]+="$MEASURED_WALL "
    cpu[$way]+="$(awk '{ printf "%.2f", $1 + $2 }' "$results/$run_name.cpu") "
    step_groups "$log" >"$results/$run_name.steps"
    read -r a with_mean n < <(awk '$3 == 1 { print $2 }' "$results/$run_name.steps" | stats)
    with_md[$way]+="$a "; with_mn[$way]+="$with_mean "; with_n[$way]=$n
    read -r a without_mean n < <(awk '$3 == 0 { print $2 }' "$results/$run_name.steps" | stats)
    without_md[$way]+="$a "; without_mn[$way]+="$without_mean "; without_n[$way]=$n
    final_wait[$way]+="$(end_wait "$log") "
    if [ "$way" != none ]; then
      read -r n s r < <(saves "$log")
      saves_n[$way]=$n; save_s[$way]+="$s "; save_rate[$way]+="$r "
      copy[$way]+="$(first_copy "$results/out/$run_name/metrics/metrics.jsonl") "
      a=$(sed -n 's/^Allocated the checkpoint snapshot buffer in \([0-9.]*\) s$/\1/p' "$log")
      alloc[$way]+="${a:--} "
      # Saves started before the last step: their cost falls in the steps.
      started=$(awk -v last=$((steps - 1)) '/^Started saving the checkpoint of step/ && $7 + 0 < last { n++ } END { print n + 0 }' "$log")
      per_save[$way]+="$(awk -v a="$with_mean" -v b="$without_mean" -v n="${with_n[$way]}" -v k="$started" \
        'BEGIN { if (a == "-" || b == "-" || k == 0) print "-"; else printf "%.4f", (a - b) * n / k }') "
      w=$(sed -n 's/^copied the state of step [0-9]* on the writer thread in [0-9.]* s; the next step waited \([0-9.]*\) s for it$/\1/p' "$log" | mid)
      copy_wait[$way]+="${w:--} "
    fi
    # Each run writes up to 1.6 GB per kept checkpoint: keep only the one the restore reads.
    [ "$way" = async ] && [ "$round" -eq "$rounds" ] || rm -rf "$results/out/$run_name/checkpoints"
  done
done
echo "== restore" >&2
measure "$results/restore.log" "$results/bin/precast-run" "$pcx" steps=$((steps + 1)) \
  num_threads="$threads" base_output_directory="$results/out" run_name="async-$rounds" \
  enable_checkpointing=true checkpoint_period="$period"
restore=$(sed -n 's/^restored checkpoint in \([0-9.]*\) s (\([0-9.]*\) MB\/s.*/\1 s, \2 MB\/s/p' "$results/restore.log")
rm -rf "$results/out/async-$rounds/checkpoints"  # the logs and tables stay in $results

base_mean=$(echo "${mean[none]}" | mid)
base_wall=$(echo "${wall[none]}" | mid)
base_cpu=$(echo "${cpu[none]}" | mid)
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "") print "-"; else printf "%+.1f%%", (a / b - 1) * 100 }'; }
# CPU seconds more than none's run
extra() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "") print "-"; else printf "%+.2f", a - b }'; }
echo
echo "Model: ${params} billion parameters, ${batch} x ${seq} tokens per step, $threads threads, checkpoint_period=$period, $steps steps, $rounds rounds (median of the rounds)."
echo
echo "| way | steps with a save: n, median s, mean s | vs none's mean | steps without: n, median s, mean s | all steps: mean s | vs none | end-of-run wait s | run wall s | wall vs none | saves | save s (median) | save MB/s | first save in its step s | buffer allocation s (start-up) | copy wait s | each save inside the run: s, % of period | run CPU s (user+sys) | CPU s vs none | others % |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for way in $ways; do
  m=$(echo "${mean[$way]}" | mid)
  w=$(echo "${wall[$way]}" | mid)
  wm=$(echo "${with_mn[$way]}" | mid)
  if [ "$way" = none ]; then
    n=- ss=- sr=- cp=- al=- cw=- ps=- pp=-
  else
    n=${saves_n[$way]} ss=$(echo "${save_s[$way]}" | mid) sr=$(echo "${save_rate[$way]}" | mid)
    cp=$(echo "${copy[$way]}" | mid) al=$(echo "${alloc[$way]}" | mid)
    cw=$(echo "${copy_wait[$way]}" | mid) ps=$(echo "${per_save[$way]}" | mid)
    pp=$(awk -v a="$ps" -v b="$(echo "${without_mn[$way]}" | mid)" -v p="$period" \
      'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%+.1f%%", a / (p * b) * 100 }')
  fi
  c=$(echo "${cpu[$way]}" | mid)
  printf "| %s | %s, %s, %s | %s | %s, %s, %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s, %s | %s | %s | %s |\n" "$way" \
    "${with_n[$way]}" "$(echo "${with_md[$way]}" | mid)" "$wm" "$(pct "$wm" "$base_mean")" \
    "${without_n[$way]}" "$(echo "${without_md[$way]}" | mid)" "$(echo "${without_mn[$way]}" | mid)" \
    "$m" "$(pct "$m" "$base_mean")" "$(echo "${final_wait[$way]}" | mid)" "$w" "$(pct "$w" "$base_wall")" \
    "$n" "$ss" "$sr" "$cp" "$al" "$cw" "$ps" "$pp" "$c" "$(extra "$c" "$base_cpu")" "$(echo "${others[$way]}" | mid)"
done
echo
echo "Per-step seconds, each way and round: $results/<way>-<round>.steps (step, seconds, 1 = with a save)."
echo "Restore (read once into the step's buffers, SHA-256 verified as read): $restore"
