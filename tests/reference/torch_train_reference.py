#!/usr/bin/python3
"""Repeats train_runner's training steps in PyTorch and compares them with Precast's.

The model is torch_reference.py's Decoder (the README's math, written independently of the
frontend); gradients come from torch.autograd. Loss normalisation, gradient accumulation,
global-norm clipping and the optimizers are written here from MaxText's (optax's) formulas,
not taken from torch.optim:

  G == 1:  loss = sum(xent * w) / (sum(w) + 1e-8), and the gradient is that loss's gradient.
  G > 1:   micro-batch i = rows i, i+G, ...; per micro-batch the unnormalised sum(xent * w) is
           differentiated; gradients and sums are added, the gradients divided by the total
           real-token count, loss = sum xent / max(total, 1).
  MoE with load_balance_loss_weight > 0: each micro-batch's objective adds the mean of its MoE
           layers' load-balancing losses (MaxText's, both with and without accumulation);
           loss = lm_loss + their mean over micro-batches, reported also as moe_lb_loss.
  clipping (optax.clip_by_global_norm): threshold > 0 and norm >= threshold -> g / norm * thr.
  adamw (optax.adamw): t = count + 1; mu = b1 mu + (1 - b1) g; nu = b2 nu + (1 - b2) g^2;
           update = (mu / (1 - b1^t)) / (sqrt(nu / (1 - b2^t) + eps_root) + eps) + wd p
           (no wd for weights adamw_mask names); p -= lr update.
  adam_pax (MaxText's): t = count + 1; decay(b) = b (1 - b^(t-1)) / (1 - b^t);
           mu = (1 - decay(b1)) g + decay(b1) mu; same for nu with g^2 and b2;
           update = mu / (sqrt(nu + eps_root) + eps) + wd p (every weight); p -= lr update.
  sgd (optax.sgd): p -= lr g.

Per step the metrics (loss, lm_loss, perplexity, z_loss, total_weights, grad_norm, raw_grad_norm,
param_norm, and moe_lb_loss with the load-balancing loss) must agree to --metric-rtol (|precast - torch| / |torch|; absolute where torch's is
0); after the last step every weight and optimizer moment to --state-rtol
(max |precast - torch| / max |torch| per tensor) and count exactly. One exemption, in f32
only: gpt3's key bias, along which the loss is flat (see flat_slice), is bounded instead. A
threshold that clips in every step or in none is reported too: the case must exercise both
branches. A weight the README math never reads is a failure. Exit status 0 on agreement, 1 on a
mismatch, 2 on bad usage.

Usage: torch_train_reference.py OUT_DIR --metric-rtol 1e-5 --state-rtol 1e-4
"""

import argparse
import math
import os
import re
import sys

try:
    import numpy as np
    import torch
except ImportError as error:
    print(f"torch_train_reference.py: {error}; the reference suite needs python3-numpy and "
          "python3-torch (tools/setup.sh installs them)", file=sys.stderr)
    sys.exit(1)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference  # noqa: E402
from torch_reference import BATCH_NAMES  # noqa: E402

HYPERPARAMETERS = ("learning_rate", "adam_b1", "adam_b2", "adam_eps", "adam_eps_root",
                   "adam_weight_decay", "gradient_clipping_threshold")
STEP_FILE = re.compile(r"step(\d+)\.(\w+)$")


class TrainRun:
    """train_runner's directory: starting weights, per-step batches, Precast's metrics and final
    state, as numpy arrays."""

    def __init__(self, directory):
        self.config = torch_reference.ModelConfig(os.path.join(directory, "config.txt"))
        self.weights, self.final, self.batches = {}, {}, {}
        self.metrics = None
        with open(os.path.join(directory, "manifest.txt")) as f:
            names = [line.split()[0] for line in f if line.strip()]
        for name in names:
            array = np.load(os.path.join(directory, name + ".npy"))
            step = STEP_FILE.match(name)
            if step and step.group(2) in BATCH_NAMES:
                self.batches.setdefault(int(step.group(1)), {})[step.group(2)] = array
            elif name == "out.metrics":
                self.metrics = array
            elif name.startswith("final."):
                self.final[name[len("final."):]] = array
            else:
                self.weights[name] = array
        self.metric_names = self.config.text("metrics").split(",")
        self.steps = self.config.int("steps")


def flat_slice(cfg, name):
    """The index (along the first axis) of the part of weight `name` along which the loss is flat
    in exact arithmetic, or None.

    gpt3's key bias, qkv_proj.bias[1], adds q . b_k to every score of a query's row, which the
    softmax ignores: its gradient is zero up to rounding (~1e-8 in f32 here, ~1e-17 in f64). Adam
    divides that noise by its own size (|g| ~ eps), so in f32 each implementation moves these
    weights by up to ~lr per step in a direction its rounding picks, and the two cannot agree to
    1e-4. In f64 the noise is far below eps and the whole tensor is compared as usual."""
    if cfg.text("family") == "gpt3" and name.endswith("self_attention.qkv_proj.bias"):
        return 1
    return None


def global_norm(tensors):
    return torch.sqrt(sum(torch.sum(t * t) for t in tensors))


class Trainer:
    """The PyTorch train step: weights as autograd leaves, optimizer state as plain tensors."""

    def __init__(self, run, dtype):
        cfg = run.config
        self.cfg = cfg
        self.dtype = dtype
        self.names = list(run.weights)
        self.params = {n: torch.from_numpy(run.weights[n]).to(dtype) for n in self.names}
        self.optimizer = cfg.text("optimizer")
        self.accumulation = cfg.int("gradient_accumulation_steps")
        # The f32 values the compiled step received, exactly.
        self.hyper = {k: torch.tensor(cfg.float(k), dtype=dtype) for k in HYPERPARAMETERS}
        self.no_decay = set(filter(None, cfg.text("weights_without_decay").split(",")))
        if self.optimizer in ("adamw", "adam_pax"):
            self.mu = {n: torch.zeros_like(p) for n, p in self.params.items()}
            self.nu = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.count = 0
        self.unused = set()
        # Per weight with a flat slice: the largest max|g[slice]| / max|g| over the steps.
        self.flat_gradient_ratio = {}

    def gradients(self, batch):
        """(gradients by weight, loss, z_loss, total_weights) of one optimizer step's batch."""
        leaves = {n: p.detach().clone().requires_grad_(True) for n, p in self.params.items()}
        G = self.accumulation
        grads = {n: torch.zeros_like(p) for n, p in self.params.items()}
        xent_sum = z_sum = total = lb_sum = torch.zeros((), dtype=self.dtype)
        has_lb = False
        for i in range(G):
            micro = {k: v[i::G] for k, v in batch.items()}  # rows i, i + G, ...
            weights = torch_reference.Weights(leaves, self.dtype)
            decoder = torch_reference.Decoder(self.cfg, weights, self.dtype)
            sums = decoder.loss_sums(decoder.logits(micro), micro)
            objective = sums[0] / (sums[2] + 1e-8) if G == 1 else sums[0]
            lb = decoder.moe_lb_loss()
            if lb is not None:  # MaxText adds it to what it differentiates, G == 1 or not
                objective = objective + lb
                lb_sum, has_lb = lb_sum + lb.detach(), True
            names = sorted(weights.used)
            derivatives = torch.autograd.grad(objective, [leaves[n] for n in names])
            for n, d in zip(names, derivatives):
                grads[n] = grads[n] + d
            self.unused |= set(weights.unused())
            xent_sum, z_sum, total = (xent_sum + sums[0].detach(), z_sum + sums[1].detach(),
                                      total + sums[2].detach())
        if G == 1:
            loss, z_loss = xent_sum / (total + 1e-8), z_sum / (total + 1e-8)
        else:
            denominator = torch.clamp(total, min=1.0)
            loss, z_loss = xent_sum / denominator, z_sum / denominator
            grads = {n: g / total for n, g in grads.items()}
        self.moe_lb_loss = lb_sum / G if has_lb else None
        return grads, loss, z_loss, total

    def clip(self, grads):
        """optax.clip_by_global_norm; returns (clipped gradients, raw norm, whether it clipped)."""
        raw = global_norm(grads.values())
        threshold = self.hyper["gradient_clipping_threshold"]
        clipping = bool(threshold > 0) and bool(raw >= threshold)
        if clipping:
            grads = {n: g / raw * threshold for n, g in grads.items()}
        return grads, raw, clipping

    def update(self, grads):
        h = self.hyper
        lr = h["learning_rate"]
        if self.optimizer == "sgd":
            for n in self.names:
                self.params[n] = self.params[n] - lr * grads[n]
            return
        self.count += 1
        t = torch.tensor(float(self.count), dtype=self.dtype)
        one = torch.ones((), dtype=self.dtype)
        b1, b2 = h["adam_b1"], h["adam_b2"]
        if self.optimizer == "adamw":
            decay1, decay2 = b1, b2
        else:  # adam_pax folds the bias correction into the decay

            def decay(b):
                return b * (one - b ** (t - one)) / (one - b ** t)

            decay1, decay2 = decay(b1), decay(b2)
        for n in self.names:
            g, p = grads[n], self.params[n]
            mu = (one - decay1) * g + decay1 * self.mu[n]
            nu = (one - decay2) * g * g + decay2 * self.nu[n]
            if self.optimizer == "adamw":
                mu_hat, nu_hat = mu / (one - b1 ** t), nu / (one - b2 ** t)
                decays = n not in self.no_decay
            else:
                mu_hat, nu_hat = mu, nu
                decays = bool(h["adam_weight_decay"] > 0)
            step = mu_hat / (torch.sqrt(nu_hat + h["adam_eps_root"]) + h["adam_eps"])
            if decays:
                step = step + h["adam_weight_decay"] * p
            self.params[n] = p - lr * step
            self.mu[n], self.nu[n] = mu, nu

    def step(self, batch):
        """One train step; returns (metrics by name, whether clipping was active)."""
        grads, loss, z_loss, total = self.gradients(batch)
        for n in self.names:
            flat = flat_slice(self.cfg, n)
            if flat is not None:
                ratio = float(grads[n][flat].abs().max() / grads[n].abs().max())
                self.flat_gradient_ratio[n] = max(self.flat_gradient_ratio.get(n, 0.0), ratio)
        clipped, raw, clipping = self.clip(grads)
        self.update(clipped)
        lb = self.moe_lb_loss
        metrics = {"loss": loss if lb is None else loss + lb, "lm_loss": loss,
                   "perplexity": torch.exp(loss), "z_loss": z_loss, "total_weights": total,
                   "grad_norm": global_norm(clipped.values()), "raw_grad_norm": raw,
                   "param_norm": global_norm(self.params.values())}
        if lb is not None:
            metrics["moe_lb_loss"] = lb
        return {k: float(v) for k, v in metrics.items()}, clipping

    def state(self):
        """The final state under train_runner's names (final.<name> without the prefix)."""
        out = {n: p for n, p in self.params.items()}
        if self.optimizer != "sgd":
            out.update({f"mu.{n}": m for n, m in self.mu.items()})
            out.update({f"nu.{n}": v for n, v in self.nu.items()})
        return {n: t.to(torch.float64).numpy() for n, t in out.items()}


def relative_error(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    error = float(np.max(np.abs(got - want))) if got.size else 0.0
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    return error, scale, (error / scale if scale > 0 else error)


def compare_metrics(run, trainer, rtol, failures):
    """Runs every step and compares its metrics; returns the steps in which clipping was active
    and the worst (step and metric, relative error)."""
    names = run.metric_names
    worst = ("", 0.0)
    print(f"{'step':>4} {'metric':<14} {'Precast':>14} {'torch':>14} {'relative':>10}")
    clipped_steps = []
    for k in range(run.steps):
        batch = {n: torch.from_numpy(run.batches[k][n].astype(np.int64)) for n in BATCH_NAMES}
        reference, clipping = trainer.step(batch)
        if clipping:
            clipped_steps.append(k)
        for m, name in enumerate(names):
            got = float(run.metrics[k, m])
            _, _, relative = relative_error(got, reference[name])
            print(f"{k:>4} {name:<14} {got:14.8g} {reference[name]:14.8g} {relative:10.2e}")
            worst = max(worst, (f"step {k} {name}", relative), key=lambda x: x[1])
            if not math.isfinite(got) or relative > rtol:
                failures.append(f"step {k} metric {name}: Precast {got:.9g}, torch "
                                f"{reference[name]:.9g}, relative error {relative:.3e} > {rtol:g}")
    return clipped_steps, worst


def check_flat_slice(run, trainer, name, flat, failures):
    """What can be checked of a flat slice in f32 (see flat_slice): torch's gradient there stays
    at rounding level, and Precast moved it no further from torch than two Adam steps of at most
    ~1.25 lr each per step would."""
    ratio = trainer.flat_gradient_ratio[name]
    error = float(np.max(np.abs(run.final[name][flat] - trainer.state()[name][flat])))
    bound = 2.5 * run.steps * run.config.float("learning_rate")
    print(f"NOTE {name}[{flat}] is compared apart: the loss is flat along it (torch's max "
          f"|gradient| there / the tensor's <= {ratio:.1e}), max abs err {error:.3e}, bound "
          f"{bound:.3e}")
    if ratio > 1e-5:
        failures.append(f"{name}[{flat}]: torch's gradient there is {ratio:.3e} of the tensor's, "
                        "not rounding noise; the flat-slice exemption does not apply")
    if not error <= bound:
        failures.append(f"after step {run.steps - 1}: final {name}[{flat}] max abs err "
                        f"{error:.3e} > {bound:.3e} = 2.5 x steps x learning_rate")


def compare_state(run, trainer, rtol, failures):
    reference = trainer.state()
    print(f"{'final tensor':<58} {'max abs err':>11} {'max abs ref':>11} {'relative':>10}")
    worst = ("", 0.0)
    for name, want in reference.items():
        if name not in run.final:
            failures.append(f"final {name}: Precast wrote no final.{name}.npy")
            continue
        got = run.final[name]
        if got.shape != want.shape:
            failures.append(f"final {name}: Precast's shape {list(got.shape)}, torch's "
                            f"{list(want.shape)}")
            continue
        flat = flat_slice(run.config, name) if name in trainer.names else None
        if flat is not None and trainer.dtype == torch.float32:
            check_flat_slice(run, trainer, name, flat, failures)
            rest = np.ones(want.shape, dtype=bool)
            rest[flat] = False
            got, want = got[rest], want[rest]
        error, scale, relative = relative_error(got, want)
        print(f"{name:<58} {error:11.3e} {scale:11.3e} {relative:10.2e}")
        worst = max(worst, (name, relative), key=lambda x: x[1])
        if not np.isfinite(got).all() or relative > rtol:
            failures.append(f"after step {run.steps - 1}: final {name} relative error "
                            f"{relative:.3e} > {rtol:g} (max abs err {error:.3e})")
    expected = set(reference) | ({"count"} if trainer.optimizer != "sgd" else set())
    for name in sorted(set(run.final) - expected):
        failures.append(f"final {name}: Precast wrote state the {trainer.optimizer} reference "
                        "does not have")
    if trainer.optimizer != "sgd":
        count = int(run.final["count"]) if "count" in run.final else None
        if count != trainer.count:
            failures.append(f"final count: Precast {count}, torch {trainer.count}")
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="directory train_runner wrote")
    parser.add_argument("--metric-rtol", type=float, required=True,
                        help="largest allowed |precast - torch| / |torch| per metric and step")
    parser.add_argument("--state-rtol", type=float, required=True,
                        help="largest allowed max-abs-error / max-abs-reference per final tensor")
    args = parser.parse_args()
    torch.set_num_threads(1)

    run = TrainRun(args.out_dir)
    cfg = run.config
    dtype = {"f64": torch.float64, "f32": torch.float32}[cfg.text("dtype")]
    trainer = Trainer(run, dtype)
    threshold = cfg.float("gradient_clipping_threshold")
    print(f"{cfg.text('model_name')} ({cfg.text('family')}), {cfg.text('dtype')}, "
          f"{trainer.optimizer}, G {trainer.accumulation}, {run.steps} steps, lr "
          f"{cfg.float('learning_rate'):.6g}, clipping threshold {threshold:g}, "
          f"{len(trainer.no_decay)} weight(s) without decay; metric rtol "
          f"{args.metric_rtol:g}, state rtol {args.state_rtol:g}")
    failures = []
    clipped_steps, worst_metric = compare_metrics(run, trainer, args.metric_rtol, failures)
    worst_name, worst = compare_state(run, trainer, args.state_rtol, failures)
    print(f"clipping active in steps {clipped_steps} of 0..{run.steps - 1}")
    for name in sorted(trainer.unused):
        failures.append(f"weight {name} was written but the README math does not use it")
    if threshold > 0 and run.steps > 1 and len(clipped_steps) in (0, run.steps):
        failures.append(f"clipping threshold {threshold:g} clips in {len(clipped_steps)} of "
                        f"{run.steps} steps: choose one between the raw grad norms so the case "
                        "covers both branches")
    print(f"worst metric: {worst_metric[0]} ({worst_metric[1]:.2e}); worst final tensor: "
          f"{worst_name} ({worst:.2e})")
    for failure in failures:
        print(f"MISMATCH {failure}")
    print("FAIL" if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
