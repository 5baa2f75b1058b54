#!/usr/bin/env bash
# Start-up of precast-run against compiling, for the demo-size model (emb 256, 4 layers, 4 heads
# x 64, mlp 768, vocab 8192, batch 8, seq 256, f32, cpu-1; ~10M parameters).
#
#   compile: wall time of `precast compile` (whole process);
#   load / link: the "Loaded ... in X ms" and "Linked the object code in X ms" lines of precast-run
#     (verify + read the artifact; JITLink of the object code and symbol lookup);
#   init: "parameters initialised in X s" (the weights drawn with MaxText's initialisers);
#   to first step: wall of `precast-run steps=1` minus step 0's seconds (process start, load,
#     link, arena, init, the synthetic batch; plus the process's exit after the step);
#   steps=0 wall: the whole `precast-run steps=0` process (everything but the step).
# Targets: to first step at least 20x sooner than compiling; load + link under 100 ms.
# Then the size of a stripped copy of precast-run, and its peak RSS (steps=1, /usr/bin/time %M)
# against the buffer plan it prints: "Runtime memory:" arena + arguments + outputs - donated
# (the bytes it allocates), and "Total estimated memory size".
# Each time is the median of REPS runs (default 5; compile: 3). Shared machine: each run waits
# for a quiet moment (QUIET_WAIT s, default 300) and "others %" is the share of the machine other
# processes used during the runs (the largest of the runs). The binaries are copied from
# BUILD_DIR first (it may be rebuilt while this runs).
#
# Usage: benchmarks/train/startup.sh [BUILD_DIR] [THREADS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
threads=${2:-2}
reps=${REPS:-5}
compile_reps=${COMPILE_REPS:-3}
results=${RESULTS_DIR:-$(mktemp -d /tmp/precast_train_startup.XXXXXX)}
mkdir -p "$results"
# shellcheck source=common.sh
source "$root/benchmarks/train/common.sh"
cd "$root"
echo "results and logs: $results; binaries copied from $build:" >&2
snapshot_binaries "$results/bin" "$build/tools/precast/precast" "$build/tools/precast-run/precast-run"
precast="$results/bin/precast"
runner="$results/bin/precast-run"

keys=(base_emb_dim=256 base_num_decoder_layers=4 base_num_query_heads=4 base_num_kv_heads=4
      head_dim=64 base_mlp_dim=768 vocab_size=8192 per_device_batch_size=8 max_target_length=256
      dtype=float32 compile_topology=cpu-1)
pcx="$results/demo.pcx"
max_others=0
note_others() { if [ "$MEASURED_OTHERS" -gt "$max_others" ]; then max_others=$MEASURED_OTHERS; fi; }

: >"$results/compile.txt"
for i in $(seq "$compile_reps"); do
  wait_quiet
  measure "$results/compile_$i.log" "$precast" compile configs/base.yml "${keys[@]}" \
    compiled_trainstep_file="$pcx"
  [ "$MEASURED_RC" -eq 0 ] || { cat "$results/compile_$i.log" >&2; exit 1; }
  note_others
  echo "$MEASURED_WALL" >>"$results/compile.txt"
done
read -r compile_s _ < <(median_max <"$results/compile.txt")

field() {  # sed expression's capture from a log
  sed -n "$1" "$2" | head -n 1
}
: >"$results/steps0.txt"
: >"$results/steps1.txt"
for i in $(seq "$reps"); do
  wait_quiet
  measure "$results/steps0_$i.log" "$runner" "$pcx" steps=0 num_threads="$threads"
  [ "$MEASURED_RC" -eq 0 ] || { cat "$results/steps0_$i.log" >&2; exit 1; }
  note_others
  echo "$MEASURED_WALL" >>"$results/steps0.txt"

  wait_quiet
  log="$results/steps1_$i.log"
  measure "$log" "$runner" "$pcx" steps=1 num_threads="$threads"
  [ "$MEASURED_RC" -eq 0 ] || { cat "$log" >&2; exit 1; }
  note_others
  load_ms=$(field 's/^Loaded .* in \([0-9.]*\) ms$/\1/p' "$log")
  link_ms=$(field 's/^Linked the object code in \([0-9.]*\) ms;.*/\1/p' "$log")
  init_s=$(field 's/.*parameters initialised in \([0-9.]*\) s;.*/\1/p' "$log")
  step_s=$(field 's/^completed step: 0, seconds: \([0-9.]*\),.*/\1/p' "$log")
  echo "$MEASURED_WALL $step_s $load_ms $link_ms $init_s $MEASURED_RSS_KIB" >>"$results/steps1.txt"
done
column_median() { awk -v c="$1" '{ print $c }' "$results/steps1.txt" | median_max | cut -d' ' -f1; }
first_step_s=$(awk '{ print $1 - $2 }' "$results/steps1.txt" | median_max | cut -d' ' -f1)
step_s=$(column_median 2)
load_ms=$(column_median 3)
link_ms=$(column_median 4)
init_s=$(column_median 5)
rss_kib=$(column_median 6)
read -r steps0_s _ < <(median_max <"$results/steps0.txt")

log="$results/steps1_1.log"
read -r arena args outs donated < <(sed -n \
  's/^Runtime memory: arena \([0-9]*\) bytes.*arguments \([0-9]*\) bytes.*outputs \([0-9]*\) bytes.*/\1 \2 \3/p' \
  "$log" | head -n 1) || true
donated=$(field 's/.*outputs [0-9]* bytes, \([0-9]*\) donated).*/\1/p' "$log")
object=$(field 's/^Loaded .* (\([0-9]*\) bytes of object code).*/\1/p' "$log")
estimate=$(field 's/^Total estimated memory size: \([0-9.]*\) GB.*/\1/p' "$log")
# Exact count (E 256, L 4, H = K 4, D 64, M 768, V 8192): embedding and logits 2VE, per layer
# two norms, q/k/v/out and three MLP kernels, the final norm. precast prints it in billions.
params=$((2 * 8192 * 256 + 4 * (2 * 256 + 4 * 256 * 4 * 64 + 3 * 256 * 768) + 256))
precast_params=$(field 's/^number parameters: \([0-9.]*\) billion.*/\1/p' "$log")
stripped="$results/precast-run.stripped"
strip -o "$stripped" "$runner"

echo "Command: benchmarks/train/startup.sh $* ($(date +%F), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo -), binaries built $(date -r "$runner" '+%F %T'), $(nproc) cores, num_threads $threads;" \
  "median of $reps precast-run runs and $compile_reps compiles; others used up to ${max_others}% of the machine meanwhile)"
echo
echo "Demo model: emb 256, 4 layers, 4 heads x 64, mlp 768, vocab 8192, batch 8 x 256 tokens, f32 ($params parameters; precast: $precast_params billion)"
echo
printf '| compile s | load ms | link ms | load + link ms | init s | to first step s | steps=0 wall s | compile / to first step | step 0 s | load + link < 100 ms | >= 20x |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
awk -v c="$compile_s" -v lo="$load_ms" -v li="$link_ms" -v init="$init_s" -v f="$first_step_s" \
    -v z="$steps0_s" -v s="$step_s" 'BEGIN {
  printf "| %.2f | %.1f | %.2f | %.1f | %.3f | %.3f | %.3f | %.1fx | %.3f | %s | %s |\n",
    c, lo, li, lo + li, init, f, z, c / f, s, (lo + li < 100 ? "yes" : "NO"), (c / f >= 20 ? "yes" : "NO") }'
echo
printf '| precast-run binary | stripped | peak RSS (steps=1) | plan: arena + arguments + outputs - donated | RSS - plan | object code | "Total estimated memory size" |\n'
printf '|---|---|---|---|---|---|---|\n'
awk -v bin="$(stat -c %s "$runner")" -v st="$(stat -c %s "$stripped")" -v rss="$rss_kib" \
    -v arena="$arena" -v args="$args" -v outs="$outs" -v don="$donated" -v obj="$object" \
    -v est="$estimate" 'BEGIN {
  plan = arena + args + outs - don; mib = 1048576
  printf "| %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB (%d + %d + %d - %d bytes) | %.1f MiB | %.2f MiB | %s GB |\n",
    bin / mib, st / mib, rss * 1024 / mib, plan / mib, arena, args, outs, don, (rss * 1024 - plan) / mib,
    obj / mib, est }'
