#!/usr/bin/env bash
# One reference check: forward_runner lowers the config and runs Precast's forward in the IR
# interpreter, check_forward.py recomputes it in PyTorch and compares logits and losses.
# Usage: run_reference.sh [--expect-mismatch] FORWARD_RUNNER SOURCE_DIR f32|f64 RTOL key=value ...
# --expect-mismatch moves one of Precast's logits by 10 x RTOL x max|logits| and passes only
# when check_forward.py reports the mismatch (the suite's own error path).
# PRECAST_REFERENCE_KEEP=1 keeps the .npy directory and prints its path.
set -euo pipefail
expect_mismatch=0
if [ "${1:-}" = "--expect-mismatch" ]; then
  expect_mismatch=1
  shift
fi
if [ $# -lt 4 ]; then
  echo "usage: run_reference.sh [--expect-mismatch] FORWARD_RUNNER SOURCE_DIR f32|f64 RTOL" \
       "key=value ..." >&2
  exit 2
fi
runner=$1
source_dir=$2
dtype=$3
rtol=$4
shift 4
python=${PRECAST_PYTHON:-/usr/bin/python3}
check="$source_dir/tests/reference/check_forward.py"

out=$(mktemp -d "${TMPDIR:-/tmp}/precast_reference.XXXXXX")
if [ "${PRECAST_REFERENCE_KEEP:-0}" = "1" ]; then
  echo "run_reference.sh: keeping $out"
else
  trap 'rm -rf "$out"' EXIT
fi

"$runner" "$out" --dtype "$dtype" "$source_dir/configs/base.yml" "$@"
if [ "$expect_mismatch" = "0" ]; then
  "$python" "$check" "$out" --rtol "$rtol"
  exit
fi

"$python" - "$out/out.logits.npy" "$rtol" <<'PY'
import sys
import numpy as np
path, rtol = sys.argv[1], float(sys.argv[2])
logits = np.load(path)
logits.flat[7] += 10 * rtol * np.abs(logits).max()
np.save(path, logits)
PY
status=0
"$python" "$check" "$out" --rtol "$rtol" || status=$?
if [ "$status" -ne 1 ]; then
  echo "run_reference.sh: check_forward.py exited $status on corrupted logits; expected 1" >&2
  exit 1
fi
echo "run_reference.sh: the corrupted logits were reported, as expected"
