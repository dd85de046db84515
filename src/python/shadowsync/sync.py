# SPDX-License-Identifier: BSD-2-Clause
"""The sync layer (sync.h): a replica of n floats that the library
allocates in registered memory and keeps close to the other ranks' with
S-MA, S-EASGD, S-BMUF or gossip, in a shadow thread or in the foreground.

The library owns the memory; .params() is a NumPy view of it (zero copy),
valid for as long as any view lives: the endpoint and the memory are
released when the last reference to them goes, never under a view.
"""
import atexit
import ctypes
import os
import weakref

import numpy as np

from . import _lib, fabric
from .base import check, usage

ALGOS = {"ma": _lib.SYNC_MA, "easgd": _lib.SYNC_EASGD, "bmuf": _lib.SYNC_BMUF,
         "gossip": _lib.SYNC_GOSSIP}
MODES = ("shadow", "foreground")


class _Owner:
    """The C sync and its endpoint.  NumPy views of the replica hold it;
    it is released when the last of them and the Sync are gone, never
    under a view: at exit (atexit handlers registered before ours may
    still read the parameters) the shadow thread stops and the /dev/shm
    names go, but the memory stays mapped until the process ends."""

    def __init__(self):
        self.fabric = ctypes.c_void_p()
        self.sync = ctypes.c_void_p()
        self.shadow = False
        self.pid = os.getpid()
        self._finalizer = weakref.finalize(self, _Owner._release,
                                           self.fabric, self.sync, self.pid)
        self._finalizer.atexit = False
        _live.add(self)

    @staticmethod
    def _release(fab, sync, pid):
        if os.getpid() != pid:  # a forked child owns none of it
            return
        _lib.sync_destroy(ctypes.byref(sync))  # stops the shadow thread
        _lib.fabric_close(ctypes.byref(fab))

    def release_now(self):
        """Release at once: for a Sync that failed before any view of its
        memory was handed out (a half-made one kept the address claimed
        while the exception lived)."""
        self._finalizer()


_live = weakref.WeakSet()  # owners not yet released


@atexit.register
def _at_exit():
    """The safe part of a release at exit: shadow threads stopped, this
    process's /dev/shm names removed (its peers see it go); the memory
    and the connections go with the process."""
    for owner in list(_live):
        if owner.pid == os.getpid() and owner._finalizer.alive and \
                owner.shadow:
            owner.shadow = False
            _lib.shadow_stop(owner.sync)
    _lib.fabric_remove_names()


def _options(algo, **kw):
    if algo not in ALGOS:
        raise usage(f"algo '{algo}'", "not a sync algorithm",
                    "give one of: " + ", ".join(ALGOS))
    o = _lib.SyncOptions()
    _lib.sync_options_init_size(ctypes.byref(o), ctypes.sizeof(o),
                                ALGOS[algo])
    for name, value in kw.items():
        if value is None:
            continue
        if not hasattr(o, name):
            raise usage(f"sync option '{name}'", "no such option",
                        "see help(shadowsync.sync.Sync)")
        setattr(o, name, value)
    return o


class Sync:
    """A replica of @n floats among the ranks of @job (fabric.Job; default:
    found from the environment), synchronized by @algo ("ma", "easgd",
    "bmuf", "gossip").  Keyword options are ss_sync_options' fields:
    alpha, eta, zeta, nesterov, beta, round_timeout_ms, max_rounds_per_s,
    max_bytes_per_s, hierarchical_from, max_gap, seed.  @layout_hash: peers
    of another layout are refused at connect.

    Use: s = Sync(n); s.params()[:] = ...; s.begin();
    s.start_shadow() ... s.finish() (or s.foreground() every k steps)."""

    def __init__(self, n, algo="ma", job=None, layout_hash=0, timeout_ms=0,
                 **sync_options):
        if n <= 0:
            raise usage("replica", f"{n} floats", "give a replica of 1 or more")
        self.job = job if job is not None else fabric.Job()
        self.algo = algo
        opts = _options(algo, **sync_options)
        fo = fabric.options(self.job, layout_hash=layout_hash,
                            timeout_ms=timeout_ms)
        self._owner = _Owner()
        fabric.guard_signals()
        try:
            check(_lib.fabric_open(ctypes.byref(self._owner.fabric),
                                   ctypes.byref(fo)))
            check(_lib.sync_create(ctypes.byref(self._owner.sync),
                                   self._owner.fabric, n, ctypes.byref(opts)))
        except BaseException:
            self._owner.release_now()
            raise
        self.n = n
        self._view = _view(self._owner, n)
        self._connected = self._begun = self._finished = False
        self._trainers_set = False

    # -- the replica ------------------------------------------------------

    def params(self):
        """The replica: a float32 NumPy array of n, a view of the library's
        registered memory (the shadow thread writes it while it runs)."""
        self._alive()
        return self._view

    @property
    def handle(self):
        return self._owner.sync

    def _alive(self):
        if self._owner is None:
            raise usage("sync", "closed", "make a new Sync")
        if os.getpid() != self._owner.pid:
            raise usage("sync", "used in a process forked after it was made",
                        "make the replica after the fork (data loaders' "
                        "workers), or in the child itself")

    # -- the life of a rank -----------------------------------------------

    def connect(self):
        """Connect to every peer (each rank calls it; any order)."""
        self._alive()
        if not self._connected:
            check(_lib.fabric_connect(self._owner.fabric))
            self._connected = True

    def begin(self):
        """Connect if not yet, then the first barrier: every rank starts
        from here (a restarted rank joins the running ones instead)."""
        self.connect()
        if not self._begun:
            check(_lib.sync_begin(self._owner.sync))
            self._begun = True

    def start_shadow(self):
        """Start the shadow thread: rounds in the background, as often as
        the caps allow, while the caller trains on params()."""
        self.begin()
        check(_lib.shadow_start(self._owner.sync, None, None))
        self._owner.shadow = True

    def stop_shadow(self):
        if self._owner is not None and self._owner.shadow and \
                os.getpid() == self._owner.pid:
            self._owner.shadow = False
            check(_lib.shadow_stop(self._owner.sync))

    def round(self):
        """One round now, in this thread."""
        self.begin()
        check(_lib.sync_round(self._owner.sync))

    def foreground(self):
        """The foreground mode's round: the caller's training stops while
        it runs (every k steps)."""
        self.begin()
        if not self._trainers_set:
            check(_lib.sync_set_trainers(self._owner.sync, 1))
            self._trainers_set = True
        check(_lib.sync_foreground(self._owner.sync))

    def add_iterations(self, k=1):
        """Report @k training steps done (the sync gap's unit)."""
        self._alive()
        _lib.sync_add_iterations(self._owner.sync, k)

    def claim(self):
        """The next chunk number of the job's data, from the counter at
        rank 0 (each number to exactly one rank; a faster rank gets
        more); after begin()."""
        self._alive()
        n = ctypes.c_uint64()
        check(_lib.sync_claim(self._owner.sync, ctypes.byref(n)))
        return n.value

    def barrier(self):
        self.begin()
        check(_lib.sync_barrier(self._owner.sync))

    def finish(self):
        """The end of this rank's training, as train's: shadow stopped, a
        barrier with the ranks done too, for S-MA and S-BMUF a last round
        (all hold the same exact average), LEAVE.  Returns how many ranks
        did not come in time (they finish alone)."""
        self._alive()
        if self._finished:
            return 0
        self.stop_shadow()
        missing = ctypes.c_int(0)
        if self._begun:
            check(_lib.sync_finish(self._owner.sync, ctypes.byref(missing)))
        self._finished = True
        return missing.value

    def close(self, views_dropped=False):
        """Drop this object's hold on the replica: the library's memory and
        endpoint go once no NumPy view of it is left (at once if none).
        @views_dropped: the caller knows of no view left (its own are
        gone): release now, whatever the garbage collector still holds."""
        if self._owner is not None:
            self.stop_shadow()
            owner, self._owner, self._view = self._owner, None, None
            if views_dropped and os.getpid() == owner.pid:
                owner.release_now()

    # -- figures ----------------------------------------------------------

    def stats(self):
        """ss_sync_get_stats as a dict (rounds, rounds_per_s, sync_gap,
        rounds_partial, peers_left_out, members, ...), plus the rounds
        each peer was left out of (left_out_by_peer)."""
        self._alive()
        st = _lib.SyncStats()
        _lib.sync_get_stats(self._owner.sync, ctypes.byref(st))
        out = {name: getattr(st, name) for name, _ in st._fields_}
        out["left_out_by_peer"] = [
            _lib.sync_peer_left_out(self._owner.sync, p)
            for p in range(self.job.world)]
        return out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _view(owner, n):
    """A NumPy array over the replica's n floats whose base holds @owner:
    the memory outlives every view taken of it."""
    ptr = _lib.sync_params(owner.sync)
    buf = (ctypes.c_float * n).from_address(ctypes.addressof(ptr.contents))
    buf._owner = owner
    return np.frombuffer(buf, dtype=np.float32)
