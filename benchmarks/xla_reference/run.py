#!/usr/bin/env python3
"""XLA ground truth for Precast: deviceless MaxText train-step compiles on named TPU topologies.

Runs under the venv made by setup.sh (not part of the Precast build or CI):

  nice -n 19 /opt/xla-ref-venv/bin/python benchmarks/xla_reference/run.py \
      benchmarks/xla_reference/configs.txt [--only ID[,ID...]] [--skip-done]

configs.txt: one row per line, `ID TOPOLOGY key=value ...` (MaxText overrides); '#' starts a
comment. Each row is compiled in its own child process (one compile at a time), which calls
MaxText's own train_compile entry point (`maxtext.trainers.pre_train.train_compile.main`) with the
same argv as the command recorded in the CSV, and keeps the compiled executable to read
`compiled.memory_analysis()`. The parent then updates the row in reference.csv (replacing a row
with the same id) and writes a short summary of XLA's buffer assignment at its peak to
peaks/<ID>.txt.
"""

import argparse
import csv
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CSV_PATH = os.path.join(HERE, "reference.csv")
PEAKS_DIR = os.path.join(HERE, "peaks")
GIB = 1 << 30

# Environment every compile runs under (see README.md).
COMPILE_ENV = {
    "TPU_SKIP_MDS_QUERY": "1",
    "DECOUPLE_GCLOUD": "TRUE",
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
}

# Overrides every row gets (a row's own overrides come after these and win).
FIXED_OVERRIDES = [
    "skip_jax_distributed_system=true",
    "dataset_type=synthetic",
    "enable_checkpointing=false",
    "run_name=xlaref",
    "base_output_directory=/tmp/xlaref-out",
]

# Nominal HBM per chip (bytes). XLA's own usable limit is a little lower; when a compile runs out
# of memory the error states XLA's limit, which is then recorded in xla_limit_bytes.
HBM_PER_CHIP = {
    "v4": 32 * GIB,
    "v5e": 16 * GIB,
    "v5p": 95 * GIB,
    "v6e": 32 * GIB,
    "tpu7x": 192 * GIB,
}

COLUMNS = [
    "id", "model_name", "topology", "num_slices", "num_devices", "mesh", "overrides", "status",
    "argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes",
    "total_bytes", "host_temp_bytes", "ba_hbm_bytes", "device_limit_bytes", "xla_limit_bytes", "fits",
    "jax", "jaxlib", "libtpu", "maxtext", "compile_seconds", "error", "command",
]


def parse_configs(path):
  rows = []
  with open(path) as f:
    for line in f:
      line = line.split("#", 1)[0].strip()
      if not line:
        continue
      parts = shlex.split(line)
      rows.append((parts[0], parts[1], parts[2:]))
  return rows


def train_compile_argv(topology, overrides):
  """The argv given to MaxText's train_compile main (argv[0] is the program name)."""
  args = ["train_compile", f"compile_topology={topology}"]
  if not any(o.startswith("compile_topology_num_slices=") for o in overrides):
    args.append("compile_topology_num_slices=1")
  return args + FIXED_OVERRIDES + list(overrides)


def command_line(topology, overrides):
  env = " ".join(f"{k}={v}" for k, v in COMPILE_ENV.items())
  return f"{env} python -m maxtext.trainers.pre_train.train_compile " + " ".join(
      shlex.quote(a) for a in train_compile_argv(topology, overrides)[1:])


# ----------------------------------------------------------------------------- child process
class _MeshOnly(Exception):
  """Stops a child after the mesh is built (--backfill-mesh)."""


def child(out_json, topology, overrides):
  """Runs one compile in this process and writes the result as JSON."""
  import importlib.metadata as md
  result = {"versions": {}}
  for p in ("jax", "jaxlib", "libtpu", "maxtext"):
    try:
      result["versions"][p] = md.version(p)
    except md.PackageNotFoundError:
      result["versions"][p] = ""
  from maxtext.trainers.pre_train import train_compile  # pylint: disable=import-outside-toplevel

  captured = {}
  # Keep MaxText's own functions once, so that repeated calls in one process (--backfill-mesh) do
  # not wrap the wrappers.
  if not hasattr(train_compile, "_xlaref_originals"):
    train_compile._xlaref_originals = (train_compile.jit_and_compile, train_compile.get_topology_mesh)
  original, original_mesh = train_compile._xlaref_originals

  def keep_compiled(*args, **kwargs):
    compiled = original(*args, **kwargs)
    captured["compiled"] = compiled
    return compiled

  train_compile.jit_and_compile = keep_compiled

  def keep_mesh(*args, **kwargs):
    mesh = original_mesh(*args, **kwargs)
    result["num_devices"] = int(mesh.devices.size)
    result["mesh"] = " ".join(f"{a}={n}" for a, n in mesh.shape.items() if n > 1)
    if os.environ.get("XLAREF_MESH_ONLY"):
      raise _MeshOnly()
    return mesh

  train_compile.get_topology_mesh = keep_mesh
  start = time.time()
  try:
    train_compile.main(train_compile_argv(topology, overrides))
    m = captured["compiled"].memory_analysis()
    result["memory"] = {
        "argument_bytes": m.argument_size_in_bytes,
        "output_bytes": m.output_size_in_bytes,
        "alias_bytes": m.alias_size_in_bytes,
        "temp_bytes": m.temp_size_in_bytes,
        "generated_code_bytes": m.generated_code_size_in_bytes,
        "host_temp_bytes": m.host_temp_size_in_bytes,
    }
  except _MeshOnly:
    pass
  except BaseException as e:  # pylint: disable=broad-except
    result["error"] = f"{type(e).__name__}: {e}"
  result["compile_seconds"] = round(time.time() - start, 1)
  with open(out_json, "w") as f:
    json.dump(result, f)


# ----------------------------------------------------------------------------- peak summary
_SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KiB": 1 << 10, "M": 1 << 20, "MiB": 1 << 20,
               "G": 1 << 30, "GiB": 1 << 30}


def _main_module_files(dump_dir, suffix):
  files = glob.glob(os.path.join(dump_dir, f"*{suffix}"))
  train = [f for f in files if "train_step" in os.path.basename(f)]
  return sorted(train or files, key=os.path.getsize, reverse=True)


def _value_shapes(buffer_assignment_text):
  """Maps 'name{index}' of each HLO value in the buffer assignment to its shape."""
  shapes = {}
  for m in re.finditer(r"value: <\d+ ([^ >{]+)(\{[^}]*\})? @\d+> \(size=\d+,offset=\d+\): (\S+)",
                       buffer_assignment_text):
    shapes[m.group(1) + (m.group(2) or "{}")] = m.group(3)
  return shapes


def hbm_allocation_bytes(dump_dir):
  """Sum of all colour-0 (HBM) allocations of the dumped buffer assignment, or ""."""
  ba = _main_module_files(dump_dir, "after_optimizations-buffer-assignment.txt")
  if not ba:
    return ""
  text = open(ba[0], errors="replace").read()
  return sum(int(m.group(1)) for m in re.finditer(
      r"^allocation \d+: size (\d+), (?!color \d)", text, re.M))


def allocation_breakdown(buffer_assignment_text):
  """Sums XLA's allocations by memory color and kind (parameter, preallocated-temp, ...)."""
  sums = {}
  for m in re.finditer(r"^allocation \d+: size (\d+), (?:color (\d+), )?page \d+, ?([^\n]*)$",
                       buffer_assignment_text, re.M):
    size, color, rest = int(m.group(1)), int(m.group(2) or 0), m.group(3)
    if rest.startswith("parameter"):
      kind = "parameter" + (" (maybe-live-out)" if "maybe-live-out" in rest else "")
    elif rest.startswith("output shape is"):
      kind = "output tuple" + (" (maybe-live-out)" if "maybe-live-out" in rest else "")
    else:
      kind = rest.split(",")[0].split(":")[0].strip() or "temp"
    key = (color, kind)
    n, total = sums.get(key, (0, 0))
    sums[key] = (n + 1, total + size)
  lines = ["XLA allocations by (memory color, kind) from the buffer assignment:"]
  for (color, kind), (n, total) in sorted(sums.items(), key=lambda kv: -kv[1][1]):
    lines.append(f"  color {color:<2} {kind:<34} {n:>5} allocations {total:>14} B ({total / GIB:.3f} GiB)")
  return lines


def peak_summary(dump_dir, row_id, header_lines, limit=10):
  """A short text summary of XLA's live buffers at its peak (from the --xla_dump_to files).

  XLA's `*live-range.txt` lists the values live at the peak of the main memory space
  ("Live ranges at N (peak)") and a breakdown of the peak by JAX source (named scope) stack.
  """
  del row_id
  out = list(header_lines)
  lr = _main_module_files(dump_dir, "after_optimizations-live-range.txt")
  if not lr:
    out.append("no live-range dump found")
    return "\n".join(out) + "\n"
  text = open(lr[0], errors="replace").read()
  ba = _main_module_files(dump_dir, "after_optimizations-buffer-assignment.txt")
  shapes = _value_shapes(open(ba[0], errors="replace").read()) if ba else {}
  if ba:
    out.extend(allocation_breakdown(open(ba[0], errors="replace").read()))
  out.append(f"source: {os.path.basename(lr[0])}")
  m = re.search(r"Live ranges at (\d+) \(peak\):\n(.*?)\n  (?=\S)", text, re.S)
  if m:
    entries = []
    for l in m.group(2).splitlines():
      mm = re.match(r"\s*(\S+): (\d+) bytes", l)
      if mm:
        entries.append((int(mm.group(2)), mm.group(1)))
    total = sum(e[0] for e in entries)
    entries.sort(reverse=True)
    out.append(f"Live at XLA's peak (instruction {m.group(1)}): {len(entries)} values, {total} bytes "
               f"({total / GIB:.3f} GiB) in the main memory space")
    out.append(f"Top {min(limit, len(entries))} live buffers at the peak:")
    for size, name in entries[:limit]:
      out.append(f"  {size:>14} B  {size / GIB:8.3f} GiB  {name}  {shapes.get(name, '')}")
  else:
    out.append("no '(peak)' section in the live-range dump")
  m = re.search(r"(  Stack trace breakdown for peak usage:.*)", text, re.S)
  if m:
    lines = m.group(1).splitlines()
    # Keep the tree down to three levels below the module: enough to see which scopes dominate.
    keep = [lines[0]]
    for l in lines[1:]:
      depth = (len(l) - len(l.lstrip(" │├└─"))) // 4
      if depth <= 5 and "(0.0%" not in l:
        keep.append(l[:260])
      if len(keep) >= 80:
        break
    out.append("")
    out.extend(keep)
  s = "\n".join(out) + "\n"
  return s[:48000]


# ----------------------------------------------------------------------------- parent process
def read_csv():
  if not os.path.exists(CSV_PATH):
    return []
  with open(CSV_PATH, newline="") as f:
    return list(csv.DictReader(f))


def write_csv(rows):
  tmp = CSV_PATH + ".tmp"
  with open(tmp, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=COLUMNS)
    w.writeheader()
    for r in rows:
      w.writerow({k: r.get(k, "") for k in COLUMNS})
  os.replace(tmp, CSV_PATH)


def override_value(overrides, key, default=""):
  for o in overrides:
    if o.startswith(key + "="):
      return o.split("=", 1)[1]
  return default


def limit_bytes(topology):
  gen = topology.rsplit("-", 1)[0]
  return HBM_PER_CHIP.get(gen, "")


def xla_limit_from_error(err):
  """(kind, bytes XLA needed, XLA's HBM limit) from an out-of-memory error, or ("", "", "")."""
  # e.g. "Used 17.03G of 15.75G hbm. Exceeded hbm capacity by 1.28G."
  m = re.search(r"Used ([\d.]+)([KMG]?) of ([\d.]+)([KMG]?) hbm", err)
  kind = "total"
  if not m:
    # e.g. "the total memory required for HLO temporaries (76.27G) exceeds available HBM (15.75G)"
    m = re.search(r"HLO temporaries \(([\d.]+)([KMG]?)\) exceeds available HBM \(([\d.]+)([KMG]?)\)", err)
    kind = "temp"
  if not m:
    return "", "", ""
  used = int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])
  lim = int(float(m.group(3)) * _SIZE_UNITS[m.group(4)])
  return kind, used, lim


def run_one(row_id, topology, overrides, timeout):
  work = tempfile.mkdtemp(prefix=f"xlaref-{row_id}-")
  dump = os.path.join(work, "dump")
  out_json = os.path.join(work, "result.json")
  env = dict(os.environ)
  env.update(COMPILE_ENV)
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_dump_to={dump}").strip()
  cmd = ["nice", "-n", "19", sys.executable, os.path.abspath(__file__), "--child", out_json, topology,
         *overrides]
  log_path = os.path.join(work, "compile.log")
  t0 = time.time()
  with open(log_path, "w") as log:
    try:
      subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False,
                     cwd=work)
    except subprocess.TimeoutExpired:
      pass
  wall = time.time() - t0
  if os.path.exists(out_json):
    res = json.load(open(out_json))
  else:
    tail = open(log_path, errors="replace").read()[-2000:]
    res = {"error": f"child failed or timed out after {wall:.0f}s: {tail}", "versions": {},
           "compile_seconds": round(wall, 1)}
  return res, work, dump, log_path


def backfill_mesh():
  """Fills num_devices/mesh of rows that lack them: builds each row's mesh in this process."""
  os.environ.update(COMPILE_ENV)
  os.environ["XLAREF_MESH_ONLY"] = "1"
  work = tempfile.mkdtemp(prefix="xlaref-mesh-")
  out_json = os.path.join(work, "result.json")
  os.chdir(work)
  for r in read_csv():
    if r.get("num_devices"):
      continue
    child(out_json, r["topology"], shlex.split(r["overrides"]))
    res = json.load(open(out_json))
    rows = read_csv()
    for row in rows:
      if row["id"] == r["id"]:
        row["num_devices"] = res.get("num_devices", "")
        row["mesh"] = res.get("mesh", "")
    write_csv(rows)
    print(r["id"], res.get("num_devices"), res.get("mesh"), res.get("error", "")[:200], flush=True)
  shutil.rmtree(work, ignore_errors=True)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("configs", nargs="?", default=os.path.join(HERE, "configs.txt"))
  ap.add_argument("--only", default="")
  ap.add_argument("--skip-done", action="store_true", help="skip ids already 'ok' or 'oom' in the CSV")
  ap.add_argument("--timeout", type=int, default=1800)
  ap.add_argument("--keep-dumps", action="store_true")
  ap.add_argument("--backfill-mesh", action="store_true",
                  help="only fill num_devices/mesh of existing rows (builds the mesh, no compile)")
  args = ap.parse_args()
  if args.backfill_mesh:
    backfill_mesh()
    return

  configs = parse_configs(args.configs)
  if args.only:
    wanted = args.only.split(",")
    configs = [c for c in configs if c[0] in wanted]
  os.makedirs(PEAKS_DIR, exist_ok=True)

  for row_id, topology, overrides in configs:
    rows = read_csv()
    done = {r["id"]: r for r in rows}
    if args.skip_done and done.get(row_id, {}).get("status") in ("ok", "oom"):
      continue
    print(f"[{time.strftime('%H:%M:%S')}] {row_id}: {topology} {' '.join(overrides)}", flush=True)
    res, work, dump, log_path = run_one(row_id, topology, overrides, args.timeout)
    v = res.get("versions", {})
    num_slices = int(override_value(overrides, "compile_topology_num_slices", "1"))
    lim = limit_bytes(topology)
    row = {
        "id": row_id,
        "model_name": override_value(overrides, "model_name", "default"),
        "topology": topology,
        "num_slices": num_slices,
        "overrides": " ".join(overrides),
        "device_limit_bytes": lim,
        "jax": v.get("jax", ""), "jaxlib": v.get("jaxlib", ""), "libtpu": v.get("libtpu", ""),
        "maxtext": v.get("maxtext", ""),
        "compile_seconds": res.get("compile_seconds", ""),
        "num_devices": res.get("num_devices", ""),
        "mesh": res.get("mesh", ""),
        "command": command_line(topology, overrides),
    }
    if "memory" in res:
      m = res["memory"]
      row.update(m)
      total = m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"] + m["temp_bytes"]
      row["total_bytes"] = total
      row["status"] = "ok"
      row["fits"] = "yes" if lim and total <= lim else ("no" if lim else "")
    else:
      err = " ".join(res.get("error", "").split())
      kind, used, xlim = xla_limit_from_error(err)
      row["status"] = "oom" if ("RESOURCE_EXHAUSTED" in err or used) else "error"
      if used:
        # "Used X of Y hbm" states the total; "HLO temporaries (X)" states what ba_hbm_bytes holds
        # exactly (state + preallocated temp, from the dump), so only the limit is kept from it.
        if kind == "total":
          row["total_bytes"] = used
        row["xla_limit_bytes"] = xlim
      if row["status"] == "oom":
        row["fits"] = "no"
      row["error"] = err[:600]
    row["ba_hbm_bytes"] = hbm_allocation_bytes(dump)
    header = [f"id: {row_id}", f"command: {row['command']}",
              f"status: {row['status']}  temp_bytes: {row.get('temp_bytes', '')}  "
              f"total_bytes: {row.get('total_bytes', '')}"]
    if row["status"] == "oom":
      header.append("error: " + row["error"])
    with open(os.path.join(PEAKS_DIR, f"{row_id}.txt"), "w") as f:
      f.write(peak_summary(dump, row_id, header))
    rows = [r for r in read_csv() if r["id"] != row_id] + [row]
    write_csv(rows)
    print(f"    -> {row['status']} temp={row.get('temp_bytes', '')} total={row.get('total_bytes', '')} "
          f"({res.get('compile_seconds', '')} s) {row.get('error', '')[:300]}", flush=True)
    if args.keep_dumps:
      print(f"    dump kept in {work}", flush=True)
    else:
      shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
  if len(sys.argv) > 1 and sys.argv[1] == "--child":
    child(sys.argv[2], sys.argv[3], sys.argv[4:])
  else:
    main()
