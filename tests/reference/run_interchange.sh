#!/usr/bin/env bash
# Safetensors interchange between Precast and PyTorch (tests/reference/interchange.py):
#   1. precast-run trains a tiny model 2 steps with a checkpoint after step 0; PyTorch reads that
#      checkpoint's parameters and must reproduce the loss Precast reported at step 1 (the step
#      that used them) on the same synthetic batch, to 1e-5;
#   2. PyTorch moves every parameter and writes a safetensors file (F32 and BF16 tensors);
#      precast-run loads it with load_parameters_path and must report PyTorch's loss at step 0;
#   3. the same with the checkpoint saved as shards (the layout of a state of 256 MiB or more).
# forward_runner supplies the model description (config.txt) torch_reference.py reads.
# Usage: run_interchange.sh PRECAST PRECAST_RUN FORWARD_RUNNER SOURCE_DIR key=value ...
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: run_interchange.sh PRECAST PRECAST_RUN FORWARD_RUNNER SOURCE_DIR key=value ..." >&2
  exit 2
fi
precast=$1 precast_run=$2 forward_runner=$3 source_dir=$4
shift 4
python=${PRECAST_PYTHON:-/usr/bin/python3}
check="$source_dir/tests/reference/interchange.py"
out=$(mktemp -d "${TMPDIR:-/tmp}/precast_interchange.XXXXXX")
trap 'rm -rf "$out"' EXIT

"$forward_runner" "$out/model" --dtype f64 "$source_dir/configs/base.yml" "$@" >/dev/null
"$precast" compile "$source_dir/configs/base.yml" "$@" weight_dtype=float32 \
  compile_topology=cpu-1 compiled_trainstep_file="$out/step.pcx" >/dev/null
"$precast_run" "$out/step.pcx" steps=2 enable_checkpointing=true checkpoint_period=1 \
  base_output_directory="$out/runs" run_name=a metrics_file="$out/a.jsonl" >/dev/null
loss1=$("$python" -c 'import json,sys; print(repr([json.loads(l) for l in open(sys.argv[1])][1]["learning/loss"]))' "$out/a.jsonl")
"$python" "$check" check "$out/model/config.txt" "$out/runs/a/checkpoints/0/state.safetensors" \
  --seed 0 --loss "$loss1" --rtol 1e-5

torch_loss=$("$python" "$check" write "$out/model/config.txt" \
  "$out/runs/a/checkpoints/0/state.safetensors" --seed 0 --out "$out/torch.safetensors")
"$precast_run" "$out/step.pcx" steps=1 base_output_directory="$out/runs" run_name=b \
  load_parameters_path="$out/torch.safetensors" metrics_file="$out/b.jsonl" | grep '^load_parameters_path'
"$python" "$check" compare "$out/b.jsonl" --step 0 --loss "$torch_loss" --rtol 1e-5

# 3. The sharded layout (a large state's, forced here with PRECAST_CHECKPOINT_SHARD_BYTES=1): the
#    same run saves shards and no state.safetensors; PyTorch reads the step directory's shards and
#    reproduces the step-1 loss; load_parameters_path on that directory gives it at step 0.
PRECAST_CHECKPOINT_SHARD_BYTES=1 "$precast_run" "$out/step.pcx" steps=2 enable_checkpointing=true \
  checkpoint_period=1 base_output_directory="$out/runs" run_name=c metrics_file="$out/c.jsonl" >/dev/null
shards=$(ls "$out/runs/c/checkpoints/0" | grep -c '^state-000[0-9][0-9]-of-000[0-9][0-9]\.safetensors$' || true)
if [ "$shards" -lt 2 ] || [ -e "$out/runs/c/checkpoints/0/state.safetensors" ]; then
  echo "expected shards in $out/runs/c/checkpoints/0, found: $(ls "$out/runs/c/checkpoints/0")" >&2
  exit 1
fi
"$python" "$check" check "$out/model/config.txt" "$out/runs/c/checkpoints/0" \
  --seed 0 --loss "$loss1" --rtol 1e-5
"$precast_run" "$out/step.pcx" steps=1 base_output_directory="$out/runs" run_name=d \
  load_parameters_path="$out/runs/c/checkpoints/0" metrics_file="$out/d.jsonl" | grep '^load_parameters_path'
"$python" "$check" compare "$out/d.jsonl" --step 0 --loss "$loss1" --rtol 1e-5
