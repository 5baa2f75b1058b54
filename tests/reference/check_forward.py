#!/usr/bin/python3
"""Compares Precast's forward (forward_runner's OUT_DIR) with torch_reference.py.

Per tensor: max |precast - reference| / max |reference| must not exceed --rtol (an all-zero
reference, e.g. z_loss without a multiplier, compares the absolute error instead). Weights the
run wrote that the README math never read are a failure too, and so is an initial weight (as
@init drew it, before the runner's perturbation) that does not follow the README's init column.
Exit status 0 on agreement, 1 on a mismatch, 2 on bad usage.

Usage: check_forward.py OUT_DIR --rtol 1e-5
"""

import argparse
import os
import sys

try:
    import numpy as np
    import torch  # noqa: F401  (torch_reference needs it; fail here with a clear message)
except ImportError as error:
    print(f"check_forward.py: {error}; the reference suite needs python3-numpy and python3-torch "
          "(tools/setup.sh installs them)", file=sys.stderr)
    sys.exit(1)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference  # noqa: E402


def compare(name, got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return None, f"{name}: Precast's shape {list(got.shape)}, the reference's {list(want.shape)}"
    error = float(np.max(np.abs(got - want))) if got.size else 0.0
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    relative = error / scale if scale > 0 else error
    if not np.isfinite(got).all():
        return (error, scale, relative), f"{name}: Precast's values are not all finite"
    return (error, scale, relative), None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="directory forward_runner wrote")
    parser.add_argument("--rtol", type=float, required=True,
                        help="largest allowed max-abs-error / max-abs-reference per tensor")
    args = parser.parse_args()
    torch.set_num_threads(1)

    run = torch_reference.Run(args.out_dir)
    config, precast = run.config, run.outputs
    reference, unused = torch_reference.run_reference(run)
    print(f"{config.text('model_name')} ({config.text('family')}), {config.text('dtype')}, "
          f"rtol {args.rtol:g}")
    print(f"{'tensor':<14} {'max abs err':>12} {'max abs ref':>12} {'relative':>12}")
    failures = []
    names = torch_reference.OUTPUT_NAMES + (("moe_lb_loss",) if "moe_lb_loss" in reference else ())
    for name in names:
        if name not in precast:
            failures.append(f"{name}: Precast wrote no out.{name}.npy")
            continue
        numbers, problem = compare(name, precast[name], reference[name])
        if numbers is not None:
            error, scale, relative = numbers
            print(f"{name:<14} {error:12.3e} {scale:12.3e} {relative:12.3e}")
            if relative > args.rtol:
                failures.append(f"{name}: relative error {relative:.3e} > {args.rtol:g}")
        if problem:
            failures.append(problem)
    for name in unused:
        failures.append(f"weight {name} was written but the README math does not use it")
    init_problems = torch_reference.check_initial_weights(run)
    print(f"init: {len(run.initial)} weights drawn by @init checked against the README's table, "
          f"{len(init_problems)} problem(s)")
    failures += init_problems
    for failure in failures:
        print(f"MISMATCH {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
