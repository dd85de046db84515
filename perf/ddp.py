# SPDX-License-Identifier: BSD-2-Clause
"""Running PyTorch's DistributedDataParallel peer (perf/ddp_dlrm.py) and
commands that print JSON, for the benchmarks that measure against DDP
(perf/vs-ddp, perf/quality-sweep): each rank on its share of the cores,
one rank optionally held in a cgroup (a straggler)."""

import json
import os
import subprocess
import threading

from benchlib import fail, log

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))

PYTHON = "/usr/bin/python3"


def env():
    e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src", "python"))
    for k in ("SS_PEERS", "SS_RANK", "RANK", "WORLD_SIZE", "BLIS_ARCH_TYPE"):
        e.pop(k, None)
    return e


def last_json(text, what):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    fail(f"{what} printed no JSON", text[-2000:])


def run(cmd, what, timeout, preexec=None):
    log(what)
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout, env=env(),
                           preexec_fn=preexec)
    except subprocess.TimeoutExpired:
        fail(f"{what} ran past {timeout} s", "use fewer --examples")
    if r.returncode != 0:
        fail(f"{what} exited with {r.returncode}", r.stderr[-3000:])
    return last_json(r.stdout, what)


def cores_of(rank, ranks):
    """Rank @rank's share of this process's CPUs, as launch --bind spread
    gives it."""
    cpus = sorted(os.sched_getaffinity(0))
    first = rank * len(cpus) // ranks
    last = max((rank + 1) * len(cpus) // ranks, first + 1)
    return cpus[first:last]


class HeldWhenTraining(threading.Thread):
    """Reads @proc's stderr; once a line says "training", moves the process
    and its children into the cgroup @slow, and out of it once a line says
    "evaluating": the straggler starts (imports PyTorch, reads its data,
    connects) at full speed, as a slow machine's rank would not miss its
    peers' connect timeout, trains held, and its model is then evaluated
    as any rank's (held, its table thread served its lookups past their
    timeout, as stale rows)."""

    def __init__(self, proc, slow):
        super().__init__(daemon=True)
        self.proc, self.slow, self.err, self.held = proc, slow, [], False
        self.start()

    def run(self):
        for line in self.proc.stderr:
            self.err.append(line)
            if not self.held and "training" in line:
                self.slow.add(self.proc.pid)
                self.held = True
            elif self.held and "evaluating" in line:
                self.slow.release(self.proc.pid)


def run_ddp(args, data, test, ranks, port, timeout, slow=None, steps=0):
    """perf/ddp_dlrm.py with @args (model, --lr, --seed) as @ranks
    processes, each on its cores; rank ranks - 1 in the cgroup @slow.  The
    job's JSON in launch's form."""
    procs = []
    for r in range(ranks):
        e = env()
        e.update(RANK=str(r), WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port))
        cmd = ["taskset", "-c", ",".join(map(str, cores_of(r, ranks))),
               PYTHON, os.path.join(HERE, "ddp_dlrm.py"), "--data", data,
               "--test", test, "--threads", "1", "--steps", str(steps),
               *args]
        procs.append(subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=e))
    outs = collect(procs, slow, timeout, "DDP")
    seconds = max(o["seconds"] for o in outs)
    examples = sum(o["examples"] for o in outs)
    return {"examples": examples, "seconds": seconds,
            "examples_per_s": examples / seconds,
            "test_ne": outs[0].get("test_ne"), "ranks": outs}


def collect(procs, slow, timeout, what):
    """Each process's last JSON line; the last process held by @slow once
    it trains (None: none held)."""
    readers = [HeldWhenTraining(p, slow) if slow and r == len(procs) - 1
               else None for r, p in enumerate(procs)]
    outs = []
    for r, (p, rd) in enumerate(zip(procs, readers)):
        try:
            if rd:
                out = p.stdout.read()
                p.wait(timeout=timeout)
                rd.join()
                err = "".join(rd.err)
            else:
                out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            fail(f"{what}: rank {r} ran past {timeout} s")
        if p.returncode != 0:
            fail(f"{what}: rank {r} exited with {p.returncode}", err[-3000:])
        if rd and not rd.held:
            fail(f"{what}: rank {r} never said it was training")
        outs.append(last_json(out, f"{what} rank {r}"))
    return outs
