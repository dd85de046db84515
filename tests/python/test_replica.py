# SPDX-License-Identifier: BSD-2-Clause
"""Replica: the module's parameters as views of the registered replica,
kept in sync by the library's rounds."""
import numpy as np
import pytest
from conftest import easgd_levels_hold, run_ranks


@pytest.mark.parametrize("world", [2, 3])
def test_ma_ends_with_the_exact_mean_after_a_round(world, no_shm_left):
    n = 1000
    ranks = run_ranks(world, "ma_mean", n)
    assert ranks.code == [0] * world, ranks.text()
    want = np.mean([r + np.arange(n, dtype=np.float32) / np.float32(n)
                    for r in range(world)], axis=0)
    for r in range(world):
        got = np.array(ranks.json[r]["values"], dtype=np.float32)
        assert ranks.json[r]["rounds"] >= 1
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6,
                                   err_msg=f"rank {r}")


@pytest.mark.parametrize("world", [2, 3])
def test_easgd_conserves_replicas_and_center(world, no_shm_left):
    """Rank r holds r + 1 everywhere, and each shard of the center starts
    as its owner's replica; with no training the replicas and the center
    meet where the sum says: (sum of (r + 1) + owner + 1) / (world + 1),
    shard by shard.  A delta lost or applied twice moves that."""
    n = 999
    ranks = run_ranks(world, "easgd_consensus", n, 300)
    assert ranks.code == [0] * world, ranks.text()
    for r in range(world):
        easgd_levels_hold(world, ranks.json[r]["values"], f"rank {r}")


def test_parameters_are_views_and_a_step_is_seen_by_the_rounds(no_shm_left):
    ranks = run_ranks(2, "views_and_a_step", 0.5)
    assert ranks.code == [0, 0], ranks.text()
    for r, j in enumerate(ranks.json):
        assert j["inside"], f"rank {r}: a parameter outside the replica"
        # start_alike: both started from rank 0's values
        assert j["w0"] == ranks.json[0]["w0"], ranks.text()
        assert abs(j["seen"] - j["want"]) < 1e-6, (r, j)
        assert j["rounds"] >= 1, j
        assert j["own"], "after finish() the parameters own their memory"
        assert abs(j["after"] - j["want"]) < 1e-6, (r, j)


def test_a_rank_killed_leaves_the_others_training(no_shm_left):
    """SIGKILL one of three ranks: the others go on and finish, leaving it
    out, as train's ranks do; what it left in /dev/shm is removed with
    shadowsync shm-clean."""
    import os
    import subprocess
    from conftest import ROOT
    ranks = run_ranks(3, "trains_while_one_dies", 4, kill=(2, "training"))
    assert ranks.code[:2] == [0, 0], ranks.text()
    for j in ranks.json[:2]:
        assert j["steps"] > 0
        assert j["members"] == 2 or j["left_out"] > 0, j
    subprocess.run([os.path.join(ROOT, "build", "bin", "shadowsync"),
                    "shm-clean", "--job-key", str(ranks.key)],
                   capture_output=True, check=False)
