/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ShadowSync: distributed training with synchronization in the background.
 * The umbrella header: include this one.
 *
 * The library's surface (docs/architecture.md, "The library surface"):
 * libshadowsync.so exports exactly the functions these headers declare,
 * each under a version node of src/libshadowsync.map; option structs carry
 * their size (see base.h), so that they can grow without breaking callers.
 */
#ifndef SHADOWSYNC_H
#define SHADOWSYNC_H

/*
 * The version of these headers.  The Makefile reads its VERSION from these
 * three lines.  SS_VERSION is SS_VERSION_ENCODE() of them, for comparisons
 * such as `#if SS_VERSION >= SS_VERSION_ENCODE(0, 2, 0)`.
 */
#define SS_VERSION_MAJOR 0
#define SS_VERSION_MINOR 1
#define SS_VERSION_PATCH 0

#define SS_VERSION_ENCODE(major, minor, patch) \
	((unsigned)(major) << 16 | (unsigned)(minor) << 8 | (unsigned)(patch))
#define SS_VERSION \
	SS_VERSION_ENCODE(SS_VERSION_MAJOR, SS_VERSION_MINOR, SS_VERSION_PATCH)

#define SS__STR_(x) #x
#define SS__STR(x) SS__STR_(x)
/* "0.1.0" */
#define SS_VERSION_STRING         \
	SS__STR(SS_VERSION_MAJOR) \
	"." SS__STR(SS_VERSION_MINOR) "." SS__STR(SS_VERSION_PATCH)

#include "shadowsync/base.h"
#include "shadowsync/topo.h"
#include "shadowsync/fabric.h"
#include "shadowsync/sync.h"
#include "shadowsync/train.h"
#include "shadowsync/checkpoint.h"
#include "shadowsync/table.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * ss_version() - the version of the library running, as SS_VERSION
 * encodes it: it may be later than the headers a program was built with
 * (same SOVERSION, a later minor or patch release).
 *
 * Threads: any, at once.
 */
unsigned ss_version(void);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_H */
