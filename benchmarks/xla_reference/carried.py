#!/usr/bin/env python3
"""An evaluation of "temp = 2 x arena - U" from one kept dump (README.md, "What the extra is").

The TPU backend prints, after code generation, its HBM "HLO temp" (the dumped colour-0 arena) with
an "Unpadded" figure U and a "fragmentation" = arena - U; on the 2- and 4-layer default models
memory_analysis()'s temp is arena + that fragmentation. U is not in the dump. This prints one
guess at it, the most bytes of the colour-0 arena live at one schedule position when the buffers
that hold a while loop's carried values (a `(phi)` value or a `while.N` value) are left out, and
2 x arena - that guess against result.json's temp_bytes (beside DUMP_DIR, as run.py --keep-dumps
and probe.py leave it: result.json or stats.json). Standard library only.

Usage: benchmarks/xla_reference/carried.py DUMP_DIR
"""
import collections
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arena  # noqa: E402  (arena_values, live_ranges, one)


def temp_bytes(dump):
    parent = os.path.dirname(os.path.abspath(dump))
    for name, key in (("result.json", "memory"), ("stats.json", "stats")):
        path = os.path.join(parent, name)
        if os.path.exists(path):
            found = json.load(open(path)).get(key, {})
            return found.get("temp_bytes", found.get("temp_size_in_bytes"))
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    dump = sys.argv[1]
    ba = arena.one(os.path.join(dump, "*after_optimizations-buffer-assignment.txt"))
    size, values = arena.arena_values(ba)
    ranges = arena.live_ranges(arena.one(os.path.join(dump, "*after_optimizations-live-range.txt")))
    with open(ba) as f:
        phi = set(re.findall(r" value: <\d+ (\S+) \(phi\)", f.read()))
    names = collections.defaultdict(list)
    for name, bytes_, offset, _ in values:
        names[(offset, bytes_)].append(name)
    carried = {k for k, n in names.items() if any(x in phi or x.startswith("while.") for x in n)}
    live = collections.defaultdict(set)
    for name, bytes_, offset, _ in values:
        span = ranges.get(name) or ranges.get(name + "{}")
        if span:
            for t in range(span[0], span[1] + 1):
                live[t].add((offset, bytes_))

    def total(t, without_carried):
        return sum(b for (o, b) in live[t] if not (without_carried and (o, b) in carried))

    peak = max(live, key=lambda t: (total(t, False), -t))
    guess_at = max(live, key=lambda t: (total(t, True), -t))
    guess = total(guess_at, True)
    print("arena %d B; most live %d B at %d; carried buffers %d B; most live without them %d B "
          "at %d" % (size, total(peak, False), peak, sum(b for _, b in carried), guess, guess_at))
    temp = temp_bytes(dump)
    model = 2 * size - guess
    if temp:
        print("2 x arena - that = %d B against temp %d B (%+.1f%%)" % (
            model, temp, 100.0 * (model - temp) / temp))
    else:
        print("2 x arena - that = %d B (no result.json / stats.json beside the dump)" % model)


if __name__ == "__main__":
    main()
