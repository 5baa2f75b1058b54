"""A from-scratch PyTorch forward of the decoder families in compiler/frontend/README.md.

The independent oracle for Precast's lowered forward: it reads the README's math, not the
frontend's code. Weights come by name from forward_runner's .npy files; every weight is taken
with the shape the README's table gives, and the caller can ask which weights were never used.
Attention is written naively (full [T, S] scores and explicit masks) on purpose.
"""

import math
import os

import numpy as np
import torch

# Masked attention scores: -0.7 x the largest finite float32, whatever the compute dtype.
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)

BATCH_NAMES = ("inputs", "inputs_position", "inputs_segmentation", "targets",
               "targets_position", "targets_segmentation")
OUTPUT_NAMES = ("loss", "z_loss", "total_weights", "logits")


class ModelConfig:
    """config.txt: one `key value` pair a line, written by forward_runner from the ModelSpec."""

    def __init__(self, path):
        self.values = {}
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    key, _, value = line.partition(" ")
                    self.values[key] = value

    def text(self, key):
        return self.values[key]

    def int(self, key):
        return int(self.values[key])

    def float(self, key):
        return float(self.values[key])

    def flag(self, key):
        return self.values[key] == "true"


class Weights:
    """Named weights with README shapes; records which names the math used."""

    def __init__(self, arrays, dtype):
        self.arrays = arrays
        self.dtype = dtype
        self.used = set()

    def has(self, name):
        return name in self.arrays

    def get(self, name, shape):
        if name not in self.arrays:
            raise KeyError(f"weight {name} (README shape {list(shape)}) is missing")
        array = self.arrays[name]
        if tuple(array.shape) != tuple(shape):
            raise ValueError(f"weight {name} has shape {list(array.shape)}, the README says "
                             f"{list(shape)}")
        self.used.add(name)
        if torch.is_tensor(array):  # a training leaf: autograd must see this very tensor
            return array
        return torch.from_numpy(array).to(self.dtype)

    def unused(self):
        return sorted(set(self.arrays) - self.used)


class Run:
    """forward_runner's directory: manifest.txt and every .npy it lists, as numpy arrays."""

    def __init__(self, directory):
        self.config = ModelConfig(os.path.join(directory, "config.txt"))
        self.weights, self.initial, self.batch, self.outputs = {}, {}, {}, {}
        with open(os.path.join(directory, "manifest.txt")) as f:
            names = [line.split()[0] for line in f if line.strip()]
        for name in names:
            array = np.load(os.path.join(directory, name + ".npy"))
            if name in BATCH_NAMES:
                self.batch[name] = array
            elif name.startswith("out."):
                self.outputs[name[len("out."):]] = array
            elif name.startswith("init."):
                self.initial[name[len("init."):]] = array
            else:
                self.weights[name] = array


def rms_norm(x, scale, eps):
    return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps) * scale


def layer_norm(x, scale, bias, eps):
    """gpt3's LayerNorm: biased variance, scale applied as (1 + scale)."""
    centered = x - torch.mean(x, dim=-1, keepdim=True)
    variance = torch.mean(centered * centered, dim=-1, keepdim=True)
    return centered * torch.rsqrt(variance + eps) * (1 + scale) + bias


def activation(name, x):
    if name == "silu":
        return x * torch.sigmoid(x)
    if name == "gelu":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1 + torch.tanh(inner))
    if name == "sigmoid":
        return torch.sigmoid(x)
    if name == "relu":
        return torch.clamp(x, min=0)
    if name == "linear":
        return x
    raise ValueError(f"activation {name} is not in the README")


def soft_cap(x, cap):
    return cap * torch.tanh(x / cap) if cap > 0 else x


def rope_frequencies(cfg, local, d):
    """1 / timescale_i for i < D/2, in float64, with llama3.1's scaling when it applies; the
    halves style stretches timescales by rope_linear_scaling_factor and lets sliding-window
    layers use local_rope_max_timescale. d: the rotated width (head_dim; MLA's qk_rope_head_dim)."""
    low, high = cfg.float("rope_min_timescale"), cfg.float("rope_max_timescale")
    halves = cfg.text("rope_style") != "llama3.1"
    stretch = cfg.float("rope_linear_scaling_factor") if halves else 1.0
    if local and cfg.text("family") == "gemma3":  # gemma3's local layers are not stretched
        stretch = 1.0
    if halves and local and cfg.float("local_rope_max_timescale") > 0:
        high = cfg.float("local_rope_max_timescale")
    frequencies = []
    for i in range(d // 2):
        timescale = low * (high / low) ** (2 * i / d) * stretch
        frequency = 1 / timescale
        if cfg.text("rope_style") == "llama3.1" and cfg.flag("rope_use_scale"):
            factor, low_factor, high_factor, context = 8.0, 1.0, 4.0, 8192.0
            wavelength = 2 * math.pi / frequency
            if wavelength > context / low_factor:
                frequency = frequency / factor
            elif wavelength >= context / high_factor:
                smooth = (context / wavelength - low_factor) / (high_factor - low_factor)
                frequency = (1 - smooth) * frequency / factor + smooth * frequency
        frequencies.append(frequency)
    return torch.tensor(frequencies, dtype=torch.float64)


def yarn_frequencies(cfg, d):
    """YaRN (the README's formula): base_i = theta^(-2i/D) blended towards base_i / rope_factor
    over the correction range [low, high] of dimensions, found from beta_fast and beta_slow
    rotations within original_max_position_embeddings. d: the rotated width."""
    theta = cfg.float("rope_max_timescale")
    context = cfg.float("original_max_position_embeddings")

    def dimension_of(rotations):
        return d * math.log(context / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dimension_of(cfg.float("beta_fast")), dimension_of(cfg.float("beta_slow"))
    if cfg.flag("rope_truncate"):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    frequencies = []
    for i in range(d // 2):
        base = theta ** (-2 * i / d)
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)  # 0 below the range, 1 above
        frequencies.append(base * (1 - ramp) + base / cfg.float("rope_factor") * ramp)
    return torch.tensor(frequencies, dtype=torch.float64)


def rope(x, positions, cfg, dtype, local):
    """x [R, T, N, D] rotated at positions [R, T]: halves, llama3.1's interleaved pairs, or
    YaRN (every layer; pairs in with rope_interleave, halves out; scaled by 0.1 ln(factor) + 1
    with rope_attention_scaling)."""
    half = x.shape[-1] // 2
    style = cfg.text("rope_style")
    d = x.shape[-1]
    frequencies = yarn_frequencies(cfg, d) if style == "yarn" else rope_frequencies(cfg, local, d)
    angle = positions.to(dtype)[:, :, None] * frequencies.to(dtype)  # [R, T, D/2]
    sin = torch.sin(angle)[:, :, None, :]
    cos = torch.cos(angle)[:, :, None, :]
    pairs_in = style == "llama3.1" or (style == "yarn" and cfg.flag("rope_interleave"))
    if pairs_in:
        first, second = x[..., 0::2], x[..., 1::2]
    else:
        first, second = x[..., :half], x[..., half:]
    out_first = first * cos - second * sin
    out_second = second * cos + first * sin
    if style == "llama3.1":
        return torch.stack([out_first, out_second], dim=-1).reshape(x.shape)
    out = torch.cat([out_first, out_second], dim=-1)
    factor = cfg.float("rope_factor")
    if style == "yarn" and cfg.flag("rope_attention_scaling") and factor > 1:
        out = out * (0.1 * math.log(factor) + 1.0)
    return out


def attention(q, k, v, segments, window, cap, sinks=None, chunk=0):
    """Causal, segment-masked, optionally windowed and soft-capped; query head h reads kv head
    h // (H / K). Full [T, S] score matrices, explicit masks. sinks [H] (gpt_oss): one more
    column of scores per query head, the sink's logit, whose value is zero — it only joins the
    softmax's denominator."""
    rows, length, heads, _ = q.shape
    group = heads // k.shape[2]
    k = torch.repeat_interleave(k, group, dim=2)
    v = torch.repeat_interleave(v, group, dim=2)
    scores = soft_cap(torch.einsum("rthd,rshd->rhts", q, k), cap)
    t = torch.arange(length)[:, None]
    s = torch.arange(length)[None, :]
    visible = s <= t
    if window > 0:
        visible = visible & ((t - s).abs() < window)
    if chunk > 0:  # llama4's chunked layers: causal within chunks of `chunk` tokens
        visible = visible & (t // chunk == s // chunk)
    same_segment = segments[:, :, None] == segments[:, None, :]  # [R, T, S]
    visible = (visible[None, :, :] & same_segment)[:, None, :, :]  # [R, 1, T, S]
    scores = torch.where(visible, scores, torch.full_like(scores, MASK_VALUE))
    if sinks is not None:
        sink_column = sinks.to(scores.dtype)[None, :, None, None].expand(rows, heads, length, 1)
        probabilities = torch.softmax(torch.cat([scores, sink_column], dim=-1), dim=-1)[..., :-1]
    else:
        probabilities = torch.softmax(scores, dim=-1)
    return torch.einsum("rhts,rshd->rthd", probabilities, v)


class Decoder:
    def __init__(self, cfg, weights, dtype):
        self.cfg = cfg
        self.w = weights
        self.dtype = dtype
        self.family = cfg.text("family")
        self.E = cfg.int("emb_dim")
        self.H = cfg.int("num_query_heads")
        self.K = cfg.int("num_kv_heads")
        self.D = cfg.int("head_dim")
        self.M = cfg.int("mlp_dim")
        self.V = cfg.int("vocab_size")
        self.eps = cfg.float("normalization_layer_epsilon")
        self.activations = cfg.text("mlp_activations").split(",")
        self.lb_losses = []  # each MoE layer's load-balancing loss, filled by logits()

    def norm(self, x, prefix):
        if self.family == "gpt3":
            return layer_norm(x, self.w.get(prefix + ".scale", (self.E,)),
                              self.w.get(prefix + ".bias", (self.E,)), self.eps)
        return rms_norm(x, self.w.get(prefix + ".scale", (self.E,)), self.eps)

    def attention(self, x, prefix, window, batch, nope=False, chunk=0):
        E, H, K, D = self.E, self.H, self.K, self.D
        if self.family == "gpt3":
            qkv = torch.einsum("rte,eshd->rtshd", x, self.w.get(prefix + "qkv_proj.kernel",
                                                                  (E, 3, H, D)))
            qkv = qkv + self.w.get(prefix + "qkv_proj.bias", (3, H, D))
            q, k, v = qkv[:, :, 0] / math.sqrt(D), qkv[:, :, 1], qkv[:, :, 2]
        else:
            q = torch.einsum("rte,ehd->rthd", x, self.w.get(prefix + "query.kernel", (E, H, D)))
            k = torch.einsum("rte,ekd->rtkd", x, self.w.get(prefix + "key.kernel", (E, K, D)))
            v = torch.einsum("rte,ekd->rtkd", x, self.w.get(prefix + "value.kernel", (E, K, D)))
            if self.family in ("qwen2", "gpt_oss") and self.cfg.flag("attention_bias"):
                q = q + self.w.get(prefix + "query.bias", (H, D))
                k = k + self.w.get(prefix + "key.bias", (K, D))
                v = v + self.w.get(prefix + "value.bias", (K, D))
            # olmo3 (use_qk_norm): over all heads at once, [H*D] and [K*D] scales, before RoPE
            if self.family == "olmo3" and self.cfg.flag("use_qk_norm"):
                rows, length = q.shape[0], q.shape[1]
                q = rms_norm(q.reshape(rows, length, H * D),
                             self.w.get(prefix + "query_norm.scale", (H * D,)),
                             self.eps).reshape(rows, length, H, D)
                k = rms_norm(k.reshape(rows, length, K * D),
                             self.w.get(prefix + "key_norm.scale", (K * D,)),
                             self.eps).reshape(rows, length, K, D)
            # qwen3 (use_qk_norm) and gemma3 (always): per head, over D, before RoPE
            elif (self.cfg.flag("use_qk_norm") and self.family != "llama4") or \
                    self.family == "gemma3":
                q = rms_norm(q, self.w.get(prefix + "query_norm.scale", (D,)), self.eps)
                k = rms_norm(k, self.w.get(prefix + "key_norm.scale", (D,)), self.eps)
            if not nope:
                q = rope(q, batch["inputs_position"], self.cfg, self.dtype, window > 0)
                k = rope(k, batch["inputs_position"], self.cfg, self.dtype, window > 0)
            if self.family == "llama4" and self.cfg.flag("use_qk_norm") and not nope:
                # L2 norm over D after RoPE, no scale
                q = q * torch.rsqrt((q * q).mean(-1, keepdim=True) + self.eps)
                k = k * torch.rsqrt((k * k).mean(-1, keepdim=True) + self.eps)
            if self.family in ("qwen3", "qwen2", "olmo3", "qwen3_moe", "gpt_oss", "llama4"):
                q = q / math.sqrt(D)  # q * D^-0.5
            if self.family == "llama4" and nope and self.cfg.flag("temperature_tuning"):
                position = batch["inputs_position"].to(q.dtype)
                scale = torch.log(torch.floor((position + 1) / 8192) + 1) * 0.1 + 1
                q = q * scale[:, :, None, None]
            if self.family == "gemma3":  # D^-0.5, but (E // H)^-0.5 for gemma3-27b
                depth = E // H if self.cfg.text("model_name").startswith("gemma3-27b") else D
                q = q / math.sqrt(depth)
        sinks = self.w.get(prefix + "sinks", (H,)) if self.cfg.flag("attention_sink") else None
        context = attention(q, k, v, batch["inputs_segmentation"], window,
                            self.cfg.float("attn_logits_soft_cap"), sinks, chunk)
        out = torch.einsum("rthd,hde->rte", context, self.w.get(prefix + "out.kernel", (H, D, E)))
        if self.family == "gpt3" or (self.family == "gpt_oss" and self.cfg.flag("attention_bias")):
            out = out + self.w.get(prefix + "out.bias", (E,))
        return out

    def mla(self, x, prefix, batch):
        """deepseek's multi-head latent attention (README: MLA)."""
        cfg, E, H = self.cfg, self.E, self.H
        n, r = cfg.int("qk_nope_head_dim"), cfg.int("qk_rope_head_dim")
        vd, c, qr = cfg.int("v_head_dim"), cfg.int("kv_lora_rank"), cfg.int("q_lora_rank")
        positions = batch["inputs_position"]
        if qr == 0:
            q = torch.einsum("rte,ehd->rthd", x, self.w.get(prefix + "query.kernel", (E, H, n + r)))
        else:
            low = rms_norm(x @ self.w.get(prefix + "wq_a.kernel", (E, qr)),
                           self.w.get(prefix + "q_norm.scale", (qr,)), self.eps)
            q = torch.einsum("rtq,qhd->rthd", low, self.w.get(prefix + "wq_b.kernel", (qr, H, n + r)))
        scale = (n + r) ** -0.5
        if cfg.int("max_position_embeddings") > cfg.int("original_max_position_embeddings"):
            m = 0.1 * cfg.float("mscale") * math.log(cfg.float("rope_factor")) + 1.0
            scale = scale * m * m
        q = torch.cat([q[..., :n], rope(q[..., n:], positions, cfg, self.dtype, False)], dim=-1)
        q = q * scale
        latent = x @ self.w.get(prefix + "wkv_a.kernel", (E, c + r))
        main = rms_norm(latent[..., :c], self.w.get(prefix + "kv_norm.scale", (c,)), self.eps)
        kv = torch.einsum("rtc,chd->rthd", main, self.w.get(prefix + "wkv_b.kernel", (c, H, n + vd)))
        key_rope = rope(latent[..., c:][:, :, None, :], positions, cfg, self.dtype, False)
        k = torch.cat([kv[..., :n], key_rope.expand(-1, -1, H, -1)], dim=-1)
        v = kv[..., n:]
        context = attention(q, k, v, batch["inputs_segmentation"], 0, 0.0)
        return torch.einsum("rthd,hde->rte", context, self.w.get(prefix + "out.kernel", (H, vd, E)))

    def experts(self, x, prefix):
        """Routed experts (README): router scores, top-k mask, weights, every expert densely."""
        cfg, E = self.cfg, self.E
        X, k, Mm = cfg.int("num_experts"), cfg.int("num_experts_per_tok"), cfg.int("moe_mlp_dim")
        deepseek = self.family == "deepseek"
        scores = x @ self.w.get(prefix + "gate.kernel", (E, X))
        func = cfg.text("routed_score_func")
        if func == "softmax":
            scores = torch.softmax(scores, dim=-1)
        elif func == "sigmoid":
            scores = torch.sigmoid(scores)
        biased = scores
        if cfg.flag("routed_bias"):
            biased = scores + self.w.get(prefix + "gate.bias", (X,))
        selection = biased
        groups = cfg.int("n_routing_groups")
        if groups > 0:  # deepseek3: only the experts of the best groups (sum of their best two)
            rows, length = x.shape[0], x.shape[1]
            grouped = biased.reshape(rows, length, groups, X // groups)
            group_scores = torch.topk(grouped, 2, dim=-1).values.sum(-1)
            best = torch.topk(group_scores, cfg.int("topk_routing_group"), dim=-1).indices
            kept = torch.zeros_like(group_scores).scatter(-1, best, 1.0)
            kept = kept[..., None].expand(-1, -1, -1, X // groups).reshape(rows, length, X)
            selection = torch.where(kept > 0, biased, torch.full_like(biased, -math.inf))
        chosen = torch.topk(selection, k, dim=-1).indices
        mask = torch.zeros_like(biased).scatter(-1, chosen, 1.0)
        if cfg.float("load_balance_loss_weight") > 0:
            self.lb_losses.append(self.load_balance_loss(biased, mask))
        if self.family == "llama4":  # top-1: x * sigmoid(chosen logit) into the expert, weight 1
            gain = torch.sigmoid((mask * biased).sum(-1, keepdim=True))
            x = x * gain
            weights = mask
        elif deepseek:
            weights = mask * (scores if cfg.text("model_name").startswith("deepseek3") else biased)
            if func == "sigmoid":
                weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
            weights = weights * cfg.float("routed_scaling_factor")
        else:
            e = mask * torch.exp(biased - biased.max(dim=-1, keepdim=True).values)
            weights = e / e.sum(-1, keepdim=True)
            if cfg.flag("norm_topk_prob"):
                weights = weights / weights.sum(-1, keepdim=True)
        wi_0 = self.w.get(prefix + "wi_0", (X, E, Mm))
        wi_1 = self.w.get(prefix + "wi_1", (X, E, Mm))
        wo = self.w.get(prefix + "wo", (X, Mm, E))
        if cfg.float("capacity_factor") > 0:
            return self.dispatch_and_combine(x, chosen, weights, wi_0, wi_1, wo)
        gate = torch.einsum("rte,xem->rtxm", x, wi_0)
        up = torch.einsum("rte,xem->rtxm", x, wi_1)
        if cfg.flag("mlp_bias"):  # gpt_oss: per-expert biases on wi_0, wi_1 and wo
            gate = gate + self.w.get(prefix + "wi_0_bias", (X, Mm))
            up = up + self.w.get(prefix + "wi_1_bias", (X, Mm))
        limit = cfg.float("mlp_activations_limit")
        if limit > 0:  # gpt_oss: min(gate, L) * act(1.702 min(gate, L)) * (clip(up, -L, L) + 1)
            gate = torch.clamp(gate, max=limit)
            up = torch.clamp(up, min=-limit, max=limit)
            hidden = gate * activation(self.activations[0], 1.702 * gate) * (up + 1)
        else:
            hidden = activation(self.activations[0], gate) * up
        if cfg.flag("mlp_bias"):  # the bias joins each expert's output before the weighting
            out = torch.einsum("rtxm,xme->rtxe", hidden, wo) + self.w.get(prefix + "wo_bias", (X, E))
            return torch.einsum("rtxe,rtx->rte", out, weights)
        return torch.einsum("rtxm,rtx,xme->rte", hidden, weights, wo)

    def dispatch_and_combine(self, x, chosen, weights, wi_0, wi_1, wo):
        """Token dropping with capacity_factor > 0 as MaxText's dense_matmul does it: per row,
        the (token, choice) pairs in order claim slots 1..C of their expert's buffer; the tokens
        past C are dropped; dispatch copies each kept token into its slot [X, R, C, E], the experts
        run on the slots, and combine adds each slot's output back with the token's weight."""
        cfg = self.cfg
        X, k = cfg.int("num_experts"), cfg.int("num_experts_per_tok")
        rows, length = x.shape[0], x.shape[1]
        factor = cfg.float("capacity_factor")
        capacity = int(max(math.ceil(length * k / X) * factor, factor))
        one_hot = torch.nn.functional.one_hot(chosen, X)  # [R, T, k, X], int64
        count = one_hot.reshape(rows, length * k, X).cumsum(dim=1).reshape(rows, length, k, X)
        kept = (one_hot * (count <= capacity)).sum(dim=2)  # [R, T, X]
        weights = weights * kept.to(weights.dtype)
        slot = (one_hot * count).sum(dim=2) * kept  # 1..C for kept choices, 0 otherwise
        slots = torch.nn.functional.one_hot(slot, capacity + 1)[..., 1:].to(weights.dtype)
        combine = weights[..., None] * slots  # [R, T, X, C]
        dispatch = (combine != 0).to(x.dtype)
        inputs = torch.einsum("rte,rtxc->xrce", x, dispatch)
        gate = torch.einsum("xrce,xem->xrcm", inputs, wi_0)
        up = torch.einsum("xrce,xem->xrcm", inputs, wi_1)
        out = torch.einsum("xrcm,xme->xrce", activation(self.activations[0], gate) * up, wo)
        return torch.einsum("xrce,rtxc->rte", out, combine)

    def load_balance_loss(self, biased, mask):
        """README: per row, f = the share of its tokens routed to each expert, P = the mean of
        softmax(s_b); mean over rows and experts of f * P, times X^2 and the weight."""
        X = self.cfg.int("num_experts")
        f = mask.mean(dim=1)
        p = torch.softmax(biased, dim=-1).mean(dim=1)
        return (f * p).mean() * X * X * self.cfg.float("load_balance_loss_weight")

    def moe_lb_loss(self):
        """The mean of the MoE layers' load-balancing losses of the last logits(), or None."""
        if not self.lb_losses:
            return None
        return torch.stack(self.lb_losses).mean()

    def mlp(self, x, prefix, width=None):
        E, M = self.E, width or self.M
        gpt3 = self.family == "gpt3"
        if gpt3:
            x = self.norm(x, prefix + "mlp_layer_norm")
        hidden = None
        for a, name in enumerate(self.activations):
            wi = prefix + ("wi" if len(self.activations) == 1 else f"wi_{a}")
            h = x @ self.w.get(wi + ".kernel", (E, M))
            if gpt3:
                h = h + self.w.get(wi + ".bias", (M,))
            h = activation(name, h)
            hidden = h if hidden is None else hidden * h
        out = hidden @ self.w.get(prefix + "wo.kernel", (M, E))
        if gpt3:
            out = out + self.w.get(prefix + "wo.bias", (E,))
        return out

    def layer(self, x, i, batch):
        p = f"decoder.layers_{i}."
        cfg = self.cfg
        if self.family == "deepseek":
            # MaxText's unscanned deepseek tree numbers its dense and MoE layers apart.
            dense = cfg.int("first_num_dense_layers")
            p = f"decoder.dense_layers_{i}." if i < dense else f"decoder.moe_layers_{i - dense}."
            h = x + self.mla(self.norm(x, p + "pre_self_attention_layer_norm"),
                             p + "self_attention.", batch)
            y = self.norm(h, p + "post_self_attention_layer_norm")
            if i < cfg.int("first_num_dense_layers"):
                return h + self.mlp(y, p + "mlp.")
            block = p + "DeepSeekMoeBlock_0."
            out = self.experts(y, block + "MoeBlock_0.")
            shared = cfg.int("shared_experts")
            if shared > 0:
                out = out + self.mlp(y, block + "shared_experts.", shared * cfg.int("moe_mlp_dim"))
            return h + out
        if self.family == "llama4":  # NoPE/global every nope_layer_interval, else chunked + RoPE
            nope = (i + 1) % cfg.int("nope_layer_interval") == 0
            chunk = 0 if nope else cfg.int("chunk_attn_window_size")
            h = x + self.attention(self.norm(x, p + "pre_self_attention_layer_norm"),
                                   p + "self_attention.", 0, batch, nope, chunk)
            y = self.norm(h, p + "post_self_attention_layer_norm")
            if (i + 1) % cfg.int("interleave_moe_layer_step") != 0:
                return h + self.mlp(y, p + "mlp.")
            block = p + "Llama4MoEBlock_0."
            out = self.experts(y, block + "MoeBlock_0.")
            shared = cfg.int("shared_experts")
            if shared > 0:
                out = out + self.mlp(y, block + "shared_experts.", shared * cfg.int("moe_mlp_dim"))
            return h + out
        if self.family == "gpt_oss":  # layer i within the window when i is even, else global
            window = cfg.int("sliding_window_size") if i % 2 == 0 else 0
            h = x + self.attention(self.norm(x, p + "pre_self_attention_layer_norm"),
                                   p + "GptOssAttention.", window, batch)
            return h + self.experts(self.norm(h, p + "post_self_attention_layer_norm"),
                                    p + "GptOssMlp.")
        if self.family in ("mixtral", "qwen3_moe"):
            h = x + self.attention(self.norm(x, p + "pre_self_attention_layer_norm"),
                                   p + "self_attention.", 0, batch)
            block = "MoeBlock_0." if self.family == "mixtral" else "moe_block."
            return h + self.experts(self.norm(h, p + "post_self_attention_layer_norm"), p + block)
        if self.family in ("llama2", "mistral", "qwen3", "qwen2"):
            local = cfg.text("attention_type") == "local_sliding" and self.family in ("llama2",
                                                                                     "mistral")
            window = cfg.int("sliding_window_size") if local else 0
            h = x + self.attention(self.norm(x, p + "pre_self_attention_layer_norm"),
                                   p + "self_attention.", window, batch)
            return h + self.mlp(self.norm(h, p + "post_self_attention_layer_norm"), p + "mlp.")
        if self.family == "gemma":
            h = x + self.attention(self.norm(x, p + "pre_self_attention_norm"),
                                   p + "self_attention.", 0, batch)
            return h + self.mlp(self.norm(h, p + "pre_ffw_norm"), p + "mlp.")
        if self.family == "gemma2":
            for suffix, window in (("_local", cfg.int("sliding_window_size")), ("_global", 0)):
                a = self.attention(self.norm(x, p + "pre_self_attention_norm" + suffix),
                                   p + "self_attention" + suffix + ".", window, batch)
                if cfg.flag("use_post_attn_norm"):
                    a = self.norm(a, p + "post_self_attention_norm" + suffix)
                h = x + a
                m = self.mlp(self.norm(h, p + "pre_ffw_norm" + suffix), p + "mlp" + suffix + ".")
                if cfg.flag("use_post_ffw_norm"):
                    m = self.norm(m, p + "post_ffw_norm" + suffix)
                x = h + m
            return x
        if self.family == "gemma3":  # layer i is global when i % 6 == 5, else local
            window = 0 if i % 6 == 5 else cfg.int("sliding_window_size")
            a = self.attention(self.norm(x, p + "pre_self_attention_norm"), p + "self_attention.",
                               window, batch)
            if cfg.flag("use_post_attn_norm"):
                a = self.norm(a, p + "post_self_attention_norm")
            h = x + a
            m = self.mlp(self.norm(h, p + "pre_ffw_norm"), p + "mlp.")
            if cfg.flag("use_post_ffw_norm"):
                m = self.norm(m, p + "post_ffw_norm")
            return h + m
        if self.family == "olmo3":  # no pre-norms; layer i is global when i % 4 == 3
            window = 0 if i % 4 == 3 else cfg.int("sliding_window_size")
            a = self.attention(x, p + "attention.", window, batch)
            h = x + self.norm(a, p + "post_self_attention_layer_norm")
            return h + self.norm(self.mlp(h, p + "mlp."), p + "post_mlp_layer_norm")
        if self.family == "gpt3":
            h = x + self.attention(self.norm(x, p + "pre_self_attention_norm"),
                                   p + "self_attention.", 0, batch)
            return h + self.mlp(h, p + "mlp.")
        raise ValueError(f"family {self.family} is not in the README")

    def forward(self, batch):
        logits = self.logits(batch)
        return logits, *self.loss(logits, batch)

    def logits(self, batch):
        cfg = self.cfg
        self.lb_losses = []
        embedding = self.w.get("token_embedder.embedding", (self.V, self.E))
        x = embedding[batch["inputs"]]
        if self.family == "gpt3" and cfg.int("trainable_position_size") > 0:
            table = self.w.get("decoder.position_embedder.embedding",
                               (cfg.int("trainable_position_size"), self.E))
            x = x + table[batch["inputs_position"]]
        for i in range(cfg.int("num_decoder_layers")):
            x = self.layer(x, i, batch)
        y = self.norm(x, "decoder.decoder_norm")
        if cfg.flag("logits_via_embedding"):
            logits = y @ embedding.T
            if cfg.flag("normalize_embedding_logits"):
                logits = logits / math.sqrt(self.E)
        else:
            logits = y @ self.w.get("decoder.logits_dense.kernel", (self.E, self.V))
        return soft_cap(logits, cfg.float("final_logits_soft_cap"))

    def loss_sums(self, logits, batch):
        """Unnormalised (sum of xent, sum of z-loss, real-token count) over the batch's real
        tokens (targets_segmentation != 0); xent includes the z-loss term."""
        lse = torch.logsumexp(logits, dim=-1)
        target_logit = torch.gather(logits, -1, batch["targets"][..., None])[..., 0]
        z = self.cfg.float("z_loss_multiplier") * lse * lse
        xent = lse - target_logit + z
        w = (batch["targets_segmentation"] != 0).to(self.dtype)
        return (xent * w).sum(), (z * w).sum(), w.sum()

    def loss(self, logits, batch):
        """MaxText's loss without accumulation: sums / (total_weights + 1e-8), plus the mean
        load-balancing loss of the MoE layers when load_balance_loss_weight > 0."""
        xent_sum, z_sum, total_weights = self.loss_sums(logits, batch)
        loss = xent_sum / (total_weights + 1e-8)
        if self.moe_lb_loss() is not None:
            loss = loss + self.moe_lb_loss()
        z_loss = z_sum / (total_weights + 1e-8)
        return loss, z_loss, total_weights


def run_reference(run):
    """Recomputes forward_runner's outputs from its weights and batch.

    Returns (reference outputs as float64 numpy arrays, names of weights the math never read).
    """
    dtype = {"f64": torch.float64, "f32": torch.float32}[run.config.text("dtype")]
    weights = Weights(run.weights, dtype)
    batch = {name: torch.from_numpy(run.batch[name].astype(np.int64)) for name in BATCH_NAMES}
    with torch.no_grad():
        decoder = Decoder(run.config, weights, dtype)
        results = decoder.forward(batch)
    reference = {name: results[i].to(torch.float64).numpy()
                 for i, name in enumerate(("logits", "loss", "z_loss", "total_weights"))}
    if decoder.moe_lb_loss() is not None:
        reference["moe_lb_loss"] = decoder.moe_lb_loss().to(torch.float64).numpy()
    return reference, weights.unused()


def readme_initializer(name, cfg):
    """The README table's init for a weight: ("ones",), ("zeros",) or ("normal", stddev)."""
    E, H, D, M = (cfg.int(k) for k in ("emb_dim", "num_query_heads", "head_dim", "mlp_dim"))
    if name in ("token_embedder.embedding", "decoder.position_embedder.embedding"):
        return ("normal", 1.0)
    if name.endswith(".bias") or name.endswith("_bias") or name.endswith(".sinks"):
        return ("zeros",)
    if name.endswith(".scale"):
        return ("zeros",) if cfg.text("family") == "gpt3" else ("ones",)
    parts = name.split(".")
    family = cfg.text("family")
    if parts[-1] in ("wi_0", "wi_1"):  # routed experts [X, E, Mm] (no .kernel)
        return ("normal", 1 / math.sqrt(E))
    if parts[-1] == "wo":  # [X, Mm, E]
        return ("normal", 1 / math.sqrt(cfg.int("moe_mlp_dim")))
    kernel = parts[-2]
    if kernel == "gate":
        return ("normal", 1 / math.sqrt(E))
    if parts[-3] == "shared_experts" and kernel == "wo":
        return ("normal", 1 / math.sqrt(cfg.int("shared_experts") * cfg.int("moe_mlp_dim")))
    if family == "deepseek" and parts[-3] == "self_attention":  # MLA: N(0, 1/fan_in)
        fan_in = {"query": E, "wq_a": E, "wkv_a": E, "wq_b": cfg.int("q_lora_rank"),
                  "wkv_b": cfg.int("kv_lora_rank"), "out": H * cfg.int("v_head_dim")}
        return ("normal", 1 / math.sqrt(fan_in[kernel]))
    if kernel == "query" and family in ("qwen3", "qwen2", "gemma3", "olmo3", "qwen3_moe",
                                        "gpt_oss", "llama4"):  # scaled explicitly
        return ("normal", 1 / math.sqrt(E))
    if kernel == "query":
        return ("normal", 1 / math.sqrt(E * D))
    if kernel in ("key", "value", "qkv_proj", "logits_dense") or kernel.startswith("wi"):
        return ("normal", 1 / math.sqrt(E))
    if kernel == "out":
        return ("normal", 1 / math.sqrt(H * D))
    if kernel == "wo":
        return ("normal", 1 / math.sqrt(M))
    raise ValueError(f"weight {name} is not in the README's table")


def check_initial_weights(run):
    """Problems with what "init" drew, against the README's table: exact ones and zeros; for
    normals a mean within 5 standard errors of 0 and a sample stddev within 15% of the README's
    (every normal weight of the tiny test models has at least 256 elements, so 15% is > 5
    standard errors); and no two normal weights drawn from the same stream."""
    problems = []
    first_values = {}
    for name, array in run.initial.items():
        init = readme_initializer(name, run.config)
        values = array.astype(np.float64).ravel()
        if init[0] in ("ones", "zeros"):
            want = 1.0 if init[0] == "ones" else 0.0
            if not np.all(values == want):
                problems.append(f"init {name}: expected all {want:g}")
            continue
        stddev = init[1]
        mean, sample_stddev = float(values.mean()), float(values.std())
        if abs(mean) > 5 * stddev / math.sqrt(values.size):
            problems.append(f"init {name}: mean {mean:.3g} for N(0, {stddev:.4g}^2)")
        if abs(sample_stddev / stddev - 1) > 0.15:
            problems.append(f"init {name}: stddev {sample_stddev:.4g}, README {stddev:.4g}")
        key = tuple(values[:8] / stddev)
        if key in first_values:
            problems.append(f"init {name} repeats the random stream of {first_values[key]}")
        first_values[key] = name
    return problems
