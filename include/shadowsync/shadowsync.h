/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ShadowSync: distributed training with synchronization in the background.
 * The umbrella header: include this one.
 */
#ifndef SHADOWSYNC_H
#define SHADOWSYNC_H

#include "shadowsync/base.h"
#include "shadowsync/topo.h"
#include "shadowsync/fabric.h"
#include "shadowsync/sync.h"
#include "shadowsync/train.h"
#include "shadowsync/checkpoint.h"
#include "shadowsync/table.h"

#endif /* SHADOWSYNC_H */
