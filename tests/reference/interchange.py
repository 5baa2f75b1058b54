#!/usr/bin/python3
"""Parameters cross between Precast and PyTorch through safetensors, read and written here with
plain Python (an 8-byte little-endian header length, a JSON header, raw little-endian data) and
no safetensors package.

check:  reads a Precast checkpoint's state.safetensors, runs torch_reference.py's decoder (f64) on
        MaxText's synthetic batch as precast-run draws it (ir/Random.h: MurmurHash3's finaliser
        over (seed, stream 0xda7a, row * (T + 1) + position), token = bits % vocab) and compares
        its loss with the loss Precast reported for the step that used those parameters.
write:  moves every parameter of that checkpoint by a deterministic pattern in PyTorch, writes
        them as a new safetensors file (floating tensors alternately F32 and BF16, so the loader's
        conversion is exercised too) and prints the PyTorch loss of exactly the written values;
        precast-run must report it at step 0 with load_parameters_path=that file.
compare: the loss of step 0 in a metrics file against a number.

Exit status 0 on agreement, 1 on a mismatch, 2 on bad usage.

Usage: interchange.py check CONFIG_TXT STATE --seed N --loss L --rtol R
       interchange.py write CONFIG_TXT STATE --seed N --out FILE.safetensors
STATE: a safetensors file or a checkpoint step directory (its state file or shards).
       interchange.py compare METRICS.jsonl --step S --loss L --rtol R
"""

import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference  # noqa: E402

MASK64 = (1 << 64) - 1
NUMPY_OF = {"F64": np.float64, "F32": np.float32, "I32": np.int32, "U32": np.uint32}


def mix64(z):
    z ^= z >> 33
    z = (z * 0xff51afd7ed558ccd) & MASK64
    z ^= z >> 33
    z = (z * 0xc4ceb9fe1a85ec53) & MASK64
    z ^= z >> 33
    return z


def random_bits(seed, stream, index):
    key = mix64(((seed << 32) | stream) & MASK64)
    return mix64((key + index * 0x9e3779b97f4a7c15) & MASK64) >> 32


def synthetic_batch(rows, length, vocab, seed):
    def token(r, t):
        return random_bits(seed, 0xda7a, r * (length + 1) + t) % vocab
    batch = {
        "inputs": [[token(r, t) for t in range(length)] for r in range(rows)],
        "inputs_position": [list(range(length)) for _ in range(rows)],
        "inputs_segmentation": [[1] * length for _ in range(rows)],
        "targets": [[token(r, t + 1) for t in range(length)] for r in range(rows)],
        "targets_position": [list(range(1, length + 1)) for _ in range(rows)],
        "targets_segmentation": [[1] * length for _ in range(rows)],
    }
    return {name: torch.tensor(value, dtype=torch.int64) for name, value in batch.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_length])
    body = data[8 + header_length:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = body[begin:end]
        if entry["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        else:
            array = np.frombuffer(raw, dtype=np.dtype(NUMPY_OF[entry["dtype"]]).newbyteorder("<"))
        tensors[name] = array.reshape(entry["shape"]).copy()
    return tensors


def read_state(path):
    """A safetensors file, or a checkpoint step directory: every state file metadata.json lists
    (state.safetensors, or a large state's shards state-00001-of-000NN.safetensors ...) merged."""
    if not os.path.isdir(path):
        return read_safetensors(path)
    with open(os.path.join(path, "metadata.json")) as f:
        metadata = json.load(f)
    tensors = {}
    for name in sorted(metadata["files"]):
        tensors.update(read_safetensors(os.path.join(path, name)))
    return tensors


def write_safetensors(path, tensors):
    """tensors: name -> (dtype name, little-endian bytes, shape)."""
    header, offset, pieces = {}, 0, []
    for name, (dtype, raw, shape) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        pieces.append(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(pieces))
    os.replace(path + ".tmp", path)


def parameters_only(state, cfg):
    """A checkpoint holds parameters, mu.*, nu.* and the count: the model reads the first."""
    return {name: array for name, array in state.items()
            if not name.startswith(("mu.", "nu.")) and name != "count"}


def torch_loss(cfg, arrays, seed):
    cfg.values["dtype"] = "f64"
    weights = torch_reference.Weights(arrays, torch.float64)
    batch = synthetic_batch(cfg.int("rows"), cfg.int("length"), cfg.int("vocab_size"), seed)
    with torch.no_grad():
        results = torch_reference.Decoder(cfg, weights, torch.float64).forward(batch)
    unused = weights.unused()
    if unused:
        raise SystemExit(f"interchange.py: the model never read {sorted(unused)}")
    return float(results[1])


def relative(got, want):
    return abs(got - want) / abs(want)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["check", "write", "compare"])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loss", type=float)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--step", type=int, default=0)
    parser.add_argument("--out")
    args = parser.parse_args()

    if args.mode == "compare":
        with open(args.paths[0]) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        got = next(r["learning/loss"] for r in rows if int(r["step"]) == args.step)
        error = relative(got, args.loss)
        print(f"step {args.step}: Precast's loss {got:.9g}, PyTorch's {args.loss:.9g}, "
              f"relative difference {error:.3g} (tolerance {args.rtol:g})")
        return 0 if error <= args.rtol else 1

    cfg = torch_reference.ModelConfig(args.paths[0])
    params = parameters_only(read_state(args.paths[1]), cfg)
    if args.mode == "check":
        want = torch_loss(cfg, {k: v.astype(np.float64) for k, v in params.items()}, args.seed)
        error = relative(args.loss, want)
        print(f"Precast's loss with the checkpoint's {len(params)} parameters {args.loss:.9g}, "
              f"PyTorch's {want:.9g}, relative difference {error:.3g} (tolerance {args.rtol:g})")
        return 0 if error <= args.rtol else 1

    # write: a deterministic move of every weight, made and stored by PyTorch.
    written, exact = {}, {}
    for i, name in enumerate(sorted(params)):
        t = torch.from_numpy(params[name].astype(np.float32))
        pattern = torch.sin(torch.arange(t.numel(), dtype=torch.float32) * 0.37 + i).reshape(t.shape)
        moved = (t * (1 + 0.25 * pattern) + 0.01 * pattern).contiguous()
        if i % 2 == 0:
            written[name] = ("F32", moved.numpy().astype("<f4").tobytes(), moved.shape)
            exact[name] = moved.to(torch.float64).numpy()
        else:
            as_bf16 = moved.to(torch.bfloat16)
            written[name] = ("BF16", as_bf16.view(torch.int16).numpy().astype("<i2").tobytes(),
                             moved.shape)
            exact[name] = as_bf16.to(torch.float64).numpy()
    write_safetensors(args.out, written)
    print(f"{torch_loss(cfg, exact, args.seed):.17g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
