# SPDX-License-Identifier: BSD-2-Clause
"""ShadowSync from Python: a thin skin over libshadowsync.so.

One module per C layer: base (errors, logging), fabric (the job's ranks,
endpoints), sync (the replica and its rounds), table (rows sharded over
the ranks), data (the Criteo reader and the metrics of the C trainer);
shadowsync.torch puts a PyTorch model on them (Replica,
ShardedEmbeddingBag).  docs/python.md is the guide.
"""
from .base import ShadowSyncError, set_log_level, version
from .fabric import Job

__all__ = ["ShadowSyncError", "Job", "set_log_level", "version"]
