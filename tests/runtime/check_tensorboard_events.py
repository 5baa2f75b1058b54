#!/usr/bin/python3
"""Reads a TensorBoard event file as an independent reader would and checks it against the run's
JSON-lines metrics file: every record's TFRecord framing (uint64 length, masked CRC-32C of the
length, data, masked CRC-32C of the data; CRC-32C computed here bit by bit), the first Event's
file_version "brain.Event:2", then one Event per step whose scalars are exactly the metrics
file's keys (less step and run_name) with its values rounded to float32.

usage: check_tensorboard_events.py EVENTS_FILE METRICS_JSONL PB2_DIR
Prints "steps agree: N" and exits 0, or names the first disagreement and exits 1.
"""
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        blob = f.read()
    offset = 0
    while offset < len(blob):
        header = blob[offset:offset + 12]
        if len(header) < 12:
            sys.exit(f"{path}: truncated header at offset {offset}")
        (length,) = struct.unpack("<Q", header[:8])
        (length_crc,) = struct.unpack("<I", header[8:12])
        if length_crc != masked(header[:8]):
            sys.exit(f"{path}: length CRC mismatch at offset {offset}")
        data = blob[offset + 12:offset + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[offset + 12 + length:offset + 16 + length])
        if data_crc != masked(data):
            sys.exit(f"{path}: data CRC mismatch at offset {offset}")
        yield data
        offset += 16 + length


def float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    events_path, metrics_path, pb2_dir = sys.argv[1:4]
    sys.path.insert(0, pb2_dir)
    import tensorboard_event_pb2 as pb

    events = []
    for data in records(events_path):
        event = pb.Event()
        event.ParseFromString(data)
        events.append(event)
    if not events or events[0].file_version != "brain.Event:2":
        sys.exit(f"{events_path}: the first record is not file_version brain.Event:2")
    with open(metrics_path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    steps = events[1:]
    if len(steps) != len(lines):
        sys.exit(f"{len(steps)} step events but {len(lines)} metrics lines")
    for event, line in zip(steps, lines):
        if event.step != int(line["step"]):
            sys.exit(f"event step {event.step} against metrics step {line['step']}")
        if event.wall_time <= 1e9:
            sys.exit(f"step {event.step}: wall_time {event.wall_time} is not unix seconds")
        scalars = {v.tag: v.simple_value for v in event.summary.value}
        expected = {k: v for k, v in line.items() if k not in ("step", "run_name")}
        if set(scalars) != set(expected):
            sys.exit(f"step {event.step}: tags {sorted(scalars)} against keys {sorted(expected)}")
        for tag, value in expected.items():
            if scalars[tag] != float32(value):
                sys.exit(f"step {event.step}: {tag} is {scalars[tag]} in TensorBoard, "
                         f"{value} (float32 {float32(value)}) in the metrics file")
    print(f"steps agree: {len(steps)}; scalars per step: {len(lines[0]) - 2}")


if __name__ == "__main__":
    main()
