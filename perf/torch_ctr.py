#!/usr/bin/python3
# SPDX-License-Identifier: BSD-2-Clause
"""The anchor of perf/vs-torch: our CTR model (src/train/model.c) in PyTorch
on the CPU, trained Hogwild by T processes through shared memory, one pass
over a Criteo-format file.  Prints one JSON line with examples/s.

The model is ours layer for layer: 13 dense features through the bottom MLP
(ReLU), the 26 categorical values hashed with splitmix64 into tables of
--hash-size rows (one value per feature, so sum pooling is the row itself),
the bottom output followed by the 351 pairwise dot products of the 27
vectors in our order ((1,0), (2,0), (2,1), ...), the top MLP (ReLU but on
the output), sigmoid, mean binary cross-entropy, plain SGD (or, with
--optimizer adagrad, Adagrad with its state shared by the processes, as
ours shares its accumulators) at the same learning rate and batch.
With --interaction dcn the pairwise dot products give way to DCNv2's
low-rank cross network over the 27 vectors end to end (LowRankCrossNet,
as ours); a file whose categorical fields hold several comma-separated
values (multi-hot) is read into one nn.EmbeddingBag (mode --pooling,
sparse gradients), its bags example by example.
Initialization has our distributions, not our values.  --test FILE adds
held-out NE, AUC and calibration, computed as ours are (perf/hogwild).
Each process's last batch is the remainder of its slice, and torch's mean
loss gives it a full step, as a user's loop would.

What is timed: from the moment every process has its model, optimizer and
data ready to the moment the last one has finished its slice.  The file is
parsed and hashed into tensors BEFORE that (by numpy in the parent), so this
time has no parsing in it, while `shadowsync train` parses as it trains;
perf/vs-torch and docs/perf.md say how much that is.

The 26 tables are one nn.Embedding(26 * rows, dim, sparse=True) indexed by
feature * rows + row: the same arithmetic as 26 tables with one kernel call
instead of 26, and sparse gradients, so SGD touches only the rows a batch
used, as ours does.  Dense gradients would update all 41.6 M table floats
every step.

Needs Debian's python3-torch and python3-numpy, run with /usr/bin/python3
(their modules are not on other Pythons' paths):
    apt-get update && apt-get install -y python3-torch python3-numpy
"""

import argparse
import json
import os
import queue
import sys
import time

INSTALL_HINT = ("apt-get update && apt-get install -y python3-torch "
                "python3-numpy, then run this with /usr/bin/python3")

try:
    import numpy as np
    import torch
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"torch_ctr.py: error: {e.name or e} is not installed "
          f"for {sys.executable}", file=sys.stderr)
    print(f"torch_ctr.py: hint: {INSTALL_HINT}", file=sys.stderr)
    sys.exit(3)

DENSE, SPARSE = 13, 26
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def layers(text, option):
    try:
        sizes = [int(s) for s in text.split("-")]
    except ValueError:
        sys.exit(f"torch_ctr.py: error: {option} '{text}': write the sizes "
                 "with dashes, e.g. 13-512-256-64-16")
    return sizes


def splitmix64(x):
    """src/base/mix.h's ss__mix64 on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def hex_values(cols):
    """Hex strings (bytes, up to 8 digits, b'' when empty) into uint32,
    vectorized: digit by digit, skipping the padding of shorter ones."""
    digits = np.zeros(256, dtype=np.uint64)
    for i, ch in enumerate(b"0123456789abcdef"):
        digits[ch] = i
    for i, ch in enumerate(b"ABCDEF"):
        digits[ch] = 10 + i
    raw = cols.astype("S8")
    b = raw.view(np.uint8).reshape(raw.shape + (8,))
    v = np.zeros(raw.shape, dtype=np.uint64)
    for k in range(8):
        c = b[..., k]
        v = np.where(c != 0, v * np.uint64(16) + digits[c], v)
    return v


def hashed_rows(v, j, hash_size):
    """Feature @j's values @v (uint64) as rows of the one big table: row
    j * hash_size + splitmix64(j << 32 | v) % hash_size, our ss_row() in
    src/train/model.c."""
    j = np.uint64(j) if np.isscalar(j) else j.astype(np.uint64)
    rows = splitmix64((j << np.uint64(32)) | v) % np.uint64(hash_size)
    return rows + j * np.uint64(hash_size)


def multi_hot_rows(fields, hash_size):
    """Multi-hot fields (several comma-separated values; empty: the value
    0, as src/train/criteo.c reads them) as EmbeddingBag input: every
    value's row, example by example and feature by feature, and the
    bags' offsets into them (n * 26 + 1, the last the end)."""
    n = len(fields)
    lens = np.empty((n, SPARSE), dtype=np.int64)
    cols = []
    for j in range(SPARSE):
        col = [f[1 + DENSE + j] for f in fields]
        lens[:, j] = [c.count(b",") + 1 for c in col]
        vals = hex_values(np.array(b",".join(col).split(b","), dtype="S8"))
        cols.append(hashed_rows(vals, j, hash_size))
    offs = np.zeros(n * SPARSE + 1, dtype=np.int64)
    np.cumsum(lens.reshape(-1), out=offs[1:])
    flat = np.empty(offs[-1], dtype=np.int64)
    for j in range(SPARSE):
        lj = lens[:, j]
        first = np.cumsum(lj) - lj  # each example's first in column j
        flat[np.repeat(offs[j:-1:SPARSE] - first, lj) +
             np.arange(lj.sum())] = cols[j].astype(np.int64)
    return torch.from_numpy(flat), torch.from_numpy(offs)


def batch_rows(rows, b, e):
    """Examples [b, e)'s rows: a slice of the (n, 26) rows, or of
    multi-hot bags (their rows and the offsets of their bags)."""
    if isinstance(rows, torch.Tensor):
        return rows[b:e]
    flat, offs = rows
    s = offs[b * SPARSE]
    return flat[s:offs[e * SPARSE]], offs[b * SPARSE:e * SPARSE] - s


def load(path, hash_size):
    """The file as tensors: labels, dense (log(1 + max(x, 0)), 0 when
    empty, as src/train/criteo.c) and the rows of one big table
    (hashed_rows()): (n, 26) of them, or multi-hot bags
    (multi_hot_rows()) where a field holds several values."""
    with open(path, "rb") as f:
        raw = f.read()
    multi = b"," in raw
    lines = raw.split(b"\n")
    del raw
    if lines and lines[-1] == b"":
        lines.pop()
    fields = [ln.rstrip(b"\r").split(b"\t") for ln in lines]
    for i, f in enumerate(fields):
        if len(f) != 1 + DENSE + SPARSE:
            sys.exit(f"torch_ctr.py: error: {path}:{i + 1}: {len(f)} "
                     f"fields, not {1 + DENSE + SPARSE}")
    bags = multi_hot_rows(fields, hash_size) if multi else None
    a = np.array([f[:1 + DENSE] if multi else f for f in fields], dtype="S8")
    del fields, lines
    label = a[:, 0].astype(np.float32)
    dense = a[:, 1:1 + DENSE]
    dense = np.where(dense == b"", b"0", dense).astype(np.int64)
    dense = np.log1p(np.maximum(dense, 0).astype(np.float64))
    if bags is None:
        rows = hashed_rows(hex_values(a[:, 1 + DENSE:]),
                           np.arange(SPARSE, dtype=np.uint64), hash_size)
        bags = torch.from_numpy(rows.astype(np.int64))
    return (torch.from_numpy(label), torch.from_numpy(dense.astype(np.float32)),
            bags)


def mlp(sizes, last_relu):
    mods = []
    for k in range(len(sizes) - 1):
        lin = nn.Linear(sizes[k], sizes[k + 1])
        # as ss_model_init: W ~ N(0, 2 / (in + out)), b ~ N(0, 1 / out)
        nn.init.normal_(lin.weight, 0.0, (2.0 / (sizes[k] + sizes[k + 1]))**0.5)
        nn.init.normal_(lin.bias, 0.0, (1.0 / sizes[k + 1])**0.5)
        mods.append(lin)
        if k < len(sizes) - 2 or last_relu:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


class LowRankCrossNet(nn.Module):
    """DCNv2's low-rank cross network, as TorchRec's LowRankCrossNet and
    our --interaction dcn: x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l;
    W and V xavier-normal, b 0, as TorchRec and ss_model_init."""

    def __init__(self, d, layers, rank):
        super().__init__()
        std = (2.0 / (d + rank))**0.5
        self.W = nn.ParameterList(
            [nn.Parameter(torch.randn(d, rank) * std) for _ in range(layers)])
        self.V = nn.ParameterList(
            [nn.Parameter(torch.randn(rank, d) * std) for _ in range(layers)])
        self.b = nn.ParameterList(
            [nn.Parameter(torch.zeros(d)) for _ in range(layers)])

    def forward(self, x0):
        x = x0
        for W, V, b in zip(self.W, self.V, self.b):
            x = x0 * torch.addmm(b, x @ V.t(), W.t()) + x
        return x


class CTR(nn.Module):

    def __init__(self, emb_dim, bottom, top, hash_size, cross=None,
                 pooling=None):
        super().__init__()
        self.bottom = mlp(bottom, True)
        n = 1 + SPARSE
        # cross: (layers, rank) for DCNv2, None for DLRM's dot products
        self.cross = (LowRankCrossNet(n * emb_dim, *cross)
                      if cross else None)
        self.top = mlp([n * emb_dim if cross else
                        emb_dim + n * (n - 1) // 2] + top, False)
        # pooling: multi-hot bags through one EmbeddingBag ("sum" or
        # "mean"); None: one value a feature, an Embedding
        self.emb = (nn.EmbeddingBag(SPARSE * hash_size, emb_dim,
                                    mode=pooling, sparse=True)
                    if pooling else
                    nn.Embedding(SPARSE * hash_size, emb_dim, sparse=True))
        bound = (1.0 / hash_size)**0.5
        nn.init.uniform_(self.emb.weight, -bound, bound)
        # pairs (a, b), a > b, row by row: our order in ss_forward()
        li, lj = torch.tril_indices(n, n, offset=-1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)

    def forward(self, dense, rows):
        z = self.bottom(dense)  # batch x D
        if isinstance(rows, torch.Tensor):
            e = self.emb(rows)  # batch x 26 x D
        else:  # bags: (rows, offsets), 26 a batch's example
            e = self.emb(*rows).view(z.shape[0], SPARSE, -1)
        t = torch.cat([z.unsqueeze(1), e], dim=1)  # batch x 27 x D
        if self.cross is not None:
            return self.top(self.cross(t.flatten(1))).squeeze(1)
        dots = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return self.top(torch.cat([z, dots], dim=1)).squeeze(1)


def make_optimizer(model, args):
    """SGD, or Adagrad as ours: eps added to sqrt(sum of g^2), no decay;
    torch's Adagrad takes the sparse gradients of the tables."""
    if args.optimizer == "adagrad":
        return torch.optim.Adagrad(model.parameters(), lr=args.lr,
                                   eps=args.adagrad_eps)
    return torch.optim.SGD(model.parameters(), lr=args.lr)


def worker(i, model, data, lo, hi, args, go, out, shared_opt=None):
    """Trainer i: SGD steps on examples [lo, hi) straight into the shared
    model, no lock (Hogwild), one thread."""
    torch.set_num_threads(1)
    if args.pin:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[i % len(cores)]})
    label, dense, rows = data
    opt = make_optimizer(model, args) if shared_opt is None else shared_opt
    loss_sum = 0.0
    out.put(("ready", i))
    if not go.wait(timeout=600):
        return
    start, cpu = time.monotonic(), time.process_time()
    for b in range(lo, hi, args.batch):
        e = min(b + args.batch, hi)
        loss = F.binary_cross_entropy_with_logits(
            model(dense[b:e], batch_rows(rows, b, e)), label[b:e])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_sum += loss.item() * (e - b)
    out.put(("done", i, hi - lo, loss_sum, time.monotonic() - start,
             time.process_time() - cpu))


def collect(procs, out, kind, timeout=1800):
    """One message of @kind from every trainer; fails, naming the process,
    when one died without sending it, or after @timeout seconds."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < len(procs):
        try:
            msg = out.get(timeout=1)
            got.append(msg[2:])
            continue
        except queue.Empty:
            pass
        dead = [pr for pr in procs if pr.exitcode not in (None, 0)]
        if dead:
            sys.exit(f"torch_ctr.py: error: trainer process {dead[0].pid} "
                     f"exited with {dead[0].exitcode} before '{kind}'")
        if time.monotonic() > deadline:
            for pr in procs:
                pr.kill()
            sys.exit(f"torch_ctr.py: error: no '{kind}' from every trainer "
                     f"within {timeout} s")
    return got


def held_out(model, path, hash_size, batch=4096):
    """NE, AUC and calibration of @model on the file at @path, defined as
    src/train/metrics.c defines them (log loss over the entropy of the
    file's click rate; mean prediction over click rate; AUC by ranks, ties
    sharing their mean rank)."""
    label, dense, rows = load(path, hash_size)
    with torch.no_grad():
        n = label.shape[0]
        p = torch.cat([torch.sigmoid(model(
            dense[b:b + batch], batch_rows(rows, b, min(b + batch, n))))
                       for b in range(0, n, batch)])
    p, y = p.double().numpy(), label.double().numpy()
    q = np.clip(p, 1e-7, 1 - 1e-7)
    ll = -np.mean(np.where(y > 0, np.log(q), np.log(1 - q)))
    ctr = y.mean()
    h = -(ctr * np.log(ctr) + (1 - ctr) * np.log(1 - ctr))
    order = np.argsort(p, kind="stable")
    ps, ys = p[order], y[order]
    ranks = np.empty(len(p))
    i = 0
    while i < len(ps):  # tied scores share their mean rank
        j = i
        while j < len(ps) and ps[j] == ps[i]:
            j += 1
        ranks[i:j] = (i + 1 + j) / 2
        i = j
    pos = ys.sum()
    auc = (np.sum(ranks * ys) - pos * (pos + 1) / 2) / (pos * (len(y) - pos))
    return {"test_ne": round(float(ll / h), 6),
            "test_auc": round(float(auc), 6),
            "test_calibration": round(float(p.sum() / y.sum()), 6)}


def blas_library():
    """Which BLAS torch's GEMMs run on here (Debian's libblas.so.3
    alternative), read from this process's mappings."""
    torch.mm(torch.ones(2, 2), torch.ones(2, 2))
    try:
        with open("/proc/self/maps") as f:
            for ln in f:
                if "libblas" in ln or "blis" in ln or "openblas" in ln:
                    return os.path.realpath(ln.split()[-1])
    except OSError:
        pass
    return "unknown"


def main():
    p = argparse.ArgumentParser(
        description="Train our CTR model in PyTorch on the CPU, Hogwild "
        "over THREADS processes, one pass over a Criteo-format file; print "
        "examples/s as JSON.  Parsing is done before timing.",
        epilog="needs: " + INSTALL_HINT)
    p.add_argument("--data", required=True, help="Criteo-format file")
    p.add_argument("--threads", type=int, default=1,
                   help="Hogwild processes, one thread each (default 1)")
    p.add_argument("--batch", type=int, default=128, help="(default 128)")
    p.add_argument("--optimizer", choices=("sgd", "adagrad"), default="sgd",
                   help="(default sgd); Adagrad's state is shared by the "
                   "processes, as ours shares its accumulators")
    p.add_argument("--lr", type=float, default=None,
                   help="(default 0.1 for sgd, 0.01 for adagrad)")
    p.add_argument("--adagrad-eps", type=float, default=1e-8)
    p.add_argument("--emb-dim", type=int, default=16, help="(default 16)")
    p.add_argument("--bottom", default="13-512-256-64-16")
    p.add_argument("--top", default="512-256-1")
    p.add_argument("--hash-size", type=int, default=100000)
    p.add_argument("--interaction", choices=("dot", "dcn"), default="dot",
                   help="dot (DLRM's, the default) or dcn (DCNv2's "
                   "low-rank cross network, as train --interaction dcn)")
    p.add_argument("--cross-layers", type=int, default=3)
    p.add_argument("--cross-rank", type=int, default=64)
    p.add_argument("--pooling", choices=("sum", "mean"), default="sum",
                   help="a multi-hot field's rows pooled (default sum), "
                   "as train --pooling")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--test", help="held-out Criteo-format file: NE, AUC "
                   "and calibration at the end, as shadowsync train's")
    p.add_argument("--no-pin", dest="pin", action="store_false",
                   help="do not pin process i to core i (shadowsync pins "
                   "its trainers)")
    args = p.parse_args()
    if args.lr is None:
        args.lr = 0.01 if args.optimizer == "adagrad" else 0.1
    bottom = layers(args.bottom, "--bottom")
    top = layers(args.top, "--top")
    if bottom[0] != DENSE or bottom[-1] != args.emb_dim or top[-1] != 1:
        sys.exit("torch_ctr.py: error: --bottom must run from 13 to "
                 "--emb-dim, --top end at 1")
    if args.threads < 1 or args.batch < 1:
        sys.exit("torch_ctr.py: error: --threads and --batch must be >= 1")

    # No OpenMP pool in the parent: forked children must not inherit one.
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    t0 = time.monotonic()
    try:
        data = load(args.data, args.hash_size)
    except OSError as e:
        sys.exit(f"torch_ctr.py: error: data file '{args.data}': "
                 f"{e.strerror}")
    parse_s = time.monotonic() - t0
    n = data[0].shape[0]
    if n == 0:
        sys.exit(f"torch_ctr.py: error: data file '{args.data}': no examples")
    for t in data:
        for x in (t if isinstance(t, tuple) else (t,)):
            x.share_memory_()
    model = CTR(args.emb_dim, bottom, top, args.hash_size,
                (args.cross_layers, args.cross_rank)
                if args.interaction == "dcn" else None,
                args.pooling if isinstance(data[2], tuple) else None)
    model.share_memory()
    # Adagrad's accumulators in shared memory, made before the fork: one
    # set for every process (Hogwild on the state too, as ours)
    shared_opt = None
    if args.optimizer == "adagrad":
        shared_opt = make_optimizer(model, args)
        shared_opt.share_memory()

    ctx = mp.get_context("fork")
    go = ctx.Event()
    out = ctx.Queue()
    procs = []
    for i in range(args.threads):
        # the same split as ours: trainer i gets the i-th contiguous slice
        lo, hi = n * i // args.threads, n * (i + 1) // args.threads
        procs.append(ctx.Process(target=worker,
                                 args=(i, model, data, lo, hi, args,
                                       go, out, shared_opt)))
    for pr in procs:
        pr.start()
    collect(procs, out, "ready")
    go.set()
    start = time.monotonic()
    results = collect(procs, out, "done")
    seconds = time.monotonic() - start
    for pr in procs:
        pr.join(timeout=60)
        if pr.exitcode != 0:
            sys.exit(f"torch_ctr.py: error: trainer process {pr.pid} "
                     f"exited with {pr.exitcode}")
    examples = sum(r[0] for r in results)
    # CPU time of the training loops alone, all processes: immune to
    # other work sharing the cores, which wall time is not
    cpu = sum(r[3] for r in results)
    quality = held_out(model, args.test, args.hash_size) if args.test else {}
    print(json.dumps({
        **quality,
        "examples": examples,
        "threads": args.threads,
        "seconds": round(seconds, 3),
        "examples_per_s": round(examples / seconds, 1),
        "cpu_seconds": round(cpu, 3),
        "examples_per_cpu_s": round(examples / cpu, 1),
        "train_log_loss": round(sum(r[1] for r in results) / examples, 6),
        "optimizer": args.optimizer,
        "interaction": args.interaction,
        "lr": args.lr,
        "parse_seconds": round(parse_s, 3),
        "torch": torch.__version__,
        "blas": blas_library(),
    }))


if __name__ == "__main__":
    main()
