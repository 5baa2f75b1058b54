#!/usr/bin/env python3
"""The buffer assignment memory_analysis() reads, against the one XLA dumps.

probe.py keeps `memory_analysis().serialized_buffer_assignment_proto` (XLA's BufferAssignmentProto)
as PROBE_DIR/buffer_assignment.pb, with the compile's --xla_dump_to folder in PROBE_DIR/dump. This
decodes the proto with a small protobuf wire-format reader (standard library only; field numbers of
xla/service/hlo.proto: BufferAssignmentProto.logical_buffers 1, buffer_allocations 3;
LogicalBufferProto id 1, size 2, defined_at 3 (instruction_name 2, shape_index 3), color 4;
BufferAllocationProto index 1, size 2, is_thread_local 3, is_entry_computation_parameter 5,
maybe_live_out 7, color 8, assigned 9 (logical_buffer_id 1, offset 2, size 3), is_constant 12)
and prints:
* the proto's allocations summed by (colour, kind), beside stats.json's temp_size_in_bytes;
* the dumped `*after_optimizations-buffer-assignment.txt`'s allocations summed the same way;
* with --values: the values of the proto's largest temp allocation by size, and which of them the
  dumped colour-0 arena does not hold (by instruction name and shape index).

Usage: benchmarks/xla_reference/final_ba.py PROBE_DIR [--values]
"""
import collections
import glob
import json
import os
import re
import sys


def read_varint(data, pos):
    result, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(data):
    """Yields (field number, wire type, value) of one message; value is int or bytes."""
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(data, pos)
        elif wire == 1:
            value, pos = int.from_bytes(data[pos:pos + 8], "little"), pos + 8
        elif wire == 2:
            length, pos = read_varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = int.from_bytes(data[pos:pos + 4], "little"), pos + 4
        else:
            raise ValueError("final_ba.py: wire type %d at byte %d is not supported" % (wire, pos))
        yield number, wire, value


def signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def packed_or_single(wire, value):
    if wire == 2:
        out, pos = [], 0
        while pos < len(value):
            v, pos = read_varint(value, pos)
            out.append(signed(v))
        return out
    return [signed(value)]


def decode(data):
    """(logical buffers by id, allocations) of a BufferAssignmentProto."""
    buffers, allocations = {}, []
    for number, wire, value in fields(data):
        if number == 1 and wire == 2:
            b = {"id": 0, "size": 0, "color": 0, "name": "", "index": []}
            for n, w, v in fields(value):
                if n == 1:
                    b["id"] = v
                elif n == 2:
                    b["size"] = v
                elif n == 4:
                    b["color"] = v
                elif n == 3 and w == 2:
                    for n2, w2, v2 in fields(v):
                        if n2 == 2 and w2 == 2:
                            b["name"] = v2.decode(errors="replace")
                        elif n2 == 3:
                            b["index"] += packed_or_single(w2, v2)
            buffers[b["id"]] = b
        elif number == 3 and wire == 2:
            a = {"index": 0, "size": 0, "color": 0, "thread_local": 0, "parameter": 0,
                 "live_out": 0, "constant": 0, "assigned": []}
            for n, w, v in fields(value):
                if n == 1:
                    a["index"] = v
                elif n == 2:
                    a["size"] = v
                elif n == 3:
                    a["thread_local"] = v
                elif n == 5:
                    a["parameter"] = v
                elif n == 7:
                    a["live_out"] = v
                elif n == 8:
                    a["color"] = v
                elif n == 12:
                    a["constant"] = v
                elif n == 9 and w == 2:
                    x = {1: 0, 2: 0, 3: 0}
                    for n2, _, v2 in fields(v):
                        x[n2] = v2
                    a["assigned"].append((x[1], x[2], x[3]))
            allocations.append(a)
    return buffers, allocations


def kind(a):
    if a["parameter"]:
        return "parameter"
    if a["constant"]:
        return "constant"
    if a["thread_local"]:
        return "thread-local"
    if a["live_out"]:
        return "maybe-live-out"
    return "temp"


def summary(rows):
    """rows: (colour, kind, size) -> printed lines, largest first."""
    sums = collections.defaultdict(lambda: [0, 0])
    for colour, k, size in rows:
        sums[(colour, k)][0] += 1
        sums[(colour, k)][1] += size
    return ["  colour %-2d %-16s %5d allocations %14d B" % (c, k, n, s)
            for (c, k), (n, s) in sorted(sums.items(), key=lambda kv: -kv[1][1])]


def dumped_rows(path):
    rows, values, inside = [], set(), False
    for line in open(path, errors="replace"):
        m = re.match(r"allocation \d+: size (\d+), (?:color (\d+), )?(.*)", line)
        if m:
            rest = m.group(3)
            k = ("parameter" if "parameter" in rest else "constant" if "constant" in rest else
                 "thread-local" if "thread-local" in rest else
                 "maybe-live-out" if "preallocated-temp" not in rest and "maybe-live-out" in rest
                 else "temp")
            rows.append((int(m.group(2) or 0), k, int(m.group(1))))
            inside = k == "temp" and not m.group(2)
            continue
        v = re.match(r" value: <\d+ (\S+?)(\{[^}]*\})?(?: \(phi\))? @\d+>", line)
        if v and inside:
            values.add(v.group(1) + (v.group(2) or "{}"))
    return rows, values


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--values"):
        sys.exit(__doc__.strip().splitlines()[-1])
    probe = sys.argv[1]
    with open(os.path.join(probe, "buffer_assignment.pb"), "rb") as f:
        data = f.read()
    if not data:
        sys.exit("final_ba.py: %s/buffer_assignment.pb is empty (the compile gave no proto)" % probe)
    stats = json.load(open(os.path.join(probe, "stats.json")))["stats"]
    buffers, allocations = decode(data)
    print("memory_analysis(): temp %d, argument %d, output %d, alias %d, peak_memory %s, "
          "total_allocation %s, peak_unpadded_heap %s" % (
              stats["temp_size_in_bytes"], stats["argument_size_in_bytes"],
              stats["output_size_in_bytes"], stats["alias_size_in_bytes"],
              stats.get("peak_memory_in_bytes"), stats.get("total_allocation_bytes"),
              stats.get("peak_unpadded_heap_bytes")))
    print("buffer assignment of memory_analysis() (%d logical buffers, %d allocations):" % (
        len(buffers), len(allocations)))
    for line in summary([(a["color"], kind(a), a["size"]) for a in allocations]):
        print(line)
    dumped = glob.glob(os.path.join(probe, "dump", "*after_optimizations-buffer-assignment.txt"))
    dumped_values = set()
    if len(dumped) == 1:
        rows, dumped_values = dumped_rows(dumped[0])
        print("dumped buffer assignment (%s):" % os.path.basename(dumped[0]))
        for line in summary(rows):
            print(line)
    if len(sys.argv) == 3:
        temps = [a for a in allocations if kind(a) == "temp"]
        largest = max(temps, key=lambda a: a["size"])
        print("values of the largest temp allocation (index %d, colour %d, %d B), largest first;"
              " '*' = not in the dumped colour-0 arena:" % (
                  largest["index"], largest["color"], largest["size"]))
        for buffer_id, offset, size in sorted(largest["assigned"], key=lambda x: -x[2])[:60]:
            b = buffers.get(buffer_id, {"name": "?", "index": []})
            name = "%s{%s}" % (b["name"], ",".join(str(i) for i in b["index"]))
            print("  %12d B at %12d  %s %s" % (size, offset, name,
                                               "" if name in dumped_values else "*"))


if __name__ == "__main__":
    main()
