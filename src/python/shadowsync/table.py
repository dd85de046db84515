# SPDX-License-Identifier: BSD-2-Clause
"""The table layer (table.h): @tables tables of @rows rows of @width floats,
each row kept by one owner rank with its optimizer state, read by the
others with one-sided READs and updated through gradient logs that the
owner's applier applies.

Ids are global: table t, row r is t * rows + r.  A lookup is posted
(lookup) and waited for later (wait), so the next batch's rows come while
this one computes; push() sends the summed gradients of distinct rows.
"""
import ctypes
import os
import weakref

import numpy as np

from . import _lib, fabric
from .base import check, usage

UPDATES = {"sgd": _lib.TABLE_SGD, "adagrad": _lib.TABLE_ADAGRAD}


class _Owner:
    def __init__(self):
        self.table = ctypes.c_void_p()
        self.pid = os.getpid()
        self._finalizer = weakref.finalize(self, _Owner._release, self.table,
                                           self.pid)

    @staticmethod
    def _release(table, pid):
        if os.getpid() == pid:
            _lib.table_close(ctypes.byref(table))


def _u64(a):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64))


def _f32(a):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


class Table:
    """This rank's endpoint of the sharded tables (ss_table_open): its
    shard, its proxy thread; one client (the calling thread) with @depth
    lookups in flight.  @optimizer "adagrad" or "sgd" at @lr (@eps), the
    rows starting uniform in +-@init_bound (0: sqrt(1 / rows)) from @seed,
    the same on every rank whatever the placement.  @max_rows: distinct
    rows in one lookup or push, at most."""

    def __init__(self, tables, rows, width, optimizer="adagrad", lr=0.01,
                 eps=1e-8, seed=1, init_bound=0.0, max_rows=65536, depth=2,
                 job=None, timeout_ms=0, log_entries=0, cache_rows=None):
        if optimizer not in UPDATES:
            raise usage(f"optimizer '{optimizer}'",
                        "not one the owners apply",
                        "give one of: " + ", ".join(UPDATES))
        self.job = job if job is not None else fabric.Job()
        o = _lib.TableOptions()
        _lib.table_options_init_size(ctypes.byref(o), ctypes.sizeof(o))
        o.tables, o.rows, o.width = tables, rows, width
        o.update, o.lr, o.eps = UPDATES[optimizer], lr, eps
        o.seed, o.init_bound = seed, init_bound
        o.max_rows, o.depth, o.clients = max_rows, depth, 1
        if timeout_ms:
            o.timeout_ms = timeout_ms
        if log_entries:
            o.log_entries = log_entries
        if cache_rows is not None:
            o.cache_rows = cache_rows
        self.tables, self.rows, self.width = tables, rows, width
        self.depth, self.max_rows = depth, max_rows
        fo = fabric.options(self.job, addrs=self.job.table_addrs(),
                            timeout_ms=timeout_ms)
        self._owner = _Owner()
        fabric.guard_signals()
        try:
            check(_lib.table_open(ctypes.byref(self._owner.table),
                                  ctypes.byref(o), ctypes.byref(fo)))
        except BaseException:
            self._owner._finalizer()  # nothing of it was handed out
            raise
        self._posted = [None] * depth  # the ids each slot was posted with

    def _handle(self):
        if self._owner is None:
            raise usage("table", "closed", "make a new Table")
        if os.getpid() != self._owner.pid:
            raise usage("table", "used in a process forked after it was made",
                        "make the tables after the fork")
        return self._owner.table

    def lookup(self, ids, slot=0):
        """Post the lookup of the distinct global @ids (uint64) into
        @slot; returns at once."""
        ids = np.ascontiguousarray(ids, dtype=np.uint64)
        check(_lib.table_lookup(self._handle(), 0, slot, _u64(ids),
                                len(ids)))
        self._posted[slot] = ids
        return ids

    def wait(self, slot=0, out=None):
        """Wait for @slot's lookup: its rows as an (n, width) float32
        array (@out, or a new one).  A row whose owner failed comes as
        last fetched (counted stale)."""
        ids = self._posted[slot]
        if ids is None:
            raise usage(f"table wait on slot {slot}", "nothing posted there",
                        "lookup() first")
        if out is None:
            out = np.empty((len(ids), self.width), dtype=np.float32)
        elif (out.shape != (len(ids), self.width) or out.dtype != np.float32
              or not out.flags["C_CONTIGUOUS"]):
            raise usage("table wait's out", f"{out.dtype} {out.shape}",
                        f"a C-contiguous float32 array of ({len(ids)}, "
                        f"{self.width})")
        try:
            check(_lib.table_wait_into(self._handle(), 0, slot, _f32(out)))
        finally:
            self._posted[slot] = None
        return out

    def push(self, ids, grads):
        """Send the summed gradients (n, width) of the distinct @ids to
        their owners (own rows are stepped at once)."""
        ids = np.ascontiguousarray(ids, dtype=np.uint64)
        grads = np.ascontiguousarray(grads, dtype=np.float32)
        if grads.shape != (len(ids), self.width):
            raise usage("table push",
                        f"gradients of shape {grads.shape} for {len(ids)} "
                        f"rows of {self.width}", "one row of width a id")
        check(_lib.table_push(self._handle(), 0, _u64(ids), _f32(grads),
                              len(ids)))

    def flush(self, timeout_ms=30000):
        """Wait until every gradient pushed so far is applied (or
        dropped) by its owner."""
        check(_lib.table_flush(self._handle(), timeout_ms))

    def barrier(self, timeout_ms=60000):
        """Wait for every live peer's barrier: a shard must outlive the
        others' last lookups, so ranks close together."""
        check(_lib.table_barrier(self._handle(), timeout_ms))

    def owner(self, table, row):
        return _lib.table_owner(self._handle(), table, row)

    def stats(self):
        st = _lib.TableStats()
        _lib.table_stats(self._handle(), ctypes.byref(st))
        return {name: getattr(st, name) for name, _ in st._fields_}

    def close(self):
        """Close now: flush what is queued (bounded), disconnect, release.
        Call table.barrier() first so that no peer still reads this
        rank's shard.  In a forked child: forget it, release nothing."""
        if self._owner is not None:
            if os.getpid() == self._owner.pid:
                self._owner._finalizer()
            self._owner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def init_rows(seed, table, rows, width, bound):
    """The starting values the owners give rows @rows (a sequence) of
    @table (ss_table_init_row): for tests and for a model's copy."""
    out = np.empty((len(rows), width), dtype=np.float32)
    for i, r in enumerate(rows):
        _lib.table_init_row(seed, table, int(r), width, bound,
                            _f32(out[i:i + 1]))
    return out
