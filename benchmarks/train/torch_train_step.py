#!/usr/bin/python3
"""PyTorch peer for benchmarks/train/throughput.sh: the same llama2-style model and batch as a
Precast artifact compiled from configs/base.yml with the given dimensions, trained in float32
with torch.optim.AdamW, timed per step.

The model is tests/reference/torch_reference.py's Decoder (written from
compiler/frontend/README.md, independently of Precast's frontend), imported, not copied; the
gradient comes from torch.autograd. Weights are drawn with the README's initialisers (MaxText's
variances), the batch is MaxText's synthetic batch (uniform random tokens, positions 0..T-1,
segmentation all ones, the same batch every step), and a step is what Precast's train step does
with base.yml's defaults: forward, loss, backward, global-norm clipping at 1.0, AdamW (b1 0.9,
b2 0.95, eps 1e-8, weight decay 0.1). Precast's default remat policy (`full`) recomputes
activations in the backward pass; eager PyTorch keeps them (no recomputation).

Prints `torch params: N` (the exact parameter count), `model flops per step: F` (MaxText's
formula, as precast reports it), then one line per step:
  torch step: K, seconds: S, tokens/s: X, loss: L

With --warmup W, W untimed steps come first, each printed as `torch warmup: K, ...`.

Usage: torch_train_step.py --emb 256 --layers 4 --heads 4 --kv-heads 4 --head-dim 64 --mlp 768
       --vocab 1024 --batch 8 --seq 256 --steps 5 --threads 2 [--model sdpa [--compile]]
Run it with Debian's /usr/bin/python3 (python3-torch 1.13: --model fused or reference), or, for
--model sdpa and --compile (PyTorch 2.x), with the virtual environment's python that
setup_torch_venv.sh makes.
"""

import argparse
import math
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import torch_reference  # noqa: E402


class Config(torch_reference.ModelConfig):
    """torch_reference's ModelConfig from a dict instead of forward_runner's config.txt."""

    def __init__(self, values):  # pylint: disable=super-init-not-called
        self.values = {k: str(v) for k, v in values.items()}


def model_config(a):
    # base.yml's llama2 defaults for everything the dimensions do not set.
    return Config({
        "family": "llama2", "model_name": "default", "dtype": "f32",
        "rows": a.batch, "length": a.seq,
        "emb_dim": a.emb, "num_query_heads": a.heads, "num_kv_heads": a.kv_heads,
        "head_dim": a.head_dim, "mlp_dim": a.mlp, "vocab_size": a.vocab,
        "num_decoder_layers": a.layers, "mlp_activations": "silu,linear",
        "normalization_layer_epsilon": 1e-5, "rope_min_timescale": 1,
        "rope_max_timescale": 10000, "rope_style": "halves", "rope_use_scale": "true",
        "rope_linear_scaling_factor": 1.0, "local_rope_max_timescale": -1,
        "attention_type": "global", "sliding_window_size": 0, "attn_logits_soft_cap": 0.0,
        "final_logits_soft_cap": 0.0, "logits_via_embedding": "false",
        "normalize_embedding_logits": "true", "z_loss_multiplier": 0.0,
        "use_post_attn_norm": "false", "use_post_ffw_norm": "false",
        "trainable_position_size": -1, "use_qk_norm": "false", "attention_bias": "false",
        # YaRN's settings (olmo3's rope), read by torch_reference's rope; unused by halves.
        "rope_factor": 1.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
        "beta_slow": 1.0, "rope_interleave": "false", "rope_truncate": "true",
        "rope_attention_scaling": "false",
        # gpt_oss's attention sinks and biases, read by torch_reference; off for llama2.
        "attention_sink": "false", "mlp_bias": "false", "mlp_activations_limit": -1.0,
    })


def use_fused_ops():
    """Swaps three of torch_reference's deliberately naive pieces for the ops an eager PyTorch
    model would use, same math: attention as batched matmuls with the causal (and, when the
    batch has several segments, segment) mask filled in place; silu as F.silu; kv heads repeated
    only when grouped. The rest (RMSNorm, RoPE, einsum projections, loss) is torch_reference's."""
    reference_activation = torch_reference.activation
    masks = {}

    def activation(name, x):
        if name == "silu":
            return torch.nn.functional.silu(x)
        if name == "linear":
            return x
        return reference_activation(name, x)

    def attention(q, k, v, segments, window, cap, sinks=None, chunk=0):
        if window > 0 or cap > 0 or sinks is not None or chunk > 0:
            raise ValueError("the fused attention covers global, uncapped, unchunked attention "
                             "without sinks only")
        length, group = q.shape[1], q.shape[2] // k.shape[2]
        if group > 1:
            k = torch.repeat_interleave(k, group, dim=2)
            v = torch.repeat_interleave(v, group, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [R, H, T, D]
        scores = torch.matmul(q, k.transpose(2, 3))
        if length not in masks:
            masks[length] = torch.ones(length, length, dtype=torch.bool).triu(1)
        hidden = masks[length][None, None]
        if bool(segments.min() != segments.max()):
            hidden = hidden | (segments[:, :, None] != segments[:, None, :])[:, None]
        scores = scores.masked_fill(hidden, torch_reference.MASK_VALUE)
        return torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2)

    torch_reference.activation = activation
    torch_reference.attention = attention


def use_sdpa(single_segment):
    """use_fused_ops() with attention as torch.nn.functional.scaled_dot_product_attention
    (PyTorch 2.x): causal, at scale 1 (MaxText folds 1/sqrt(head_dim) into the query kernel's
    initialiser, so the reference's scores are plain q.k), kv heads repeated only when grouped.
    `single_segment` (decided once from the batch, outside any compiled code) picks is_causal;
    otherwise the causal and same-segment mask is passed as a boolean attn_mask."""
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        sys.exit(f"--model sdpa needs PyTorch 2.x (this is {torch.__version__}): run it with "
                 "the python of benchmarks/train/setup_torch_venv.sh's environment")
    use_fused_ops()
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def attention(q, k, v, segments, window, cap, sinks=None, chunk=0):
        if window > 0 or cap > 0 or sinks is not None or chunk > 0:
            raise ValueError("the sdpa attention covers global, uncapped, unchunked attention "
                             "without sinks only")
        length, group = q.shape[1], q.shape[2] // k.shape[2]
        if group > 1:
            k = torch.repeat_interleave(k, group, dim=2)
            v = torch.repeat_interleave(v, group, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [R, H, T, D]
        if single_segment:
            return sdpa(q, k, v, is_causal=True, scale=1.0).transpose(1, 2)
        visible = torch.ones(length, length, dtype=torch.bool).tril()[None] & (
            segments[:, :, None] == segments[:, None, :])
        return sdpa(q, k, v, attn_mask=visible[:, None], scale=1.0).transpose(1, 2)

    torch_reference.attention = attention


def weight_shapes(a):
    """Name -> shape of every llama2 weight, in the README's order."""
    E, H, K, D, M, V = a.emb, a.heads, a.kv_heads, a.head_dim, a.mlp, a.vocab
    shapes = {"token_embedder.embedding": (V, E)}
    for i in range(a.layers):
        p = f"decoder.layers_{i}."
        shapes[p + "pre_self_attention_layer_norm.scale"] = (E,)
        shapes[p + "self_attention.query.kernel"] = (E, H, D)
        shapes[p + "self_attention.key.kernel"] = (E, K, D)
        shapes[p + "self_attention.value.kernel"] = (E, K, D)
        shapes[p + "self_attention.out.kernel"] = (H, D, E)
        shapes[p + "post_self_attention_layer_norm.scale"] = (E,)
        shapes[p + "mlp.wi_0.kernel"] = (E, M)
        shapes[p + "mlp.wi_1.kernel"] = (E, M)
        shapes[p + "mlp.wo.kernel"] = (M, E)
    shapes["decoder.decoder_norm.scale"] = (E,)
    shapes["decoder.logits_dense.kernel"] = (E, V)
    return shapes


def initial_weights(cfg, shapes, generator):
    weights = {}
    for name, shape in shapes.items():
        init = torch_reference.readme_initializer(name, cfg)
        if init[0] == "ones":
            w = torch.ones(shape)
        elif init[0] == "zeros":
            w = torch.zeros(shape)
        else:
            w = torch.randn(shape, generator=generator) * init[1]
        weights[name] = w.requires_grad_(True)
    return weights


def synthetic_batch(a, generator):
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=generator)
    positions = torch.arange(a.seq + 1).expand(a.batch, a.seq + 1)
    ones = torch.ones(a.batch, a.seq, dtype=torch.int64)
    return {"inputs": tokens[:, :-1], "inputs_position": positions[:, :-1].contiguous(),
            "inputs_segmentation": ones, "targets": tokens[:, 1:].contiguous(),
            "targets_position": positions[:, 1:].contiguous(), "targets_segmentation": ones}


def model_flops_per_step(a):
    """MaxText's model FLOPs per train step (forward + backward = 3 x forward): 2 per multiply-add
    of every weight contraction (q, k, v, out, both wi, wo, logits; not the embedding lookup) and
    4 R H D pairs per layer for causal attention, pairs = T^2 / 2. The `Total TFLOPs` precast
    prints (compiler/frontend/README.md, FLOPs)."""
    tokens = a.batch * a.seq
    E, H, K, D, M = a.emb, a.heads, a.kv_heads, a.head_dim, a.mlp
    per_layer = 2 * tokens * (E * (H + 2 * K) * D + H * D * E + 3 * E * M)
    attention = 4 * a.batch * H * D * a.seq * a.seq / 2
    return 3 * (a.layers * (per_layer + attention) + 2 * tokens * E * a.vocab)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("emb", "layers", "heads", "kv_heads", "head_dim", "mlp", "vocab", "batch", "seq",
                 "steps", "threads"):
        parser.add_argument("--" + flag.replace("_", "-"), type=int, required=True)
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", choices=("fused", "sdpa", "reference"), default="fused",
                        help="fused: torch_reference's Decoder with use_fused_ops(); sdpa: the same "
                        "with scaled_dot_product_attention (PyTorch 2.x); reference: "
                        "torch_reference as it is (naive attention, explicit masks)")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile (PyTorch 2.x, Inductor, default mode) the forward and "
                        "loss; autograd runs the compiled backward; clipping and AdamW stay eager")
    parser.add_argument("--warmup", type=int, default=0,
                        help="untimed steps before the --steps ones (printed as `torch warmup:`), "
                        "e.g. for torch.compile's compilation and recompilations")
    a = parser.parse_args()
    if a.model == "fused":
        use_fused_ops()

    torch.set_num_threads(a.threads)
    cfg = model_config(a)
    generator = torch.Generator().manual_seed(a.seed)
    shapes = weight_shapes(a)
    weights = initial_weights(cfg, shapes, generator)
    batch = synthetic_batch(a, generator)
    if a.model == "sdpa":
        segments = batch["inputs_segmentation"]
        use_sdpa(bool(segments.min() == segments.max()))
    params = sum(math.prod(s) for s in shapes.values())
    print(f"torch params: {params}")
    print(f"model flops per step: {model_flops_per_step(a):.0f}")
    print(f"torch {torch.__version__}, model {a.model}{', torch.compile' if a.compile else ''}, "
          f"threads {torch.get_num_threads()}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '-')}", flush=True)

    names = list(weights)
    leaves = [weights[n] for n in names]
    # MaxText's adamw_mask is empty by default: every weight decays.
    optimizer = torch.optim.AdamW(leaves, lr=a.learning_rate, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=0.1)
    def loss_of(weights, batch):
        decoder = torch_reference.Decoder(cfg, torch_reference.Weights(weights, torch.float32),
                                          torch.float32)
        loss, _, _ = decoder.loss(decoder.logits(batch), batch)
        return loss

    if a.compile:
        if not hasattr(torch, "compile"):
            sys.exit(f"--compile needs PyTorch 2.x (this is {torch.__version__})")
        loss_of = torch.compile(loss_of)
    tokens = a.batch * a.seq
    for step in range(-a.warmup, a.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(weights, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(leaves, 1.0)
        optimizer.step()
        seconds = time.perf_counter() - start
        label = f"warmup: {step + a.warmup}" if step < 0 else f"step: {step}"
        print(f"torch {label}, seconds: {seconds:.3f}, tokens/s: {tokens / seconds:.3f}, "
              f"loss: {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
