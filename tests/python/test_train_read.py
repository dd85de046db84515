# SPDX-License-Identifier: BSD-2-Clause
"""shadowsync.train's reader on a gzip file: the examples of its plain
copy, the whole file and each rank's share (ranges of the uncompressed
bytes); chunks of it are refused (each would decompress it from its
start), and so are chunks or shares of standard input; a truncated one is
an error naming the file."""
import gzip
import os
import subprocess

import numpy
import pytest
from conftest import ROOT

from shadowsync import ShadowSyncError, train

SHADOWSYNC = os.path.join(ROOT, "build", "bin", "shadowsync")


def same(a, b):
    return (numpy.array_equal(a.labels, b.labels)
            and numpy.array_equal(a.dense, b.dense)
            and numpy.array_equal(a.sparse, b.sparse))


def test_a_gzip_file_reads_as_its_plain_copy(tmp_path):
    plain, gz = str(tmp_path / "d.txt"), str(tmp_path / "d.txt.gz")
    subprocess.run([SHADOWSYNC, "gen-data", "--out", plain, "--examples",
                    "3000"], check=True, capture_output=True)
    with open(plain, "rb") as f, gzip.open(gz, "wb") as g:
        g.write(f.read())
    assert train.data_size(gz) == os.path.getsize(plain)
    assert same(train.read(gz), train.read(plain))
    parts = [train.read(gz, rank, 3) for rank in range(3)]
    assert sum(len(p) for p in parts) == 3000
    for rank, p in enumerate(parts):
        assert same(p, train.read(plain, rank, 3))
    assert train.is_gzip(gz) and not train.is_gzip(plain)
    assert sum(len(c) for c in train.chunks(plain, chunk_size=4096)) == 3000
    with pytest.raises(ShadowSyncError, match="it is gzip"):
        next(train.chunks(gz))
    with pytest.raises(ShadowSyncError, match="not by chunks"):
        next(train.chunks("-"))
    with pytest.raises(ShadowSyncError, match="by one rank"):
        train.read("-", 0, 2)
    with open(gz, "r+b") as f:
        f.truncate(os.path.getsize(gz) // 2)
    with pytest.raises(ShadowSyncError, match="d.txt.gz"):
        train.read(gz)
