#!/usr/bin/env bash
# Data parallel over 2 ranks: Precast on 2 MPI ranks against PyTorch DDP on 2 processes, the same
# model, global batch and threads per process.
#
# For each config (CONFIGS, default "tiny"; the dimensions of throughput.sh) compiles the step for
# cpu-2 with ici_data_parallelism=2 (f32, base.yml's defaults otherwise: llama2-style decoder,
# AdamW, clipping at 1.0, remat_policy full; PRECAST_KEYS="k=v ..." adds compile keys) and each
# device holding half of the global batch, then runs, ROUNDS times (default 3) in turn:
#   precast  mpirun -np 2 precast-run step.pcx steps=N num_threads=1 (shared memory, rank 0's
#            log lines)
#   ddp      benchmarks/train/torch_ddp_step.py: torch.nn.parallel.DistributedDataParallel, gloo
#            backend, 2 processes, torch.set_num_threads(1) each, Debian's python3-torch
#            (PRECAST_PYTHON, default /usr/bin/python3)
# Step 0 is warm-up for both; a round's figure is the median steps/s of steps 1..N-1 (precast:
# its Tokens/s/device over the tokens one device holds; DDP: one over rank 0's step seconds),
# and the table gives per config the median over the rounds (with their range) and precast / ddp
# as the median over the rounds of the ratio of the two figures measured in the same round. Each
# run waits for a quiet moment first (common.sh's wait_quiet, QUIET_WAIT default 30 s here);
# "others %" is the share of the machine other processes used during the runs (median).
#
# Usage: benchmarks/train/ddp.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
python=${PRECAST_PYTHON:-/usr/bin/python3}
configs=${CONFIGS:-tiny}
rounds=${ROUNDS:-3}
export QUIET_WAIT=${QUIET_WAIT:-30}
# shellcheck source=common.sh
source "$root/benchmarks/train/common.sh"
cd "$root"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
results=${RESULTS_DIR:-$(mktemp -d /tmp/precast_ddp.XXXXXX)}
echo "logs in $results" >&2
snapshot_binaries "$results/bin" "$build/tools/precast/precast" \
  "$build/tools/precast-run/precast-run"
precast="$results/bin/precast"
runner="$results/bin/precast-run"

# name: emb layers heads kv_heads head_dim mlp vocab global_batch seq steps
declare -A dims=(
  [tiny]="256 4 4 4 64 768 1024 8 256 6"
  [small]="512 8 8 8 64 1536 8192 8 512 4"
)

median_range() {  # "median (min-max)" of the numbers on stdin, printf format $1
  sort -g | awk -v f="$1" '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf f " (" f "-" f ")\n", m, v[1], v[NR] }'
}

echo "| config | global batch x seq | steps (timed) | precast steps/s median (range) | ddp steps/s median (range) | precast / ddp | step-0 loss precast / ddp | others % precast / ddp |"
echo "|---|---|---|---|---|---|---|---|"
for name in $configs; do
  read -r emb layers heads kv hd mlp vocab batch seq steps <<<"${dims[$name]}"
  pcx="$results/$name.pcx"
  echo "== $name: compiling for cpu-2, data 2" >&2
  "$precast" compile configs/base.yml base_emb_dim="$emb" base_num_decoder_layers="$layers" \
    base_num_query_heads="$heads" base_num_kv_heads="$kv" head_dim="$hd" base_mlp_dim="$mlp" \
    vocab_size="$vocab" per_device_batch_size=$((batch / 2)) max_target_length="$seq" \
    dtype=float32 compile_topology=cpu-2 ici_data_parallelism=2 ${PRECAST_KEYS:-} \
    compiled_trainstep_file="$pcx" >"$results/$name.compile.log" 2>&1 ||
    { cat "$results/$name.compile.log" >&2; exit 1; }
  device_tokens=$((batch / 2 * seq))
  p_rates=() d_rates=() ratios=() p_others=() d_others=()
  for round in $(seq 1 "$rounds"); do
    order="precast ddp"
    [ $((round % 2)) -eq 0 ] && order="ddp precast"
    for cmd in $order; do
      log="$results/$name.$cmd.r$round.log"
      echo "== $name round $round/$rounds: $cmd steps=$steps" >&2
      wait_quiet
      if [ "$cmd" = precast ]; then
        measure "$log" mpirun --oversubscribe --mca pml ob1 --mca btl self,vader -np 2 \
          "$runner" "$pcx" steps="$steps" num_threads=1 \
          base_output_directory="$results" run_name="$name.r$round"
        [ "$MEASURED_RC" -eq 0 ] || { cat "$log" >&2; exit 1; }
        p=$(sed -n 's/^completed step: \([0-9]*\), .*Tokens\/s\/device: \([0-9.]*\),.*/\1 \2/p' "$log" |
          awk -v t="$device_tokens" '$1 >= 1 { print $2 / t }' | median_max | cut -d' ' -f1)
        p_loss=$(sed -n 's/^completed step: 0, .* loss: \([0-9.]*\),.*/\1/p' "$log")
        p_rates+=("$p") p_others+=("$MEASURED_OTHERS")
      else
        measure "$log" "$python" benchmarks/train/torch_ddp_step.py --emb "$emb" \
          --layers "$layers" --heads "$heads" --kv-heads "$kv" --head-dim "$hd" --mlp "$mlp" \
          --vocab "$vocab" --batch "$batch" --seq "$seq" --steps "$steps" --threads 1
        [ "$MEASURED_RC" -eq 0 ] || { cat "$log" >&2; exit 1; }
        d=$(awk -F', ' '/^ddp step: / { split($1, s, ": "); split($2, t, ": ");
            if (s[2] >= 1) print 1 / t[2] }' "$log" | median_max | cut -d' ' -f1)
        d_loss=$(sed -n 's/^ddp step: 0, .* loss: \([0-9.]*\)$/\1/p' "$log")
        d_rates+=("$d") d_others+=("$MEASURED_OTHERS")
      fi
    done
    ratios+=("$(awk -v p="$p" -v d="$d" 'BEGIN { print p / d }')")
  done
  echo "| $name | $batch x $seq | $steps ($((steps - 1))) |" \
    "$(printf '%s\n' "${p_rates[@]}" | median_range '%.2f') |" \
    "$(printf '%s\n' "${d_rates[@]}" | median_range '%.2f') |" \
    "$(printf '%s\n' "${ratios[@]}" | median_max | awk '{ printf "%.2fx", $1 }') |" \
    "$p_loss / $d_loss |" \
    "$(printf '%s\n' "${p_others[@]}" | median_max | cut -d' ' -f1) / $(printf '%s\n' "${d_others[@]}" | median_max | cut -d' ' -f1) |"
done
