# SPDX-License-Identifier: BSD-2-Clause
"""One rank of the peer perf/vs-ddp measures against: the same PyTorch DLRM
as shadowsync.examples.dlrm (its DLRM class), the tables in this process
as one nn.EmbeddingBag with sparse gradients, wrapped in
DistributedDataParallel over gloo (dense and sparse gradients all-reduced
every step: what a CPU user runs), Adagrad for both, each rank its static
1/N of the file's bytes, through the same reader.  Rank and world from
RANK/WORLD_SIZE, the rendezvous at MASTER_ADDR:MASTER_PORT.  The last
stdout line is the rank's JSON (the example's fields: examples, seconds,
examples_per_s, test_ne, ...); only rank 0 evaluates (all ranks hold the
same model).
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

from shadowsync import train
from shadowsync.examples.dlrm import DLRM, LocalBags, batches, evaluate, sizes


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", required=True)
    p.add_argument("--test")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--emb-dim", type=int, default=16)
    p.add_argument("--bottom", default="13-512-256-64-16")
    p.add_argument("--top", default="512-256-1")
    p.add_argument("--hash-size", type=int, default=100000)
    p.add_argument("--steps", type=int, default=0,
                   help="stop after so many steps (0: the rank's data)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1,
                   help="model initialization (rank 0's, broadcast)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ex = train.read(a.data, rank, world)
    rows = ex.rows(a.hash_size)
    model = DLRM(LocalBags(a.hash_size, a.emb_dim), a.emb_dim,
                 sizes(a.bottom, "--bottom"), sizes(a.top, "--top"))
    ddp = nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's
    opt = torch.optim.Adagrad(ddp.parameters(), lr=a.lr, eps=1e-8)
    loss_fn = nn.BCEWithLogitsLoss()
    # DDP needs every rank to take the same number of steps: the fewest
    n = torch.tensor([(len(ex) + a.batch - 1) // a.batch])
    dist.all_reduce(n, op=dist.ReduceOp.MIN)
    steps = int(n) if not a.steps else min(int(n), a.steps)
    done, loss_sum = 0, 0.0
    dist.barrier()
    print(f"rank {rank}: training", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    for i, (dense, values, offsets, labels) in enumerate(
            batches(ex, rows, a.batch)):
        if i == steps:
            break
        opt.zero_grad()
        loss = loss_fn(ddp(dense, values, offsets), labels)
        loss.backward()
        opt.step()
        done += len(labels)
        loss_sum += loss.item() * len(labels)
    seconds = time.perf_counter() - t0
    out = {"rank": rank, "world": world, "examples": done,
           "seconds": round(seconds, 3),
           "examples_per_s": round(done / seconds, 1),
           "train_log_loss": round(loss_sum / max(done, 1), 6),
           "sync": "ddp-gloo"}
    if a.test and rank == 0:
        print(f"rank {rank}: evaluating", file=sys.stderr, flush=True)
        test = train.read(a.test)
        m = evaluate(model, test, test.rows(a.hash_size))
        out.update(test_ne=m["ne"], test_auc=m["auc"],
                   test_calibration=m["calibration"])
    dist.barrier()
    print(json.dumps(out), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
