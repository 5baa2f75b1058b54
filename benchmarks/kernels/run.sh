#!/usr/bin/env bash
# SGEMM 2048^3 through precast_gemm_f32 (openblas, eigen) against plain cblas_sgemm, 1 and 2
# threads: runs bench_gemm RUNS times (each the median of 5 products) and prints the median of
# the runs' GFLOP/s per row, with the ratio to cblas_sgemm at the same thread count.
# Usage: benchmarks/kernels/run.sh [BUILD_DIR] [RUNS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/release}
runs=${2:-3}
bench="$build/benchmarks/kernels/bench_gemm"

outputs=$(for _ in $(seq "$runs"); do "$bench"; done)
rows=$(grep '^| [a-z]' <<<"$outputs" | grep -v '^| impl')
head -n 1 <<<"$outputs"
printf '| impl | threads | median GFLOP/s of %s runs | ratio vs cblas |\n|---|---|---|---|\n' "$runs"
awk -F'|' '
  { key = $2 "|" $3; gsub(/^ +| +$/, "", $4); values[key] = values[key] " " $4
    if (!(key in seen)) { seen[key] = 1; order[++count] = key } }
  function median(list,   n, v, i, j, t) {
    n = split(list, v, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  END {
    for (i = 1; i <= count; i++) {
      split(order[i], parts, "|"); threads = parts[2]; gsub(/ /, "", threads)
      m = median(values[order[i]])
      if (parts[1] ~ /cblas/) reference[threads] = m
      printf "|%s| %s | %.1f | %.2f |\n", parts[1], threads, m, m / reference[threads]
    }
  }' <<<"$rows"
