# SPDX-License-Identifier: BSD-2-Clause
"""libshadowsync.so, loaded once, and the C declarations the modules use.

The library is found, in this order: $SHADOWSYNC_LIB (a path to the .so);
the build/ folder of the checkout this package sits in
(src/python/shadowsync -> build/lib/libshadowsync.so); the one `make
install` put beside it (PREFIX/lib/python3/dist-packages/shadowsync ->
PREFIX/lib/libshadowsync.so.0); the system's.  The structs below
mirror include/shadowsync/*.h field for field; tests/python/test_layout.py
holds them to the C compiler's sizes and offsets.  Calls go through
ctypes.CDLL, which releases the GIL for the call: a rank waiting in the
library lets the interpreter's other threads run.
"""
import ctypes
import ctypes.util
import os
from ctypes import (POINTER, c_bool, c_char, c_char_p, c_double, c_float,
                    c_int, c_size_t, c_uint, c_uint32, c_uint64, c_void_p)

_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("SHADOWSYNC_LIB")
    if env:
        return [env]
    up = os.path.join(_HERE, "..", "..", "..")
    # a checkout: src/python/shadowsync -> build/lib
    checkout = os.path.normpath(os.path.join(up, "build", "lib",
                                             "libshadowsync.so"))
    # installed: PREFIX/lib/python3/dist-packages/shadowsync -> PREFIX/lib
    installed = os.path.normpath(os.path.join(up, "libshadowsync.so.0"))
    found = ctypes.util.find_library("shadowsync")
    return [checkout, installed, "libshadowsync.so.0"] + (
        [found] if found else [])


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} (no such file)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path} ({e})")
    raise ImportError(
        "shadowsync: cannot load libshadowsync.so; tried: " + "; ".join(tried)
        + ". Build it (make) in the checkout, install it (make install), "
        "or point SHADOWSYNC_LIB at it")


lib, path = _load()


# ---- base.h ---------------------------------------------------------------

class Error(ctypes.Structure):
    _fields_ = [("code", c_int), ("what", c_char * 256),
                ("why", c_char * 256), ("hint", c_char * 256)]


# ---- fabric.h -------------------------------------------------------------

TRANSPORT_AUTO, TRANSPORT_VERBS, TRANSPORT_SHM = 0, 1, 2


class FabricOptions(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("transport", c_int), ("rank", c_int),
                ("world", c_int), ("addrs", POINTER(c_char_p)),
                ("job_key", c_uint64), ("layout_hash", c_uint64),
                ("timeout_ms", c_uint), ("device", c_char_p),
                ("gid_index", c_int), ("max_message", c_size_t),
                ("partial_connect", c_bool)]


class JobRequest(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("peers", c_char_p),
                ("hostfile", c_char_p), ("port", c_int), ("rank", c_int),
                ("peers_name", c_char_p), ("rank_name", c_char_p)]


# ---- sync.h ---------------------------------------------------------------

SYNC_NONE, SYNC_MA, SYNC_EASGD, SYNC_BMUF, SYNC_GOSSIP = range(5)


class SyncOptions(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("algo", c_int), ("alpha", c_double),
                ("eta", c_double), ("zeta", c_double), ("nesterov", c_bool),
                ("beta", c_double), ("gossip_random", c_bool),
                ("seed", c_uint64), ("round_timeout_ms", c_uint),
                ("max_rounds_per_s", c_double), ("max_bytes_per_s", c_double),
                ("topo", c_void_p), ("numa", c_int), ("synced", c_size_t),
                ("hierarchical_from", c_int), ("max_gap", c_uint64),
                ("start_alike", c_bool), ("claims_from", c_uint64)]


class SyncStats(ctypes.Structure):
    _fields_ = [("rounds", c_uint64), ("rounds_per_s", c_double),
                ("bytes_sent", c_uint64),
                ("bytes_per_peer_per_round", c_double),
                ("round_p50_us", c_double), ("round_p99_us", c_double),
                ("sync_gap", c_double), ("divergence", c_double),
                ("peers_left_out", c_uint64), ("rounds_partial", c_uint64),
                ("rounds_skipped", c_uint64), ("messages_late", c_uint64),
                ("easgd_dropped", c_uint64), ("round_timeout_ms", c_uint),
                ("view_changes", c_uint64), ("members", c_int),
                ("joins", c_uint64), ("reseeds", c_uint64),
                ("iterations", c_uint64)]


# ---- table.h --------------------------------------------------------------

TABLE_SGD, TABLE_ADAGRAD = 0, 1


class TableOptions(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("tables", c_int), ("rows", c_uint32),
                ("width", c_int), ("update", c_int), ("lr", c_float),
                ("eps", c_float), ("seed", c_uint64),
                ("init_bound", c_float), ("clients", c_int),
                ("max_rows", c_int), ("depth", c_int),
                ("log_entries", c_uint32), ("cache_rows", c_uint32),
                ("timeout_ms", c_uint), ("topo", c_void_p), ("numa", c_int),
                ("proxy_slot", c_void_p), ("fill", c_void_p),
                ("fill_arg", c_void_p), ("table_rows", c_void_p)]


class TableStats(ctypes.Structure):
    _fields_ = [("lookups", c_uint64), ("rows_local", c_uint64),
                ("rows_remote", c_uint64), ("rows_fetched", c_uint64),
                ("rows_stale", c_uint64), ("rows_cached", c_uint64),
                ("lookup_wait_ns", c_uint64), ("pushed_local", c_uint64),
                ("pushed", c_uint64), ("dropped", c_uint64),
                ("applied", c_uint64), ("credit_waits", c_uint64),
                ("shard_bytes", c_size_t), ("registered_bytes", c_size_t)]


TABLE_ADDR_LEN = 272


# ---- train.h: the Criteo reader, the model's hashing, the metrics --------

DENSE, SPARSE = 13, 26
MAX_LAYERS = 8
BAD_LINES_FAIL = 0


class Example(ctypes.Structure):
    _fields_ = [("label", c_float), ("dense", c_float * DENSE),
                ("sparse", c_uint32 * SPARSE)]


class ModelConfig(ctypes.Structure):
    _fields_ = [("emb_dim", c_int), ("bottom", c_int * (MAX_LAYERS + 1)),
                ("n_bottom", c_int), ("top", c_int * (MAX_LAYERS + 1)),
                ("n_top", c_int), ("hash_size", c_uint32),
                ("table_rows", c_uint32 * SPARSE), ("interaction", c_int),
                ("cross_layers", c_int), ("cross_rank", c_int),
                ("pooling", c_int), ("reserved", c_int * 4)]


class Chunks(ctypes.Structure):
    _fields_ = [("sync", c_void_p), ("next", c_uint64), ("size", c_uint64),
                ("chunk", c_uint64), ("per_epoch", c_uint64),
                ("total", c_uint64), ("shuffle", c_uint64)]


class Metrics(ctypes.Structure):
    _fields_ = [("count", c_uint64), ("log_loss", c_double),
                ("ne", c_double), ("auc", c_double),
                ("calibration", c_double), ("ctr", c_double),
                ("not_numbers", c_uint64)]


# ---- prototypes -----------------------------------------------------------

P = c_void_p  # an opaque handle
PP = POINTER(c_void_p)


def _proto(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_PROTOS = [
    # base
    ("ss_last_error", POINTER(Error)),
    ("ss_error_clear", None),
    ("ss_strerror", c_char_p, c_int),
    ("ss_version", c_uint),
    ("ss_log_set_level", None, c_int),
    ("ss_log_parse_level", c_int, c_char_p, POINTER(c_int)),
    ("ss_log_set_tag", None, c_char_p),
    # fabric
    ("ss_fabric_options_init_size", None, POINTER(FabricOptions), c_size_t),
    ("ss_transport_parse", c_int, c_char_p, c_char_p, POINTER(c_int)),
    ("ss_transport_name", c_char_p, c_int),
    ("ss_fabric_verbs_available", c_bool),
    ("ss_fabric_open", c_int, PP, POINTER(FabricOptions)),
    ("ss_fabric_connect", c_int, P),
    ("ss_fabric_close", None, PP),
    ("ss_fabric_transport", c_int, P),
    ("ss_fabric_remove_names", None),
    ("ss_job_request_init_size", None, POINTER(JobRequest), c_size_t),
    ("ss_job_find", c_int, PP, POINTER(JobRequest)),
    ("ss_job_free", None, PP),
    ("ss_job_rank", c_int, P),
    ("ss_job_world", c_int, P),
    ("ss_job_addrs_of", POINTER(c_char_p), P),
    ("ss_job_source", c_char_p, P),
    # sync
    ("ss_sync_options_init_size", None, POINTER(SyncOptions), c_size_t,
     c_int),
    ("ss_sync_algo_parse", c_int, c_char_p, c_char_p, POINTER(c_int)),
    ("ss_sync_create", c_int, PP, P, c_size_t, POINTER(SyncOptions)),
    ("ss_sync_destroy", None, PP),
    ("ss_sync_params", POINTER(c_float), P),
    ("ss_sync_len", c_size_t, P),
    ("ss_sync_begin", c_int, P),
    ("ss_sync_round", c_int, P),
    ("ss_sync_barrier", c_int, P),
    ("ss_sync_finish", c_int, P, POINTER(c_int)),
    ("ss_shadow_start", c_int, P, P, P),
    ("ss_shadow_stop", c_int, P),
    ("ss_sync_set_trainers", c_int, P, c_int),
    ("ss_sync_foreground", c_int, P),
    ("ss_sync_add_iterations", None, P, c_uint64),
    ("ss_sync_get_stats", None, P, POINTER(SyncStats)),
    ("ss_sync_peer_left_out", c_uint64, P, c_int),
    ("ss_sync_claim", c_int, P, POINTER(c_uint64)),
    # table
    ("ss_table_options_init_size", None, POINTER(TableOptions), c_size_t),
    ("ss_table_addrs", c_int, POINTER(c_char_p), c_int, c_void_p,
     POINTER(c_char_p)),
    ("ss_table_open", c_int, PP, POINTER(TableOptions),
     POINTER(FabricOptions)),
    ("ss_table_close", None, PP),
    ("ss_table_lookup", c_int, P, c_int, c_int, POINTER(c_uint64), c_int),
    ("ss_table_wait_into", c_int, P, c_int, c_int, POINTER(c_float)),
    ("ss_table_push", c_int, P, c_int, POINTER(c_uint64), POINTER(c_float),
     c_int),
    ("ss_table_flush", c_int, P, c_uint),
    ("ss_table_barrier", c_int, P, c_uint),
    ("ss_table_stats", None, P, POINTER(TableStats)),
    ("ss_table_owner", c_int, P, c_int, c_uint32),
    ("ss_table_init_row", None, c_uint64, c_int, c_uint32, c_int, c_float,
     POINTER(c_float)),
    # train: the reader, the model's row ids, the metrics
    ("ss_data_size", c_int, c_char_p, POINTER(c_uint64), c_void_p),
    ("ss_reader_open", c_int, PP, c_char_p, c_uint64, c_uint64, c_int),
    ("ss_reader_next", c_int, P, POINTER(Example)),
    ("ss_reader_close", None, PP),
    ("ss_model_config_init", None, POINTER(ModelConfig)),
    ("ss_model_batch_rows", None, POINTER(ModelConfig), POINTER(Example),
     c_int, POINTER(c_uint64)),
    ("ss_chunks_plan", None, POINTER(Chunks), c_uint64, c_int, ctypes.c_long,
     c_int),
    ("ss_chunks_next", c_int, POINTER(Chunks), POINTER(c_uint64),
     POINTER(c_uint64)),
    ("ss_metrics_compute", c_int, POINTER(c_float), POINTER(c_float),
     c_size_t, POINTER(Metrics)),
    ("ss_blas_check", c_int),
]

for _p in _PROTOS:
    globals()[_p[0][3:]] = _proto(*_p)
