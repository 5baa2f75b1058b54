#!/usr/bin/python3
"""benchmarks/train/torch_train_step.py (the PyTorch peer of ddp.sh and throughput.sh) runs, and
its printed step-0 loss is the loss of its weights and batch computed here from scratch.

The script runs 3 steps of a tiny llama2 (E 32, 2 layers, 4 query heads over 2 kv heads of 8,
M 64, V 64, 2 rows of 16 tokens, seed 0), once with --model fused (what ddp.sh runs) and once with
--model reference (torch_reference as it is). Checked:
  * both print the same 3 losses, and the step-0 loss is 4.6081 (pinned: a change of the
    script's initialisers, batch or model moves it);
  * that step-0 loss equals the cross entropy computed below in float64 numpy (RMSNorm, RoPE
    halves, grouped causal attention, silu-gated MLP, logits, mean over the real tokens) from
    the script's own initial weights and batch, written from compiler/frontend/README.md without
    torch_reference;
  * the losses after AdamW steps 1 and 2 go down.
Exit status 0 on success, 1 with a message naming the mismatch."""

import math
import os
import re
import subprocess
import sys
import types

import numpy as np

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "train", "torch_train_step.py")
DIMS = {"emb": 32, "layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 8, "mlp": 64,
        "vocab": 64, "batch": 2, "seq": 16}
PINNED_STEP0 = 4.6081


def fail(message):
    print(f"torch_train_step_test: FAIL: {message}")
    sys.exit(1)


def run_script(model):
    args = [sys.executable, SCRIPT, "--steps", "3", "--threads", "1", "--model", model]
    for key, value in DIMS.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        fail(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    losses = [float(m) for m in re.findall(r"^torch step: \d+, .*loss: ([0-9.]+)$",
                                            done.stdout, re.MULTILINE)]
    if len(losses) != 3:
        fail(f"--model {model} printed {len(losses)} step lines, not 3:\n{done.stdout}")
    return losses


def rms_norm(x, scale, eps=1e-5):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * scale


def rope_halves(x, positions):
    """x [R, T, N, D]: the first and second halves rotated as pairs, timescale 10000^(2i/D)."""
    d = x.shape[-1]
    timescale = 10000.0 ** (2.0 * np.arange(d // 2) / d)
    angle = positions[:, :, None, None] / timescale  # [R, T, 1, D/2]
    first, second = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([first * np.cos(angle) - second * np.sin(angle),
                           second * np.cos(angle) + first * np.sin(angle)], axis=-1)


def numpy_loss(w, batch):
    E, H, K, D = DIMS["emb"], DIMS["heads"], DIMS["kv_heads"], DIMS["head_dim"]
    T = DIMS["seq"]
    pos = batch["inputs_position"]
    x = w["token_embedder.embedding"][batch["inputs"]]  # [R, T, E]
    causal = np.tril(np.ones((T, T), dtype=bool))
    for i in range(DIMS["layers"]):
        p = f"decoder.layers_{i}."
        y = rms_norm(x, w[p + "pre_self_attention_layer_norm.scale"])
        q = rope_halves(np.einsum("rte,ehd->rthd", y, w[p + "self_attention.query.kernel"]), pos)
        k = rope_halves(np.einsum("rte,ekd->rtkd", y, w[p + "self_attention.key.kernel"]), pos)
        v = np.einsum("rte,ekd->rtkd", y, w[p + "self_attention.value.kernel"])
        context = np.zeros_like(q)
        for h in range(H):
            kv = h // (H // K)
            scores = np.einsum("rtd,rsd->rts", q[:, :, h], k[:, :, kv])
            scores = np.where(causal[None], scores, -np.inf)
            probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs /= probs.sum(axis=-1, keepdims=True)
            context[:, :, h] = np.einsum("rts,rsd->rtd", probs, v[:, :, kv])
        x = x + np.einsum("rthd,hde->rte", context, w[p + "self_attention.out.kernel"])
        y = rms_norm(x, w[p + "post_self_attention_layer_norm.scale"])
        gate = y @ w[p + "mlp.wi_0.kernel"]
        hidden = gate / (1.0 + np.exp(-gate)) * (y @ w[p + "mlp.wi_1.kernel"])
        x = x + hidden @ w[p + "mlp.wo.kernel"]
    logits = rms_norm(x, w["decoder.decoder_norm.scale"]) @ w["decoder.logits_dense.kernel"]
    top = logits.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(axis=-1)) + top[..., 0]
    target = np.take_along_axis(logits, batch["targets"][..., None], axis=-1)[..., 0]
    real = (batch["targets_segmentation"] != 0).astype(np.float64)
    return float(((lse - target) * real).sum() / (real.sum() + 1e-8))


def main():
    fused, reference = run_script("fused"), run_script("reference")
    if fused != reference:
        fail(f"--model fused printed losses {fused}, --model reference {reference}")
    if abs(fused[0] - PINNED_STEP0) > 5e-5:
        fail(f"step-0 loss {fused[0]}, expected {PINNED_STEP0}")
    if not fused[0] > fused[1] > fused[2]:
        fail(f"losses {fused} do not go down over the AdamW steps")

    # The script's own weights and batch (the same generator calls as its main()).
    import torch  # noqa: PLC0415 (after the subprocess runs: only needed here)
    sys.path.insert(0, os.path.dirname(SCRIPT))
    import torch_train_step  # noqa: PLC0415
    a = types.SimpleNamespace(seed=0, **DIMS)
    generator = torch.Generator().manual_seed(a.seed)
    weights = torch_train_step.initial_weights(torch_train_step.model_config(a),
                                               torch_train_step.weight_shapes(a), generator)
    batch = torch_train_step.synthetic_batch(a, generator)
    w = {name: t.detach().double().numpy() for name, t in weights.items()}
    b = {name: t.numpy() for name, t in batch.items()}
    expected = numpy_loss(w, b)
    if abs(expected - fused[0]) > 1e-4:
        fail(f"step-0 loss printed {fused[0]}, numpy computes {expected:.6f}")
    print(f"torch_train_step_test: PASS: losses {fused} (both models), numpy step 0 "
          f"{expected:.6f}, ln V = {math.log(DIMS['vocab']):.4f}")


if __name__ == "__main__":
    main()
