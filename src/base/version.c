// SPDX-License-Identifier: BSD-2-Clause
/* The library's version, as built: shadowsync.h's at build time. */
#include "shadowsync/shadowsync.h"

unsigned ss_version(void)
{
	return SS_VERSION;
}
