// SPDX-License-Identifier: BSD-2-Clause
/* The handshake message and the region descriptor table, on the wire. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "fabric_internal.h"

void ss__hello_make(const struct ss_fabric *fabric, struct ss__hello *hello)
{
	memset(hello, 0, sizeof(*hello));
	hello->magic = SS_HELLO_MAGIC;
	hello->version = SS_HELLO_VERSION;
	hello->rank = (uint32_t)fabric->opts.rank;
	hello->world = (uint32_t)fabric->opts.world;
	hello->job_key = fabric->opts.job_key;
	hello->layout_hash = fabric->opts.layout_hash;
	hello->n_regions = (uint16_t)fabric->n_regions;
}

void ss__hello_to_wire(const struct ss__hello *host, struct ss__hello *wire)
{
	*wire = *host;
	wire->job_key = htobe64(host->job_key);
	wire->layout_hash = htobe64(host->layout_hash);
	wire->table_addr = htobe64(host->table_addr);
	wire->magic = htobe32(host->magic);
	wire->table_rkey = htobe32(host->table_rkey);
	wire->version = htobe16(host->version);
	wire->rank = htobe32(host->rank);
	wire->world = htobe32(host->world);
	wire->n_regions = htobe16(host->n_regions);
	memset(wire->reserved, 0, sizeof(wire->reserved));
}

void ss__hello_from_wire(const struct ss__hello *wire, struct ss__hello *host)
{
	*host = *wire;
	host->job_key = be64toh(wire->job_key);
	host->layout_hash = be64toh(wire->layout_hash);
	host->table_addr = be64toh(wire->table_addr);
	host->magic = be32toh(wire->magic);
	host->table_rkey = be32toh(wire->table_rkey);
	host->version = be16toh(wire->version);
	host->rank = be32toh(wire->rank);
	host->world = be32toh(wire->world);
	host->n_regions = be16toh(wire->n_regions);
}

int ss__hello_check(const struct ss__hello *mine, const struct ss__hello *peer,
		    int expect_rank, char *why, size_t size)
{
	if (peer->magic != SS_HELLO_MAGIC)
		snprintf(why, size,
			 "not a ShadowSync peer (magic 0x%08" PRIx32 ")",
			 peer->magic);
	else if (peer->version != mine->version)
		snprintf(why, size,
			 "protocol version differs: ours %u, theirs %u (every "
			 "rank must run the same ShadowSync release)",
			 mine->version, peer->version);
	else if (peer->job_key != mine->job_key)
		snprintf(why, size,
			 "job key differs: ours 0x%016" PRIx64
			 ", theirs 0x%016" PRIx64,
			 mine->job_key, peer->job_key);
	else if (peer->world != mine->world)
		snprintf(why, size, "world size differs: ours %u, theirs %u",
			 mine->world, peer->world);
	else if (peer->layout_hash != mine->layout_hash)
		snprintf(why, size,
			 "model layout differs: ours 0x%016" PRIx64
			 ", theirs 0x%016" PRIx64,
			 mine->layout_hash, peer->layout_hash);
	else if (peer->n_regions != mine->n_regions)
		snprintf(why, size, "region count differs: ours %u, theirs %u",
			 mine->n_regions, peer->n_regions);
	else if (peer->rank == mine->rank || peer->rank >= mine->world ||
		 (expect_rank >= 0 && peer->rank != (uint32_t)expect_rank))
		snprintf(why, size, "unexpected rank %u (we are %u of %u)",
			 peer->rank, mine->rank, mine->world);
	else
		return 0;
	return SS_EHANDSHAKE;
}

void ss__table_make(const struct ss_fabric *fabric, const uint32_t *rkeys,
		    struct ss__table *wire)
{
	memset(wire, 0, sizeof(*wire));
	wire->magic = htobe32(SS_HELLO_MAGIC);
	wire->n_regions = htobe32((uint32_t)fabric->n_regions);
	for (int i = 0; i < fabric->n_regions; i++) {
		const struct ss_region *r = &fabric->regions[i];

		wire->entries[i].addr = htobe64((uint64_t)(uintptr_t)r->ptr);
		wire->entries[i].len = htobe64(r->len);
		wire->entries[i].rkey = htobe32(rkeys ? rkeys[i] : 0);
		wire->entries[i].access = htobe32(r->access);
	}
}

/*
 * A corrupt table (a wrong magic, a count other than @n_regions, which the
 * peer's hello gave, an entry that is no region: empty, past the end of
 * the address space, or granting rights that do not exist) is refused
 * whole, the peer's regions left as they were.
 */
int ss__table_read(const struct ss__table *wire, int n_regions,
		   struct ss__peer *peer)
{
	const unsigned rights = SS_ACCESS_REMOTE_READ | SS_ACCESS_REMOTE_WRITE |
				SS_ACCESS_REMOTE_ATOMIC;
	uint32_t n = be32toh(wire->n_regions);

	if (be32toh(wire->magic) != SS_HELLO_MAGIC ||
	    n != (uint32_t)n_regions || n > SS_FABRIC_MAX_REGIONS)
		return -EPROTO;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t addr = be64toh(wire->entries[i].addr);
		uint64_t len = be64toh(wire->entries[i].len);

		if (len == 0 || addr + len < addr ||
		    (be32toh(wire->entries[i].access) & ~rights))
			return -EPROTO;
	}
	peer->n_regions = (int)n;
	for (uint32_t i = 0; i < n; i++) {
		peer->regions[i].addr = be64toh(wire->entries[i].addr);
		peer->regions[i].len = be64toh(wire->entries[i].len);
		peer->regions[i].rkey = be32toh(wire->entries[i].rkey);
		peer->regions[i].access = be32toh(wire->entries[i].access);
	}
	return 0;
}
