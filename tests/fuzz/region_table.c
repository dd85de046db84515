// SPDX-License-Identifier: BSD-2-Clause
/*
 * The table of regions a peer publishes (ss__table_read(), src/fabric/
 * handshake.c).  The input: the table as it is read from the peer, then
 * a byte that gives the count the peer's hello promised (without it, the
 * table's own count).
 *  - refused (-EPROTO) when the magic is wrong, the count is not the one
 *    promised or is past SS_FABRIC_MAX_REGIONS, or an entry is no region
 *    (empty, running past the end of the address space, granting unknown
 *    rights); the peer's regions are then left as they were;
 *  - accepted: each region as the entry says, in host order, the others
 *    left as they were; a table made from those regions
 *    (ss__table_make()) is the same bytes.
 */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "fabric/fabric_internal.h"
#include "fuzz.h"

#define KNOWN_ACCESS                                      \
	(SS_ACCESS_REMOTE_READ | SS_ACCESS_REMOTE_WRITE | \
	 SS_ACCESS_REMOTE_ATOMIC)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ss__table wire, again;
	struct ss__peer *peer = malloc(sizeof(*peer)), *before;
	struct ss_fabric *fabric;
	uint32_t rkeys[SS_FABRIC_MAX_REGIONS], n;
	bool valid;
	int rc, promised;

	memset(&wire, 0, sizeof(wire));
	memcpy(&wire, data, size < sizeof(wire) ? size : sizeof(wire));
	memset(peer, 0xa5, sizeof(*peer));
	peer->connected = true; /* bools hold 0 or 1 */
	peer->failed = false;
	before = malloc(sizeof(*before));
	memcpy(before, peer, sizeof(*peer));

	n = be32toh(wire.n_regions);
	promised = size > sizeof(wire) ?
			   data[sizeof(wire)] % (SS_FABRIC_MAX_REGIONS + 1) :
			   (int)n;
	valid = be32toh(wire.magic) == SS_HELLO_MAGIC &&
		n <= SS_FABRIC_MAX_REGIONS && n == (uint32_t)promised;
	for (uint32_t i = 0; valid && i < n; i++) {
		uint64_t addr = be64toh(wire.entries[i].addr);
		uint64_t len = be64toh(wire.entries[i].len);

		valid = len > 0 && addr + len >= addr &&
			!(be32toh(wire.entries[i].access) & ~KNOWN_ACCESS);
	}
	rc = ss__table_read(&wire, promised, peer);
	FUZZ_CHECK(rc == 0 || rc == -EPROTO, "rc %d", rc);
	FUZZ_CHECK((rc == 0) == valid, "read %s a table the reference %s",
		   rc ? "refuses" : "accepts", valid ? "accepts" : "refuses");
	if (rc) {
		FUZZ_CHECK(!memcmp(peer, before, sizeof(*peer)),
			   "refused, yet the peer was changed");
		goto out;
	}
	FUZZ_CHECK(peer->n_regions == (int)n, "%d regions, the table %u",
		   peer->n_regions, n);
	for (uint32_t i = 0; i < n; i++) {
		const struct ss__remote_region *r = &peer->regions[i];

		FUZZ_CHECK(r->addr == be64toh(wire.entries[i].addr) &&
				   r->len == be64toh(wire.entries[i].len) &&
				   r->rkey == be32toh(wire.entries[i].rkey) &&
				   r->access == be32toh(wire.entries[i].access),
			   "region %u differs from its entry", i);
	}
	FUZZ_CHECK(
		!memcmp(&peer->regions[n], &before->regions[n],
			(SS_FABRIC_MAX_REGIONS - n) * sizeof(peer->regions[0])),
		"regions past the count were changed");
	FUZZ_CHECK(
		peer->connected == before->connected &&
			!memcmp(peer->addr, before->addr, sizeof(peer->addr)),
		"the peer's other fields were changed");

	/* the same regions, published again: the same bytes */
	fabric = calloc(1, sizeof(*fabric));
	fabric->n_regions = (int)n;
	for (uint32_t i = 0; i < n; i++) {
		fabric->regions[i].ptr =
			(void *)(uintptr_t)peer->regions[i].addr;
		fabric->regions[i].len = peer->regions[i].len;
		fabric->regions[i].access = peer->regions[i].access;
		rkeys[i] = peer->regions[i].rkey;
	}
	ss__table_make(fabric, rkeys, &again);
	FUZZ_CHECK(!memcmp(&again, &wire,
			   offsetof(struct ss__table, entries) +
				   n * sizeof(wire.entries[0])),
		   "made again, the table differs");
	for (uint32_t i = n; i < SS_FABRIC_MAX_REGIONS; i++)
		FUZZ_CHECK(!again.entries[i].addr && !again.entries[i].len &&
				   !again.entries[i].rkey &&
				   !again.entries[i].access,
			   "entry %u past the count is not zero", i);
	free(fabric);
out:
	free(before);
	free(peer);
	return 0;
}
