#!/usr/bin/env bash
# Data parallel over 2 ranks: Precast on 2 MPI ranks (data parallel and fsdp) and on 1 process of
# 2 threads, against PyTorch DDP on 2 processes; the same model, global batch and cores.
#
# For each config (CONFIGS, default "tiny small"; the dimensions of throughput.sh) compiles the
# step three times (f32, remat_policy=minimal_with_context as the training table uses, so both
# sides keep their activations; base.yml's defaults otherwise: llama2-style decoder, AdamW,
# clipping at 1.0; PRECAST_KEYS="k=v ..." adds compile keys): cpu-1 with the whole global batch,
# cpu-2 with ici_data_parallelism=2 and cpu-2 with ici_fsdp_parallelism=2 (each device holding
# half of the batch), then runs, ROUNDS times (default 3) in turn (the order rotates):
#   1x2      precast-run cpu1.pcx steps=N num_threads=2
#   data     mpirun -np 2 precast-run data.pcx steps=N num_threads=1 (shared memory)
#   fsdp     mpirun -np 2 precast-run fsdp.pcx steps=N num_threads=1
#   ddp      benchmarks/train/torch_ddp_step.py: torch.nn.parallel.DistributedDataParallel, gloo
#            backend, 2 processes, torch.set_num_threads(1) each, PRECAST_PYTHON (default the
#            benchmark venv's PyTorch 2.x, /opt/precast-bench-venv/bin/python, made by
#            setup_torch_venv.sh; else Debian's /usr/bin/python3)
# Step 0 is warm-up for all; a round's figure is the median tokens/s (global tokens) of steps
# 1..N-1 (precast: its Tokens/s/device times the devices; DDP: global tokens over rank 0's step
# seconds). "coll s/step" is rank 0's seconds in collectives per step (its counters' total line,
# waits included, over all N steps). The table gives per config the median over the rounds, the
# ratios data / ddp and fsdp / data as medians over the rounds of the figures measured in the
# same round. Each run waits for a quiet moment first (common.sh's wait_quiet, QUIET_WAIT default
# 30 s here); "others %" is the share of the machine other processes used during the runs
# (median over all runs of a config).
# MFU per core: MaxText's model FLOPs per step (torch_train_step.py's model_flops_per_step, the
# `Total TFLOPs` precast prints; no recomputation counted, PyTorch's full [T,T] attention counted
# as causal) times steps/s, over the 2 cores, over the single-thread SGEMM ceiling: the best
# bench_gemm row (SGEMM 2048^3) at 1 thread, measured before the first config and after the last
# (the higher of the two). "1.5x DDP needs" is 1.5 times DDP's MFU per core: the share of the
# ceiling Precast's 2-rank step would have to reach for issue 16's target with the same FLOPs.
#
# Usage: benchmarks/train/ddp.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
venv_python=/opt/precast-bench-venv/bin/python
default_python=/usr/bin/python3
[ -x "$venv_python" ] && default_python=$venv_python
python=${PRECAST_PYTHON:-$default_python}
configs=${CONFIGS:-tiny small}
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
  "$build/tools/precast-run/precast-run" "$build/benchmarks/kernels/bench_gemm"
precast="$results/bin/precast"
runner="$results/bin/precast-run"
bench_gemm="$results/bin/bench_gemm"

gemm_ceiling() {  # best SGEMM 2048^3 GFLOP/s of bench_gemm's rows at 1 thread, and which row
  wait_quiet
  measure "$results/gemm_$1.txt" "$bench_gemm" --threads 1 --reps 5
  [ "$MEASURED_RC" -eq 0 ] || { cat "$results/gemm_$1.txt" >&2; exit 1; }
  awk -F'|' '$3 + 0 == 1 && $4 + 0 > best { best = $4 + 0; name = $2; gsub(/^ +| +$/, "", name) }
    END { printf "%.1f %s\n", best, name }' "$results/gemm_$1.txt" | tr ' ' '_' | sed 's/_/ /'
}
read -r gemm_start gemm_start_row < <(gemm_ceiling start)
echo "SGEMM 2048^3 ceiling at 1 thread at start: $gemm_start GFLOP/s (${gemm_start_row//_/ })" >&2

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

torch_version=$("$python" -c 'import torch; print(torch.__version__)')
echo "PyTorch peer: $python (torch $torch_version)" >&2

# rate_of LOG DEVICES: median tokens/s (global) of steps 1.. of a precast run's log
rate_of() {
  sed -n 's/^completed step: \([0-9]*\), .*Tokens\/s\/device: \([0-9.]*\),.*/\1 \2/p' "$1" |
    awk -v n="$2" '$1 >= 1 { print $2 * n }' | median_max | cut -d' ' -f1
}
# collective_seconds LOG STEPS: rank 0's seconds in collectives per step
collective_seconds() {
  awk -v steps="$2" '/^Collectives run by this rank:/ { on = 1 }
    on && $1 == "total" { printf "%.4f\n", $NF / steps; exit }' "$1"
}

figures=() table=()
for name in $configs; do
  read -r emb layers heads kv hd mlp vocab batch seq steps <<<"${dims[$name]}"
  model_keys="base_emb_dim=$emb base_num_decoder_layers=$layers base_num_query_heads=$heads
    base_num_kv_heads=$kv head_dim=$hd base_mlp_dim=$mlp vocab_size=$vocab
    max_target_length=$seq dtype=float32 remat_policy=minimal_with_context ${PRECAST_KEYS:-}"
  for setup in "cpu1 cpu-1 $batch" "data cpu-2 $((batch / 2)) ici_data_parallelism=2" \
    "fsdp cpu-2 $((batch / 2)) ici_fsdp_parallelism=2"; do
    read -r label topology rows mesh_keys <<<"$setup"
    echo "== $name: compiling for $topology $mesh_keys" >&2
    # shellcheck disable=SC2086
    "$precast" compile configs/base.yml $model_keys per_device_batch_size="$rows" \
      compile_topology="$topology" ${mesh_keys:-} compiled_trainstep_file="$results/$name.$label.pcx" \
      >"$results/$name.$label.compile.log" 2>&1 ||
      { cat "$results/$name.$label.compile.log" >&2; exit 1; }
  done
  tokens=$((batch * seq))
  single=() data=() fsdp=() ddp=() data_coll=() fsdp_coll=() vs_ddp=() vs_data=() others=()
  for round in $(seq 1 "$rounds"); do
    case $((round % 4)) in
      1) order="data fsdp ddp 1x2" ;; 2) order="ddp 1x2 data fsdp" ;;
      3) order="fsdp data 1x2 ddp" ;; 0) order="1x2 ddp fsdp data" ;;
    esac
    for cmd in $order; do
      log="$results/$name.$cmd.r$round.log"
      echo "== $name round $round/$rounds: $cmd steps=$steps" >&2
      wait_quiet
      case $cmd in
        1x2)
          measure "$log" "$runner" "$results/$name.cpu1.pcx" steps="$steps" num_threads=2 \
            base_output_directory="$results" run_name="$name.1x2.r$round"
          [ "$MEASURED_RC" -eq 0 ] || { cat "$log" >&2; exit 1; }
          r1=$(rate_of "$log" 1) single+=("$r1")
          p_loss=$(sed -n 's/^completed step: 0, .* loss: \([0-9.]*\),.*/\1/p' "$log") ;;
        data | fsdp)
          measure "$log" mpirun --oversubscribe --mca pml ob1 --mca btl self,vader -np 2 \
            "$runner" "$results/$name.$cmd.pcx" steps="$steps" num_threads=1 \
            base_output_directory="$results" run_name="$name.$cmd.r$round"
          [ "$MEASURED_RC" -eq 0 ] || { cat "$log" >&2; exit 1; }
          if [ "$cmd" = data ]; then
            rd=$(rate_of "$log" 2) data+=("$rd") data_coll+=("$(collective_seconds "$log" "$steps")")
          else
            rf=$(rate_of "$log" 2) fsdp+=("$rf") fsdp_coll+=("$(collective_seconds "$log" "$steps")")
          fi ;;
        ddp)
          measure "$log" "$python" benchmarks/train/torch_ddp_step.py --emb "$emb" \
            --layers "$layers" --heads "$heads" --kv-heads "$kv" --head-dim "$hd" --mlp "$mlp" \
            --vocab "$vocab" --batch "$batch" --seq "$seq" --steps "$steps" --threads 1
          [ "$MEASURED_RC" -eq 0 ] || { cat "$log" >&2; exit 1; }
          rt=$(awk -F', ' -v t="$tokens" '/^ddp step: / { split($1, s, ": "); split($2, u, ": ");
              if (s[2] >= 1) print t / u[2] }' "$log" | median_max | cut -d' ' -f1)
          ddp+=("$rt")
          d_loss=$(sed -n 's/^ddp step: 0, .* loss: \([0-9.]*\)$/\1/p' "$log") ;;
      esac
      others+=("$MEASURED_OTHERS")
    done
    vs_ddp+=("$(awk -v p="$rd" -v d="$rt" 'BEGIN { print p / d }')")
    vs_data+=("$(awk -v f="$rf" -v d="$rd" 'BEGIN { print f / d }')")
  done
  med() { printf '%s\n' "$@" | median_max | cut -d' ' -f1; }
  flops=$(awk -v E="$emb" -v L="$layers" -v H="$heads" -v K="$kv" -v D="$hd" -v M="$mlp" \
    -v V="$vocab" -v B="$batch" -v T="$seq" 'BEGIN { n = B * T
      layer = 2 * n * (E * (H + 2 * K) * D + H * D * E + 3 * E * M) + 4 * B * H * D * T * T / 2
      printf "%.0f\n", 3 * (L * layer + 2 * n * E * V) }')
  figures+=("$name|$(med "${single[@]}")|$(med "${data[@]}")|$(med "${fsdp[@]}")|$(med "${ddp[@]}")|$flops")
  row="| $name | $batch x $seq | $steps ($((steps - 1))) |"
  row+=" $(printf '%s\n' "${single[@]}" | median_range '%.0f') |"
  row+=" $(printf '%s\n' "${data[@]}" | median_range '%.0f') | $(med "${data_coll[@]}") |"
  row+=" $(printf '%s\n' "${fsdp[@]}" | median_range '%.0f') | $(med "${fsdp_coll[@]}") |"
  row+=" $(printf '%s\n' "${ddp[@]}" | median_range '%.0f') |"
  row+=" $(med "${vs_ddp[@]}" | awk '{ printf "%.2fx", $1 }') |"
  row+=" $(med "${vs_data[@]}" | awk '{ printf "%.2fx", $1 }') |"
  row+=" $p_loss / $d_loss | $(med "${others[@]}") |"
  table+=("$row")
done
read -r gemm_end gemm_end_row < <(gemm_ceiling end)
echo "SGEMM 2048^3 ceiling at 1 thread at end: $gemm_end GFLOP/s (${gemm_end_row//_/ })" >&2
ceiling=$(awk -v a="$gemm_start" -v b="$gemm_end" 'BEGIN { print (a > b ? a : b) }')
echo "SGEMM 2048^3 ceiling at 1 thread: $gemm_start GFLOP/s (${gemm_start_row//_/ }) at start, $gemm_end (${gemm_end_row//_/ }) at end"
echo
echo "| config | global batch x seq | steps (timed) | 1 rank x 2 threads tokens/s | 2 ranks data tokens/s | data coll s/step | 2 ranks fsdp tokens/s | fsdp coll s/step | DDP tokens/s | data / DDP | fsdp / data | step-0 loss precast / ddp | others % |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${table[@]}"
echo
echo "| config | model GFLOP/step | GFLOP/s per core 1x2 / data / fsdp / DDP | MFU per core 1x2 / data / fsdp / DDP (ceiling $ceiling) | 1.5x DDP needs |"
echo "|---|---|---|---|---|"
for figure in "${figures[@]}"; do
  IFS="|" read -r name m_1x2 m_data m_fsdp m_ddp flops <<<"$figure"
  awk -v n="$name" -v f="$flops" -v c="$ceiling" -v s="$m_1x2" -v d="$m_data" -v p="$m_fsdp" \
    -v t="$m_ddp" -v tokens="${dims[$name]}" 'BEGIN { split(tokens, k, " "); tok = k[8] * k[9]
    g1 = s * f / tok / 2e9; gd = d * f / tok / 2e9; gf = p * f / tok / 2e9; gt = t * f / tok / 2e9
    printf "| %s | %.2f | %.1f / %.1f / %.1f / %.1f | %.1f%% / %.1f%% / %.1f%% / %.1f%% | %.1f%% |\n",
      n, f / 1e9, g1, gd, gf, gt, 100 * g1 / c, 100 * gd / c, 100 * gf / c, 100 * gt / c,
      150 * gt / c }'
done
