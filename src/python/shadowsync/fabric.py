# SPDX-License-Identifier: BSD-2-Clause
"""The fabric layer (fabric.h): who the job's ranks are, and the options of
the endpoints the sync and table layers open.

A job is found as `shadowsync train` finds it (the library's
ss_job_find()): under `shadowsync launch -- PROGRAM` from SS_PEERS and
SS_RANK; else from SS_HOSTFILE, Slurm's node list, or a launcher whose
tasks all run on this host (torchrun's RANK, WORLD_SIZE and
LOCAL_WORLD_SIZE, mpirun's OMPI_COMM_WORLD_*) at 127.0.0.1:SS_PORT + r;
else a world of one.  Arguments given to Job override the environment.
"""
import ctypes
import os
import signal
import threading

from . import _lib
from .base import ShadowSyncError, check, usage

TRANSPORTS = {"auto": _lib.TRANSPORT_AUTO, "verbs": _lib.TRANSPORT_VERBS,
              "shm": _lib.TRANSPORT_SHM}


def _env_int(name, low, high):
    text = os.environ.get(name)
    if text is None or text == "":
        return None
    try:
        value = int(text, 10)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise usage(f"{name}='{text}'", f"not a number from {low} to {high}",
                    f"unset {name}, or give a whole number")
    return value


class Job:
    """The job's ranks: .rank, .world, .addrs (each rank's "host:port"),
    .source (who said the rank), .transport ("verbs" or "shm" once decided;
    "auto" stays for a world of one), .job_key, .rejoin (a rank that
    `launch --restarts` started again)."""

    def __init__(self, peers=None, rank=None, hostfile=None, port=None,
                 transport=None, job_key=None):
        req = _lib.JobRequest()
        _lib.job_request_init_size(ctypes.byref(req), ctypes.sizeof(req))
        peers = peers if peers is not None else os.environ.get("SS_PEERS")
        hostfile = hostfile if hostfile is not None else os.environ.get(
            "SS_HOSTFILE")
        if rank is None:
            rank = _env_int("SS_RANK", 0, 65535)
        if port is None:
            port = _env_int("SS_PORT", 1, 65535)
        if isinstance(peers, (list, tuple)):
            peers = ",".join(peers)
        req.peers = peers.encode() if peers else None
        req.hostfile = hostfile.encode() if hostfile else None
        req.rank = -1 if rank is None else int(rank)
        if port is not None:
            req.port = int(port)
        req.peers_name = b"peers"
        req.rank_name = b"rank"
        handle = ctypes.c_void_p()
        check(_lib.job_find(ctypes.byref(handle), ctypes.byref(req)))
        try:
            self.rank = _lib.job_rank(handle)
            self.world = _lib.job_world(handle)
            addrs = _lib.job_addrs_of(handle)
            self.addrs = [addrs[i].decode() for i in range(self.world)]
            source = _lib.job_source(handle)
            self.source = source.decode() if source else None
        finally:
            _lib.job_free(ctypes.byref(handle))
        self.transport = self._transport(transport)
        if job_key is None:
            job_key = _env_int("SS_JOB_KEY", 1, 2**63 - 1)
        self.job_key = 1 if job_key is None else int(job_key)
        self.rejoin = os.environ.get("SS_REJOIN") == "1"

    def _transport(self, name):
        name = name or os.environ.get("SS_TRANSPORT") or "auto"
        if name not in TRANSPORTS:
            raise usage(f"transport '{name}'", "not a transport",
                        "give one of: " + ", ".join(TRANSPORTS))
        # decided once, for every endpoint of this rank, as train does
        if name == "auto" and self.world > 1:
            name = "verbs" if _lib.fabric_verbs_available() else "shm"
        return name

    def table_addrs(self):
        """The table endpoints' addresses: each rank's port + world
        (ss_table_addrs)."""
        bufs = ctypes.create_string_buffer(_lib.TABLE_ADDR_LEN * self.world)
        out = (ctypes.c_char_p * self.world)()
        check(_lib.table_addrs(_cstrings(self.addrs), self.world, bufs, out))
        return [out[i].decode() for i in range(self.world)]

    def __repr__(self):
        return (f"Job(rank={self.rank}, world={self.world}, "
                f"transport={self.transport!r}, source={self.source!r})")


def _cstrings(strings):
    arr = (ctypes.c_char_p * len(strings))()
    arr[:] = [s.encode() for s in strings]
    return arr


def options(job, addrs=None, layout_hash=0, timeout_ms=0,
            partial_connect=False):
    """An ss_fabric_options for @job at @addrs (default its own).  The
    returned object keeps the address strings alive."""
    o = _lib.FabricOptions()
    _lib.fabric_options_init_size(ctypes.byref(o), ctypes.sizeof(o))
    o.transport = TRANSPORTS[job.transport]
    o.rank, o.world = job.rank, job.world
    keep = _cstrings(addrs if addrs is not None else job.addrs)
    o.addrs = ctypes.cast(keep, ctypes.POINTER(ctypes.c_char_p))
    o._keep = keep
    o.job_key = job.job_key
    o.layout_hash = layout_hash
    o.timeout_ms = timeout_ms
    o.partial_connect = partial_connect or job.rejoin
    return o


# ---- a rank that ends by a signal leaves nothing in /dev/shm -------------

_handlers_lock = threading.Lock()
_handlers_set = False


def _remove_names_then(previous, signum):
    """A handler that does what @previous did (a Python handler, or
    SIG_DFL when None); where that is the process's death, this process's
    /dev/shm names go first.  A handler that returns (a KeyboardInterrupt
    caught by a loop, Jupyter's) leaves them: the process lives on, its
    address still claimed; its exit removes them (sync.py's atexit)."""
    def handler(sig, frame):
        if callable(previous):
            return previous(sig, frame)
        _lib.fabric_remove_names()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    return handler


def guard_signals():
    """Once an endpoint is open: SIGTERM and SIGHUP (when they would kill
    the process) first remove this process's /dev/shm names
    (ss_fabric_remove_names), then kill it as before; SIGINT's
    KeyboardInterrupt and handlers of the program's own run as before.
    Python runs a handler between bytecodes: a signal that comes while
    the library waits (a barrier, a connect) is handled when the call
    returns.  Only from the main thread; a no-op elsewhere."""
    global _handlers_set
    if threading.current_thread() is not threading.main_thread():
        return
    with _handlers_lock:
        if _handlers_set:
            return
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN or previous is None:
                continue
            signal.signal(signum, _remove_names_then(
                None if previous is signal.SIG_DFL else previous, signum))
        _handlers_set = True


__all__ = ["Job", "ShadowSyncError", "options", "guard_signals"]
