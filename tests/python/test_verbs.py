# SPDX-License-Identifier: BSD-2-Clause
"""The layers the package wraps over the test's transport: over verbs in
the soft-RoCE guest, where tests/python/pytest runs this file alone (and
without PyTorch, whose import takes minutes on the guest's emulated CPU),
and over shm here."""
import numpy as np
import pytest
from conftest import TRANSPORT, easgd_levels_hold, run_ranks


@pytest.mark.verbs
def test_sync_and_tables_over_the_transport(no_shm_left):
    """What crosses the fabric, over verbs in the guest (shm here), with
    NumPy only: the S-MA mean, S-EASGD's conservation, rows pushed to
    their owners and read back by both ranks."""
    from shadowsync import _lib
    if TRANSPORT == "verbs" and not _lib.fabric_verbs_available():
        pytest.skip("no active RDMA port here (run under tools/rxe-vm)")
    n = 999
    ranks = run_ranks(2, "verbs_core", n, timeout=900)
    assert ranks.code == [0, 0], ranks.text()
    want = np.mean([r + np.arange(n, dtype=np.float32) / np.float32(n)
                    for r in range(2)], axis=0)
    want = np.concatenate([want[:8], want[-8:]])
    for r, j in enumerate(ranks.json):
        assert j["transport"] == TRANSPORT, j
        np.testing.assert_allclose(j["ma"], want, rtol=1e-6, atol=1e-6)
        easgd_levels_hold(2, j["easgd"], f"rank {r}")
        assert j["table_worst"] < 1e-6, j
        assert j["owners"] == [0, 1], j  # both ranks own pushed rows
    assert ranks.json[1]["rows_remote"] > 0


