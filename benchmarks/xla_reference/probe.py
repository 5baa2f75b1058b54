#!/usr/bin/env python3
"""One deviceless compile with everything memory_analysis() carries, for the extra's experiments.

`compiled.memory_analysis()` (jaxlib's CompiledMemoryStats) has more than the ten size fields its
repr prints: `peak_memory_in_bytes`, `total_allocation_bytes`, `peak_unpadded_heap_bytes`,
`indefinite_allocations` and `serialized_buffer_assignment_proto`, the buffer assignment the
figures come from (XLA's BufferAssignmentProto). This runs one compile like run.py does (the same
child, environment and fixed overrides; nothing is written to reference.csv or peaks/) and writes
into OUT_DIR:
* stats.json: every CompiledMemoryStats field but the proto, plus the compile time and versions;
* buffer_assignment.pb: the serialized buffer assignment (empty with libtpu 0.0.48.1);
* compile.log: the compile's stdout and stderr; dump/: XLA's --xla_dump_to folder (unless
  --no-dump).
Extra XLA flags (--xla-flags '...') and environment (--env K=V, repeatable) are added to the
compile, so that a flag can be flipped without touching run.py.

Run under the venv of setup.sh, one compile at a time:
  nice -n 19 /opt/xla-ref-venv/bin/python benchmarks/xla_reference/probe.py OUT_DIR TOPOLOGY \
      [--xla-flags '...'] [--env K=V ...] [--no-dump] key=value ...
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run  # noqa: E402  (COMPILE_ENV, train_compile_argv, command_line)

STAT_FIELDS = [
    "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
    "generated_code_size_in_bytes", "host_argument_size_in_bytes", "host_output_size_in_bytes",
    "host_alias_size_in_bytes", "host_temp_size_in_bytes", "host_generated_code_size_in_bytes",
    "peak_memory_in_bytes", "total_allocation_bytes", "peak_unpadded_heap_bytes",
]


def child(out_dir, topology, overrides):
    """Compiles in this process; writes stats.json and buffer_assignment.pb into out_dir."""
    import importlib.metadata as md
    result = {"versions": {p: md.version(p) for p in ("jax", "jaxlib", "libtpu", "maxtext")}}
    from maxtext.trainers.pre_train import train_compile  # pylint: disable=import-outside-toplevel
    captured = {}
    original = train_compile.jit_and_compile

    def keep_compiled(*args, **kwargs):
        captured["compiled"] = original(*args, **kwargs)
        return captured["compiled"]

    train_compile.jit_and_compile = keep_compiled
    start = time.time()
    try:
        train_compile.main(run.train_compile_argv(topology, overrides))
        stats = captured["compiled"].memory_analysis()
        result["stats"] = {f: getattr(stats, f, None) for f in STAT_FIELDS}
        indefinite = getattr(stats, "indefinite_allocations", None)
        result["indefinite_allocations"] = repr(indefinite)[:4000]
        proto = getattr(stats, "serialized_buffer_assignment_proto", b"") or b""
        with open(os.path.join(out_dir, "buffer_assignment.pb"), "wb") as f:
            f.write(proto)
        result["buffer_assignment_proto_bytes"] = len(proto)
    except BaseException as e:  # pylint: disable=broad-except
        result["error"] = f"{type(e).__name__}: {e}"[:4000]
    result["compile_seconds"] = round(time.time() - start, 1)
    with open(os.path.join(out_dir, "stats.json"), "w") as f:
        json.dump(result, f, indent=1)


def main():
    ap = argparse.ArgumentParser(usage=__doc__.strip().splitlines()[-2].strip())
    ap.add_argument("out_dir")
    ap.add_argument("topology")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--xla-flags", default="")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--no-dump", action="store_true")
    ap.add_argument("--timeout", type=int, default=1800)
    args = ap.parse_intermixed_args()
    os.makedirs(args.out_dir, exist_ok=True)
    out_dir = os.path.abspath(args.out_dir)
    env = dict(os.environ)
    env.update(run.COMPILE_ENV)
    flags = args.xla_flags
    if not args.no_dump:
        flags += " --xla_dump_to=" + os.path.join(out_dir, "dump")
    env["XLA_FLAGS"] = flags.strip()
    for kv in args.env:
        key, value = kv.split("=", 1)
        env[key] = value
    with open(os.path.join(out_dir, "command.txt"), "w") as f:
        f.write("XLA_FLAGS=%r %s\n%s\n" % (env["XLA_FLAGS"], " ".join(args.env),
                                           run.command_line(args.topology, args.overrides)))
    cmd = ["nice", "-n", "19", sys.executable, os.path.abspath(__file__), "--child", out_dir,
           args.topology, *args.overrides]
    with open(os.path.join(out_dir, "compile.log"), "w") as log:
        try:
            subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout,
                           check=False, cwd=out_dir)
        except subprocess.TimeoutExpired:
            print("probe.py: compile timed out after %d s" % args.timeout, file=sys.stderr)
    stats_path = os.path.join(out_dir, "stats.json")
    if not os.path.exists(stats_path):
        sys.exit("probe.py: the compile wrote no stats.json; see %s/compile.log" % out_dir)
    with open(stats_path) as f:
        print(f.read())


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        main()
