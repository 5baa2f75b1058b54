#!/usr/bin/env bash
# Training throughput of the CPU backend against eager PyTorch on the same model and batch.
#
# For each config (tiny, small, 110m; CONFIGS="tiny small" picks some): compiles the train step
# with `precast compile` (f32, cpu-1, base.yml's defaults otherwise: llama2-style decoder,
# AdamW, clipping at 1.0, remat_policy full), runs `precast-run steps=N num_threads=T` on
# MaxText's synthetic batch, then benchmarks/train/torch_train_step.py (Debian's python3-torch)
# for the same N steps of the same shapes with torch.set_num_threads(T). Step 0 is warm-up on
# both sides; the table gives the median (and best) tokens/s of steps 1..N-1, the
# precast/PyTorch ratio, and MFU: model FLOPs per second (MaxText's model FLOPs per step, the
# `Total TFLOPs` precast prints, computed exactly by torch_train_step.py, at the median tokens/s)
# over the SGEMM ceiling: the best row of bench_gemm (SGEMM 2048^3: cblas_sgemm, precast's
# OpenBLAS and Eigen entry points) at T threads, measured at the start and the end of this run,
# the higher of the two. PyTorch's MFU is the same FLOPs at its own speed.
#
# Shared machine: each measurement waits for a quiet moment (up to QUIET_WAIT s, default 300);
# a run during which other processes used more than NOISY_PCT % of the machine (default 20) is
# repeated up to RETRIES times (default 2), keeping the quietest; "others %" in the table is that
# share during the kept precast-run / PyTorch run. The binaries are copied from BUILD_DIR first
# (it may be rebuilt while this runs). TORCH_MODEL=reference runs torch_reference.py's naive
# model instead of the default `fused` one (see torch_train_step.py); PRECAST_KEYS="k=v ..."
# adds compile keys (e.g. remat_policy=minimal). Raw logs stay in RESULTS_DIR (default: a new
# /tmp directory).
#
# Usage: benchmarks/train/throughput.sh [BUILD_DIR] [THREADS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
threads=${2:-2}
python=${PRECAST_PYTHON:-/usr/bin/python3}
configs=${CONFIGS:-tiny small 110m}
torch_model=${TORCH_MODEL:-fused}
results=${RESULTS_DIR:-$(mktemp -d /tmp/precast_train_throughput.XXXXXX)}
mkdir -p "$results"
# shellcheck source=common.sh
source "$root/benchmarks/train/common.sh"
echo "results and logs: $results; binaries copied from $build:" >&2
snapshot_binaries "$results/bin" "$build/tools/precast/precast" \
  "$build/tools/precast-run/precast-run" "$build/benchmarks/kernels/bench_gemm"
precast="$results/bin/precast"
runner="$results/bin/precast-run"
bench_gemm="$results/bin/bench_gemm"
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
cd "$root"

# name: emb layers heads kv_heads head_dim mlp vocab batch seq steps
declare -A dims=(
  [tiny]="256 4 4 4 64 768 1024 8 256 6"
  [small]="512 8 8 8 64 1536 8192 8 512 4"
  [110m]="768 12 12 12 64 2048 32000 4 1024 4"
)

gemm_ceiling() {  # best SGEMM GFLOP/s of bench_gemm's rows at $threads threads (each a median
  # of 5 products), and which row it was
  measure_quietest "$results/gemm_$1.txt" "$bench_gemm" --threads "$threads" --reps 5
  [ "$MEASURED_RC" -eq 0 ] || { cat "$results/gemm_$1.txt" >&2; exit 1; }
  awk -F'|' -v t="$threads" '$3 + 0 == t && $4 + 0 > best {
      best = $4 + 0; name = $2; gsub(/^ +| +$/, "", name) }
    END { printf "%.1f %s\n", best, name }' "$results/gemm_$1.txt" | tr ' ' '_' | sed 's/_/ /'
}

read -r gemm_start gemm_start_row < <(gemm_ceiling start)
echo "SGEMM ceiling at start: $gemm_start GFLOP/s (${gemm_start_row//_/ })" >&2

rows=()
for name in $configs; do
  read -r emb layers heads kv hd mlp vocab batch seq steps <<<"${dims[$name]}"
  keys=(base_emb_dim="$emb" base_num_decoder_layers="$layers" base_num_query_heads="$heads"
        base_num_kv_heads="$kv" head_dim="$hd" base_mlp_dim="$mlp" vocab_size="$vocab"
        per_device_batch_size="$batch" max_target_length="$seq" dtype=float32
        compile_topology=cpu-1 ${PRECAST_KEYS:-})
  pcx="$results/$name.pcx"
  echo "== $name: compiling" >&2
  wait_quiet
  measure "$results/$name.compile.log" "$precast" compile configs/base.yml "${keys[@]}" \
    compiled_trainstep_file="$pcx"
  [ "$MEASURED_RC" -eq 0 ] || { cat "$results/$name.compile.log" >&2; exit 1; }
  compile_s=$MEASURED_WALL

  echo "== $name: precast-run steps=$steps" >&2
  measure_quietest "$results/$name.precast.log" "$runner" "$pcx" steps="$steps" num_threads="$threads"
  [ "$MEASURED_RC" -eq 0 ] || { cat "$results/$name.precast.log" >&2; exit 1; }
  precast_others=$MEASURED_OTHERS
  precast_rss=$((MEASURED_RSS_KIB / 1024))
  steps_of() {  # field (1-based, comma-separated) of the `completed step` lines for steps >= 1
    sed -n 's/^completed step: \([0-9]*\), /\1, /p' "$results/$name.precast.log" |
      awk -F', ' -v f="$1" '$1 >= 1 { split($f, kv, ": "); print kv[2] }'
  }
  read -r precast_tok precast_best < <(steps_of 4 | median_max)
  precast_loss0=$(sed -n 's/^completed step: 0, .* loss: \([0-9.]*\),.*/\1/p' \
    "$results/$name.precast.log")

  echo "== $name: PyTorch steps=$steps" >&2
  measure_quietest "$results/$name.torch.log" "$python" benchmarks/train/torch_train_step.py \
    --emb "$emb" --layers "$layers" --heads "$heads" --kv-heads "$kv" --head-dim "$hd" \
    --mlp "$mlp" --vocab "$vocab" --batch "$batch" --seq "$seq" --steps "$steps" \
    --threads "$threads" --model "$torch_model"
  [ "$MEASURED_RC" -eq 0 ] || { cat "$results/$name.torch.log" >&2; exit 1; }
  torch_others=$MEASURED_OTHERS
  torch_rss=$((MEASURED_RSS_KIB / 1024))
  read -r torch_tok torch_best < <(awk -F', ' '/^torch step: / {
      split($1, s, ": "); split($3, t, ": "); if (s[2] >= 1) print t[2] }' \
    "$results/$name.torch.log" | median_max)
  torch_loss0=$(sed -n 's/^torch step: 0, .* loss: \([0-9.]*\)$/\1/p' "$results/$name.torch.log")
  params=$(sed -n 's/^torch params: //p' "$results/$name.torch.log")
  flops=$(sed -n 's/^model flops per step: //p' "$results/$name.torch.log")
  precast_total=$(sed -n 's/^ Total TFLOPs: \([0-9.]*\).*/\1/p' "$results/$name.precast.log")
  precast_params=$(sed -n 's/^number parameters: \([0-9.]*\) billion.*/\1/p' "$results/$name.precast.log" | head -n 1)
  echo "   params $params (precast: $precast_params billion), model FLOPs/step $flops (precast: $precast_total TFLOPs)" >&2
  rows+=("$name|$params|$compile_s|$precast_tok|$precast_best|$torch_tok|$torch_best|$flops|$precast_loss0|$torch_loss0|$precast_others|$torch_others|$precast_rss|$torch_rss|$steps")
done

read -r gemm_end gemm_end_row < <(gemm_ceiling end)
echo "SGEMM ceiling at end: $gemm_end GFLOP/s (${gemm_end_row//_/ })" >&2
ceiling=$(awk -v a="$gemm_start" -v b="$gemm_end" 'BEGIN { print (a > b ? a : b) }')

echo "Command: benchmarks/train/throughput.sh $* ($(date +%F), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo -), binaries built $(date -r "$runner" '+%F %T'), $(nproc) cores, threads $threads, PyTorch model $torch_model${PRECAST_KEYS:+, precast keys $PRECAST_KEYS};" \
  "SGEMM 2048^3 ceiling at $threads threads, best bench_gemm row: $gemm_start GFLOP/s (${gemm_start_row//_/ }) at start, $gemm_end (${gemm_end_row//_/ }) at end)"
echo
printf '| config | params | steps (timed) | compile s | precast tokens/s median (best) | pytorch tokens/s median (best) | precast / pytorch | precast TFLOP/s | precast MFU | pytorch MFU | step-0 loss precast / pytorch (ln V + 0.5) | peak RSS MiB precast / pytorch | others %% precast / pytorch |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for row in "${rows[@]}"; do
  IFS='|' read -r name params compile_s ptok pbest ttok tbest flops l0p l0t op ot prss trss steps <<<"$row"
  read -r vocab tokens < <(awk '{ print $7, $8 * $9 }' <<<"${dims[$name]}")
  awk -v n="$name" -v params="$params" -v c="$compile_s" -v ptok="$ptok" -v pbest="$pbest" \
      -v ttok="$ttok" -v tbest="$tbest" -v flops="$flops" -v tokens="$tokens" -v ceil="$ceiling" -v l0p="$l0p" \
      -v l0t="$l0t" -v op="$op" -v ot="$ot" -v prss="$prss" -v trss="$trss" -v steps="$steps" \
      -v vocab="$vocab" 'BEGIN {
    tf = flops / tokens * ptok / 1e12
    mfu = tf * 1000 / ceil * 100
    printf "| %s | %.1fM | %d (%d) | %.1f | %.0f (%.0f) | %.0f (%.0f) | %.2fx | %.4f | %.1f%% | %.1f%% | %s / %s (%.3f) | %d / %d | %s / %s |\n",
      n, params / 1e6, steps, steps - 1, c, ptok, pbest, ttok, tbest, ptok / ttok, tf, mfu,
      mfu * ttok / ptok, l0p, l0t, log(vocab) + 0.5, prss, trss, op, ot }'
done
