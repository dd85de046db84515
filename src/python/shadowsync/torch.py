# SPDX-License-Identifier: BSD-2-Clause
"""A PyTorch model on the runtime: its dense part shadow-synchronized in
place (Replica), its embedding bags served from the sharded tables
(ShardedEmbeddingBag, ShardedEmbeddingBagCollection).

The library owns the memory and tensors are views of it: Replica moves the
module's parameters into the registered replica and points each
parameter's .data at its piece, so the optimizer and the training loop
stay as they were while the shadow thread averages the same memory.
docs/python.md is the guide.
"""
import time
import types
import weakref

import torch
import torch.nn.functional as F

from . import fabric
from .base import ShadowSyncError, usage
from .sync import ALGOS, MODES, Sync
from .table import Table

__all__ = ["Replica", "ShardedEmbeddingBag", "ShardedEmbeddingBagCollection",
           "ShadowSyncError"]


def _layout_hash(entries):
    """FNV-1a over the names and shapes: ranks whose models differ are
    refused when they connect, not averaged into nonsense."""
    h = 0xcbf29ce484222325
    for name, t in entries:
        for c in f"{name}:{tuple(t.shape)};".encode():
            h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return h


def _entries(module, params, buffers):
    if params is not None:
        entries = [(f"params[{i}]", p) for i, p in enumerate(params)]
    elif module is not None:
        entries = [(n, p) for n, p in module.named_parameters()
                   if p.requires_grad]
        if buffers:
            entries += [(n, b) for n, b in module.named_buffers()
                        if b.is_floating_point()]
    else:
        raise usage("Replica", "neither a module nor parameters",
                    "Replica(model) or Replica(None, params=[...])")
    seen, out = set(), []
    for name, t in entries:  # a tied weight is one piece
        if id(t) in seen:
            continue
        seen.add(id(t))
        if not isinstance(t, torch.Tensor):
            raise usage(f"parameter '{name}'", "not a tensor",
                        "give the module's parameters")
        if t.dtype != torch.float32:
            raise usage(f"parameter '{name}'",
                        f"{t.dtype}: the replica holds float32",
                        "call model.float() before wrapping it")
        if t.device.type != "cpu":
            raise usage(f"parameter '{name}'", f"on {t.device}",
                        "the replica is in host memory: keep the model on "
                        "the CPU")
        if t.is_sparse or not t.is_contiguous():
            raise usage(f"parameter '{name}'",
                        "not contiguous (a view with strides of its own)",
                        "make it contiguous before wrapping: "
                        "p.data = p.data.contiguous()")
        out.append((name, t))
    if not out:
        raise usage("Replica", "no parameter to synchronize",
                    "give a module with parameters that require grad")
    return out


class Replica:
    """The dense parameters of @module (those that require grad; or
    @params; floating buffers too with @buffers) in one replica that the
    library registers and synchronizes by @algo ("ma", "easgd", "bmuf",
    "gossip") in @mode "shadow" (a background thread: the training never
    waits) or "foreground" (step() runs a round every @sync_every steps).

    @start_alike: every rank starts from rank 0's values (as
    DistributedDataParallel does).  The rank, world and peers come from
    the environment (fabric.Job) unless @job is given.  Further keyword
    options go to the sync layer: max_rounds_per_s, max_bytes_per_s,
    round_timeout_ms, alpha, eta, zeta, beta, max_gap, hierarchical_from.

    Call step() after each optimizer step (or wrap(optimizer) once), and
    finish() at the end of training."""

    def __init__(self, module=None, algo="ma", mode="shadow", sync_every=10,
                 params=None, buffers=False, job=None, start_alike=True,
                 timeout_ms=0, **sync_options):
        if mode not in MODES:
            raise usage(f"mode '{mode}'", "not a sync mode",
                        "give one of: " + ", ".join(MODES))
        if algo not in ALGOS:
            raise usage(f"algo '{algo}'", "not a sync algorithm",
                        "give one of: " + ", ".join(ALGOS))
        if sync_every < 1:
            raise usage(f"sync_every {sync_every}", "below 1",
                        "give the steps between foreground rounds")
        entries = _entries(module, params, buffers)
        n = sum(t.numel() for _, t in entries)
        self.mode, self.sync_every = mode, sync_every
        self._sync = Sync(n, algo=algo, job=job,
                          layout_hash=_layout_hash(entries),
                          timeout_ms=timeout_ms, start_alike=start_alike,
                          **sync_options)
        self.job = self._sync.job
        flat = torch.from_numpy(self._sync.params())
        self._pieces = []
        off = 0
        with torch.no_grad():
            for name, t in entries:
                piece = flat[off:off + t.numel()].view(t.shape)
                piece.copy_(t.detach())
                t.data = piece
                self._pieces.append((name, t, piece.data_ptr()))
                off += t.numel()
        self._flat = flat
        self._steps = 0
        self.finished = False
        try:
            self._sync.begin()  # every rank; rank 0's values, start_alike
            if mode == "shadow":
                self._sync.start_shadow()
        except BaseException:
            # the parameters get their values back in memory of their own,
            # and the endpoint goes now: no view of it was handed out
            flat = piece = None
            self._release(views_dropped=True)
            raise

    @property
    def sync(self):
        """The shadowsync.sync.Sync underneath: claim() for the job's data
        chunks (train.chunks), round(), barrier()."""
        return self._sync

    @property
    def world(self):
        return self.job.world

    @property
    def rank(self):
        return self.job.rank

    def flat(self):
        """The whole replica as one float32 tensor: a view, zero copy."""
        return self._flat

    def check(self):
        """Raise when a parameter no longer is a view of the replica (it
        was re-bound after wrapping: model.to(...), p.data = ...): its
        updates would no longer be synchronized."""
        for name, t, ptr in self._pieces:
            if t.data_ptr() != ptr:
                raise usage(f"parameter '{name}'",
                            "re-bound after the Replica was made: it is no "
                            "longer a view of the replica, and its updates "
                            "would not be synchronized",
                            "change parameters in place (copy_, "
                            "load_state_dict), or wrap the model after the "
                            "change")

    def step(self, k=1):
        """After an optimizer step: counts @k steps (the sync gap's unit);
        in the foreground mode, a round every sync_every steps."""
        if self.finished:
            raise usage("Replica.step", "after finish()",
                        "make a new Replica to train again")
        self.check()  # and add_iterations refuses a forked child
        self._sync.add_iterations(k)
        self._steps += k
        if self.mode == "foreground" and self._steps >= self.sync_every:
            self._steps = 0
            self._sync.foreground()

    def wrap(self, optimizer):
        """@optimizer, whose step() now calls self.step() after it (still
        a bound method: learning-rate schedulers wrap it in turn)."""
        inner = optimizer.step
        replica = self

        def step(opt, *args, **kwargs):
            out = inner(*args, **kwargs)
            replica.step()
            return out

        optimizer.step = types.MethodType(step, optimizer)
        return optimizer

    def round(self):
        """One round now, from this thread (with the shadow thread
        running, it waits for the round in progress)."""
        self._sync.round()

    def stats(self):
        """The sync figures as a dict: rounds, rounds_per_s, sync_gap,
        rounds_partial, peers_left_out, left_out_by_peer, members, ..."""
        return self._sync.stats()

    def finish(self):
        """The end of training, as train's: the shadow thread stopped, a
        barrier with the ranks done too, for S-MA and S-BMUF a last round
        (every rank then holds the exact average), LEAVE.  The parameters
        then get memory of their own, holding the final values, and the
        replica is released.  Returns how many ranks did not come in
        time (they finish alone)."""
        if self.finished:
            return 0
        try:
            return self._sync.finish()
        finally:
            self.close()

    def close(self):
        """Release without the last round (after an error): the
        parameters keep their values in memory of their own."""
        self._release(views_dropped=False)

    def _release(self, views_dropped):
        if not self.finished:
            with torch.no_grad():
                for _, t, _ in self._pieces:
                    t.data = t.data.clone()
            self._flat = None
            self._sync.close(views_dropped=views_dropped)
            self.finished = True

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.finish()
        else:
            self.close()


# ---- the sharded embedding bags ---------------------------------------------

_open_bags = weakref.WeakSet()  # modules whose table endpoint is open


class _Bags(torch.nn.Module):
    """What ShardedEmbeddingBag and ShardedEmbeddingBagCollection share:
    one Table endpoint of @features tables, the lookups of a batch's
    distinct rows (the next one's posted ahead by prefetch()), and the
    gradients of those rows pushed to their owners from the backward
    pass."""

    def __init__(self, sizes, dim, mode, optimizer, lr, eps, seed,
                 init_bound, max_ids, job, timeout_ms):
        super().__init__()
        if mode not in ("sum", "mean"):
            raise usage(f"mode '{mode}'", "not a pooling",
                        "give 'sum' or 'mean'")
        if any(b.table._owner is not None for b in _open_bags):
            raise usage("sharded tables", "this rank has tables open "
                        "already (one endpoint a rank)",
                        "put every feature in one "
                        "ShardedEmbeddingBagCollection")
        self.sizes = [int(n) for n in sizes]
        self.dim, self.mode = dim, mode
        self.rows = max(self.sizes)
        self.max_ids = max_ids
        self.table = Table(len(self.sizes), self.rows, dim,
                           optimizer=optimizer, lr=lr, eps=eps, seed=seed,
                           init_bound=init_bound, max_rows=max_ids, depth=2,
                           job=job, timeout_ms=timeout_ms)
        _open_bags.add(self)
        self.job = self.table.job
        self._free = list(range(self.table.depth))  # lookup slots
        self._ahead = []  # prefetched: (values, offsets, ids, inverse, slot)
        self.wait_seconds = 0.0

    def _distinct(self, values, feature_of):
        """The batch's distinct global ids (table * rows + id) and each
        value's place among them."""
        g = values + feature_of * self.rows
        ids, inverse = torch.unique(g, sorted=True, return_inverse=True)
        if len(ids) > self.max_ids:
            raise usage("sharded lookup",
                        f"{len(ids)} distinct ids in one batch, more than "
                        f"max_ids {self.max_ids}",
                        "give a larger max_ids, or smaller batches")
        return ids, inverse

    def _post(self, ids):
        """Post the lookup of @ids into a free slot (the oldest prefetch's,
        unused, when none is free); returns the slot."""
        if not self._free:
            self._drop(self._ahead.pop(0))
        slot = self._free.pop(0)
        try:
            self.table.lookup(ids.numpy().astype("uint64"), slot)
        except BaseException:
            self._free.append(slot)
            raise
        return slot

    def _wait(self, slot):
        """The rows of @slot's lookup; the slot is free again after, also
        when the wait fails or is interrupted."""
        t0 = time.perf_counter()
        try:
            return self.table.wait(slot)
        finally:
            self.wait_seconds += time.perf_counter() - t0
            self._free.append(slot)

    def _drop(self, ahead):
        """A prefetch no forward took: waited for, its slot freed."""
        try:
            self.table.wait(ahead[4])
        finally:
            self._free.append(ahead[4])

    def _prefetch(self, values, feature_of, offsets):
        ids, inverse = self._distinct(values, feature_of)
        slot = self._post(ids)
        self._ahead.append((values.clone(), offsets.clone(), ids, inverse,
                            slot))

    def _pool(self, values, feature_of, offsets):
        """The bags' pooled rows (prefetched, or looked up now); their
        gradients, summed per row by autograd, pushed to the owners from
        the backward pass."""
        hit = None
        for k, a in enumerate(self._ahead):
            if torch.equal(a[0], values) and torch.equal(a[1], offsets):
                hit = k
                break
        if hit is not None:
            for stale in self._ahead[:hit]:  # prefetched, never used
                self._drop(stale)
            ids, inverse, slot = self._ahead[hit][2:]
            del self._ahead[:hit + 1]
        else:
            ids, inverse = self._distinct(values, feature_of)
            slot = self._post(ids)
        rows = torch.from_numpy(self._wait(slot))
        if torch.is_grad_enabled() and self.training:
            rows.requires_grad_(True)
            table, keep = self.table, ids.numpy().astype("uint64")

            def push(grad):
                table.push(keep, grad.detach().contiguous().numpy())

            rows.register_hook(push)
        return F.embedding_bag(inverse, rows, offsets[:-1], mode=self.mode)

    def prefetching(self, batches, bags_of=lambda b: (b[1], b[2])):
        """@batches (any iterable) again, each batch's lookup posted while
        the one before computes: bags_of(batch) gives the (values,
        offsets) this module will be called with for it (default: the
        batch's second and third items)."""
        it = iter(batches)
        nxt = next(it, None)
        if nxt is not None:
            self.prefetch(*bags_of(nxt))
        while nxt is not None:
            cur, nxt = nxt, next(it, None)
            if nxt is not None:
                self.prefetch(*bags_of(nxt))
            yield cur

    def flush(self, timeout_ms=30000):
        """Wait until every gradient pushed so far is applied at its owner:
        before evaluating, so the rows read are the trained ones."""
        self.table.flush(timeout_ms)

    def stats(self):
        """The table figures (lookups, rows_local, rows_remote, pushed,
        applied, dropped, lookup_wait_ns, ...) and this module's own
        lookup wait in seconds."""
        st = self.table.stats()
        st["lookup_wait_s"] = self.wait_seconds
        return st

    def finish(self, timeout_ms=60000):
        """The end: flush, wait for every rank (their last lookups may read
        this rank's shard), close."""
        if self.table._owner is None:
            return
        self.table.flush()
        self.table.barrier(timeout_ms)
        self.table.close()

    def close(self):
        """Close now, without waiting for the others (after an error)."""
        self.table.close()


def _check_bags(input, offsets, size, name):
    """@input (1-D ids, or 2-D: one bag a row) and @offsets as
    torch.nn.EmbeddingBag takes them; returns 1-D ids (int64) and the
    B + 1 bag boundaries."""
    if input.dim() == 2:
        if offsets is not None:
            raise usage(f"{name} offsets", "given with 2-D input",
                        "2-D input is one bag a row: leave offsets out")
        b, length = input.shape
        offsets = torch.arange(0, b * length + 1, length, dtype=torch.int64)
        input = input.reshape(-1)
    elif input.dim() == 1:
        if offsets is None:
            raise usage(f"{name} offsets", "missing with 1-D input",
                        "give the start of each bag, as EmbeddingBag")
        offsets = offsets.to(torch.int64)
        if offsets.dim() != 1 or len(offsets) == 0 or offsets[0] != 0:
            raise usage(f"{name} offsets", "the first is not 0",
                        "offsets start at 0, one a bag")
        if len(offsets) > 1 and bool((offsets[1:] < offsets[:-1]).any()):
            i = int((offsets[1:] < offsets[:-1]).nonzero()[0]) + 1
            raise usage(f"{name} offsets[{i}]",
                        f"{int(offsets[i])} is below the one before, "
                        f"{int(offsets[i - 1])}",
                        "offsets must not decrease")
        if int(offsets[-1]) > len(input):
            raise usage(f"{name} offsets[{len(offsets) - 1}]",
                        f"{int(offsets[-1])} is past the {len(input)} ids",
                        "each offset is a start within input")
        offsets = torch.cat([offsets, torch.tensor([len(input)])])
    else:
        raise usage(f"{name} input", f"{input.dim()}-D",
                    "give 1-D ids with offsets, or 2-D bags")
    input = input.to(torch.int64)
    if len(input) and (int(input.min()) < 0 or int(input.max()) >= size):
        bad = int(((input < 0) | (input >= size)).nonzero()[0])
        raise usage(f"{name} id {int(input[bad])} at position {bad}",
                    f"past the table's {size} rows",
                    "ids count from 0 to num_embeddings - 1")
    return input, offsets


class ShardedEmbeddingBag(_Bags):
    """torch.nn.EmbeddingBag(@num_embeddings, @embedding_dim, mode=@mode)
    whose rows live sharded over the ranks: each row at one owner, with
    its @optimizer state ("adagrad" or "sgd", at @lr), read by one-sided
    READs, updated there from the gradients the backward pass pushes.
    The rows start uniform in +-@init_bound (0: sqrt(1 / rows)) from
    @seed, the same whatever the ranks.  Takes (input, offsets) as
    EmbeddingBag does (no per_sample_weights); prefetch(input, offsets)
    posts the lookup of a batch ahead of its forward."""

    def __init__(self, num_embeddings, embedding_dim, mode="sum",
                 optimizer="adagrad", lr=0.01, eps=1e-10, seed=1,
                 init_bound=0.0, max_ids=65536, job=None, timeout_ms=0):
        super().__init__([num_embeddings], embedding_dim, mode, optimizer,
                         lr, eps, seed, init_bound, max_ids, job, timeout_ms)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim

    def _prepare(self, input, offsets):
        values, offsets = _check_bags(input, offsets, self.num_embeddings,
                                      "ShardedEmbeddingBag")
        return values, torch.zeros_like(values), offsets

    def prefetch(self, input, offsets=None):
        """Post the lookup of this batch's rows now; its forward() then
        waits only for what has not come."""
        self._prefetch(*self._prepare(input, offsets))

    def forward(self, input, offsets=None):
        return self._pool(*self._prepare(input, offsets))


class ShardedEmbeddingBagCollection(_Bags):
    """Many features' bags in one call, as TorchRec's
    EmbeddingBagCollection: feature f's table has @num_embeddings[f] rows
    of @embedding_dim (one sharded table set, every feature's rows in one
    lookup).  forward(values, offsets): the ids of the F features' bags,
    feature by feature, each feature's B bags in order (TorchRec's
    KeyedJaggedTensor layout), @offsets the F * B bag starts; returns
    (B, F, embedding_dim)."""

    def __init__(self, num_embeddings, embedding_dim, mode="sum",
                 optimizer="adagrad", lr=0.01, eps=1e-10, seed=1,
                 init_bound=0.0, max_ids=1 << 18, job=None, timeout_ms=0):
        super().__init__(num_embeddings, embedding_dim, mode, optimizer, lr,
                         eps, seed, init_bound, max_ids, job, timeout_ms)
        self.features = len(self.sizes)

    def _prepare(self, values, offsets):
        values, offs = _check_bags(values, offsets, self.rows,
                                   "ShardedEmbeddingBagCollection")
        bags = len(offs) - 1
        if bags % self.features:
            raise usage("ShardedEmbeddingBagCollection offsets",
                        f"{bags} bags for {self.features} features",
                        "give B bags a feature, feature after feature")
        b = bags // self.features
        lengths = offs[1:] - offs[:-1]
        feature_of = torch.repeat_interleave(
            torch.arange(self.features).repeat_interleave(b), lengths)
        sizes = torch.tensor(self.sizes)[feature_of]
        if len(values) and bool((values >= sizes).any()):
            bad = int((values >= sizes).nonzero()[0])
            raise usage(f"ShardedEmbeddingBagCollection id "
                        f"{int(values[bad])} at position {bad}",
                        f"past feature {int(feature_of[bad])}'s "
                        f"{int(sizes[bad])} rows",
                        "ids count from 0 to that feature's rows - 1")
        return values, feature_of, offs, b

    def prefetch(self, values, offsets):
        """Post the lookup of this batch's rows now, as
        ShardedEmbeddingBag.prefetch."""
        v, feature_of, offs, _ = self._prepare(values, offsets)
        self._prefetch(v, feature_of, offs)

    def forward(self, values, offsets):
        v, feature_of, offs, b = self._prepare(values, offsets)
        pooled = self._pool(v, feature_of, offs)
        return pooled.view(self.features, b, self.dim).transpose(0, 1)


def job(**kw):
    """The job of this process (fabric.Job), for a Replica and the bags to
    share: shadowsync.torch.job() once, then job=that to each."""
    return fabric.Job(**kw)
