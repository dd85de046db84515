# SPDX-License-Identifier: BSD-2-Clause
"""The base layer (base.h): errors as exceptions, logging, the version.

Every C call that fails returns a negative code and records what failed,
why, and a hint for the calling thread; check() turns that into a
ShadowSyncError carrying the three texts, so that Python users read what
the command's users read.
"""
import errno as _errno

from . import _lib

# ShadowSync's own codes (enum ss_status)
EUSAGE, EPARSE, ETOPO, ENOCORES, ENODEVICE = -1000, -1001, -1002, -1003, -1004
EHANDSHAKE, EPEER, EREMOTE, ELAYOUT, EINTERNAL = (-1005, -1006, -1007, -1008,
                                                  -1009)


class ShadowSyncError(Exception):
    """A failure of the library: .code (negative errno or SS_E*), .what,
    .why and .hint, as `shadowsync` prints them."""

    def __init__(self, code, what, why, hint):
        self.code, self.what, self.why, self.hint = code, what, why, hint
        text = f"{what}: {why}" if what else why
        super().__init__(text + (f" (hint: {hint})" if hint else ""))


def _text(raw):
    return raw.decode("utf-8", "replace")


def error(code):
    """The ShadowSyncError for @code, with the detail the library recorded
    for it in this thread (its text for the code alone when none was)."""
    e = _lib.last_error().contents
    if e.code == code and (e.what or e.why):
        return ShadowSyncError(code, _text(e.what), _text(e.why),
                               _text(e.hint))
    return ShadowSyncError(code, "", _text(_lib.strerror(code)), "")


def check(rc):
    """@rc when it is 0 or more; a ShadowSyncError when negative."""
    if rc < 0:
        raise error(rc)
    return rc


def usage(what, why, hint=""):
    """A usage error of the Python layer itself (bad arguments), in the
    same form as the library's."""
    return ShadowSyncError(EUSAGE, what, why, hint)


def set_log_level(level):
    """"error", "warn" (default, or $SS_LOG), "info" or "debug"."""
    value = _lib.c_int()
    check(_lib.log_parse_level(level.encode(), _lib.ctypes.byref(value)))
    _lib.log_set_level(value.value)


def version():
    """The library's version, "major.minor.patch"."""
    v = _lib.version()
    return f"{v >> 16}.{(v >> 8) & 0xff}.{v & 0xff}"


def is_timeout(err):
    return isinstance(err, ShadowSyncError) and err.code == -_errno.ETIMEDOUT
