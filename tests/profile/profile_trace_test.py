#!/usr/bin/env python3
"""profiler=trace end to end: precast compile a 1-layer llama2, precast-run it with
profiler=trace, and check the Chrome trace against the artifact's program as `precast inspect`
lists it (one event per program entry per profiled step, each of the entry's kind and symbol,
named by its op and scope, inside its step's event; profiler_steps step events), then that
`precast profile summary` prints totals equal to the sums of the events' durations (summed here
exactly, as decimals), precast compile's progress lines when not on a terminal, and the error paths (a bad trace file: exit 2 naming the file;
profiler=xplane: exit 2, not supported yet).

Usage: profile_trace_test.py PRECAST PRECAST_RUN SOURCE_DIR"""
import decimal
import json
import os
import re
import subprocess
import sys
import tempfile

PRECAST, PRECAST_RUN, SOURCE = sys.argv[1:4]
FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)
        print("FAIL:", message)


def run(args, env=None):
    return subprocess.run(args, capture_output=True, text=True, env=env)


def compile_tiny(directory):
    pcx = os.path.join(directory, "tiny.pcx")
    result = run([PRECAST, "compile", os.path.join(SOURCE, "configs", "base.yml"),
                  "base_emb_dim=64", "base_num_decoder_layers=1", "base_num_query_heads=4",
                  "base_num_kv_heads=4", "head_dim=16", "base_mlp_dim=128", "vocab_size=256",
                  "per_device_batch_size=2", "max_target_length=16", "dtype=float32",
                  "compile_topology=cpu-1", "compiled_trainstep_file=" + pcx])
    if result.returncode != 0:
        sys.exit("precast compile failed:\n" + result.stdout + result.stderr)
    # Not a terminal: one plain progress line per stage on standard error, the ops and kernels
    # counted as the compile summary counts them.
    summary = re.search(r"Compiled @train_step .*: (\d+) ops, (\d+) kernels", result.stdout)
    ops, kernels = summary.groups()
    expected = ["precast compile: analysis (lower, passes, partition, schedule, plan)",
                "precast compile: generating LLVM kernels, ops (%s)" % ops,
                "precast compile: LLVM O3 and object code for %s kernels" % kernels,
                "precast compile: writing " + pcx]
    check(result.stderr.splitlines() == expected,
          "compile progress lines %r, expected %r" % (result.stderr.splitlines(), expected))
    return pcx


def program_rows(pcx):
    """(kind, symbol) of every program step, from `precast inspect`."""
    listing = run([PRECAST, "inspect", pcx]).stdout
    count = int(re.search(r"^Step program \((\d+) steps\)$", listing, re.M).group(1))
    body = listing.split("Step program", 1)[1].splitlines()[1:count + 1]
    rows = []
    for i, line in enumerate(body):
        fields = line.split()
        assert fields[0] == str(i), line
        rows.append((fields[1], fields[2]))
    return rows


def main():
    directory = tempfile.mkdtemp(prefix="precast_profile_trace_test_")
    pcx = compile_tiny(directory)
    rows = program_rows(pcx)
    out = os.path.join(directory, "out")
    steps, skip, profiled = 6, 2, 3
    result = run([PRECAST_RUN, pcx, "steps=%d" % steps, "num_threads=1", "profiler=trace",
                  "profiler_steps=%d" % profiled, "skip_first_n_steps_for_profiler=%d" % skip,
                  "base_output_directory=" + out, "run_name=traced"])
    check(result.returncode == 0, "precast-run exit %d: %s" % (result.returncode, result.stderr))
    trace_dir = os.path.join(out, "traced", "profile")
    trace_file = os.path.join(trace_dir, "trace-rank0.json")
    check(os.listdir(trace_dir) == ["trace-rank0.json"],
          "the profile directory holds only the trace (no temporary): %s" % os.listdir(trace_dir))
    check(trace_file in result.stdout, "the log names the trace file")
    with open(trace_file) as f:
        trace = json.load(f)  # valid JSON, or the test stops here
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    step_events = [e for e in events if e["cat"] == "step"]
    entry_events = [e for e in events if e["cat"] != "step"]

    # MaxText's window: steps skip .. skip + profiler_steps - 1 of a run starting at step 0.
    check([e["name"] for e in step_events] == ["step %d" % s for s in range(skip, skip + profiled)],
          "step events %s" % [e["name"] for e in step_events])
    check(len(entry_events) == len(rows) * profiled,
          "%d entry events, expected %d program steps x %d profiled steps"
          % (len(entry_events), len(rows), profiled))
    check(trace["otherData"]["program_entries"] == len(rows), "otherData.program_entries")
    tids = {e["tid"] for e in events}
    check(len(tids) == 1 and {e["pid"] for e in events} == {0},
          "one rank (pid 0) and one thread run the program: %s" % tids)
    for step_event in step_events:
        step = step_event["args"]["step"]
        begin = decimal.Decimal(str(step_event["ts"]))
        end = begin + decimal.Decimal(str(step_event["dur"]))
        mine = [e for e in entry_events if e["args"]["step"] == step]
        check([e["args"]["entry"] for e in mine] == list(range(len(rows))),
              "step %d has every program entry once, in order" % step)
        for e in mine:
            kind, symbol = rows[e["args"]["entry"]]
            check(e["cat"] == kind and e["args"]["symbol"] == symbol,
                  "entry %d: %s %s, inspect lists %s %s"
                  % (e["args"]["entry"], e["cat"], e["args"]["symbol"], kind, symbol))
            op, scope = e["args"]["op"], e["args"]["scope"]
            check(op != "" and e["name"] == (op + " " + scope if scope else op),
                  "entry %d named %r for op %r scope %r" % (e["args"]["entry"], e["name"], op, scope))
            ts = decimal.Decimal(str(e["ts"]))
            check(begin <= ts and ts + decimal.Decimal(str(e["dur"])) <= end,
                  "entry %d of step %d lies inside the step's event" % (e["args"]["entry"], step))
    check(any(e["args"]["op"] == "dot_general" and e["cat"] == "gemm" for e in entry_events),
          "a GEMM event named dot_general")
    check(any(e["cat"] == "attention" for e in entry_events), "an attention event")

    # The summary's totals: the events' durations summed exactly (as decimals, in microseconds).
    summary = run([PRECAST, "profile", "summary", trace_file])
    check(summary.returncode == 0, "summary exit %d: %s" % (summary.returncode, summary.stderr))
    text = summary.stdout

    def total(events_):
        return sum((decimal.Decimal(str(e["dur"])) for e in events_), decimal.Decimal(0))

    m = re.search(r"^  steps: (\d+) events, ([\d.]+) us", text, re.M)
    check(m and int(m.group(1)) == profiled and decimal.Decimal(m.group(2)) == total(step_events),
          "steps total %s, expected %d events %s us" % (m and m.groups(), profiled, total(step_events)))
    m = re.search(r"^  program entries: (\d+) events, ([\d.]+) us", text, re.M)
    check(m and int(m.group(1)) == len(entry_events)
          and decimal.Decimal(m.group(2)) == total(entry_events),
          "entries total %s, expected %d events %s us"
          % (m and m.groups(), len(entry_events), total(entry_events)))
    kinds = text.split("Time by op kind\n", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    check(len(kinds) == len({e["cat"] for e in entry_events}), "one row per kind: %s" % kinds)
    for line in kinds:
        name, count, micros = line.split()[:3]
        mine = [e for e in entry_events if e["cat"] == name]
        check(int(count) == len(mine) and decimal.Decimal(micros) == total(mine),
              "kind %s: %s events %s us, expected %d %s" % (name, count, micros, len(mine), total(mine)))
    top = text.split("Top 20 ops (op and scope)\n", 1)[1].splitlines()[1:]
    top = [line for line in top if line.startswith("  ") and not line.startswith("  ...")]
    check(len(top) == min(20, len({e["name"] for e in entry_events})), "top 20 rows: %d" % len(top))

    # Bad trace files: exit 2, the message names the file.
    not_json = os.path.join(directory, "broken.json")
    with open(not_json, "w") as f:
        f.write('{"traceEvents": [{"ph": "X", "dur": 1.5,')
    no_events = os.path.join(directory, "other.json")
    with open(no_events, "w") as f:
        f.write('{"events": []}')
    for path in (not_json, no_events, os.path.join(directory, "missing.json")):
        bad = run([PRECAST, "profile", "summary", path])
        check(bad.returncode == 2 and path in bad.stderr and "Traceback" not in bad.stderr,
              "summary of %s: exit %d, %s" % (path, bad.returncode, bad.stderr))

    # MaxText's other profilers are refused by name.
    xplane = run([PRECAST_RUN, pcx, "steps=1", "profiler=xplane", "base_output_directory=" + out])
    check(xplane.returncode == 2 and "profiler is not supported yet" in xplane.stderr,
          "profiler=xplane: exit %d, %s" % (xplane.returncode, xplane.stderr))

    # Restoring a checkpoint is announced on standard error (one plain line, not a terminal);
    # a run with nothing to restore says nothing there.
    common = [PRECAST_RUN, pcx, "enable_checkpointing=true", "checkpoint_period=1",
              "base_output_directory=" + out, "run_name=resumed"]
    first = run(common + ["steps=1"])
    check(first.returncode == 0 and first.stderr == "", "first run: %d %r" % (first.returncode, first.stderr))
    second = run(common + ["steps=2"])
    check(second.returncode == 0 and second.stderr.splitlines() == [
        "precast-run: restoring the latest checkpoint in %s/resumed/checkpoints/" % out],
        "resumed run's progress: %d %r" % (second.returncode, second.stderr))

    subprocess.run(["rm", "-rf", directory])
    if FAILURES:
        sys.exit("%d check(s) failed" % len(FAILURES))
    print("profile_trace_test: all checks passed (%d program entries x %d steps)"
          % (len(rows), profiled))


main()
