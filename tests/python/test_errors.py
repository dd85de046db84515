# SPDX-License-Identifier: BSD-2-Clause
"""Bad input gets a clear exception naming what is wrong, and nothing
leaks: not in /dev/shm, not when the process ends by an exception or a
signal."""
import json
import os
import signal
import subprocess

import pytest
import torch
from conftest import PYTHON, HERE, port_block, rank_env, run_ranks, \
    shm_objects

import shadowsync.torch as sst
from shadowsync import Job, ShadowSyncError


def test_a_float64_module_is_refused_by_name(no_shm_left):
    model = torch.nn.Linear(3, 2).double()
    with pytest.raises(ShadowSyncError) as e:
        sst.Replica(model)
    assert e.value.what == "parameter 'weight'"
    assert "torch.float64" in e.value.why and "model.float()" in e.value.hint


def test_a_non_contiguous_parameter_is_refused(no_shm_left):
    model = torch.nn.Linear(3, 4)
    model.weight = torch.nn.Parameter(torch.randn(3, 4).t())
    with pytest.raises(ShadowSyncError, match="parameter 'weight'.*not "
                       "contiguous"):
        sst.Replica(model)


def test_a_parameter_rebound_after_wrapping_is_caught(no_shm_left):
    model = torch.nn.Linear(3, 1)
    r = sst.Replica(model)
    r.step()
    model.bias.data = torch.zeros(1)
    with pytest.raises(ShadowSyncError, match="parameter 'bias': re-bound"):
        r.step()
    r.close()


def test_bad_bags_are_named(no_shm_left):
    bag = sst.ShardedEmbeddingBag(10, 4)
    cases = [
        ((torch.tensor([1, 10]), torch.tensor([0])),
         "id 10 at position 1: past the table's 10 rows"),
        ((torch.tensor([1, -1]), torch.tensor([0])), "id -1 at position 1"),
        ((torch.tensor([1, 2, 3]), torch.tensor([0, 2, 1])),
         "offsets\\[2\\]: 1 is below the one before, 2"),
        ((torch.tensor([1, 2]), torch.tensor([1])), "the first is not 0"),
        ((torch.tensor([1, 2]), torch.tensor([0, 3])),
         "offsets\\[1\\]: 3 is past the 2 ids"),
        ((torch.tensor([1, 2]), None), "missing with 1-D input"),
    ]
    for args, says in cases:
        with pytest.raises(ShadowSyncError, match=says):
            bag(*args)
    with pytest.raises(ShadowSyncError, match="one endpoint a rank"):
        sst.ShardedEmbeddingBag(10, 4)
    with pytest.raises(ShadowSyncError, match="mode 'max'"):
        sst.ShardedEmbeddingBagCollection([5], 4, mode="max")
    bag.finish()


def test_a_world_without_peers_says_so(monkeypatch):
    """torchrun says 2 tasks, on more than one host (no LOCAL_WORLD_SIZE
    of 2), and no peers are given: nothing to connect to."""
    for k in ("SS_PEERS", "SS_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
              "PMI_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ShadowSyncError) as e:
        Job()
    assert "torchrun says 2 tasks, the peers are 1" in e.value.what
    assert "as many peers" in e.value.hint
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # all here: 127.0.0.1
    job = Job(port=7300)
    assert (job.rank, job.world, job.addrs[1]) == (1, 2, "127.0.0.1:7301")
    monkeypatch.setenv("SS_TRANSPORT", "ib")
    with pytest.raises(ShadowSyncError, match="transport 'ib'"):
        Job()
    monkeypatch.setenv("SS_TRANSPORT", "shm")
    monkeypatch.setenv("SS_RANK", "x")
    with pytest.raises(ShadowSyncError, match="SS_RANK='x'"):
        Job()


def test_bad_options_are_named(no_shm_left):
    with pytest.raises(ShadowSyncError, match="mode 'fast'"):
        sst.Replica(torch.nn.Linear(2, 1), mode="fast")
    with pytest.raises(ShadowSyncError, match="algo 'sum'"):
        sst.Replica(torch.nn.Linear(2, 1), algo="sum")
    with pytest.raises(ShadowSyncError, match="sync option 'bogus'"):
        sst.Replica(torch.nn.Linear(2, 1), bogus=1)
    with pytest.raises(ShadowSyncError, match="no parameter"):
        sst.Replica(torch.nn.ReLU())


def test_a_peer_that_never_comes_is_a_timeout_and_leaves_nothing():
    """Rank 0 of 2 alone: the connect times out as an exception naming
    the peer, and the process ends with nothing of its in /dev/shm."""
    before = shm_objects()
    port = port_block()
    env = rank_env(0, 2, port)
    out = subprocess.run([PYTHON, os.path.join(HERE, "rank_jobs.py"),
                          "wait_for_a_peer"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert '"error": "ShadowSyncError"' in out.stdout, out
    assert f"127.0.0.1:{port + 1}" in out.stdout, out.stdout
    left = [n for n in shm_objects() - before if f":{port}-" in n]
    assert not left, left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_rank_ended_by_a_signal_leaves_nothing(sig):
    before = shm_objects()
    port = port_block()
    p = subprocess.Popen([PYTHON, os.path.join(HERE, "rank_jobs.py"),
                          "sleep_in_training"], env=rank_env(0, 1, port),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    for line in p.stdout:
        if "ready" in line:
            break
    mine = [n for n in shm_objects() - before if f":{port}-" in n]
    assert mine, "the rank made no /dev/shm objects to check"
    p.send_signal(sig)
    p.wait(timeout=60)
    left = [n for n in shm_objects() - before if f":{port}-" in n]
    assert not left, left


def test_the_library_is_found_and_errors_carry_its_text():
    from shadowsync import _lib, version
    from shadowsync.base import check
    assert version() == "0.1.0" or version().count(".") == 2
    assert _lib.path.endswith(("libshadowsync.so", "libshadowsync.so.0"))
    with pytest.raises(ShadowSyncError) as e:
        from shadowsync.table import Table
        Table(1, 10, 4, lr=-1.0)
    assert e.value.code < 0 and e.value.what and e.value.why
    with pytest.raises(ShadowSyncError):
        check(-2)  # -ENOENT, nothing recorded: the errno's text


def run_job(job, world=1):
    port = port_block()
    return port, subprocess.run(
        [PYTHON, os.path.join(HERE, "rank_jobs.py"), job],
        env=rank_env(0, world, port), capture_output=True, text=True,
        timeout=120)


def test_an_exit_handler_reads_the_model_after_ours():
    """Before, the replica was unmapped at exit under the views an earlier
    atexit handler still read: SIGSEGV."""
    port, out = run_job("exit_handler_reads_the_model")
    assert out.returncode == 0, out
    assert '"at_exit": ' in out.stdout, out.stdout
    assert not [n for n in shm_objects() if f":{port}-" in n]


def test_a_caught_interrupt_keeps_the_ranks_names():
    """Before, SIGINT removed the /dev/shm names (the address's claim too)
    of a process that went on."""
    port, out = run_job("interrupt_caught")
    assert '"kept": true' in out.stdout, out
    assert not [n for n in shm_objects() if f":{port}-" in n]


def test_a_failed_replica_frees_its_address_at_once():
    port, out = run_job("retry_after_a_timeout", world=2)
    errors = json.loads(out.stdout.strip().splitlines()[-1])["errors"]
    assert len(errors) == 2, out
    assert all("waiting" in e and "live process" not in e
               for e in errors), errors


def test_a_wrapped_optimizer_takes_a_scheduler(no_shm_left):
    model = torch.nn.Linear(3, 1)
    r = sst.Replica(model)
    opt = r.wrap(torch.optim.SGD(model.parameters(), lr=0.1))
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)
    for _ in range(3):
        opt.zero_grad()
        model(torch.ones(2, 3)).sum().backward()
        opt.step()
        sched.step()
    assert r.stats()["iterations"] == 3
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)
    r.finish()
