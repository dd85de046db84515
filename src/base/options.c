// SPDX-License-Identifier: BSD-2-Clause
/* Option structs that can grow: the caller's size against the library's. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "base/options.h"
#include "shadowsync/shadowsync.h"

/* No option struct grows past this: a larger size is garbage. */
#define SS_OPTIONS_MAX 4096u

void ss__options_out(void *opts, size_t size, const void *ours,
		     size_t ours_size)
{
	if (size < sizeof(size_t))
		return; /* no room even for the size: nothing to fill */
	memcpy(opts, ours, size < ours_size ? size : ours_size);
	if (size > ours_size)
		memset((char *)opts + ours_size, 0, size - ours_size);
	memcpy(opts, &size, sizeof(size));
}

int ss__options_in(void *ours, size_t ours_size, const void *opts,
		   size_t oldest, const char *name)
{
	char hint[160];
	size_t size;

	memcpy(&size, opts, sizeof(size));
	/* An uninitialized struct's garbage is no size: read nothing past */
	if (size < oldest || size > SS_OPTIONS_MAX) {
		snprintf(hint, sizeof(hint),
			 "fill the struct with %s_init() before setting its "
			 "fields",
			 name);
		return ss_error_set(-EINVAL,
				    size ? "not a size this library knows" :
					   "its size field is 0",
				    hint,
				    "struct %s of size %zu (%zu expected)",
				    name, size, ours_size);
	}
	if (size > ours_size) {
		const unsigned char *tail = (const unsigned char *)opts;

		for (size_t i = ours_size; i < size; i++)
			if (tail[i])
				return ss_error_set(
					-EINVAL,
					"it sets options this library does "
					"not know (built against a later "
					"shadowsync.h)",
					"run the program with the "
					"libshadowsync it was built with, "
					"or leave the newer options unset",
					"struct %s of size %zu (libshadowsync "
					"%s knows %zu bytes)",
					name, size, SS_VERSION_STRING,
					ours_size);
		size = ours_size;
	}
	memcpy(ours, opts, size);
	memcpy(ours, &ours_size, sizeof(ours_size));
	return 0;
}
