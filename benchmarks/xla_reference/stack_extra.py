#!/usr/bin/env python3
"""What Precast's temp would be if the extra were K more scan stacks (an evaluation, not the model).

The extra memory_analysis() adds over XLA's dumped arenas is not explained (README.md, "What
memory_analysis() adds to the arenas"); on most rows it is 0.7-2.2 times the scan's stacked
layer inputs [L, B, S, E] in bf16. For each compiled row of reference.csv this prints Precast's
`--xla-arena` plan + its on-chip arenas (xla_on_chip_arenas_bytes) + K times that stack against
XLA's temp and total, and how many rows come within 10% of both. L and E are the model's
base_num_decoder_layers and base_emb_dim (configs/models/<model>.yml, else configs/base.yml), B
the per-device batch, S max_target_length over the context-parallel axis. Standard library only.

Usage: benchmarks/xla_reference/stack_extra.py K [BUILD_DIR]   (default build/release)
"""
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (precast_analysis, ROOT, TOLERANCE)


model_key = compare.model_dimension  # the same lookup compare.py makes


def stack_bytes(row):
    overrides = dict(kv.split("=", 1) for kv in row["overrides"].split())
    model = overrides.get("model_name", "default")
    seq = int(overrides["max_target_length"]) // int(overrides.get("ici_context_parallelism", 1))
    return (model_key(model, "base_num_decoder_layers") * int(overrides["per_device_batch_size"]) *
            seq * model_key(model, "base_emb_dim") * 2)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[-1])
    k = float(sys.argv[1])
    build = sys.argv[2] if len(sys.argv) == 3 else os.path.join(compare.ROOT, "build", "release")
    precast = os.path.join(build, "tools", "precast", "precast")
    with open(os.path.join(compare.ROOT, "benchmarks", "xla_reference", "reference.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    print("| id | stack GiB | temp error | total error |")
    print("|---|---|---|---|")
    inside, below = 0, 0
    for row in rows:
        report, problem = compare.precast_analysis(precast, row, ["--xla-arena"])
        if report is None:
            print("| %s | - | %s | - |" % (row["id"], problem))
            continue
        stack = stack_bytes(row)
        temp = report["temp_bytes"] + report["xla_on_chip_arenas_bytes"] + k * stack
        total = report["argument_bytes"] + report["output_bytes"] - report["alias_bytes"] + temp
        temp_error = compare.signed_error(temp, int(row["temp_bytes"]))
        total_error = compare.signed_error(total, int(row["total_bytes"]))
        inside += max(abs(temp_error), abs(total_error)) <= 100 * compare.TOLERANCE
        below += temp_error < -100 * compare.TOLERANCE
        print("| %s | %.2f | %+.1f%% | %+.1f%% |" % (row["id"], stack / compare.GIB, temp_error,
                                                   total_error))
    print()
    print("K = %g: temp and total within %d%% of XLA's on %d of %d rows; temp more than %d%% "
          "below on %d." % (k, 100 * compare.TOLERANCE, inside, len(rows), 100 * compare.TOLERANCE,
                             below))


if __name__ == "__main__":
    main()
