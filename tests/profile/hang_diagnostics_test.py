#!/usr/bin/env python3
"""collect_stack_trace end to end, with precast-run's test-only stall (PRECAST_TEST_STALL_STEP /
PRECAST_TEST_STALL_SECONDS, runtime/profile/HangWatchdog.h): step 1 sleeps, so no step completes
within stack_trace_interval_seconds, and the log must show every thread's stack within the
interval plus 5 s of step 0's line. Every thread counted independently from /proc/<pid>/task
while it stalls: the main thread, the thread pool's num_threads - 1 workers, the watchdog and
OpenBLAS's num_threads - 1 helpers (openblas_set_num_threads(num_threads)), each with a stack.
Then a fatal signal (SIGSEGV sent to the stalled run) writes the stacks and the process still
dies of the signal.

Usage: hang_diagnostics_test.py PRECAST PRECAST_RUN SOURCE_DIR"""
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time

PRECAST, PRECAST_RUN, SOURCE = sys.argv[1:4]
FAILURES = []
INTERVAL = 2
NUM_THREADS = 2


def check(condition, message):
    if not condition:
        FAILURES.append(message)
        print("FAIL:", message)


def compile_tiny(directory):
    pcx = os.path.join(directory, "tiny.pcx")
    result = subprocess.run(
        [PRECAST, "compile", os.path.join(SOURCE, "configs", "base.yml"), "base_emb_dim=32",
         "base_num_decoder_layers=1", "base_num_query_heads=2", "base_num_kv_heads=2",
         "head_dim=16", "base_mlp_dim=64", "vocab_size=128", "per_device_batch_size=1",
         "max_target_length=8", "dtype=float32", "compile_topology=cpu-1",
         "compiled_trainstep_file=" + pcx], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("precast compile failed:\n" + result.stdout + result.stderr)
    return pcx


class Run:
    """precast-run with its output read line by line as it comes, each line timed."""

    def __init__(self, args, env):
        # No core file from the SIGSEGV case.
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, bufsize=1,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
        self.lines = []  # (seconds since start, line)
        self.start = time.monotonic()
        self.reader = threading.Thread(target=self._read)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append((time.monotonic() - self.start, line.rstrip("\n")))

    def wait_for(self, pattern, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, line in list(self.lines):
                if re.search(pattern, line):
                    return t
            time.sleep(0.02)
        return None

    def finish(self, timeout=60):
        code = self.process.wait(timeout=timeout)
        self.reader.join()
        return code

    def text(self):
        return "\n".join(line for _, line in self.lines)


def first_dump(text):
    """The sections of the first stack dump: [(tid, name, frame lines)], and its thread count."""
    start = text.index("Precast stack traces:")
    block = text[start:text.index("End of stack traces", start)]
    count = int(re.search(r"\((\d+) threads\)", block.splitlines()[0]).group(1))
    sections = []
    for line in block.splitlines()[1:]:
        m = re.match(r"Thread (\d+) \(([^)]*)\)", line)
        if m:
            sections.append((int(m.group(1)), m.group(2), []))
        elif sections and line.strip():
            sections[-1][2].append(line)
    return count, sections


def main():
    directory = tempfile.mkdtemp(prefix="precast_hang_test_")
    pcx = compile_tiny(directory)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PRECAST_TEST_STALL_STEP="1",
               PRECAST_TEST_STALL_SECONDS="5")
    args = [PRECAST_RUN, pcx, "steps=3", "num_threads=%d" % NUM_THREADS, "collect_stack_trace=true",
            "stack_trace_interval_seconds=%d" % INTERVAL, "base_output_directory=" + directory,
            "run_name=hang"]
    run = Run(args, env)
    step0 = run.wait_for(r"^completed step: 0,", 30)
    header = run.wait_for(r"^Precast stack traces: no training step completed", INTERVAL + 10)
    live = sorted(int(t) for t in os.listdir("/proc/%d/task" % run.process.pid)) if header else []
    end = run.wait_for(r"^End of stack traces", INTERVAL + 10)
    code = run.finish()
    text = run.text()
    check(code == 0, "the stalled run still finishes: exit %d" % code)
    check(step0 is not None and end is not None and end - step0 <= INTERVAL + 5,
          "the stacks came %s s after step 0's line (interval %d s + 5 s)"
          % (None if end is None or step0 is None else round(end - step0, 2), INTERVAL))
    if end is None:
        sys.exit("no stack dump:\n" + text)
    check("step 1 running" in text, "the dump names the running step")
    count, sections = first_dump(text)
    tids = sorted(tid for tid, _, _ in sections)
    check(count == len(sections) == len(live) and tids == live,
          "the dump's %d threads %s are the process's %s" % (count, tids, live))
    watchdog = [s for s in sections if s[1] == "precast-watch"]
    main_thread = [s for s in sections if any("__libc_start_main" in f for f in s[2])]
    openblas = [s for s in sections if any("libopenblas" in f for f in s[2])]
    workers = [s for s in sections if s not in watchdog + main_thread + openblas]
    check(len(watchdog) == 1 and len(main_thread) == 1,
          "one watchdog (%d) and one main thread (%d)" % (len(watchdog), len(main_thread)))
    check(len(workers) == NUM_THREADS - 1 and len(openblas) == NUM_THREADS - 1,
          "%d pool workers and %d OpenBLAS helpers, expected %d each"
          % (len(workers), len(openblas), NUM_THREADS - 1))
    check(count == NUM_THREADS + 1 + (NUM_THREADS - 1),
          "num_threads (main + workers) + watchdog + OpenBLAS helpers = %d threads, got %d"
          % (2 * NUM_THREADS, count))
    check(all(len(frames) >= 2 for _, _, frames in sections),
          "every thread has a stack: %s" % [(t, len(f)) for t, _, f in sections])
    check("no answer" not in text, "every thread answered")

    # A fatal signal: the stacks, then the signal's default action (the process dies of it).
    env["PRECAST_TEST_STALL_SECONDS"] = "30"
    crash = Run(args[:-1] + ["run_name=crash", "stack_trace_interval_seconds=600"], env)
    check(crash.wait_for(r"^completed step: 0,", 30) is not None, "the second run reached step 0")
    time.sleep(0.5)
    crash.process.send_signal(signal.SIGSEGV)
    code = crash.finish()
    crash_text = crash.text()
    check(code == -signal.SIGSEGV, "killed by SIGSEGV: returncode %d" % code)
    check("Precast stack traces: fatal signal SIGSEGV" in crash_text
          and "End of stack traces" in crash_text, "the fatal signal's dump:\n" + crash_text[-2000:])

    subprocess.run(["rm", "-rf", directory])
    if FAILURES:
        sys.exit("%d check(s) failed" % len(FAILURES))
    print("hang_diagnostics_test: all checks passed (%d threads, stacks %.2f s after step 0)"
          % (count, end - step0))


main()
