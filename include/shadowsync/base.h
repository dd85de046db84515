/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ShadowSync base layer: status codes, the per-thread detail of the last
 * failure, logging, monotonic clocks and option parsing helpers.
 *
 * Error convention, used by every layer: a function returns 0 on success or
 * a negative value on failure, either -errno (-ENOMEM, -ETIMEDOUT, ...) or
 * one of the SS_E* codes below.  ss_strerror() turns either into text.  A
 * failing function also records a detail message (what failed, why, and a
 * hint) for the calling thread; ss_last_error() returns it so that a
 * command can tell the user more than the code alone.
 *
 * Option structs (ss_fabric_options, ss_sync_options, ss_train_options,
 * ss_table_options, ss_gen_options, ss_plan_request) can grow: each begins
 * with a size_t size that its ss_*_init() sets, and ss_*_init() is a macro
 * that passes sizeof(*opts) to the exported ss_*_init_size().  So a later
 * library knows how much of the struct a program built against an earlier
 * header has, reads only that, and gives the options it lacks their
 * defaults; fields are only ever added at the end.  Always fill an option
 * struct with its ss_*_init() before setting fields; a call that takes
 * one refuses a struct whose size it does not know (never initialized, or
 * options of a later header set) with -EINVAL and a detail naming it.
 * Structs the library fills (statistics, results, completions) and the
 * model's shape (ss_model_config) are fixed for a SOVERSION: growing one
 * is an incompatible change (docs/architecture.md, "The library surface").
 *
 * Threads: each header says which threads may call its functions at once:
 * a rule for its handles in its top comment, and each function whose rule
 * differs says so.  Everything here may be called from any thread at once:
 * the error detail is per thread, and so is the text ss_strerror() makes
 * for an errno code; ss_log_set_tag() is the exception.
 */
#ifndef SHADOWSYNC_BASE_H
#define SHADOWSYNC_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * ShadowSync's own codes.  They start far below any errno value so that the
 * two ranges never overlap.
 */
enum ss_status {
	SS_OK = 0,
	SS_EUSAGE = -1000, /* bad option or argument */
	SS_EPARSE = -1001, /* malformed input file or description */
	SS_ETOPO = -1002, /* machine topology cannot be read or used */
	SS_ENOCORES = -1003, /* more threads asked for than cores */
	SS_ENODEVICE = -1004, /* no such RDMA device */
	SS_EHANDSHAKE = -1005, /* a peer's handshake did not match */
	SS_EPEER = -1006, /* a peer failed or went away */
	SS_EREMOTE = -1007, /* remote access error on a one-sided operation */
	SS_ELAYOUT = -1008, /* model or file layout does not match */
	SS_EINTERNAL = -1009, /* a bug: an invariant did not hold */
};

/*
 * ss_strerror() - text for a status code.
 * @code: 0, a negative errno value, or an SS_E* code.
 *
 * Returns a string, never NULL, also for unknown codes: static for 0 and
 * the SS_E* codes; for an errno or unknown code, the calling thread's own
 * buffer, which its next ss_strerror() call may overwrite.
 */
const char *ss_strerror(int code);

/* The detail of the last failure recorded by this thread. */
struct ss_error {
	int code; /* the status code returned */
	char what[256]; /* what failed: the call, file, option or peer */
	char why[256]; /* why: the errno text or the parser's reason */
	char hint[256]; /* what the user can do; may be empty */
};

/*
 * ss_error_set() - record the detail of a failure for the calling thread.
 * @code: the status code the caller is about to return.
 * @why:  the reason; NULL means ss_strerror(@code).
 * @hint: what the user can do about it; NULL for none.
 * @what_fmt: printf format saying what failed.
 *
 * Returns @code, so that a caller can write `return ss_error_set(...)`.
 */
int ss_error_set(int code, const char *why, const char *hint,
		 const char *what_fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * ss_error_prefix() - put context in front of the recorded "what", e.g. the
 * file name a lower layer did not know.  Returns the recorded code.
 */
int ss_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ss_last_error() - the calling thread's last recorded failure (never NULL). */
const struct ss_error *ss_last_error(void);

/* ss_error_clear() - forget the calling thread's last failure. */
void ss_error_clear(void);

/*
 * ss_error_print() - print the last failure for a user:
 *   PROG: error: WHAT: WHY
 *   PROG: hint: HINT
 * @code is printed through ss_strerror() when nothing was recorded for it.
 */
void ss_error_print(FILE *out, const char *prog, int code);

/* Logging.  The level comes from SS_LOG=error|warn|info|debug (default warn). */
enum ss_log_level {
	SS_LOG_ERROR = 0,
	SS_LOG_WARN = 1,
	SS_LOG_INFO = 2,
	SS_LOG_DEBUG = 3,
};

/* ss_log_level() - the level in force (read from SS_LOG on first use). */
enum ss_log_level ss_log_level(void);

/* ss_log_set_level() - override the level, e.g. for --verbose. */
void ss_log_set_level(enum ss_log_level level);

/*
 * ss_log_parse_level() - parse "error", "warn", "info" or "debug".
 * Returns 0, or SS_EUSAGE with the detail recorded.
 */
int ss_log_parse_level(const char *text, enum ss_log_level *level);

/*
 * ss_log_set_tag() - a short tag printed on every line of this process,
 * such as "rank 3".  NULL clears it.  Threads: not while another thread
 * logs (the tag is copied unlocked): set it before starting threads.
 */
void ss_log_set_tag(const char *tag);

/* ss_log() - print one line to stderr when @level is enabled.  Thread-safe. */
void ss_log(enum ss_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define ss_log_error(...) ss_log(SS_LOG_ERROR, __VA_ARGS__)
#define ss_log_warn(...) ss_log(SS_LOG_WARN, __VA_ARGS__)
#define ss_log_info(...) ss_log(SS_LOG_INFO, __VA_ARGS__)
#define ss_log_debug(...) ss_log(SS_LOG_DEBUG, __VA_ARGS__)

/* Monotonic clock, immune to wall-clock steps. */
uint64_t ss_now_ns(void);
double ss_now_s(void);

/* ss_deadline_ns() - the ss_now_ns() value @timeout_ms from now. */
uint64_t ss_deadline_ns(uint64_t timeout_ms);

/* ss_deadline_passed() - whether ss_now_ns() has reached @deadline. */
bool ss_deadline_passed(uint64_t deadline);

/* ss_sleep_ns() - sleep, resuming after signals, for @ns nanoseconds. */
void ss_sleep_ns(uint64_t ns);

/*
 * ss_memlock_check() - whether @len more bytes can be pinned when
 * @registered already are: 0, or -ENOMEM with the detail naming @where, the
 * limit and how to raise it.  *@limit: RLIMIT_MEMLOCK, UINT64_MAX when
 * unlimited.  A process with CAP_IPC_LOCK may pin past the limit.
 */
int ss_memlock_check(size_t registered, size_t len, const char *where,
		     uint64_t *limit);

/*
 * ss_parse_long() - parse the value of an option as an integer in [min, max].
 * @option: the option's name as the user typed it, e.g. "--trainers".
 * @text:   its value.
 *
 * Returns 0, or SS_EUSAGE with a detail naming the option and the range.
 */
int ss_parse_long(const char *option, const char *text, long min, long max,
		  long *value);

/*
 * ss_parse_double() - parse the value of an option as a finite number in
 * [min, max].  Returns 0 or SS_EUSAGE, as ss_parse_long().
 */
int ss_parse_double(const char *option, const char *text, double min,
		    double max, double *value);

/*
 * ss_parse_choice() - match the value of an option against a NULL-terminated
 * list of accepted words.  Stores the index of the match in @index.
 * Returns 0, or SS_EUSAGE with a detail listing the accepted values.
 */
int ss_parse_choice(const char *option, const char *text,
		    const char *const *choices, int *index);

/*
 * ss_json_string() - write @text to @out as a JSON string, quotes included;
 * NULL is written as null.
 */
void ss_json_string(FILE *out, const char *text);

/*
 * ss_json_double() - write @v with the printf @format ("%.6f"), or null
 * when it is NaN or infinite, which JSON cannot hold.
 */
void ss_json_double(FILE *out, const char *format, double v);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_BASE_H */
