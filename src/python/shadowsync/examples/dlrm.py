# SPDX-License-Identifier: BSD-2-Clause
"""A PyTorch DLRM on the runtime: its MLPs a Replica that the shadow thread
averages in place, its 26 embedding tables sharded over the ranks.

    python3 -m shadowsync.examples.dlrm --data TRAIN --test TEST
    shadowsync launch -n 2 -- python3 -m shadowsync.examples.dlrm \\
        --data TRAIN --test TEST

The model and the data are the C trainer's default (`shadowsync train`):
13 dense features log1p'd through a bottom MLP 13-512-256-64-16, the 26
hex categoricals hashed into tables of 100000 rows of 16, the pairwise
dot products of the 27 vectors, a top MLP 367-512-256-1, Adagrad at
0.01; the same reader, hashing and metrics (the library's).  Each rank
claims chunks of the file from the job's counter as `train --data-split
dynamic` does (a faster rank takes more), or with --data-split static
trains on its 1/N of the bytes.  The last stdout line is a JSON
object: this rank's figures, as `shadowsync train --json` gives them
(launch combines the ranks': the job's examples over the slowest rank's
seconds, the worst rank's NE).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
from torch import nn

import shadowsync.torch as sst
from shadowsync import ShadowSyncError, train

SPARSE = train.SPARSE


def mlp(sizes, last_relu):
    """Linear layers with ReLU between (and after the last, if asked),
    initialized as the C model: weights N(0, 2 / (in + out)), biases
    N(0, 1 / out)."""
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        lin = nn.Linear(a, b)
        with torch.no_grad():
            lin.weight.normal_(0, math.sqrt(2.0 / (a + b)))
            lin.bias.normal_(0, math.sqrt(1.0 / b))
        layers.append(lin)
        if i < len(sizes) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class CrossNet(nn.Module):
    """DCNv2's low-rank cross network (TorchRec's LowRankCrossNet; the C
    trainer's --interaction dcn): x = x0 * (W_l (V_l x) + b_l) + x for
    each layer l, from x = x0; W and V xavier-normal, b zero."""

    def __init__(self, d, layers, rank):
        super().__init__()
        std = math.sqrt(2.0 / (d + rank))
        self.W = nn.ParameterList(nn.Parameter(torch.randn(d, rank) * std)
                                  for _ in range(layers))
        self.V = nn.ParameterList(nn.Parameter(torch.randn(rank, d) * std)
                                  for _ in range(layers))
        self.b = nn.ParameterList(nn.Parameter(torch.zeros(d))
                                  for _ in range(layers))

    def forward(self, x0):
        x = x0
        for W, V, b in zip(self.W, self.V, self.b):
            x = x0 * torch.addmm(b, x @ V.t(), W.t()) + x
        return x


class DLRM(nn.Module):
    """DLRM (Naumov et al., 2019) with the tables given: @bags maps a batch's
    (values, offsets), 26 features' bags in TorchRec's layout, to
    (B, 26, emb_dim).  @cross (layers, rank): DCNv2's cross network over
    the 27 vectors end to end instead of their dot products (MLPerf's
    DLRM-DCNv2)."""

    def __init__(self, bags, emb_dim=16, bottom=(13, 512, 256, 64, 16),
                 top=(512, 256, 1), cross=None):
        super().__init__()
        self.bags = bags
        self.bottom = mlp(list(bottom), last_relu=True)
        vecs = SPARSE + 1
        self.cross = CrossNet(vecs * emb_dim, *cross) if cross else None
        self.register_buffer("li", torch.tril_indices(vecs, vecs, -1)[0],
                             persistent=False)
        self.register_buffer("lj", torch.tril_indices(vecs, vecs, -1)[1],
                             persistent=False)
        self.top = mlp([vecs * emb_dim if cross else
                        emb_dim + vecs * (vecs - 1) // 2] + list(top),
                       last_relu=False)

    def forward(self, dense, values, offsets):
        z = self.bottom(dense)
        e = self.bags(values, offsets)
        v = torch.cat([z.unsqueeze(1), e], dim=1)  # (B, 27, d)
        if self.cross is not None:
            return self.top(self.cross(v.flatten(1))).squeeze(1)
        dots = torch.bmm(v, v.transpose(1, 2))[:, self.li, self.lj]
        return self.top(torch.cat([z, dots], dim=1)).squeeze(1)


class LocalBags(nn.Module):
    """The 26 tables in this process, one after the other in one
    nn.EmbeddingBag with sparse gradients (what DistributedDataParallel's
    users run), @rows each (or 26 numbers, one a table), their rows
    uniform in +-sqrt(1 / rows) as the sharded ones start."""

    def __init__(self, rows, dim):
        super().__init__()
        sizes = torch.as_tensor(rows, dtype=torch.int64).expand(SPARSE)
        self.register_buffer("first", torch.cumsum(sizes, 0) - sizes,
                             persistent=False)
        self.bag = nn.EmbeddingBag(int(sizes.sum()), dim, mode="sum",
                                   sparse=True)
        with torch.no_grad():
            for j, n in enumerate(sizes.tolist()):
                self.bag.weight[self.first[j]:self.first[j] + n].uniform_(
                    -math.sqrt(1.0 / n), math.sqrt(1.0 / n))

    def forward(self, values, offsets):
        b = (len(offsets)) // SPARSE
        shift = self.first.repeat_interleave(b)
        lengths = torch.diff(offsets, append=torch.tensor([len(values)]))
        out = self.bag(values + shift.repeat_interleave(lengths), offsets)
        return out.view(SPARSE, b, -1).transpose(0, 1)


def batches(ex, rows, batch):
    """(dense, values, offsets, labels) of each batch: the categoricals
    as 26 features of one id each, feature after feature."""
    for s in range(0, len(ex), batch):
        r = torch.from_numpy(rows[s:s + batch])
        b = len(r)
        yield (torch.from_numpy(ex.dense[s:s + batch]),
               r.t().reshape(-1).contiguous(),
               torch.arange(0, SPARSE * b, dtype=torch.int64),
               torch.from_numpy(ex.labels[s:s + batch]))


EVAL_BATCH = 1024


def predict(model, ex, rows, batch=EVAL_BATCH):
    """The click probability @model gives each example of @ex (@rows its
    table rows): a numpy float32 array."""
    training = model.training
    model.eval()
    out = []
    with torch.no_grad():
        for dense, values, offsets, _ in batches(ex, rows, batch):
            out.append(torch.sigmoid(model(dense, values, offsets)))
    model.train(training)
    return torch.cat(out).numpy()


def evaluate(model, ex, rows, batch=EVAL_BATCH):
    return train.metrics(predict(model, ex, rows, batch), ex.labels)


def parse(argv):
    p = argparse.ArgumentParser(
        prog="python3 -m shadowsync.examples.dlrm",
        description="Train a PyTorch DLRM on the runtime: MLPs shadow-"
        "synchronized in place, tables sharded over the ranks. Under "
        "`shadowsync launch -n N -- python3 -m shadowsync.examples.dlrm "
        "...` it is one rank of N.")
    p.add_argument("--data", required=True, help="Criteo TSV to train on")
    p.add_argument("--test", help="held-out Criteo TSV: NE, AUC at the end")
    p.add_argument("--batch", type=int, default=128, help="per rank (128)")
    p.add_argument("--lr", type=float, default=0.01, help="Adagrad (0.01)")
    p.add_argument("--emb-dim", type=int, default=16)
    p.add_argument("--bottom", default="13-512-256-64-16")
    p.add_argument("--top", default="512-256-1")
    p.add_argument("--hash-size", type=int, default=100000,
                   help="rows a table (100000)")
    p.add_argument("--interaction", choices=["dot", "dcn"], default="dot",
                   help="dot products (DLRM's, the default) or dcn "
                   "(DCNv2's cross network), as train --interaction")
    p.add_argument("--cross-layers", type=int, default=3)
    p.add_argument("--cross-rank", type=int, default=64)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--data-split", choices=["dynamic", "static"],
                   help="dynamic (default with several ranks): ranks claim "
                   "chunks of the file as train does, a faster one more; "
                   "static: each its 1/N of the bytes")
    p.add_argument("--sync", default="ma",
                   choices=["ma", "easgd", "bmuf", "gossip"])
    p.add_argument("--mode", default="shadow",
                   choices=["shadow", "foreground"])
    p.add_argument("--sync-every", type=int, default=10,
                   help="foreground: steps between rounds (10)")
    p.add_argument("--max-rounds-per-s", type=float, default=0,
                   help="cap on the shadow's rounds (0: none)")
    p.add_argument("--threads", type=int, default=0,
                   help="PyTorch threads (0: this process's CPUs)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--progress", type=float, default=5,
                   help="seconds between progress lines on stderr (0: none)")
    return p.parse_args(argv)


def sizes(text, option):
    try:
        return [int(x) for x in text.split("-")]
    except ValueError:
        raise SystemExit(f"dlrm: {option} '{text}': not sizes like 13-64-16")


def main(argv=None):
    a = parse(argv)
    torch.set_num_threads(a.threads or len(os.sched_getaffinity(0)))
    torch.manual_seed(a.seed)
    job = sst.job()
    bottom, top = sizes(a.bottom, "--bottom"), sizes(a.top, "--top")
    # chunks of a gzip file would each decompress it from its start
    split = a.data_split or ("dynamic" if job.world > 1 and
                             not train.is_gzip(a.data) else "static")
    bags = sst.ShardedEmbeddingBagCollection(
        [a.hash_size] * SPARSE, a.emb_dim, optimizer="adagrad", lr=a.lr,
        eps=1e-8, job=job, max_ids=SPARSE * max(a.batch, EVAL_BATCH))
    model = DLRM(bags, a.emb_dim, bottom, top,
                 (a.cross_layers, a.cross_rank)
                 if a.interaction == "dcn" else None)
    replica = sst.Replica(model, algo=a.sync, mode=a.mode,
                          sync_every=a.sync_every, job=job,
                          max_rounds_per_s=a.max_rounds_per_s)
    opt = replica.wrap(torch.optim.Adagrad(
        [p for n, p in model.named_parameters() if not n.startswith("bags")],
        lr=a.lr, eps=1e-8))
    loss_fn = nn.BCEWithLogitsLoss()
    done, loss_sum, t0 = 0, 0.0, time.perf_counter()
    last = t0
    print(f"rank {job.rank}: training ({split} split)", file=sys.stderr,
          flush=True)
    if split == "static":
        mine = train.read(a.data, job.rank, job.world)
        parts = (mine for _ in range(a.epochs))
    else:  # chunk numbers from rank 0's counter, as train's
        parts = train.chunks(a.data, replica.sync, job.world, a.epochs)
    for ex in parts:
        # the next batch's rows looked up while this one computes
        for dense, values, offsets, labels in bags.prefetching(
                batches(ex, ex.rows(a.hash_size), a.batch)):
            opt.zero_grad()
            loss = loss_fn(model(dense, values, offsets), labels)
            loss.backward()
            opt.step()
            done += len(labels)
            loss_sum += loss.item() * len(labels)
            now = time.perf_counter()
            if a.progress and now - last >= a.progress:
                print(f"rank {job.rank}: {done} examples, "
                      f"{done / (now - t0):.0f}/s, log loss "
                      f"{loss_sum / done:.4f}", file=sys.stderr, flush=True)
                last = now
    seconds = time.perf_counter() - t0
    bags.flush()
    sync = replica.stats()
    missing = replica.finish()  # S-MA: every rank then holds the average
    out = {"rank": job.rank, "world": job.world, "examples": done,
           "seconds": round(seconds, 3),
           "examples_per_s": round(done / seconds, 1) if seconds else 0,
           "train_log_loss": round(loss_sum / max(done, 1), 6),
           "sync": a.sync, "mode": a.mode, "optimizer": "adagrad",
           "lr": a.lr, "tables": "sharded", "data_split": split,
           "transport": job.transport}
    if a.test:
        print(f"rank {job.rank}: evaluating", file=sys.stderr, flush=True)
        test = train.read(a.test)
        m = evaluate(model, test, test.rows(a.hash_size))
        out.update(test_ne=m["ne"], test_auc=m["auc"],
                   test_calibration=m["calibration"],
                   test_examples=m["count"])
    st = bags.stats()
    bags.finish()
    out.update(rounds=sync["rounds"],
               rounds_per_s=round(sync["rounds_per_s"], 2),
               sync_gap=round(sync["sync_gap"], 2),
               peers_left_out=sync["peers_left_out"],
               rounds_partial=sync["rounds_partial"],
               left_out_by_peer=sync["left_out_by_peer"],
               finish_missing=missing,
               lookup_wait_s=round(st["lookup_wait_s"], 3),
               rows_remote=st["rows_remote"], rows_local=st["rows_local"],
               pushed=st["pushed"], dropped=st["dropped"])
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ShadowSyncError as e:
        print(f"dlrm: error: {e.what}: {e.why}", file=sys.stderr)
        if e.hint:
            print(f"dlrm: hint: {e.hint}", file=sys.stderr)
        sys.exit(2 if e.code == -1000 else 1)
