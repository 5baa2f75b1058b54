#!/usr/bin/env bash
# One train-step reference check: train_runner runs Precast's train_step for 5 steps in the IR
# interpreter, torch_train_reference.py repeats them in PyTorch and compares the metrics of every
# step and the final weights and optimizer moments.
# Usage: run_train_reference.sh [--expect-mismatch] TRAIN_RUNNER SOURCE_DIR f32|f64 key=value ...
# Tolerances by dtype: metrics per step rtol 1e-5 (f32) / 1e-9 (f64); final tensors
# max|diff| / max|ref| 1e-4 (f32) / 1e-8 (f64).
# --expect-mismatch moves one element of Precast's final token embedding by 10 x the state
# tolerance x its max |value| and passes only when the check reports it (the error path).
# PRECAST_REFERENCE_KEEP=1 keeps the .npy directory and prints its path.
set -euo pipefail
expect_mismatch=0
if [ "${1:-}" = "--expect-mismatch" ]; then
  expect_mismatch=1
  shift
fi
if [ $# -lt 3 ]; then
  echo "usage: run_train_reference.sh [--expect-mismatch] TRAIN_RUNNER SOURCE_DIR f32|f64" \
       "key=value ..." >&2
  exit 2
fi
runner=$1
source_dir=$2
dtype=$3
shift 3
case "$dtype" in
  f32) metric_rtol=1e-5 state_rtol=1e-4 ;;
  f64) metric_rtol=1e-9 state_rtol=1e-8 ;;
  *) echo "run_train_reference.sh: dtype must be f32 or f64, not '$dtype'" >&2; exit 2 ;;
esac
python=${PRECAST_PYTHON:-/usr/bin/python3}
check="$source_dir/tests/reference/torch_train_reference.py"

out=$(mktemp -d "${TMPDIR:-/tmp}/precast_train_reference.XXXXXX")
if [ "${PRECAST_REFERENCE_KEEP:-0}" = "1" ]; then
  echo "run_train_reference.sh: keeping $out"
else
  trap 'rm -rf "$out"' EXIT
fi

"$runner" "$out" --dtype "$dtype" "$source_dir/configs/base.yml" "$@"
tolerances=(--metric-rtol "$metric_rtol" --state-rtol "$state_rtol")
if [ "$expect_mismatch" = "0" ]; then
  "$python" "$check" "$out" "${tolerances[@]}"
  exit
fi

"$python" - "$out/final.token_embedder.embedding.npy" "$state_rtol" <<'PY'
import sys
import numpy as np
path, rtol = sys.argv[1], float(sys.argv[2])
weights = np.load(path)
weights.flat[5] += 10 * rtol * np.abs(weights).max()
np.save(path, weights)
PY
status=0
"$python" "$check" "$out" "${tolerances[@]}" || status=$?
if [ "$status" -ne 1 ]; then
  echo "run_train_reference.sh: torch_train_reference.py exited $status on a corrupted final" \
       "weight; expected 1" >&2
  exit 1
fi
echo "run_train_reference.sh: the corrupted final weight was reported, as expected"
