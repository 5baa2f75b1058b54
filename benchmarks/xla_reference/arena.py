#!/usr/bin/env python3
"""What fills XLA's preallocated-temp arena, from one compile's dump (run.py --keep-dumps).

Reads the `*after_optimizations-buffer-assignment.txt` (every value of the colour-0
preallocated-temp allocation with its offset and size) and `*after_optimizations-live-range.txt`
(each value's live range over the flattened schedule) of DUMP_DIR and prints:
* the schedule position where the most arena bytes are live (distinct offset ranges, so the values
  of a while loop's carry that share one buffer count once), and how much of the arena that is;
* every buffer live there, largest first (size, offset, one value's name and shape, how many
  values share it), or at POSITION when one is given.

Unlike the live-range dump's own "Live ranges at N (peak)" list, which leaves out the loop carries'
phi values (so the stacked residuals and gradient carries of the scan go missing), this counts
every value of the allocation. Standard library only.

Usage: benchmarks/xla_reference/arena.py DUMP_DIR [POSITION]
"""
import collections
import glob
import os
import re
import sys

VALUE = re.compile(r" value: <\d+ (\S+)(?: \(phi\))? @\d+> \(size=(\d+),offset=(\d+)\): (.*)")
ALLOCATION = re.compile(r"allocation \d+: size (\d+), (.*)")
RANGE = re.compile(r"\s+(\S+):(\d+)-(\d+)$")


def one(pattern):
    found = glob.glob(pattern)
    if len(found) != 1:
        sys.exit("arena.py: expected one file matching %s, found %d" % (pattern, len(found)))
    return found[0]


def arena_values(path):
    """(arena size, [(name, size, offset, shape)]) of the colour-0 preallocated-temp allocation."""
    values, inside, size = [], False, 0
    with open(path) as f:
        for line in f:
            m = ALLOCATION.match(line)
            if m:
                inside = "preallocated-temp" in m.group(2) and "color" not in m.group(2)
                if inside:
                    size = int(m.group(1))
                continue
            if inside:
                v = VALUE.match(line)
                if v:
                    values.append((v.group(1), int(v.group(2)), int(v.group(3)), v.group(4)))
    return size, values


def live_ranges(path):
    ranges, inside = {}, False
    with open(path) as f:
        for line in f:
            if "BufferLiveRange" in line:
                inside = True
                continue
            if "Live ranges at" in line:
                break
            m = RANGE.match(line) if inside else None
            if m:
                ranges[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return ranges


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[-1])
    dump = sys.argv[1]
    size, values = arena_values(one(os.path.join(dump, "*after_optimizations-buffer-assignment.txt")))
    ranges = live_ranges(one(os.path.join(dump, "*after_optimizations-live-range.txt")))
    live = collections.defaultdict(list)
    for name, bytes_, offset, shape in values:
        span = ranges.get(name) or ranges.get(name + "{}")
        if span is None:
            continue
        for t in range(span[0], span[1] + 1):
            live[t].append((name, bytes_, offset, shape))

    def distinct(t):
        return sum(s for (o, s) in {(o, s) for _, s, o, _ in live[t]})

    peak = max(live, key=lambda t: (distinct(t), -t))
    at = int(sys.argv[2]) if len(sys.argv) == 3 else peak
    print("arena %d B; most live at position %d: %d B (%.1f%% of the arena)" % (
        size, peak, distinct(peak), 100.0 * distinct(peak) / size))
    buffers = collections.OrderedDict()
    for name, bytes_, offset, shape in live[at]:
        buffers.setdefault((offset, bytes_), []).append((name, shape))
    print("buffers live at position %d: %d, %d B" % (at, len(buffers), distinct(at)))
    for (offset, bytes_), names in sorted(buffers.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
        print("%12d B at %12d  %s  %s  (%d value%s)" % (
            bytes_, offset, names[0][0], names[0][1][:70], len(names), "" if len(names) == 1 else "s"))


if __name__ == "__main__":
    main()
