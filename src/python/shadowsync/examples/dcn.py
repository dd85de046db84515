# SPDX-License-Identifier: BSD-2-Clause
"""A model that is not the built-in one, on the same few lines of setup:
multi-hot features pooled from the sharded tables, and a DCNv2 low-rank
cross network (x_{l+1} = x_0 * (W_l (V_l x_l) + b_l) + x_l) between the
bottom and the top MLP, as MLPerf's DLRM-DCNv2.

    python3 -m shadowsync.examples.dcn [--examples N]
    shadowsync launch -n 2 -- python3 -m shadowsync.examples.dcn

The data are made here, the same on every rank (each trains on its 1/N):
F features whose bags hold 1 to several Zipf-drawn ids, 13 dense
features, and clicks from a planted teacher that sees the pooled bags and
one feature pair's interaction, so that a model that learns has
something to find.  The last stdout line is the rank's JSON summary, as
the DLRM example's.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn

import shadowsync.torch as sst
from shadowsync import ShadowSyncError, train
from shadowsync.examples.dlrm import CrossNet, mlp


class DCN(nn.Module):
    def __init__(self, bags, features, dim, cross_layers=3, rank=32):
        super().__init__()
        self.bags = bags
        self.bottom = mlp([13, 64, dim], last_relu=True)
        width = dim * (features + 1)
        self.cross = CrossNet(width, cross_layers, rank)
        self.top = mlp([width, 128, 64, 1], last_relu=False)

    def forward(self, dense, values, offsets):
        z = self.bottom(dense)
        x0 = torch.cat([z, self.bags(values, offsets).flatten(1)], dim=1)
        return self.top(self.cross(x0)).squeeze(1)


def make_data(n, sizes, rows, seed):
    """@n examples of len(@sizes) multi-hot features (bag f of 1 to
    sizes[f] ids, Zipf over @rows), 13 dense features, planted clicks."""
    rng = np.random.default_rng(seed)
    f_count = len(sizes)
    lengths = np.stack([rng.integers(1, s + 1, n) for s in sizes])  # (F, n)
    ids = [rng.zipf(1.2, lengths[f].sum()) % rows for f in range(f_count)]
    teacher = rng.normal(0, 0.6, (f_count, rows)).astype(np.float32)
    pair = rng.normal(0, 0.8, (rows,)).astype(np.float32)
    dense = rng.exponential(1.0, (n, 13)).astype(np.float32)
    logit = dense @ rng.normal(0, 0.3, 13).astype(np.float32) - 1.0
    for f in range(f_count):
        starts = np.concatenate([[0], np.cumsum(lengths[f])[:-1]])
        logit += np.add.reduceat(teacher[f][ids[f]], starts)
    first = [np.concatenate([[0], np.cumsum(lengths[f])[:-1]])
             for f in (0, 1)]
    logit += pair[(ids[0][first[0]] + ids[1][first[1]]) % rows]
    labels = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return np.log1p(dense), lengths, ids, labels


def batch_of(data, lo, hi):
    """Examples lo..hi as (dense, values, offsets, labels): each feature's
    bags in order, feature after feature (TorchRec's layout)."""
    dense, lengths, ids, labels = data
    values, lens = [], []
    for f in range(len(ids)):
        ends = np.cumsum(lengths[f])
        start = ends[lo - 1] if lo else 0
        values.append(ids[f][start:ends[hi - 1]])
        lens.append(lengths[f][lo:hi])
    lens = np.concatenate(lens)
    offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
    return (torch.from_numpy(dense[lo:hi]),
            torch.from_numpy(np.concatenate(values).astype(np.int64)),
            torch.from_numpy(offsets.astype(np.int64)),
            torch.from_numpy(labels[lo:hi]))


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python3 -m shadowsync.examples.dcn",
        description="A DCNv2 model with multi-hot features on the runtime.")
    p.add_argument("--examples", type=int, default=60000)
    p.add_argument("--test-examples", type=int, default=10000)
    p.add_argument("--bag-sizes", default="3,2,1,2,6,1,7,3",
                   help="most ids a bag of each feature")
    p.add_argument("--rows", type=int, default=20000, help="rows a table")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--sync", default="ma")
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads or len(os.sched_getaffinity(0)))
    sizes = [int(s) for s in a.bag_sizes.split(",")]

    job = sst.job()
    data = make_data(a.examples + a.test_examples, sizes, a.rows, seed=7)
    bags = sst.ShardedEmbeddingBagCollection(
        [a.rows] * len(sizes), a.dim, lr=a.lr, eps=1e-8, job=job)
    model = DCN(bags, len(sizes), a.dim)
    replica = sst.Replica(model, algo=a.sync, job=job)
    opt = replica.wrap(torch.optim.Adagrad(
        [p for n, p in model.named_parameters() if not n.startswith("bags")],
        lr=a.lr, eps=1e-8))

    lo = a.examples * job.rank // job.world
    hi = a.examples * (job.rank + 1) // job.world
    loss_fn, t0, done = nn.BCEWithLogitsLoss(), time.perf_counter(), 0
    for s in range(lo, hi, a.batch):
        dense, values, offsets, labels = batch_of(data, s,
                                                  min(s + a.batch, hi))
        opt.zero_grad()
        loss_fn(model(dense, values, offsets), labels).backward()
        opt.step()
        done += len(labels)
    seconds = time.perf_counter() - t0
    bags.flush()
    sync = replica.stats()
    replica.finish()

    model.eval()
    with torch.no_grad():
        preds = [torch.sigmoid(model(*batch_of(
            data, s, min(s + 4096, a.examples + a.test_examples))[:3]))
            for s in range(a.examples, a.examples + a.test_examples, 4096)]
    m = train.metrics(torch.cat(preds).numpy(), data[3][a.examples:])
    bags.finish()
    print(json.dumps({
        "rank": job.rank, "world": job.world, "examples": done,
        "seconds": round(seconds, 3),
        "examples_per_s": round(done / seconds, 1) if seconds else 0,
        "test_ne": m["ne"], "test_auc": m["auc"],
        "test_calibration": m["calibration"], "rounds": sync["rounds"],
        "rounds_per_s": round(sync["rounds_per_s"], 2),
        "sync_gap": round(sync["sync_gap"], 2)}), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ShadowSyncError as e:
        print(f"dcn: error: {e}", file=sys.stderr)
        sys.exit(1)
