# SPDX-License-Identifier: BSD-2-Clause
"""The ctypes structs of shadowsync/_lib.py against the C compiler's: the
size of each, and the offset of every field, from the installed headers'
declarations (include/shadowsync)."""
import ctypes
import os
import subprocess

import pytest
from conftest import ROOT

from shadowsync import _lib

STRUCTS = {
    "ss_error": _lib.Error, "ss_fabric_options": _lib.FabricOptions,
    "ss_job_request": _lib.JobRequest, "ss_sync_options": _lib.SyncOptions,
    "ss_sync_stats": _lib.SyncStats, "ss_table_options": _lib.TableOptions,
    "ss_table_stats": _lib.TableStats, "ss_example": _lib.Example,
    "ss_model_config": _lib.ModelConfig, "ss_metrics": _lib.Metrics,
}


def test_every_struct_has_the_c_layout(tmp_path):
    lines = ["#include <stddef.h>", "#include <stdio.h>",
             '#include "shadowsync/shadowsync.h"', "int main(void) {"]
    for c, py in STRUCTS.items():
        lines.append(f'printf("{c} sizeof %zu\\n", sizeof(struct {c}));')
        for name, _ in py._fields_:
            lines.append(f'printf("{c} {name} %zu\\n", '
                         f"offsetof(struct {c}, {name}));")
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    cc = subprocess.run(["cc", "-std=gnu11", "-I", os.path.join(ROOT,
                        "include"), str(src), "-o", str(exe)],
                        capture_output=True, text=True)
    if cc.returncode:
        pytest.fail(f"a field ctypes names is not in the header:\n{cc.stderr}")
    want = {}
    for line in subprocess.run([str(exe)], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        c, name, value = line.split()
        want[(c, name)] = int(value)
    for c, py in STRUCTS.items():
        assert ctypes.sizeof(py) == want[(c, "sizeof")], c
        for name, _ in py._fields_:
            assert getattr(py, name).offset == want[(c, name)], (c, name)
