/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Option structs that can grow (base.h, "Option structs"): what every
 * ss_*_init_size() and every call that takes one of them do with the
 * caller's size.  Not part of the public API.
 */
#ifndef SS_OPTIONS_H
#define SS_OPTIONS_H

#include <stddef.h>

/*
 * ss__options_out() - the end of an ss_*_init_size(): copy the library's
 * defaults @ours (@ours_size bytes, its size field first) into the
 * caller's struct of @size bytes, zero what the caller has beyond ours (a
 * later header's fields, unset), and set the caller's size field to @size.
 */
void ss__options_out(void *opts, size_t size, const void *ours,
		     size_t ours_size);

/*
 * ss__options_in() - copy the caller's @opts into @ours, which holds the
 * defaults (@ours_size bytes, size field first), as far as the caller's
 * size goes.  Sizes from @oldest (the first this library shipped) to
 * @ours_size are read; a larger one (a program built against a later
 * header) only when every byte past ours is zero, i.e. its new options are
 * left unset, and only up to 4 KiB (a larger size is an uninitialized
 * struct's garbage).  @ours's size field is set to @ours_size.  @name is the
 * struct's, e.g. "ss_fabric_options".
 *
 * Returns 0, or -EINVAL with a detail naming the struct and the size, and
 * a hint: ss_<name>_init() not called, or a later header's option set.
 */
int ss__options_in(void *ours, size_t ours_size, const void *opts,
		   size_t oldest, const char *name);

#endif /* SS_OPTIONS_H */
