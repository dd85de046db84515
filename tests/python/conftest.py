# SPDX-License-Identifier: BSD-2-Clause
"""The Python package's tests: ranks run as processes of their own (each a
job function of rank_jobs.py) over shm, or over verbs inside the
soft-RoCE guest (SS_TEST_TRANSPORT=verbs, where tests/run --vm runs the
tests marked verbs)."""
import fcntl
import json
import os
import random
import subprocess
import sys

import numpy
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "src", "python"))

TRANSPORT = os.environ.get("SS_TEST_TRANSPORT", "shm")
PYTHON = sys.executable


def pytest_configure(config):
    config.addinivalue_line("markers",
                            "verbs: runs over verbs too, in the guest")


def pytest_collection_modifyitems(config, items):
    """Over verbs (in the guest) only the tests marked verbs: the others
    run one process, or nothing verbs changes, and ran over shm."""
    if TRANSPORT != "verbs":
        return
    keep = [i for i in items if "verbs" in i.keywords]
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep


# With SS_TEST_TALLY_FORMAT=1 (tests/python/pytest): a line a test as
# Criterion prints them, and a last "pytest: N passed, M failed" line,
# which tests/run counts into make check's tally.
_tally = {"passed": 0, "failed": 0}


def pytest_runtest_logreport(report):
    if not os.environ.get("SS_TEST_TALLY_FORMAT"):
        return
    name = report.nodeid.replace("tests/python/", "python/")
    out = sys.__stdout__
    if report.when == "call" and report.passed:
        _tally["passed"] += 1
        print(f"\n[PASS] {name}: ({report.duration:.2f}s)", file=out)
    elif report.failed:
        _tally["failed"] += 1
        print("", file=out)
        for line in report.longreprtext.splitlines()[-30:]:
            print(f"[----] {line}", file=out)
        print(f"[FAIL] {name}: ({report.duration:.2f}s)", file=out)
    elif report.skipped and report.when in ("setup", "call"):
        reason = report.longrepr[2] if isinstance(report.longrepr,
                                                  tuple) else ""
        print(f"\n[SKIP] {name}: {reason}", file=out)
    out.flush()


def pytest_sessionfinish(session):
    if os.environ.get("SS_TEST_TALLY_FORMAT"):
        print(f"\npytest: {_tally['passed']} passed, {_tally['failed']} "
              "failed", file=sys.__stdout__, flush=True)


_held = []


PORTS = 64  # tests/ranks.h's RANKS_PORTS: the lock files number blocks


def port_block():
    """A block of PORTS ports no other test of this machine holds (the C
    tests' scheme: a lock file a block in /tmp/ss-test-ports)."""
    d = "/tmp/ss-test-ports"
    os.makedirs(d, mode=0o1777, exist_ok=True)
    blocks = (52000 - 20000) // PORTS
    first = os.getpid() % blocks
    for i in range(blocks):
        b = (first + i) % blocks
        f = open(os.path.join(d, str(b)), "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        _held.append(f)
        _used_ports.update(range(20000 + b * PORTS, 20000 + (b + 1) * PORTS))
        return 20000 + b * PORTS
    raise RuntimeError("no free port block")


def rank_env(rank, world, port, key=None, extra=None):
    host = os.environ.get("SS_RXE_ADDR", "127.0.0.1")
    env = dict(os.environ)
    for k in ("SS_PEERS", "SS_RANK", "SS_WORLD", "RANK", "WORLD_SIZE",
              "LOCAL_WORLD_SIZE", "SS_REJOIN"):
        env.pop(k, None)
    env.update(SS_PEERS=",".join(f"{host}:{port + r}" for r in range(world)),
               SS_RANK=str(rank), SS_TRANSPORT=TRANSPORT,
               SS_JOB_KEY=str(key or random.randrange(1, 2**48)),
               PYTHONPATH=os.path.join(ROOT, "src", "python"))
    env.update(extra or {})
    return env


class Ranks:
    """The outcome of run_ranks: .out[r] (stdout and stderr), .code[r],
    .json[r] (the last JSON line a rank printed, or None)."""

    def __init__(self, procs, outs):
        self.code = [p.returncode for p in procs]
        self.out = outs
        self.json = []
        for o in outs:
            found = None
            for line in o.splitlines():
                if line.startswith("{"):
                    try:
                        found = json.loads(line)
                    except ValueError:
                        pass
            self.json.append(found)

    def text(self):
        return "\n".join(f"--- rank {r} (exit {c}):\n{o}" for r, (c, o) in
                         enumerate(zip(self.code, self.out)))


def run_ranks(world, job, *args, timeout=240, extra=None, kill=None):
    """Run rank_jobs.@job(rank, world, *args) in @world processes of their
    own; @kill (rank, text): that rank SIGKILLed once it printed a line
    holding @text."""
    port = port_block()
    key = random.randrange(1, 2**48)
    procs = []
    for r in range(world):
        procs.append(subprocess.Popen(
            [PYTHON, os.path.join(HERE, "rank_jobs.py"), job,
             *[str(a) for a in args]],
            env=rank_env(r, world, port, key, extra), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    early = ""
    if kill:
        victim = procs[kill[0]]
        for line in victim.stdout:
            early += line
            if kill[1] in line:
                break
        victim.kill()
    outs = []
    for r, p in enumerate(procs):
        if kill and r == kill[0]:
            outs.append(early + p.communicate()[0])
            continue
        try:
            outs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(p.communicate()[0] + "\n(killed: timed out)")
    ranks = Ranks(procs, outs)
    ranks.key, ranks.port = key, port
    return ranks


def shm_objects():
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("ss-")}
    except OSError:
        return set()


_used_ports = set()


def _ours(name):
    """Whether a /dev/shm name is of this test's addresses: its port
    blocks, or a world of one of this process (127.0.0.1:20000 + pid %
    20000, its tables' at port + 1).  Other tests may run beside it."""
    alone = 20000 + os.getpid() % 20000
    for port in _used_ports | {alone, alone + 1}:
        if f":{port}-" in name:
            return True
    return False


@pytest.fixture
def no_shm_left():
    """Fails a test that leaves objects in /dev/shm (tests/run's rule)."""
    _used_ports.clear()
    before = shm_objects()
    yield
    left = [n for n in shm_objects() - before if _ours(n)]
    assert not left, f"left in /dev/shm: {sorted(left)[:8]}"


def easgd_levels_hold(world, values, label):
    """@values, a rank's replica after S-EASGD rounds with no training
    from replicas r + 1: each shard at its owner's level."""
    total = sum(r + 1 for r in range(world))
    levels = [(total + o + 1) / (world + 1) for o in range(world)]
    got = numpy.array(values)
    owners = [int(numpy.argmin([abs(v - lv) for lv in levels])) for v in got]
    assert owners == sorted(owners), f"{label}: shards out of order"
    assert set(owners) == set(range(world)), f"{label}: {set(owners)}"
    want = numpy.array([levels[o] for o in owners])
    numpy.testing.assert_allclose(got, want, atol=1e-5,
                               err_msg=f"{label}: mass not conserved")
