// SPDX-License-Identifier: BSD-2-Clause
/*
 * The handshake decoder (src/fabric/handshake.c).  The input: a peer's
 * 48-byte hello as it comes off the wire, then our own hello's fields, the
 * rank we expect, and the size of the buffer for the reason.
 *  - byte order: decoding and encoding again gives the wire bytes back
 *    (the reserved ones zeroed), and encoding a decoded hello is lossless;
 *  - ss__hello_check() accepts exactly the hellos a reference check
 *    accepts (same magic, version, job key, world, layout, region count;
 *    a rank of the world other than ours, the expected one if any), and
 *    says what differed, in the buffer it is given;
 *  - a hello made by ss__hello_make() for rank r is accepted by every
 *    other rank of the same job.
 */
#include <string.h>

#include "fabric/fabric_internal.h"
#include "fuzz.h"

static bool reference(const struct ss__hello *mine,
		      const struct ss__hello *peer, int expect,
		      const char **what)
{
	*what = peer->magic != SS_HELLO_MAGIC	       ? "magic" :
		peer->version != mine->version	       ? "version" :
		peer->job_key != mine->job_key	       ? "job key" :
		peer->world != mine->world	       ? "world size" :
		peer->layout_hash != mine->layout_hash ? "layout" :
		peer->n_regions != mine->n_regions     ? "region count" :
		peer->rank == mine->rank || peer->rank >= mine->world ||
				(expect >= 0 &&
				 peer->rank != (uint32_t)expect) ?
						     "rank" :
						     NULL;
	return *what == NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_input in = { data, size };
	struct ss__hello wire, peer, back, mine, made, made_wire, made_back;
	struct ss_fabric *fabric;
	uint8_t raw[sizeof(wire)] = { 0 };
	size_t why_size;
	const char *what;
	char *why;
	int expect, rc;

	memcpy(raw, in.data, in.size < sizeof(raw) ? in.size : sizeof(raw));
	in.data += in.size < sizeof(raw) ? in.size : sizeof(raw);
	in.size -= in.size < sizeof(raw) ? in.size : sizeof(raw);
	memcpy(&wire, raw, sizeof(wire));

	/* byte order, both ways */
	ss__hello_from_wire(&wire, &peer);
	ss__hello_to_wire(&peer, &back);
	memset(raw + offsetof(struct ss__hello, reserved), 0,
	       sizeof(wire.reserved));
	FUZZ_CHECK(!memcmp(&back, raw, sizeof(back)),
		   "decoded and encoded again, the hello differs");
	ss__hello_from_wire(&back, &made_back);
	FUZZ_CHECK(!memcmp(&made_back.magic, &peer.magic, sizeof(peer.magic)) &&
			   made_back.job_key == peer.job_key &&
			   made_back.layout_hash == peer.layout_hash &&
			   made_back.table_addr == peer.table_addr &&
			   made_back.table_rkey == peer.table_rkey &&
			   made_back.version == peer.version &&
			   made_back.rank == peer.rank &&
			   made_back.world == peer.world &&
			   made_back.n_regions == peer.n_regions &&
			   made_back.mtu == peer.mtu &&
			   made_back.rd_atom == peer.rd_atom,
		   "a field does not survive encoding");

	/* the check against ours */
	memset(&mine, 0, sizeof(mine));
	mine.magic = SS_HELLO_MAGIC;
	mine.version = (uint16_t)fuzz_take(&in, 2);
	mine.rank = (uint32_t)fuzz_take(&in, 4);
	mine.world = (uint32_t)fuzz_take(&in, 4);
	mine.job_key = fuzz_take(&in, 8);
	mine.layout_hash = fuzz_take(&in, 8);
	mine.n_regions = (uint16_t)fuzz_take(&in, 1);
	expect = (int)(int16_t)fuzz_take(&in, 2);
	why_size = 1 + fuzz_take(&in, 1);
	why = malloc(why_size); /* exactly: ASan sees a write past it */
	rc = ss__hello_check(&mine, &peer, expect, why, why_size);
	FUZZ_CHECK((rc == 0) == reference(&mine, &peer, expect, &what),
		   "check %s, reference %s (%s)", rc ? "refuses" : "accepts",
		   what ? "refuses" : "accepts", what ? what : "");
	FUZZ_CHECK(rc == 0 || rc == SS_EHANDSHAKE, "rc %d", rc);
	if (rc) {
		FUZZ_CHECK(memchr(why, '\0', why_size), "reason not ended");
		FUZZ_CHECK(why_size < 64 || strstr(why, what),
			   "'%s' does not say the %s differs", why, what);
	}
	free(why);

	/* a made hello: every other rank of the job accepts it */
	fabric = calloc(1, sizeof(*fabric));
	fabric->opts.world = 1 + mine.world % SS_FABRIC_MAX_PEERS;
	fabric->opts.rank = mine.rank % fabric->opts.world;
	fabric->opts.job_key = mine.job_key;
	fabric->opts.layout_hash = mine.layout_hash;
	fabric->n_regions = mine.n_regions % (SS_FABRIC_MAX_REGIONS + 1);
	ss__hello_make(fabric, &made);
	ss__hello_to_wire(&made, &made_wire);
	ss__hello_from_wire(&made_wire, &made_back);
	FUZZ_CHECK(!memcmp(&made, &made_back, sizeof(made)),
		   "a made hello does not survive the wire");
	for (int r = 0; r < fabric->opts.world && r < 4; r++) {
		struct ss__hello other = made;
		char reason[128];

		if (r == fabric->opts.rank)
			continue;
		other.rank = (uint16_t)r;
		rc = ss__hello_check(&other, &made_back, fabric->opts.rank,
				     reason, sizeof(reason));
		FUZZ_CHECK(rc == 0, "rank %d refuses rank %d: %s", r,
			   fabric->opts.rank, reason);
	}
	free(fabric);
	return 0;
}
