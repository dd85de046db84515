# SPDX-License-Identifier: BSD-2-Clause
"""The train layer (train.h), as far as a model of the user's needs it:
the Criteo reader of the C trainer (log1p dense features, hex
categoricals, bad lines named by file and line), its hashing of the
categoricals into table rows, and its held-out metrics (NE, AUC,
calibration).  So a PyTorch model trains on exactly the examples and rows
that `shadowsync train` would.
"""
import ctypes

import numpy as np

from . import _lib
from .base import check, usage

DENSE, SPARSE = _lib.DENSE, _lib.SPARSE


class Examples:
    """A block of examples: .labels (n,), .dense (n, 13) float32 (log1p),
    .sparse (n, 26) uint32 (the hex values, 0 when empty)."""

    def __init__(self, labels, dense, sparse):
        self.labels, self.dense, self.sparse = labels, dense, sparse

    def __len__(self):
        return len(self.labels)

    def rows(self, hash_size):
        """Each categorical value's row in its feature's table, as the C
        model hashes it: (n, 26) int64.  @hash_size: the rows of every
        table, or 26 numbers, one a table."""
        cfg = _lib.ModelConfig()
        _lib.model_config_init(ctypes.byref(cfg))
        sizes = np.broadcast_to(np.asarray(hash_size, dtype=np.uint64),
                                (SPARSE,))
        cfg.hash_size = int(sizes[0])
        cfg.table_rows[:] = [int(r) for r in sizes]
        first = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(
            np.uint64)
        n = len(self)
        ex = self._structs()
        ids = np.empty((n, SPARSE), dtype=np.uint64)
        _lib.model_batch_rows(ctypes.byref(cfg), ex, n,
                              ids.ctypes.data_as(
                                  ctypes.POINTER(ctypes.c_uint64)))
        return (ids - first).astype(np.int64)

    def _structs(self):
        n = len(self)
        arr = (_lib.Example * n)()
        view = np.frombuffer(arr, dtype=np.dtype(
            [("label", np.float32), ("dense", np.float32, DENSE),
             ("sparse", np.uint32, SPARSE)]))
        view["label"], view["dense"], view["sparse"] = (self.labels,
                                                        self.dense,
                                                        self.sparse)
        return arr


def data_size(path):
    """The bytes of @path the reader's ranges count: a plain file's size,
    a gzip file's uncompressed length (read through once a process)."""
    return _data_size(path)[0]


def is_gzip(path):
    """Whether @path is gzip (its first bytes, whatever its name)."""
    return _data_size(path)[1]


def _data_size(path):
    size, gzip = ctypes.c_uint64(), ctypes.c_bool()
    check(_lib.data_size(path.encode(), ctypes.byref(size),
                         ctypes.byref(gzip)))
    return size.value, gzip.value


def read(path, rank=0, world=1, limit=0, block=8192):
    """The examples of @path (plain or gzip) whose lines start in rank
    @rank's 1/@world of its bytes (the C trainer's static split: every
    line read by exactly one rank), at most @limit (0: all).  A malformed
    line is an error naming the file and the line."""
    if path == "-" and world > 1:
        raise usage(f"read('-', rank {rank}, world {world})",
                    "standard input is read once, from its start, by "
                    "one rank", "give ranks a file to share")
    size = data_size(path)
    return read_range(path, size * rank // world, size * (rank + 1) // world,
                      limit, block)


def chunks(path, sync=None, world=1, epochs=1, chunk_size=0):
    """The C trainer's dynamic split (ss_chunks_plan, ss_chunks_next):
    Examples of one chunk of @path after another, the chunk numbers
    claimed from the job's counter at rank 0 through @sync (a
    sync.Sync, begun; None: this process alone), so that a rank that
    trains faster takes more of the data."""
    if path == "-":
        raise usage("chunks of '-'", "standard input is read once, in "
                    "order, not by chunks", "train.read('-') reads it")
    if is_gzip(path):
        raise usage(f"chunks of '{path}'", "it is gzip: each chunk would "
                    "decompress it from its start",
                    "decompress it first, or read a static share: "
                    "train.read(path, rank, world)")
    k = _lib.Chunks()
    if sync is not None:
        k.sync = sync.handle
    _lib.chunks_plan(ctypes.byref(k), data_size(path), world, chunk_size,
                     epochs)
    begin, end = ctypes.c_uint64(), ctypes.c_uint64()
    while check(_lib.chunks_next(ctypes.byref(k), ctypes.byref(begin),
                                 ctypes.byref(end))):
        yield read_range(path, begin.value, end.value)


def read_range(path, begin, end, limit=0, block=8192):
    """The examples whose lines start in bytes [@begin, @end) of @path."""
    reader = ctypes.c_void_p()
    check(_lib.reader_open(ctypes.byref(reader), path.encode(), begin, end,
                           _lib.BAD_LINES_FAIL))
    dt = np.dtype([("label", np.float32), ("dense", np.float32, DENSE),
                   ("sparse", np.uint32, SPARSE)])
    parts, count = [], 0
    try:
        buf = (_lib.Example * block)()
        view = np.frombuffer(buf, dtype=dt)
        while True:
            n = 0
            while n < block and (not limit or count + n < limit):
                rc = check(_lib.reader_next(reader, ctypes.byref(buf[n])))
                if rc == 0:
                    break
                n += 1
            if n:
                parts.append(view[:n].copy())
                count += n
            if n < block or (limit and count >= limit):
                break
    finally:
        _lib.reader_close(ctypes.byref(reader))
    allx = np.concatenate(parts) if parts else np.empty(0, dtype=dt)
    return Examples(np.ascontiguousarray(allx["label"]),
                    np.ascontiguousarray(allx["dense"]),
                    np.ascontiguousarray(allx["sparse"]))


def metrics(p, y):
    """Log loss, NE, AUC, calibration and click rate of predictions @p
    against labels @y, as the C trainer reports them (a dict)."""
    p = np.ascontiguousarray(p, dtype=np.float32)
    y = np.ascontiguousarray(y, dtype=np.float32)
    m = _lib.Metrics()
    check(_lib.metrics_compute(p.ctypes.data_as(ctypes.POINTER(
        ctypes.c_float)), y.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
        len(p), ctypes.byref(m)))
    return {name: getattr(m, name) for name, _ in m._fields_}
