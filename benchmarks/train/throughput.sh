#!/usr/bin/env bash
# Training throughput of the CPU backend against PyTorch on the same model, batch and thread count.
#
# For each config (tiny, small, 110m; CONFIGS="tiny small" picks some): compiles the train step
# with `precast compile` (f32, cpu-1, base.yml's defaults otherwise: llama2-style decoder,
# AdamW, clipping at 1.0, remat_policy full; PRECAST_KEYS="k=v ..." adds compile keys, e.g.
# remat_policy=minimal_with_context for the like-for-like step), then runs, ROUNDS times
# (default 3) in turn, `precast-run steps=N num_threads=T` on MaxText's synthetic batch and
# benchmarks/train/torch_train_step.py for the same N steps of the same shapes with
# torch.set_num_threads(T), as each peer:
#   torch1.13-eager    Debian's python3-torch 1.13 (PRECAST_PYTHON, default /usr/bin/python3),
#                      --model $TORCH_MODEL (default fused: batched-matmul attention)
#   torch2-eager-sdpa  PyTorch 2.x from PyPI (TORCH2_PYTHON, default the environment that
#                      setup_torch_venv.sh makes, /opt/precast-bench-venv/bin/python), eager,
#                      attention by scaled_dot_product_attention (--model sdpa)
#   torch2-compile     the same model under torch.compile (--model sdpa --compile), with
#                      COMPILE_WARMUP (default 2) untimed steps first for the compilation
# PEERS="torch1.13-eager torch2-compile" picks some; without TORCH2_PYTHON the 2.x peers are left
# out (with a note). Step 0 is warm-up for every command; a round's figure is the median
# tokens/s of steps 1..N-1, and the table gives, per config and peer, the median over the rounds
# (with the range of the round figures), and precast / peer as the median over the rounds of the
# ratio of the two figures measured in the same round (interleaved: the pairing keeps the ratio
# meaningful when the machine's speed drifts). The order of the commands rotates from round to
# round. MFU: model FLOPs per second (MaxText's model FLOPs per step, the `Total TFLOPs` precast
# prints, computed exactly by torch_train_step.py, at the median tokens/s) over the SGEMM
# ceiling: the best row of bench_gemm (SGEMM 2048^3: cblas_sgemm, precast's OpenBLAS and Eigen
# entry points) at T threads, measured at the start and the end of this run, the higher.
#
# Shared machine: each measurement waits for a quiet moment (up to QUIET_WAIT s, default 30 here);
# a run during which other processes used more than NOISY_PCT % of the machine (default 20) is
# repeated up to RETRIES times (default 0 here: the rounds take the place of retries), keeping
# the quietest; "others %" in the table is the median share of the machine that other processes
# used during the kept runs. The binaries are copied from BUILD_DIR first (it may be rebuilt
# while this runs). TORCH_MODEL=reference runs torch_reference.py's naive model as the 1.13 peer.
# Raw logs stay in RESULTS_DIR (default: a new /tmp directory).
#
# Usage: benchmarks/train/throughput.sh [BUILD_DIR] [THREADS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
threads=${2:-2}
python=${PRECAST_PYTHON:-/usr/bin/python3}
torch2_python=${TORCH2_PYTHON:-/opt/precast-bench-venv/bin/python}
configs=${CONFIGS:-tiny small 110m}
torch_model=${TORCH_MODEL:-fused}
rounds=${ROUNDS:-3}
compile_warmup=${COMPILE_WARMUP:-2}
export QUIET_WAIT=${QUIET_WAIT:-30} RETRIES=${RETRIES:-0}
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

# peer name -> "python | torch_train_step.py arguments"
declare -A peer_cmd=(
  [torch1.13-eager]="$python|--model $torch_model"
  [torch2-eager-sdpa]="$torch2_python|--model sdpa"
  [torch2-compile]="$torch2_python|--model sdpa --compile --warmup $compile_warmup"
)
peers=()
for peer in ${PEERS:-torch1.13-eager torch2-eager-sdpa torch2-compile}; do
  [ -n "${peer_cmd[$peer]:-}" ] || { echo "unknown peer $peer" >&2; exit 2; }
  if [ "$peer" != torch1.13-eager ] && [ ! -x "$torch2_python" ]; then
    echo "note: $peer left out: no $torch2_python (benchmarks/train/setup_torch_venv.sh makes it)" >&2
    continue
  fi
  peers+=("$peer")
done
declare -A peer_version=()
for peer in "${peers[@]}"; do
  peer_version[$peer]=$("${peer_cmd[$peer]%%|*}" -c 'import torch; print(torch.__version__)')
done

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

  # One round's figure per command: "tokens/s median, best, step-0 loss, others %, RSS MiB".
  declare -A fig=()
  commands=(precast "${peers[@]}")
  for round in $(seq 1 "$rounds"); do
    n=${#commands[@]}
    for i in $(seq 0 $((n - 1))); do
      cmd=${commands[$(((i + round - 1) % n))]}
      log="$results/$name.$cmd.r$round.log"
      echo "== $name round $round/$rounds: $cmd steps=$steps" >&2
      if [ "$cmd" = precast ]; then
        measure_quietest "$log" "$runner" "$pcx" steps="$steps" num_threads="$threads"
        [ "$MEASURED_RC" -eq 0 ] || { cat "$log" >&2; exit 1; }
        read -r tok best < <(sed -n 's/^completed step: \([0-9]*\), /\1, /p' "$log" |
          awk -F', ' '$1 >= 1 { split($4, kv, ": "); print kv[2] }' | median_max)
        loss0=$(sed -n 's/^completed step: 0, .* loss: \([0-9.]*\),.*/\1/p' "$log")
      else
        IFS='|' read -r peer_python peer_args <<<"${peer_cmd[$cmd]}"
        # shellcheck disable=SC2086
        measure_quietest "$log" "$peer_python" benchmarks/train/torch_train_step.py \
          --emb "$emb" --layers "$layers" --heads "$heads" --kv-heads "$kv" --head-dim "$hd" \
          --mlp "$mlp" --vocab "$vocab" --batch "$batch" --seq "$seq" --steps "$steps" \
          --threads "$threads" $peer_args
        [ "$MEASURED_RC" -eq 0 ] || { cat "$log" >&2; exit 1; }
        read -r tok best < <(awk -F', ' '/^torch step: / {
            split($1, s, ": "); split($3, t, ": "); if (s[2] >= 1) print t[2] }' "$log" |
          median_max)
        loss0=$(sed -n 's/^torch \(warmup\|step\): 0, .* loss: \([0-9.]*\)$/\2/p' "$log" | head -n 1)
        params=$(sed -n 's/^torch params: //p' "$log")
        flops=$(sed -n 's/^model flops per step: //p' "$log")
      fi
      echo "   $tok tokens/s (best step $best), others $MEASURED_OTHERS%" >&2
      fig[$cmd]+="$tok $best $loss0 $MEASURED_OTHERS $((MEASURED_RSS_KIB / 1024));"
    done
  done
  precast_total=$(sed -n 's/^ Total TFLOPs: \([0-9.]*\).*/\1/p' "$results/$name.precast.r1.log")
  precast_params=$(sed -n 's/^number parameters: \([0-9.]*\) billion.*/\1/p' \
    "$results/$name.precast.r1.log" | head -n 1)
  echo "   params $params (precast: $precast_params billion), model FLOPs/step $flops (precast: $precast_total TFLOPs)" >&2
  for cmd in "${commands[@]}"; do
    rows+=("$name|$params|$compile_s|$flops|$steps|$cmd|${fig[$cmd]}|${fig[precast]}")
  done
  unset fig
done

read -r gemm_end gemm_end_row < <(gemm_ceiling end)
echo "SGEMM ceiling at end: $gemm_end GFLOP/s (${gemm_end_row//_/ })" >&2
ceiling=$(awk -v a="$gemm_start" -v b="$gemm_end" 'BEGIN { print (a > b ? a : b) }')

versions=""
for peer in "${peers[@]}"; do versions+=", $peer: torch ${peer_version[$peer]}"; done
echo "Command: benchmarks/train/throughput.sh $* ($(date -u '+%F %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo -), binaries built $(date -r "$runner" '+%F %T'), $(nproc) cores, threads $threads, rounds $rounds${PRECAST_KEYS:+, precast keys $PRECAST_KEYS}$versions;" \
  "SGEMM 2048^3 ceiling at $threads threads, best bench_gemm row: $gemm_start GFLOP/s (${gemm_start_row//_/ }) at start, $gemm_end (${gemm_end_row//_/ }) at end)"
echo
printf '| config | params | steps (timed) | compile s | command | torch | tokens/s median of rounds (range) | precast / command, median of rounds (range) | TFLOP/s | MFU | step-0 loss (ln V + 0.5) | peak RSS MiB | others %% (median) |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for row in "${rows[@]}"; do
  IFS='|' read -r name params compile_s flops steps cmd figs pfigs <<<"$row"
  read -r vocab tokens < <(awk '{ print $7, $8 * $9 }' <<<"${dims[$name]}")
  awk -v n="$name" -v params="$params" -v c="$compile_s" -v flops="$flops" -v tokens="$tokens" \
      -v ceil="$ceiling" -v steps="$steps" -v vocab="$vocab" -v cmd="$cmd" \
      -v ver="${peer_version[$cmd]:--}" -v figs="$figs" -v pfigs="$pfigs" '
    function median(a, k,   i, j, t) {  # sorts a[1..k] in place
      for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
        t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
    }
    BEGIN {
      k = split(figs, r, ";") - 1; split(pfigs, pr, ";")
      rss = 0
      for (i = 1; i <= k; i++) {
        split(r[i], f, " "); split(pr[i], pf, " ")
        tok[i] = f[1]; ratio[i] = pf[1] / f[1]; oth[i] = f[4]
        if (i == 1) loss0 = f[3]
        if (f[5] > rss) rss = f[5]
      }
      m = median(tok, k); lo = tok[1]; hi = tok[k]
      rm = median(ratio, k); rlo = ratio[1]; rhi = ratio[k]
      om = median(oth, k)
      tf = flops / tokens * m / 1e12
      mfu = tf * 1000 / ceil * 100
      printf "| %s | %.1fM | %d (%d) | %.1f | %s | %s | %.0f (%.0f-%.0f) | %s | %.4f | %.1f%% | %s (%.3f) | %d | %s |\n",
        n, params / 1e6, steps, steps - 1, c, cmd, ver, m, lo, hi,
        cmd == "precast" ? "-" : sprintf("%.2fx (%.2f-%.2f)", rm, rlo, rhi),
        tf, mfu, loss0, log(vocab) + 0.5, rss, om
    }'
done
