#!/usr/bin/env python3
"""Candidates for what memory_analysis() adds to XLA's arenas, from one compile's dump.

memory_analysis()'s temp is larger than every preallocated-temp allocation of the dumped buffer
assignment (README.md, "What memory_analysis() adds to the arenas"). This reads one run.py
--keep-dumps folder (DUMP_DIR: the `dump/` of /tmp/xlaref-<ID>-*, with result.json beside it) and
prints:
* the extra itself: result.json's temp_bytes less the preallocated-temp allocations of every
  memory colour but host memory (5) of `*after_optimizations-buffer-assignment.txt`;
* the HBM scratch the TPU backend asks for in `*after_codegen.txt` (backend_config
  `scoped_memory_configs` in memory space 0) and the largest VMEM scratch of one instruction;
* per fusion of `*after_optimizations.txt`: its output bytes, its operands' bytes, the bytes of all
  its internal values and its largest internal value (TPU tiled sizes, VMEM-resident (S(1)) arrays
  left out), the largest of each over the program;
* per while-loop body: the sum of its fusions' outputs and of all its instructions' outputs.
Standard library only.

Usage: benchmarks/xla_reference/fusions.py DUMP_DIR
"""
import collections
import glob
import json
import os
import re
import sys

BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2, "s32": 4, "u32": 4,
         "f32": 4, "s64": 8, "u64": 8, "f64": 8}
SHAPE = re.compile(r"\b(pred|s8|u8|s16|u16|bf16|f16|s32|u32|f32|s64|u64|f64)"
                   r"\[([0-9,]*)\](\{[^}]*\})?")
INSTRUCTION = re.compile(r"(?:ROOT )?%?(\S+) = (.*?) ([a-z\-]+)\((.*)")
NOT_STORAGE = {"parameter", "get-tuple-element", "bitcast", "tuple", "constant"}


def one(pattern):
    found = glob.glob(pattern)
    if len(found) != 1:
        sys.exit("fusions.py: expected one file matching %s, found %d" % (pattern, len(found)))
    return found[0]


def array_bytes(match):
    """Bytes of one array in its TPU tiled layout: the first tile pads the most-minor dimensions."""
    dtype, dims_text, layout = match.groups()
    dims = [int(d) for d in dims_text.split(",")] if dims_text else []
    if layout and ":" in layout and dims:
        minor_to_major = [int(d) for d in layout[1:].split(":")[0].split(",") if d]
        tile = re.search(r"T\(([0-9,]+)\)", layout)
        if tile and minor_to_major:
            for i, extent in enumerate(reversed([int(t) for t in tile.group(1).split(",")])):
                if i < len(minor_to_major):
                    dim = minor_to_major[i]
                    dims[dim] = -(-dims[dim] // extent) * extent
    count = 1
    for d in dims:
        count *= d
    return count * BYTES[dtype]


def hbm_bytes(type_text):
    """Bytes of the arrays of a (tuple) type that live in HBM (not S(1), VMEM)."""
    return sum(array_bytes(m) for m in SHAPE.finditer(type_text)
               if not (m.group(3) and "S(1)" in m.group(3)))


def computations(path):
    """name -> instruction lines of every computation of an HLO module's text."""
    result, current = {}, None
    with open(path) as f:
        for line in f:
            if line.startswith("%") or line.startswith("ENTRY"):
                name = line.split()[1] if line.startswith("ENTRY") else line.split()[0]
                current = result.setdefault(name.lstrip("%"), [])
            elif line.startswith("  ") and current is not None and " = " in line:
                current.append(line.strip())
    return result


def extra_bytes(dump):
    with open(os.path.join(os.path.dirname(os.path.abspath(dump)), "result.json")) as f:
        temp = json.load(f)["memory"]["temp_bytes"]
    arenas = 0
    with open(one(os.path.join(dump, "*after_optimizations-buffer-assignment.txt"))) as f:
        for line in f:
            # colour 0 (HBM) prints no colour
            m = re.match(r"allocation \d+: size (\d+), (?:color (\d+), )?.*preallocated-temp", line)
            if m and m.group(2) != "5":
                arenas += int(m.group(1))
    return temp, arenas


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    dump = sys.argv[1]
    temp, arenas = extra_bytes(dump)
    print("temp_bytes %d, preallocated-temp arenas %d, extra %d" % (temp, arenas, temp - arenas))

    with open(one(os.path.join(dump, "*after_codegen.txt"))) as f:
        codegen = f.read()
    hbm_scoped = re.findall(r'%(\S+) = .*"scoped_memory_configs":\[\{"memory_space":"0",'
                            r'"offset":"\d+","size":"(\d+)"', codegen)
    print("HBM scoped scratch (memory space 0): %d instructions, largest %d B (%s)" % (
        len(hbm_scoped), max((int(s) for _, s in hbm_scoped), default=0),
        ", ".join(n for n, _ in hbm_scoped)))
    vmem = [int(s) for s in re.findall(r'"used_scoped_memory_configs":\[\{"memory_space":"1",'
                                       r'"offset":"\d+","size":"(\d+)"', codegen)]
    print("VMEM scoped scratch: largest of one instruction %d B" % max(vmem, default=0))

    comps = computations(one(os.path.join(dump, "*after_optimizations.txt")))
    fusions = []  # (name, computation, output, operands, internal, largest internal)
    bodies = set()
    for name, lines in comps.items():
        for line in lines:
            m = INSTRUCTION.match(line)
            if not m:
                continue
            body = re.search(r"body=%?([\w.\-]+)", line)
            if m.group(3) == "while" and body:
                bodies.add(body.group(1))
            if m.group(3) != "fusion":
                continue
            called = re.search(r"calls=%?([\w.\-]+)", line)
            operands, internal, largest = 0, 0, 0
            for inner in comps.get(called.group(1), []) if called else []:
                im = INSTRUCTION.match(inner)
                if not im:
                    continue
                size = hbm_bytes(im.group(2))
                if im.group(3) == "parameter":
                    operands += size
                else:
                    internal += size
                    largest = max(largest, size)
            fusions.append((m.group(1), name, hbm_bytes(m.group(2)), operands, internal, largest))
    for index, what in ((2, "output"), (3, "operands"), (4, "internal values"),
                        (5, "largest internal value")):
        top = max(fusions, key=lambda f: f[index])
        print("largest fusion %-22s %14d B  %s in %s" % (what, top[index], top[0], top[1]))
    for body in sorted(bodies):
        by_op = collections.Counter()
        for line in comps.get(body, []):
            m = INSTRUCTION.match(line)
            if m and m.group(3) not in NOT_STORAGE:
                by_op[m.group(3)] += hbm_bytes(m.group(2))
        if by_op["fusion"] or sum(by_op.values()) > (1 << 20):
            print("loop body %s: fusion outputs %d B, every output %d B" % (
                body, by_op["fusion"], sum(by_op.values())))


if __name__ == "__main__":
    main()
