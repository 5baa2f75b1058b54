#!/usr/bin/python3
"""PyTorch DDP peer for benchmarks/train/ddp.sh: the model, initialisers and synthetic batch of
torch_train_step.py (imported), trained data parallel over 2 processes with
torch.nn.parallel.DistributedDataParallel on the gloo backend (CPU), each process holding half of
the global batch's rows, in float32 with AdamW (b1 0.9, b2 0.95, eps 1e-8, weight decay 0.1) and
global-norm clipping at 1.0, as Precast's data-parallel step does.

Every process starts from the same weights (drawn from --seed, as torch_train_step.py draws
them), so DDP's start-up broadcast changes nothing; DDP averages the gradients over the
processes, which equals the gradient of the global batch's mean loss (every row has the same
number of target tokens). Rank 0 prints one line per step:
  ddp step: K, seconds: S, loss: L
where S is the wall time of zero_grad, forward, backward (with DDP's all-reduce), clipping and
the optimizer step on rank 0, and L the global loss (all-reduced mean of the two halves).

Usage: torch_ddp_step.py --emb 256 --layers 4 --heads 4 --kv-heads 4 --head-dim 64 --mlp 768
       --vocab 1024 --batch 8 --seq 256 --steps 6 --threads 1 [--world 2]
(--batch is the global batch; --threads per process.) Run it with Debian's /usr/bin/python3.
"""

import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_train_step  # noqa: E402
from torch_train_step import torch_reference  # noqa: E402


class DecoderModule(torch.nn.Module):
    """torch_reference's Decoder over the weights as registered parameters (DDP needs a
    Module); '.' is not allowed in a parameter's name, so it is kept as '__'."""

    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        self.names = list(weights)
        for name, w in weights.items():
            self.register_parameter(name.replace(".", "__"),
                                    torch.nn.Parameter(w.detach().clone()))

    def forward(self, batch):
        weights = {n: getattr(self, n.replace(".", "__")) for n in self.names}
        decoder = torch_reference.Decoder(self.cfg, torch_reference.Weights(weights, torch.float32),
                                          torch.float32)
        loss, _, _ = decoder.loss(decoder.logits(batch), batch)
        return loss


def worker(rank, a, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    torch.set_num_threads(a.threads)
    torch_train_step.use_fused_ops()
    cfg = torch_train_step.model_config(a)
    generator = torch.Generator().manual_seed(a.seed)
    weights = torch_train_step.initial_weights(cfg, torch_train_step.weight_shapes(a), generator)
    batch = torch_train_step.synthetic_batch(a, generator)
    rows = a.batch // a.world
    local = {k: v[rank * rows:(rank + 1) * rows].contiguous() for k, v in batch.items()}
    model = torch.nn.parallel.DistributedDataParallel(DecoderModule(cfg, weights))
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.learning_rate, betas=(0.9, 0.95),
                                  eps=1e-8, weight_decay=0.1)
    if rank == 0:
        print(f"ddp: torch {torch.__version__}, gloo, {a.world} processes, threads "
              f"{torch.get_num_threads()} each, {rows} of {a.batch} rows each", flush=True)
    for step in range(a.steps):
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(local)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        seconds = time.perf_counter() - start
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            print(f"ddp step: {step}, seconds: {seconds:.4f}, loss: {total.item() / a.world:.4f}",
                  flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("emb", "layers", "heads", "kv_heads", "head_dim", "mlp", "vocab", "batch", "seq",
                 "steps", "threads"):
        parser.add_argument("--" + flag.replace("_", "-"), type=int, required=True)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args()
    if a.batch % a.world != 0:
        sys.exit(f"--batch {a.batch} does not split over --world {a.world} processes")
    mp.spawn(worker, args=(a, free_port()), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
