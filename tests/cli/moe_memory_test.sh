#!/usr/bin/env bash
# The MoE memory plan against MaxText's published figures for deepseek2-16b
# (per_device_batch_size=24, max_target_length=2048, v5p-8, fsdp 4, remat full, bf16
# activations, f32 weights and optimizer state): argument 44.5 GB, output 44.5 GB, temp 55.9 GB,
# total 100.4 GB (MaxText's "GB" = 2^30 bytes). And the shapes of the expert computation in the
# per-device program, counted by hand.
# Usage: moe_memory_test.sh PRECAST_BINARY SOURCE_DIR
set -u
precast=$1
src=$2
cd "$src"
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run=(configs/base.yml model_name=deepseek2-16b per_device_batch_size=24 max_target_length=2048
     compile_topology=v5p-8 ici_fsdp_parallelism=4)

# within KEY WANT_GB: the JSON figure KEY within 15% of WANT_GB.
within() {
  local key=$1 want=$2 bytes
  bytes=$(grep -oE "\"$key\": [0-9]+" <<<"$line" | grep -oE '[0-9]+$')
  if [ -z "$bytes" ] || ! awk -v b="$bytes" -v w="$want" \
      'BEGIN { g = b / 1073741824; exit (g >= w * 0.85 && g <= w * 1.15) ? 0 : 1 }'; then
    failed=$((failed + 1))
    echo "FAIL: $key ${bytes:-missing} bytes is not within 15% of MaxText's $want GB"
  fi
}

line=$("$precast" analyze "${run[@]}" --format=json)
# Arguments: 15.706 B parameters in f32 / 4 devices = 14.63 GiB, twice that for Adam's moments.
within argument_bytes 44.5
within output_bytes 44.5
# Temp and total: the TPU plan of XLA's arena (the loss head's f32 chain recomputed in the backward
# fusions, only the bf16 logits kept) + the on-chip arenas + the estimated extra (1.5 bf16 scan
# stacks [27, 24 x 2048, 2048]): 53.33 and 97.21 GiB (-4.6%, -3.2%; the plan without XLA's fusion
# said 91.02 and 134.91).
within temp_bytes 55.9
within total_bytes 100.4

# sparse_matmul=true: every grouped matmul of the per-device step works on 24 rows of
# 2048 x 6 = 12288 (token, chosen expert) pairs: [24, 12288, 1408] hidden and [24, 12288, 2048]
# outputs, never the dense [24, 2048, 64, 1408]. Per MoE layer (26 of 27): forward wi_0, wi_1
# (1408) and wo (2048); recomputed wi_0, wi_1 (wo's output is not needed by the backward);
# backward wo's input gradient (1408), wi_0's and wi_1's (2048): 5 x 26 = 130 of [24, 12288, 1408]
# and 3 x 26 = 78 of [24, 12288, 2048]; 3 x 26 = 78 weight gradients of the expert stacks.
"$precast" dump "${run[@]}" --dump-ir "$tmp/ir" --stop-after=spmd-partition >/dev/null 2>&1
device=$(awk '/^func / {on = /^func @train_step\(/} on' "$tmp"/ir/*spmd-partition.ir)
count() { grep -cE "$1" <<<"$device"; }
check() {
  local name=$1 want=$2 got=$3
  if [ "$got" -ne "$want" ]; then failed=$((failed + 1)); echo "FAIL: $name: $got, wanted $want"; fi
}
check "grouped_dot [24,12288,1408]" 130 "$(count '= grouped_dot .*: bf16\[24,12288,1408\]')"
check "grouped_dot [24,12288,2048]" 78 "$(count '= grouped_dot .*: bf16\[24,12288,2048\]')"
check "weight gradients" 78 "$(count '= grouped_dot_weight_grad ')"
check "dense expert activations" 0 "$(count 'bf16\[24,2048,64,1408\]')"
check "per-device function found" 1 "$(count '^func @train_step\(')"

# sparse_matmul=false (issue 20): MaxText's moe_dense_bf16 (mixtral-8x7b on v5p-64: fsdp 32,
# per_device_batch_size=4, 1024 tokens, dropless) and custom_32x8_mesh (v6e-256 as expert 8 x
# fsdp 32, capacity_factor=1). MaxText's dense dispatch keeps the expert activations split over
# the batch (activation_batch_moe, `expert` included, ahead of activation_exp): 128 (1024) rows
# over 32 (256) devices leave 4 rows per device. Dropless, [B, S, X, Mm] = [4, 1024, 8, 14336]
# per device, never the whole [128, 1024, 8, 14336] (28 GiB); with capacity_factor=1 the
# experts' slots [X, B, C, Mm] with C = ceil(1024 x 2 / 8) = 256: [8, 4, 256, 14336]. Two layers
# here; per layer 5 such dots: forward wi_0 and wi_1, their recomputation (remat full) and wo's
# input gradient.
dense=(configs/base.yml model_name=mixtral-8x7b sparse_matmul=false per_device_batch_size=4
       max_target_length=1024 attention=flash dtype=bfloat16 use_iota_embed=true)
two_layers=(base_num_decoder_layers=2 override_model_config=true)
dense_cases=("compile_topology=v5p-64 capacity_factor=-1"
             "compile_topology=v6e-256 ici_expert_parallelism=8 capacity_factor=1 megablox=false allow_split_physical_axes=true custom_mesh=hybrid_ring_32x8")
dense_shapes=('4,1024,8,14336' '8,4,256,14336')
for i in 0 1; do
  extra=${dense_cases[$i]}
  shape=${dense_shapes[$i]}
  rm -rf "$tmp/dense"
  # shellcheck disable=SC2086  # extra holds whitespace-separated key=value words
  "$precast" dump "${dense[@]}" $extra "${two_layers[@]}" --dump-ir "$tmp/dense" \
    --stop-after=spmd-partition >/dev/null 2>&1
  device=$(awk '/^func / {on = /^func @train_step\(/} on' "$tmp"/dense/*spmd-partition.ir)
  check "$extra: expert dots [$shape]" 10 "$(count "= dot_general .*: bf16\\[$shape\\]")"
  check "$extra: whole [128 or 1024, 1024, 8, 14336] or [8, 128 or 1024, 256, 14336]" 0 \
    "$(count 'bf16\[((128|1024),1024,8|8,(128|1024),256),14336\]')"
  # MaxText compiles the 32-layer step: it fits (exit 0).
  # shellcheck disable=SC2086
  "$precast" analyze "${dense[@]}" $extra >"$tmp/analyze.txt" 2>&1
  check "$extra: analyze exit code (0: fits)" 0 "$?"
done

if [ "$failed" -ne 0 ]; then exit 1; fi
echo "moe memory: all checks passed"
