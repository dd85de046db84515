# SPDX-License-Identifier: BSD-2-Clause
"""What one rank of a test does: `rank_jobs.py JOB ARGS...`, the job, rank
and peers from the environment that conftest.run_ranks (or launch) sets.
Each job prints one JSON line of what the test checks."""
import json
import os
import sys
import time

import numpy as np

from shadowsync import Job
from shadowsync.sync import Sync
from shadowsync.table import Table, init_rows

# PyTorch only where a job needs it: its import takes a minute in the
# soft-RoCE guest's emulated CPU, where the verbs job runs without it.
if sys.argv[1:2] != ["verbs_core"]:
    import torch

    import shadowsync.torch as sst


def say(**kw):
    print(json.dumps(kw), flush=True)


def verbs_core(n):
    """The layers the package wraps, over the test's transport, without
    PyTorch: one S-MA round gives the exact mean; S-EASGD rounds with no
    training meet where the mass says; table rows pushed by rank 0 (SGD,
    some owned by rank 1) read back stepped on both ranks."""
    n = int(n)
    job = Job()
    out = {"transport": job.transport}
    s = Sync(n, algo="ma", job=job)
    s.params()[:] = job.rank + np.arange(n, dtype=np.float32) / n
    s.begin()
    s.round()
    out["ma"] = s.params()[:8].tolist() + s.params()[-8:].tolist()
    s.finish()
    s.close()
    # a job of its own on other ports: a rank's closing endpoint of the
    # first could still answer the second's connect at the same address
    shifted = [f"{a.rsplit(':', 1)[0]}:{int(a.rsplit(':', 1)[1]) + 8}"
               for a in job.addrs]
    e = Sync(n, algo="easgd", job=Job(peers=shifted))
    e.params()[:] = job.rank + 1.0
    e.begin()
    for _ in range(80):  # 2 ranks: the gaps halve each round
        e.round()
    e.barrier()
    out["easgd"] = e.params().tolist()
    e.finish()
    e.close()
    rows, width, lr = 50, 4, 0.5
    t = Table(1, rows, width, optimizer="sgd", lr=lr, job=job)
    ids = np.arange(0, rows, 3, dtype=np.uint64)
    grads = np.outer(ids + 1.0, np.arange(1, width + 1)).astype(np.float32)
    if job.rank == 0:
        t.push(ids, grads)
        t.flush()
    t.barrier()
    t.lookup(ids)
    got = t.wait()
    want = init_rows(1, 0, ids, width, (1.0 / rows) ** 0.5) - lr * grads
    out["table_worst"] = float(np.abs(got - want).max())
    out["owners"] = sorted({t.owner(0, int(i)) for i in ids})
    st = t.stats()
    out["rows_remote"] = st["rows_remote"]
    t.barrier()
    t.close()
    say(**out)


def ma_mean(n):
    """Each rank's replica rank + i / n; one S-MA round: the exact mean."""
    n = int(n)
    job = Job()
    model = torch.nn.Linear(n, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(job.rank + torch.arange(n) / n)
    r = sst.Replica(model, algo="ma", mode="foreground", job=job,
                    start_alike=False)
    r.round()
    got = model.weight.detach().numpy().ravel().tolist()
    stats = r.stats()
    r.finish()
    say(values=got, rounds=stats["rounds"])


def easgd_consensus(n, rounds):
    """S-EASGD rounds with nobody training: replicas and center meet at
    the mean of all they held (mass conserved), shard by shard."""
    n, rounds = int(n), int(rounds)
    s = Sync(n, algo="easgd")
    s.params()[:] = s.job.rank + 1.0
    s.begin()
    for _ in range(rounds):
        s.round()
    s.barrier()
    values = s.params().tolist()
    s.finish()
    s.close()
    say(values=values)


def views_and_a_step(lr):
    """Parameters are views of the registered replica; rank 0's optimizer
    step is seen by every rank through the shadow's rounds."""
    lr = float(lr)
    torch.manual_seed(1000 + int(os.environ["SS_RANK"]))  # differ: alike
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(),
                                torch.nn.Linear(5, 1))
    r = sst.Replica(model, algo="ma", mode="shadow")
    flat = r.flat()
    lo = flat.data_ptr()
    hi = lo + flat.numel() * 4
    inside = all(lo <= p.data_ptr() < hi for p in model.parameters())
    start = [p.detach().clone() for p in model.parameters()]
    alike = float(max((p - s).abs().max() for p, s in
                      zip(model.parameters(), start)))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    step = model[0].weight
    w0 = float(step[0, 0])
    if r.rank == 0:
        opt.zero_grad()
        step.grad = torch.zeros_like(step)
        step.grad[0, 0] = 1.0
        opt.step()  # w -= lr: the mean moves by lr / world
    want = w0 - lr / r.world
    deadline = time.monotonic() + 30
    while abs(float(step[0, 0]) - want) > 1e-6 and time.monotonic() < deadline:
        time.sleep(0.01)
    seen = float(step[0, 0])
    stats = r.stats()
    r.finish()
    say(inside=inside, w0=w0, seen=seen, want=want, rounds=stats["rounds"],
        after=float(step[0, 0]), own=step.data_ptr() != lo)


def bag_batches(n_rows, seed=7, steps=6):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        values = torch.randint(0, n_rows, (40,), generator=g)
        offsets = torch.tensor([0, 5, 5, 17, 30])  # an empty bag too
        w = torch.randn(5, 8, generator=g)
        out.append((values, offsets, w))
    return out


def reference_bag(n_rows, dim, mode, optimizer, lr, batches):
    """One process, no sharding: torch.nn.EmbeddingBag and the optimizer,
    started from the rows the owners start from."""
    ref = torch.nn.EmbeddingBag(n_rows, dim, mode=mode)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(init_rows(
            1, 0, range(n_rows), dim, (1.0 / n_rows) ** 0.5)))
    opt = (torch.optim.Adagrad(ref.parameters(), lr=lr, eps=1e-10)
           if optimizer == "adagrad" else
           torch.optim.SGD(ref.parameters(), lr=lr))
    outs = []
    for values, offsets, w in batches:
        y = ref(values, offsets)
        outs.append(y.detach().clone())
        opt.zero_grad()
        (y * w).sum().backward()
        opt.step()
    return outs, ref.weight.detach()


def bag_only_rank_0_trains(mode, optimizer):
    """Two ranks, only rank 0 trains the bag: its outputs are one rank's
    (rows at rank 1 updated there through the gradient logs)."""
    n_rows, dim, lr = 64, 8, 0.1
    bag = sst.ShardedEmbeddingBag(n_rows, dim, mode=mode,
                                  optimizer=optimizer, lr=lr, eps=1e-10)
    worst = 0.0
    if bag.job.rank == 0:
        batches = bag_batches(n_rows)
        want, _ = reference_bag(n_rows, dim, mode, optimizer, lr, batches)
        for (values, offsets, w), ref in zip(batches, want):
            y = bag(values, offsets)
            worst = max(worst, float((y - ref).abs().max()))
            (y * w).sum().backward()
            bag.flush()
    bag.table.barrier()  # rank 1's stats after rank 0's pushes
    st = bag.stats()
    bag.finish()
    say(worst=worst, remote=st["rows_remote"], pushed=st["pushed"],
        applied=st["applied"])


def trains_while_one_dies(seconds):
    """A small model in the shadow mode with sharded bags, trained for
    @seconds; the test kills one rank on the way: the others go on."""
    seconds = float(seconds)
    job = sst.job()
    bag = sst.ShardedEmbeddingBag(1000, 4, job=job, timeout_ms=2000)
    model = torch.nn.Linear(4, 1)
    r = sst.Replica(model, job=job, round_timeout_ms=1000)
    opt = r.wrap(torch.optim.SGD(model.parameters(), lr=0.01))
    end = time.monotonic() + seconds
    steps = 0
    while time.monotonic() < end:
        if steps == 20:
            print("training", flush=True)  # the test's cue to kill one
        values = torch.randint(0, 1000, (64,))
        y = model(bag(values, torch.arange(0, 64, 4)))
        opt.zero_grad()
        y.sum().backward()
        opt.step()
        steps += 1
        time.sleep(0.005)
    stats = r.stats()
    missing = r.finish()
    bag.close()  # its peers' barrier would wait for the dead rank
    say(steps=steps, left_out=stats["peers_left_out"], missing=missing,
        members=stats["members"])


def wait_for_a_peer():
    """A world of two whose other rank never comes: the connect's timeout,
    as an exception, and nothing left behind."""
    try:
        Sync(10, timeout_ms=1500).begin()
    except Exception as e:  # noqa: BLE001 - the test reads what it says
        say(error=type(e).__name__, text=str(e))
        return
    say(error=None)


def exit_handler_reads_the_model():
    """An atexit handler registered before the replica (a save at exit)
    reads the parameters after the package's own exit handler ran."""
    import atexit
    model = torch.nn.Linear(4, 1)
    atexit.register(lambda: say(at_exit=float(model.weight.sum())))
    sst.Replica(model, mode="shadow")
    say(ready=True)


def interrupt_caught():
    """A KeyboardInterrupt caught by the program (a notebook's): the rank
    lives on with its /dev/shm names, and removes them at exit."""
    import signal
    model = torch.nn.Linear(4, 1)
    r = sst.Replica(model)
    before = sorted(n for n in os.listdir("/dev/shm") if n.startswith("ss-"))
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    except KeyboardInterrupt:
        pass
    after = sorted(n for n in os.listdir("/dev/shm") if n.startswith("ss-"))
    r.step()
    say(kept=before == after and len(before) > 0)


def retry_after_a_timeout():
    """A Replica whose peer never came, made again at once in the except
    block: the first one's address is free (it held it while its
    exception lived)."""
    errors = []
    for _ in range(2):
        try:
            sst.Replica(torch.nn.Linear(3, 1), timeout_ms=1000)
        except Exception as e:  # noqa: BLE001
            errors.append(str(e))
    say(errors=errors)


def sleep_in_training():
    """A rank that trains until a signal ends it (SIGTERM from the test)."""
    model = torch.nn.Linear(4, 1)
    sst.Replica(model, algo="ma", mode="shadow")
    say(ready=True)
    while True:
        time.sleep(0.05)


if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])
