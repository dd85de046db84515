# SPDX-License-Identifier: BSD-2-Clause
"""ShardedEmbeddingBag against torch.nn.EmbeddingBag and its optimizer."""
import pytest
import torch
from conftest import run_ranks

import rank_jobs


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_one_rank_matches_embedding_bag_and_its_optimizer(mode, optimizer,
                                                          no_shm_left):
    """Forward and backward, step after step, equal nn.EmbeddingBag with
    the same optimizer, and so do the rows at the end."""
    import shadowsync.torch as sst
    n_rows, dim, lr = 64, 8, 0.1
    bag = sst.ShardedEmbeddingBag(n_rows, dim, mode=mode,
                                  optimizer=optimizer, lr=lr, eps=1e-10)
    batches = rank_jobs.bag_batches(n_rows)
    want, rows = rank_jobs.reference_bag(n_rows, dim, mode, optimizer, lr,
                                         batches)
    for (values, offsets, w), ref in zip(batches, want):
        y = bag(values, offsets)
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6)
        (y * w).sum().backward()
        bag.flush()
    with torch.no_grad():
        got = bag(torch.arange(n_rows), torch.arange(n_rows))
    torch.testing.assert_close(got, rows, rtol=1e-5, atol=1e-6)
    bag.finish()


def test_prefetch_gives_the_same_rows(no_shm_left):
    """prefetch(next) while this batch computes: the same outputs as
    without, and the lookups counted once a batch."""
    import shadowsync.torch as sst
    bag = sst.ShardedEmbeddingBag(50, 4, optimizer="sgd", lr=0.1)
    batches = rank_jobs.bag_batches(50)
    plain = [bag(v, o).detach() for v, o, _ in batches]
    ahead = []
    bag.prefetch(batches[0][0], batches[0][1])
    for i, (v, o, _) in enumerate(batches):
        # the next batch's lookup posted before this one's forward
        if i + 1 < len(batches):
            bag.prefetch(batches[i + 1][0], batches[i + 1][1])
        ahead.append(bag(v, o).detach())
    for a, b in zip(plain, ahead):
        torch.testing.assert_close(a, b)
    again = [bag(v, o).detach() for v, o, _ in
             bag.prefetching(batches, lambda b: (b[0], b[1]))]
    for a, b in zip(plain, again):
        torch.testing.assert_close(a, b)
    st = bag.stats()
    assert st["lookups"] == 3 * len(batches), st  # none twice
    assert st["lookup_wait_s"] >= 0
    bag.finish()


def test_a_collection_pools_each_feature_from_its_own_table(no_shm_left):
    import shadowsync.torch as sst
    sizes, dim = [10, 30, 5], 4
    ebc = sst.ShardedEmbeddingBagCollection(sizes, dim, optimizer="sgd",
                                            lr=0.1)
    refs = []
    for f, n in enumerate(sizes):
        ref = torch.nn.EmbeddingBag(n, dim, mode="sum")
        from shadowsync.table import init_rows
        with torch.no_grad():
            ref.weight.copy_(torch.from_numpy(init_rows(
                1, f, range(n), dim, (1.0 / max(sizes)) ** 0.5)))
        refs.append(ref)
    # B = 2 bags a feature, multi-hot, feature after feature
    values = torch.tensor([1, 2, 9, 0, 29, 3, 4, 4, 0])
    offsets = torch.tensor([0, 2, 3, 4, 6, 8])
    out = ebc(values, offsets)
    assert out.shape == (2, 3, dim)
    per_feature = [(values[0:3], torch.tensor([0, 2])),
                   (values[3:6], torch.tensor([0, 1])),
                   (values[6:9], torch.tensor([0, 2]))]
    for f, (v, o) in enumerate(per_feature):
        torch.testing.assert_close(out[:, f], refs[f](v, o).detach())
    with pytest.raises(sst.ShadowSyncError, match="past feature 2's 5 rows"):
        ebc(torch.tensor([1, 2, 3, 4, 5, 7]), torch.arange(6))
    ebc.finish()


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_two_ranks_where_only_one_trains_give_what_one_rank_gives(
        optimizer, no_shm_left):
    ranks = run_ranks(2, "bag_only_rank_0_trains", "sum", optimizer)
    assert ranks.code == [0, 0], ranks.text()
    j = ranks.json[0]
    assert j["worst"] < 1e-5, j
    assert j["remote"] > 0 and j["pushed"] > 0, j  # rank 1's rows in it
    assert ranks.json[1]["applied"] == j["pushed"], ranks.json
