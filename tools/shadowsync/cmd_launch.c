// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync launch: N ranks of `shadowsync train` on this machine.  Each
 * rank's output comes back prefixed by its rank; when one rank fails, or on
 * Ctrl-C, every other rank is stopped; at the end one combined summary.
 * The ranks print JSON summaries that only this command reads, so the
 * combined table needs no parsing of human output.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <hwloc.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "command.h"
#include "shadowsync/shadowsync.h"

static const char ss_launch_prog[] = "shadowsync launch";

/*
 * After a failure or Ctrl-C, how long ranks get to exit before SIGKILL:
 * a rank with --save stops at its next batch and writes its checkpoint
 * first (train gives itself SS_TRAIN_STOP_S for it); one without exits
 * at once.  A second Ctrl-C kills them at once.
 */
#define SS_LAUNCH_GRACE_MS 75000

/*
 * Ranks one launch starts on this machine: processes, not a job's size
 * (a job over hosts, --peers, may have up to SS_FABRIC_MAX_PEERS).
 */
#define SS_LAUNCH_MAX_LOCAL 1024

static void ss_launch_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowsync launch -n N [OPTIONS] -- train [TRAIN OPTIONS]\n"
		"       shadowsync launch -n N [OPTIONS] -- PROGRAM [ARGS]\n"
		"       shadowsync launch --peers LIST --rank R [OPTIONS] -- train ...\n"
		"\n"
		"Start N ranks of 'shadowsync train' on this machine, connected to each\n"
		"other, print their output prefixed by rank and one combined summary.\n"
		"If a rank fails (past --restarts), or on Ctrl-C, the other ranks are\n"
		"stopped and the exit status is 1.  launch gives each rank --rank, --peers\n"
		"and --transport (train's --rank, --peers, --hostfile, --transport and\n"
		"--port are refused after --), and a random --job-key unless train's\n"
		"options or SS_JOB_KEY give one.  Any other PROGRAM (python3 -m ...,\n"
		"docs/python.md) gets the same in its environment: SS_RANK, SS_WORLD,\n"
		"SS_PEERS, SS_TRANSPORT, SS_JOB_KEY (and SS_REJOIN=1, SS_JOB_BEGAN when\n"
		"started again); a stdout line that begins {\"rank\": is its summary.\n"
		"\n"
		"  -n, --ranks N       ranks to start (1 to %d)\n"
		"  --peers LIST        the addresses of every rank of a job over several\n"
		"                      hosts (host:port,...), with --rank R: run only rank\n"
		"                      R here, one launch per host (for --restarts); the\n"
		"                      job key, unless given, comes from LIST\n"
		"  --rank R            this host's rank in --peers\n"
		"  --transport T       shm (default), verbs or auto\n"
		"  --host ADDR         address the ranks listen on (default 127.0.0.1;\n"
		"                      over verbs: the RDMA netdev's address)\n"
		"  --port P            port of rank 0, rank r uses P + r, its tables'\n"
		"                      endpoint P + N + r (default: random)\n"
		"  --timeout S         stop every rank after S seconds (default 0: none)\n"
		"  --restarts N        start a failed rank again, N times in all (default\n"
		"                      0); it rejoins the running ranks (train --rejoin),\n"
		"                      takes a live replica, its shard of sharded tables\n"
		"                      from its last --save checkpoint (one this job\n"
		"                      wrote: train --job-began), and trains on (the\n"
		"                      data chunks no one has claimed yet); not one\n"
		"                      that refused its options (exit 2)\n"
		"  --bind B            spread (default): each rank gets its share of this\n"
		"                      process's CPUs, and plans its threads within it;\n"
		"                      none: every rank sees every CPU\n"
		"  --json              print the combined summary as JSON\n"
		"  -h, --help          this help\n"
		"\n"
		"example: shadowsync launch -n 4 -- train --data train.txt --test test.txt\n",
		SS_LAUNCH_MAX_LOCAL);
}

struct ss_rank_proc {
	pid_t pid;
	int out_fd, err_fd; /* read ends; -1 once closed */
	/* stdout's buffer grows: a rank's JSON summary is one line, longer
	 * than 4 KiB in a job of some thousand ranks (a figure per peer) */
	char *out_buf, err_buf[4096];
	size_t out_cap, out_len, err_len;
	char *json; /* the rank's JSON summary line */
	int status; /* wait status, valid once exited */
	bool exited;
	int restarts; /* times this rank was started again */
	double seconds;
	int claim_fd; /* its address's claim until it starts, else -1 */
	bool never_started; /* launch failed before it */
	int stopped_by; /* the signal launch sent it to stop, 0: none */
	char began[32]; /* --job-began, if it is started again */
};

struct ss_launch {
	int n;
	enum ss_transport transport;
	const char *host;
	long port, timeout_s;
	long restarts; /* --restarts: how many in all */
	int restarted; /* how many so far */
	char *peers; /* every rank's address, as --peers */
	const char *job_peers; /* --peers: one rank of a job over hosts */
	long first_rank; /* --rank: the job's rank of our first process */
	bool json, start_failed, bind;
	pid_t launcher;
	uint64_t nonce; /* random: the default port and job key */
	char job_key[24]; /* --job-key for the ranks, "" when the user gave one */
	int n_cores; /* this process's cores, shared out by --bind */
	cpu_set_t *cores; /* the PUs of each, in hwloc's logical order */
	int train_argc;
	char **train_argv;
	struct ss_rank_proc *ranks;
};

static volatile sig_atomic_t ss_launch_interrupted;
static sigset_t ss_launch_signals; /* the three we catch */

static volatile sig_atomic_t ss_launch_signal_count; /* how many came */

static void ss_launch_on_signal(int sig)
{
	ss_launch_interrupted = sig;
	ss_launch_signal_count++;
}

/*
 * Whether @arg names train's long option @full ("--name" or "--name=v"),
 * in full or shortened as getopt_long takes it (three characters at
 * least: "--r" would be ambiguous to train too).
 */
static bool ss_launch_names(const char *arg, const char *full)
{
	size_t len = strcspn(arg, "=");

	return len >= 3 && len <= strlen(full) && !strncmp(arg, full, len);
}

/*
 * A program of the user's after -- (not train): one that can be run, found
 * as execvp() will find it, so that a typo fails here, once, and not as
 * N ranks' "exec failed".
 */
static int ss_launch_check_program(const char *prog)
{
	static const char *const ours[] = {
		"topo", "launch", "doctor", "gen-data", "reshard", "shm-clean"
	};
	const char *path = getenv("PATH");
	char full[4096];
	struct stat st;

	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		if (!strcmp(prog, ours[i]))
			return ss_error_set(
				SS_EUSAGE,
				"launch runs 'train' or a program of yours, "
				"not the other shadowsync commands",
				"shadowsync launch -n N -- train --data FILE ...",
				"'%s' after --", prog);

	if (strchr(prog, '/')) {
		if (stat(prog, &st) == 0 && !S_ISREG(st.st_mode))
			errno = EISDIR;
		else if (access(prog, X_OK) == 0)
			return 0;
		return ss_error_set(SS_EUSAGE, strerror(errno),
				    "give a program to run, or 'train'",
				    "'%s' after --", prog);
	}
	for (const char *dir = path ? path : "/usr/bin:/bin";;) {
		size_t len = strcspn(dir, ":");

		/* an empty entry is the current folder, as execvp takes it */
		snprintf(full, sizeof(full), "%.*s/%s", len ? (int)len : 1,
			 len ? dir : ".", prog);
		if (stat(full, &st) == 0 && S_ISREG(st.st_mode) &&
		    access(full, X_OK) == 0)
			return 0;
		if (!dir[len])
			break;
		dir += len + 1;
	}
	return ss_error_set(SS_EUSAGE, "no such program on PATH",
			    "give a program to run (python3 -m ...), or "
			    "'train'",
			    "'%s' after --", prog);
}

/* Options train must not get from the user: launch sets them per rank. */
static int ss_launch_check_train_args(int argc, char **argv)
{
#define SS_GIVE_IT_TO_LAUNCH "give it to launch, before --"
#define SS_LAUNCH_NUMBERS "leave it out; launch numbers the ranks"
	static const struct {
		const char *name, *hint;
	} owned[] = {
		{ "--rank", SS_LAUNCH_NUMBERS },
		{ "--peers", SS_LAUNCH_NUMBERS },
		{ "--hostfile", SS_LAUNCH_NUMBERS },
		{ "--transport", SS_GIVE_IT_TO_LAUNCH },
		{ "--port", SS_GIVE_IT_TO_LAUNCH },
		{ "--job-began",
		  "leave it out; launch gives it to a rank it starts again" },
		{ NULL, NULL },
	};
#undef SS_GIVE_IT_TO_LAUNCH
#undef SS_LAUNCH_NUMBERS

	if (argc < 1)
		return ss_error_set(
			SS_EUSAGE, "nothing to run",
			"shadowsync launch -n N -- train --data FILE ...",
			"launch");
	if (strcmp(argv[0], "train"))
		return ss_launch_check_program(argv[0]);
	for (int i = 1; i < argc; i++)
		for (int k = 0; owned[k].name; k++) {
			int len = (int)strcspn(argv[i], "=");

			/* the spelling given, where it is not the name */
			bool other = (size_t)len != strlen(owned[k].name);

			if (ss_launch_names(argv[i], owned[k].name))
				return ss_error_set(
					SS_EUSAGE,
					"launch sets it for each rank",
					owned[k].hint,
					"train option %s%s%.*s%s",
					owned[k].name, other ? " (" : "",
					other ? len : 0, argv[i],
					other ? ")" : "");
		}
	return 0;
}

/*
 * The job key of a job over hosts, the same on each: from the address
 * list, which no two running jobs share (FNV-1a, 48 bits as the random
 * key has).
 */
static uint64_t ss_launch_peers_key(const char *peers)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const char *c = peers; *c; c++)
		h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
	return h >> 16;
}

/* --peers and --rank: one rank of a job over hosts, or neither. */
static int ss_launch_check_hosts(struct ss_launch *l, bool placed,
				 bool rank_given)
{
	int world = 1;

	if (!l->job_peers && !rank_given)
		return 0;
	if (!l->job_peers || !rank_given)
		return ss_error_set(
			SS_EUSAGE, "--peers and --rank go together",
			"shadowsync launch --peers h0:7000,h1:7000 --rank 1 -- train ...",
			"%s", l->job_peers ? "--peers" : "--rank");
	if (l->n > 1 || placed)
		return ss_error_set(
			SS_EUSAGE,
			"with --peers, launch runs this host's one rank at the address --peers gives it",
			"leave out -n, --host and --port", "%s",
			l->n > 1 ? "-n" : "--host/--port");
	for (const char *c = l->job_peers; *c; c++)
		world += *c == ',';
	if (l->first_rank >= world)
		return ss_error_set(
			SS_EUSAGE, "there is no such rank in --peers",
			"ranks are numbered from 0 in the order of --peers",
			"--rank %ld (--peers names %d rank%s)", l->first_rank,
			world, world == 1 ? "" : "s");
	l->n = 1;
	return 0;
}

static int ss_launch_parse(int argc, char **argv, struct ss_launch *l)
{
	static const struct option options[] = {
		{ "ranks", required_argument, NULL, 'n' },
		{ "transport", required_argument, NULL, 't' },
		{ "host", required_argument, NULL, 'H' },
		{ "port", required_argument, NULL, 'p' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "restarts", required_argument, NULL, 'R' },
		{ "peers", required_argument, NULL, 'P' },
		{ "rank", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "bind", required_argument, NULL, 'b' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const binds[] = { "spread", "none", NULL };
	long v;
	int opt, i, rc = 0;
	bool placed = false, rank_given = false; /* --host or --port; --rank */

	l->bind = true;
	l->transport = SS_TRANSPORT_SHM;
	l->host = "127.0.0.1";
	/*
	 * Another launch on this machine must not take these ranks for its
	 * own: ports and job key are random (a rank of another job is
	 * refused at the handshake), unless given.
	 */
	if (getrandom(&l->nonce, sizeof(l->nonce), 0) != sizeof(l->nonce))
		l->nonce = ss_now_ns() ^ (uint64_t)getpid() << 32;
	l->port = 20000 + (long)(l->nonce % 20000);
	optind = 1;
	/* '+': stop at the first non-option, the train command. */
	while ((opt = getopt_long(argc, argv, "+n:h", options, NULL)) != -1) {
		switch (opt) {
		case 'n':
			rc = ss_parse_long("--ranks", optarg, 1,
					   SS_LAUNCH_MAX_LOCAL, &v);
			l->n = (int)v;
			break;
		case 't':
			rc = ss_transport_parse("--transport", optarg,
						&l->transport);
			break;
		case 'H':
			l->host = optarg;
			placed = true;
			break;
		case 'p':
			rc = ss_parse_long("--port", optarg, 1, 65535 - 64,
					   &l->port);
			placed = true;
			break;
		case 'P':
			l->job_peers = optarg;
			break;
		case 'r':
			rc = ss_parse_long("--rank", optarg, 0,
					   SS_FABRIC_MAX_PEERS - 1,
					   &l->first_rank);
			rank_given = true;
			break;
		case 'T':
			rc = ss_parse_long("--timeout", optarg, 0, 30 * 86400,
					   &l->timeout_s);
			break;
		case 'R':
			rc = ss_parse_long("--restarts", optarg, 0, 1000,
					   &l->restarts);
			break;
		case 'j':
			l->json = true;
			break;
		case 'b':
			rc = ss_parse_choice("--bind", optarg, binds, &i);
			l->bind = i == 0;
			break;
		case 'h':
			ss_launch_usage(stdout);
			return 1;
		default:
			return ss_cmd_unknown_option("launch", argv, options);
		}
		if (rc < 0)
			return rc;
	}
	rc = ss_launch_check_hosts(l, placed, rank_given);
	if (rc < 0)
		return rc;
	if (l->n == 0)
		return ss_error_set(SS_EUSAGE, "it is required",
				    "say how many ranks: -n 4", "-n");
	/* rank r at P + r, and its tables' endpoint at P + n + r */
	if (!l->job_peers && l->port + 2 * l->n - 1 > 65535)
		return ss_error_set(
			SS_EUSAGE, "the ranks' ports would pass 65535",
			"N ranks use ports P to P + 2N - 1 (the sharded "
			"tables' endpoints after the ranks'): give a lower "
			"--port",
			"--port %ld with -n %d", l->port, l->n);
	l->train_argc = argc - optind;
	l->train_argv = argv + optind;
	if (!getenv("SS_JOB_KEY")) {
		uint64_t key = l->job_peers ?
				       ss_launch_peers_key(l->job_peers) :
				       l->nonce >> 16;

		/* train takes keys from 1 (0: any job, to shm-clean) */
		snprintf(l->job_key, sizeof(l->job_key), "%llu",
			 (unsigned long long)(key ? key : 1));
	}
	/* train's own --job-key wins; a program's arguments are its own */
	for (int k = 0; k < l->train_argc && !strcmp(l->train_argv[0], "train");
	     k++)
		if (ss_launch_names(l->train_argv[k], "--job-key"))
			l->job_key[0] = '\0';
	return ss_launch_check_train_args(l->train_argc, l->train_argv);
}

/*
 * The cores this process may use, each as the set of its PUs, in hwloc's
 * logical order (package, NUMA node, core), so that a block of
 * consecutive cores stays within a node where the counts allow.  Whole
 * cores: SMT siblings are numbered apart on Linux, and two ranks on the
 * siblings of one core would share its arithmetic units.
 */
static int ss_launch_cores(struct ss_launch *l)
{
	hwloc_topology_t topo;
	hwloc_bitmap_t mine = hwloc_bitmap_alloc();
	hwloc_obj_t core = NULL;
	int rc = 0;

	if (!mine || hwloc_topology_init(&topo) < 0) {
		hwloc_bitmap_free(mine);
		return ss_error_set(-ENOMEM, NULL, NULL, "hwloc for --bind");
	}
	if (hwloc_topology_load(topo) < 0 ||
	    hwloc_get_cpubind(topo, mine, HWLOC_CPUBIND_PROCESS) < 0) {
		rc = ss_error_set(SS_ETOPO, strerror(errno),
				  "run with --bind none", "--bind spread");
		goto out;
	}
	l->cores = calloc(
		(size_t)hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) + 1,
		sizeof(cpu_set_t));
	if (!l->cores) {
		rc = ss_error_set(-ENOMEM, NULL, NULL, "--bind spread");
		goto out;
	}
	while ((core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE,
						  core))) {
		cpu_set_t *set = &l->cores[l->n_cores];
		unsigned pu;

		CPU_ZERO(set);
		hwloc_bitmap_foreach_begin(pu, core->cpuset)
		{
			if (hwloc_bitmap_isset(mine, pu) && pu < CPU_SETSIZE)
				CPU_SET(pu, set);
		}
		hwloc_bitmap_foreach_end();
		if (CPU_COUNT(set))
			l->n_cores++;
	}
out:
	hwloc_bitmap_free(mine);
	hwloc_topology_destroy(topo);
	return rc;
}

/*
 * Rank r's share: a block of whole cores; ranks share cores only when
 * there are more ranks than cores.
 */
static void ss_launch_bind(const struct ss_launch *l, int r)
{
	int first = r * l->n_cores / l->n, last = (r + 1) * l->n_cores / l->n;
	cpu_set_t set;

	if (last <= first)
		last = first + 1;
	CPU_ZERO(&set);
	for (int i = first; i < last; i++)
		CPU_OR(&set, &set, &l->cores[i]);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		fprintf(stderr,
			"shadowsync launch: rank %d: sched_setaffinity: %s\n",
			r, strerror(errno));
}

/*
 * The child of a program of the user's (not train): the same facts as
 * train's options, in the environment, which the library's users read
 * (the Python package: docs/python.md); then the program, on PATH.
 */
static void ss_launch_exec_program(const struct ss_launch *l, int r,
				   const char *peers, const char *rank)
{
	char world[16];
	int ranks = 1;

	for (const char *c = peers; *c; c++)
		ranks += *c == ',';
	snprintf(world, sizeof(world), "%d", ranks);
	setenv("SS_RANK", rank, 1);
	setenv("SS_WORLD", world, 1);
	setenv("SS_PEERS", peers, 1);
	setenv("SS_TRANSPORT", ss_transport_name(l->transport), 1);
	if (l->job_key[0])
		setenv("SS_JOB_KEY", l->job_key, 1);
	if (l->ranks[r].restarts && strchr(peers, ',')) {
		setenv("SS_REJOIN", "1", 1);
		setenv("SS_JOB_BEGAN", l->ranks[r].began, 1);
	}
	execvp(l->train_argv[0], l->train_argv);
	fprintf(stderr, "shadowsync launch: exec %s: %s\n", l->train_argv[0],
		strerror(errno));
	_exit(127);
}

/*
 * The child: becomes `shadowsync train ... --rank r --peers ...`, or the
 * user's program with the same in its environment.
 */
static void ss_launch_exec(const struct ss_launch *l, int r, const char *peers,
			   int out_fd, int err_fd)
{
	/* the program, train's options, then at most 13 of ours and NULL */
	char **argv = calloc((size_t)l->train_argc + 16, sizeof(char *));
	char rank[16];
	int n = 0;

	if (!argv)
		_exit(127);
	dup2(out_fd, STDOUT_FILENO);
	dup2(err_fd, STDERR_FILENO);
	/* Die with launch, whatever kills it; close the race with the fork. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != l->launcher)
		_exit(127);
	if (l->bind && l->n_cores > 0)
		ss_launch_bind(l, r);
	if (l->ranks[r].claim_fd >= 0) { /* ss_fabric_open() adopts it */
		char fd[16];

		snprintf(fd, sizeof(fd), "%d", l->ranks[r].claim_fd);
		fcntl(l->ranks[r].claim_fd, F_SETFD, 0);
		setenv("SS_SHM_CLAIM_FD", fd, 1);
	}
	snprintf(rank, sizeof(rank), "%ld", l->first_rank + r);
	if (strcmp(l->train_argv[0], "train"))
		ss_launch_exec_program(l, r, peers, rank);
	argv[n++] = "shadowsync";
	for (int i = 0; i < l->train_argc; i++)
		argv[n++] = l->train_argv[i];
	argv[n++] = "--rank";
	argv[n++] = rank;
	argv[n++] = "--peers";
	argv[n++] = (char *)peers;
	argv[n++] = "--transport";
	argv[n++] = (char *)ss_transport_name(l->transport);
	argv[n++] = "--json";
	/* a job of one rank starts afresh: there is no one to rejoin */
	if (l->ranks[r].restarts && strchr(peers, ',')) {
		argv[n++] = "--rejoin";
		argv[n++] = "--job-began";
		argv[n++] = (char *)l->ranks[r].began;
	}
	if (l->job_key[0]) {
		argv[n++] = "--job-key";
		argv[n++] = (char *)l->job_key;
	}
	argv[n] = NULL;
	execv("/proc/self/exe", argv);
	fprintf(stderr, "shadowsync launch: exec /proc/self/exe: %s\n",
		strerror(errno));
	_exit(127);
}

/* Starts rank @r (again, after a failure): its pipes, fork, exec. */
static int ss_launch_spawn(struct ss_launch *l, int r)
{
	struct ss_rank_proc *p = &l->ranks[r];
	int out[2], err[2];
	sigset_t old;

	if (pipe2(out, O_CLOEXEC) < 0)
		return ss_error_set(-errno, NULL, NULL, "pipe for rank %d", r);
	if (pipe2(err, O_CLOEXEC) < 0) {
		close(out[0]);
		close(out[1]);
		return ss_error_set(-errno, NULL, NULL, "pipe for rank %d", r);
	}
	fflush(NULL);
	/*
	 * Until it execs, the child has our handlers, which only set a flag:
	 * a SIGTERM from ss_launch_kill() or a Ctrl-C in that window would be
	 * lost, and the rank would train on until SIGKILL.  Blocked over the
	 * fork; the child takes the default actions back, then unblocks (a
	 * pending one ends it).
	 */
	pthread_sigmask(SIG_BLOCK, &ss_launch_signals, &old);
	p->pid = fork();
	if (p->pid == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		ss_launch_exec(l, r, l->peers, out[1], err[1]);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(out[1]);
	close(err[1]);
	if (p->claim_fd >= 0) { /* the rank holds it now */
		close(p->claim_fd);
		p->claim_fd = -1;
	}
	p->out_fd = out[0];
	p->err_fd = err[0];
	p->exited = false;
	p->stopped_by = 0;
	p->out_len = p->err_len = 0;
	if (p->pid < 0)
		return ss_error_set(-errno, NULL, NULL, "fork rank %d", r);
	return 0;
}

/* The value of train's option @name in the ranks' arguments, or NULL. */
static const char *ss_launch_train_arg(const struct ss_launch *l,
				       const char *name)
{
	size_t len = strlen(name);
	const char *v = NULL;

	for (int k = 1; k < l->train_argc; k++) {
		const char *a = l->train_argv[k];

		if (!strcmp(a, name) && k + 1 < l->train_argc)
			v = l->train_argv[++k];
		else if (!strncmp(a, name, len) && a[len] == '=')
			v = a + len + 1;
	}
	return v;
}

/*
 * When rank @r's job began, for train --job-began should it be started
 * again (a --save file older than that is an earlier job's): the time a
 * new file in its --save folder gets, so that both times come from the
 * clock of the storage (an NFS server's, which sets a file's time), not
 * this host's; this host's clock where there is no such folder to write.
 */
static void ss_launch_began(struct ss_launch *l, int r)
{
	const char *save = ss_launch_train_arg(l, "--save"), *at;
	char path[4096], rank[16];
	struct timespec now;
	struct stat st;
	int fd = -1;

	clock_gettime(CLOCK_REALTIME, &now);
	if (save && strlen(save) < sizeof(path) - 64) {
		snprintf(rank, sizeof(rank), "%ld", l->first_rank + r);
		at = strstr(save, "{rank}");
		snprintf(path, sizeof(path), "%.*s%s%s",
			 at ? (int)(at - save) : (int)strlen(save), save,
			 at ? rank : "", at ? at + 6 : "");
		at = strrchr(path, '/');
		snprintf(at ? (char *)at + 1 : path,
			 sizeof(path) - (size_t)(at ? at + 1 - path : 0),
			 ".shadowsync-began-XXXXXX");
		fd = mkstemp(path);
	}
	if (fd >= 0) {
		if (fstat(fd, &st) == 0)
			now = st.st_mtim;
		close(fd);
		unlink(path);
	}
	snprintf(l->ranks[r].began, sizeof(l->ranks[r].began), "%lld.%09ld",
		 (long long)now.tv_sec, now.tv_nsec);
}

/*
 * Every rank's address over shm, claimed in rank order before any rank
 * starts: of two jobs started at once on the same addresses, the one
 * that takes rank 0's runs and the other is refused here, with the
 * reason; neither is left with half of its addresses.
 */
static int ss_launch_claim(struct ss_launch *l)
{
	const char *at = l->peers;
	int rc = 0;

	for (int r = 0; r < l->n && rc == 0; r++) {
		char addr[256];
		size_t len = strcspn(at, ",");

		snprintf(addr, sizeof(addr), "%.*s", (int)len, at);
		at += len + (at[len] == ',');
		rc = ss_fabric_shm_claim(addr, r, &l->ranks[r].claim_fd);
	}
	if (rc < 0)
		for (int r = 0; r < l->n; r++)
			if (l->ranks[r].claim_fd >= 0) {
				close(l->ranks[r].claim_fd);
				l->ranks[r].claim_fd = -1;
			}
	return rc;
}

static int ss_launch_start(struct ss_launch *l)
{
	size_t size = (size_t)l->n * (strlen(l->host) + 8);
	int rc = 0;

	/* --peers names the job's addresses; else ours, from --port up */
	l->peers = l->job_peers ? strdup(l->job_peers) : calloc(1, size + 1);
	if (!l->peers)
		return ss_error_set(-ENOMEM, NULL, NULL, "peer list");
	if (l->bind)
		rc = ss_launch_cores(l);
	if (rc < 0)
		return rc;
	l->launcher = getpid();
	for (int r = 0; r < l->n; r++)
		ss_launch_began(l, r);
	for (int r = 0; r < l->n && !l->job_peers; r++)
		snprintf(l->peers + strlen(l->peers),
			 size + 1 - strlen(l->peers), "%s%s:%ld", r ? "," : "",
			 l->host, l->port + r);
	if (l->transport == SS_TRANSPORT_SHM && !l->job_peers)
		rc = ss_launch_claim(l);
	if (rc < 0)
		return rc;
	for (int r = 0; r < l->n && rc == 0; r++)
		rc = ss_launch_spawn(l, r);
	if (rc == 0)
		ss_log_info("launched %d rank%s over %s, peers %s", l->n,
			    l->n == 1 ? "" : "s",
			    ss_transport_name(l->transport), l->peers);
	return rc;
}

/* The longest stdout line kept whole (a JSON summary); longer ones go
 * out in pieces. */
#define SS_LAUNCH_LINE_MAX (64u << 20)

/* Passes on complete lines; keeps the rank's JSON summary for the end. */
static void ss_launch_lines(struct ss_launch *l, int r, char *buf, size_t *len,
			    FILE *to, bool flush_all)
{
	struct ss_rank_proc *p = &l->ranks[r];
	char *start = buf, *nl;

	while ((nl = memchr(start, '\n', *len - (size_t)(start - buf))) ||
	       (flush_all && start < buf + *len)) {
		size_t n = nl ? (size_t)(nl - start) :
				*len - (size_t)(start - buf);

		if (to == stdout && n > 9 && !strncmp(start, "{\"rank\":", 8)) {
			free(p->json);
			p->json = strndup(start, n);
		} else {
			fprintf(to, "[rank %ld] %.*s\n", l->first_rank + r,
				(int)n, start);
		}
		start += n + (nl ? 1 : 0);
	}
	*len -= (size_t)(start - buf);
	memmove(buf, start, *len);
}

/*
 * Room to read into: stdout's buffer doubles (from 4 KiB) up to the
 * limit; a buffer still full holds a line longer than that, which goes
 * out in pieces.  Returns the buffer and its size in @cap.
 */
static char *ss_launch_room(struct ss_launch *l, int r, bool is_err,
			    size_t *cap)
{
	struct ss_rank_proc *p = &l->ranks[r];
	size_t *len = is_err ? &p->err_len : &p->out_len;

	if (!is_err && p->out_len + 1 >= p->out_cap &&
	    p->out_cap < SS_LAUNCH_LINE_MAX) {
		size_t want = p->out_cap ? 2 * p->out_cap : 4096;
		char *more = realloc(p->out_buf, want);

		if (more) {
			p->out_buf = more;
			p->out_cap = want;
		}
	}
	*cap = is_err ? sizeof(p->err_buf) : p->out_cap;
	if (*cap && *len + 1 >= *cap) {
		fprintf(is_err ? stderr : stdout, "[rank %ld] %.*s\n",
			l->first_rank + r, (int)*len,
			is_err ? p->err_buf : p->out_buf);
		*len = 0;
	}
	return is_err ? p->err_buf : p->out_buf;
}

static void ss_launch_read(struct ss_launch *l, int r, bool is_err)
{
	struct ss_rank_proc *p = &l->ranks[r];
	int *fd = is_err ? &p->err_fd : &p->out_fd;
	size_t *len = is_err ? &p->err_len : &p->out_len, cap;
	char *buf = ss_launch_room(l, r, is_err, &cap);
	ssize_t got;

	if (!buf) { /* no memory for a first buffer: read it later */
		usleep(10000);
		return;
	}
	got = read(*fd, buf + *len, cap - 1 - *len);
	if (got > 0) {
		*len += (size_t)got;
		ss_launch_lines(l, r, buf, len, is_err ? stderr : stdout,
				false);
		return;
	}
	if (got < 0 && errno == EINTR)
		return;
	ss_launch_lines(l, r, buf, len, is_err ? stderr : stdout, true);
	close(*fd);
	*fd = -1;
}

static void ss_launch_kill(struct ss_launch *l, int sig)
{
	for (int r = 0; r < l->n; r++)
		if (l->ranks[r].pid > 0 && !l->ranks[r].exited &&
		    kill(l->ranks[r].pid, sig) == 0)
			l->ranks[r].stopped_by = sig;
}

static bool ss_launch_failed(const struct ss_rank_proc *p)
{
	return !WIFEXITED(p->status) || WEXITSTATUS(p->status) != 0;
}

static void ss_launch_describe(const struct ss_rank_proc *p, char *buf,
			       size_t size)
{
	const char *sig = WIFSIGNALED(p->status) ?
				  sigabbrev_np(WTERMSIG(p->status)) :
				  NULL;

	if (p->never_started)
		snprintf(buf, size, "not started");
	else if (WIFEXITED(p->status))
		snprintf(buf, size, "exit %d", WEXITSTATUS(p->status));
	else if (WIFSIGNALED(p->status) && WTERMSIG(p->status) == p->stopped_by)
		/* not "killed": it may have been failing on its own (its
		 * messages say), as the rank that made launch stop it */
		snprintf(buf, size, "stopped (SIG%s)", sig ? sig : "?");
	else if (WIFSIGNALED(p->status))
		snprintf(buf, size, "killed by SIG%s", sig ? sig : "?");
	else
		snprintf(buf, size, "status 0x%x", p->status);
}

/* Passes on what rank @r wrote before it exited, to the end of its pipes. */
static void ss_launch_drain(struct ss_launch *l, int r)
{
	while (l->ranks[r].out_fd >= 0)
		ss_launch_read(l, r, false);
	while (l->ranks[r].err_fd >= 0)
		ss_launch_read(l, r, true);
}

/*
 * Starts failed rank @r again if --restarts allows: it finds the others
 * running and rejoins them (the sync layer's join: it reads a live
 * replica).  Its last output is passed on first.  Returns whether it runs.
 */
static bool ss_launch_restart(struct ss_launch *l, int r, const char *what)
{
	struct ss_rank_proc *p = &l->ranks[r];
	bool others = l->n == 1; /* a job over hosts: the others elsewhere */
	int rc;

	if (l->restarted >= l->restarts)
		return false;
	/* train's usage error: the same command line fails the same way */
	if (WIFEXITED(p->status) && WEXITSTATUS(p->status) == 2) {
		fprintf(stderr,
			"shadowsync launch: rank %ld failed (%s: its options "
			"were refused): not started again, it would be refused "
			"again\n",
			l->first_rank + r, what);
		return false;
	}
	for (int k = 0; k < l->n; k++)
		others |= k != r && l->ranks[k].pid > 0 && !l->ranks[k].exited;
	if (!others) {
		/* it would wait its connect timeout for no one, and fail */
		fprintf(stderr,
			"shadowsync launch: rank %ld failed (%s) after the "
			"other ranks had finished: not started again, there is "
			"no job left to rejoin\n",
			l->first_rank + r, what);
		return false;
	}
	ss_launch_drain(l, r);
	free(p->json);
	p->json = NULL;
	l->restarted++;
	p->restarts++;
	fprintf(stderr,
		"shadowsync launch: rank %ld failed (%s); starting it again "
		"(restart %d of %ld)\n",
		l->first_rank + r, what, l->restarted, l->restarts);
	rc = ss_launch_spawn(l, r);
	if (rc < 0) {
		ss_error_print(stderr, ss_launch_prog, rc);
		p->exited = true;
		return false;
	}
	return true;
}

/*
 * A rank killed by a signal it could not catch (SIGKILL) left its shared
 * memory in /dev/shm, and one that failed before it opened its fabric
 * left the claim we made for it: remove them, now that the rank is gone
 * (its claim's lock went with it, so a live rank's objects are never
 * touched).  A rank that ended cleanly left nothing to find.
 */
static void ss_launch_clean_shm(const struct ss_launch *l, int r)
{
	const char *at = l->peers;
	char addr[256], *colon;
	size_t len;
	long port, world = 0;
	int found;

	if (l->transport != SS_TRANSPORT_SHM)
		return;
	for (long i = 0; at && i < l->first_rank + r; i++) {
		at = strchr(at, ',');
		at = at ? at + 1 : NULL;
	}
	if (!at)
		return;
	len = strcspn(at, ",");
	if (len >= sizeof(addr))
		return;
	snprintf(addr, sizeof(addr), "%.*s", (int)len, at);
	found = ss_fabric_shm_clean(addr, 0, true, NULL, NULL);
	if (found > 0)
		ss_log_info("rank %ld (%s): removed its shared memory",
			    l->first_rank + r, addr);
	/* and its tables' endpoint, at port + world (ss_table_addrs) */
	colon = strrchr(addr, ':');
	port = colon ? strtol(colon + 1, NULL, 10) : 0;
	for (at = l->peers; at; at = strchr(at + 1, ','))
		world++;
	if (port <= 0 || port + world > 65535)
		return;
	snprintf(colon + 1, sizeof(addr) - (size_t)(colon + 1 - addr), "%ld",
		 port + world);
	found = ss_fabric_shm_clean(addr, 0, true, NULL, NULL);
	if (found > 0)
		ss_log_info("rank %ld (%s): removed its tables' shared memory",
			    l->first_rank + r, addr);
}

/*
 * Every child gone: what any rank left, and the claims of ranks that
 * never started.  Not only at each rank's exit: until it execs, a child
 * holds copies of the claims of the ranks after it (they are passed on
 * through fork), so a rank stopped early can find its neighbour's claim
 * still held then.
 */
static void ss_launch_clean_all(struct ss_launch *l)
{
	for (int r = 0; r < l->n; r++) {
		struct ss_rank_proc *p = &l->ranks[r];

		if (p->claim_fd >= 0) {
			close(p->claim_fd);
			p->claim_fd = -1;
		}
		ss_launch_clean_shm(l, r);
	}
}

/*
 * Relays output and reaps ranks until all have exited.  The first failure,
 * a signal or the time limit stops the rest: SIGTERM, then SIGKILL after
 * the grace period.  Returns the number of failed ranks.
 */
static int ss_launch_wait(struct ss_launch *l)
{
	uint64_t start = ss_now_ns(), stop_at = 0;
	int live = 0, failed = 0;
	bool stopping = l->start_failed;

	for (int r = 0; r < l->n; r++) {
		if (l->ranks[r].pid > 0) {
			live++;
		} else { /* never started */
			l->ranks[r].exited = true;
			l->ranks[r].never_started = true;
			l->ranks[r].status = 127 << 8;
			failed++;
		}
	}

	while (live > 0) {
		struct pollfd fds[2 * SS_LAUNCH_MAX_LOCAL];
		int who[2 * SS_LAUNCH_MAX_LOCAL], nfds = 0;
		uint64_t now;
		pid_t pid;
		int status;

		for (int r = 0; r < l->n; r++) {
			if (l->ranks[r].out_fd >= 0) {
				who[nfds] = r;
				fds[nfds++] = (struct pollfd){
					.fd = l->ranks[r].out_fd,
					.events = POLLIN
				};
			}
			if (l->ranks[r].err_fd >= 0) {
				who[nfds] = -1 - r;
				fds[nfds++] = (struct pollfd){
					.fd = l->ranks[r].err_fd,
					.events = POLLIN
				};
			}
		}
		if (poll(fds, (nfds_t)nfds, nfds ? 100 : 0) > 0)
			for (int i = 0; i < nfds; i++)
				if (fds[i].revents)
					ss_launch_read(l,
						       who[i] >= 0 ?
							       who[i] :
							       -1 - who[i],
						       who[i] < 0);
		if (nfds == 0)
			usleep(20000);
		now = ss_now_ns();
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
			for (int r = 0; r < l->n; r++) {
				struct ss_rank_proc *p = &l->ranks[r];
				char what[64];

				if (p->pid != pid)
					continue;
				p->exited = true;
				p->status = status;
				ss_launch_clean_shm(l, r);
				p->seconds = (double)(now - start) / 1e9;
				live--;
				if (!ss_launch_failed(p))
					break;
				ss_launch_describe(p, what, sizeof(what));
				/* not after Ctrl-C: the terminal sent the ranks
				 * the same signal */
				if (!stopping && !ss_launch_interrupted &&
				    ss_launch_restart(l, r, what)) {
					live++;
					break;
				}
				failed++;
				if (!stopping && live > 0)
					fprintf(stderr,
						"shadowsync launch: rank %ld failed (%s); stopping the other ranks\n",
						l->first_rank + r, what);
				stopping = true;
			}
		if (ss_launch_interrupted && !stopping) {
			fprintf(stderr,
				"shadowsync launch: %s; stopping every rank\n",
				strsignal(ss_launch_interrupted));
			stopping = true;
		}
		if (l->timeout_s && !stopping &&
		    now - start > (uint64_t)l->timeout_s * 1000000000ull) {
			fprintf(stderr,
				"shadowsync launch: --timeout %ld s reached; stopping every rank\n",
				l->timeout_s);
			stopping = true;
		}
		if (stopping && !stop_at && live > 0) {
			ss_launch_kill(l, SIGTERM);
			stop_at = now + SS_LAUNCH_GRACE_MS * 1000000ull;
		}
		if (stop_at && stop_at != UINT64_MAX &&
		    ss_launch_signal_count > 1) {
			fprintf(stderr,
				"shadowsync launch: %s again; killing "
				"every rank\n",
				strsignal(ss_launch_interrupted));
			stop_at = now;
		}
		if (stop_at && now >= stop_at && stop_at != UINT64_MAX) {
			ss_launch_kill(l, SIGKILL);
			stop_at = UINT64_MAX;
		}
	}
	/* Output written just before exiting. */
	for (int r = 0; r < l->n; r++)
		ss_launch_drain(l, r);
	if (ss_launch_interrupted || stop_at)
		for (int r = 0; r < l->n; r++)
			if (!ss_launch_failed(&l->ranks[r]) &&
			    !l->ranks[r].json)
				failed++; /* stopped before it finished */
	return failed;
}

/* A number from a rank's flat JSON summary; NAN when absent. */
static double ss_json_number(const char *json, const char *key)
{
	char pat[64], *end;
	const char *at;
	double v;

	if (!json)
		return NAN;
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	at = strstr(json, pat);
	if (!at)
		return NAN;
	at += strlen(pat);
	v = strtod(at, &end);
	return end == at ? NAN : v; /* null: not a number */
}

/*
 * The job as a whole.  Throughput is the examples over the job's training
 * time, the slowest rank's: the ranks start training together (at the
 * sync layer's begin barrier), so that is the wall time of the training,
 * where a sum of per-rank rates counts a rank that finished early as if
 * it had gone on.  Quality is every rank's own: a mean over ranks hides
 * one that ended far off, so the worst rank is the one reported.
 */
struct ss_launch_totals {
	double examples, seconds, rounds, rounds_per_s, sync_gap;
	int with_sync, with_ne;
	int worst, best; /* ranks of the highest and lowest test NE */
	double worst_ne, best_ne;
};

/* Ranks whose NE differ by more than this are named in the summary. */
#define SS_LAUNCH_NE_SPREAD 0.01

static void ss_launch_totals(const struct ss_launch *l,
			     struct ss_launch_totals *t)
{
	memset(t, 0, sizeof(*t));
	t->worst = t->best = -1;
	for (int r = 0; r < l->n; r++) {
		const char *j = l->ranks[r].json;
		double ne = ss_json_number(j, "test_ne");
		double rps = ss_json_number(j, "rounds_per_s");
		double sec = ss_json_number(j, "seconds");

		if (!j)
			continue;
		t->examples += ss_json_number(j, "examples");
		if (sec > t->seconds)
			t->seconds = sec;
		if (isnan(ne) && strstr(j, "\"test_ne\":null")) {
			/* evaluated, and diverged: worse than any number */
			t->worst = r;
			t->worst_ne = INFINITY;
			t->with_ne++;
		} else if (!isnan(ne)) {
			if (t->worst < 0 || ne > t->worst_ne) {
				t->worst = r;
				t->worst_ne = ne;
			}
			if (t->best < 0 || ne < t->best_ne) {
				t->best = r;
				t->best_ne = ne;
			}
			t->with_ne++;
		}
		if (!isnan(rps)) {
			t->rounds += ss_json_number(j, "rounds");
			t->rounds_per_s += rps;
			t->sync_gap += ss_json_number(j, "sync_gap");
			t->with_sync++;
		}
	}
	if (t->with_sync) {
		t->rounds /= t->with_sync;
		t->rounds_per_s /= t->with_sync;
		t->sync_gap /= t->with_sync;
	}
}

static double ss_launch_rate(const struct ss_launch_totals *t)
{
	return t->seconds > 0 ? t->examples / t->seconds : 0;
}

/* Whether the ranks' held-out NE differ by more than SS_LAUNCH_NE_SPREAD. */
static bool ss_launch_disagree(const struct ss_launch_totals *t)
{
	return t->with_ne > 1 && t->best >= 0 &&
	       t->worst_ne > t->best_ne * (1 + SS_LAUNCH_NE_SPREAD);
}

static void ss_launch_print_json(const struct ss_launch *l, int failed)
{
	struct ss_launch_totals t;

	ss_launch_totals(l, &t);
	printf("{\"world\":%d,\"transport\":\"%s\",\"failed\":%d,\"restarts\":%d,\"examples\":%.0f,"
	       "\"seconds\":%.3f,\"examples_per_s\":%.1f,\"rank_examples_per_s\":[",
	       l->n, ss_transport_name(l->transport), failed, l->restarted,
	       t.examples, t.seconds, ss_launch_rate(&t));
	for (int r = 0; r < l->n; r++)
		printf("%s%.1f", r ? "," : "",
		       l->ranks[r].json ? ss_json_number(l->ranks[r].json,
							 "examples_per_s") :
					  0.0);
	printf("]");
	if (t.with_ne) {
		const char *w = l->ranks[t.worst].json;

		/* the worst rank's figures, never a mean */
		printf(",\"test_ne\":");
		ss_json_double(stdout, "%.6f", t.worst_ne);
		printf(",\"test_auc\":");
		ss_json_double(stdout, "%.6f", ss_json_number(w, "test_auc"));
		printf(",\"test_calibration\":");
		ss_json_double(stdout, "%.6f",
			       ss_json_number(w, "test_calibration"));
		printf(",\"worst_rank\":%d,\"test_ne_best\":", t.worst);
		ss_json_double(stdout, "%.6f", t.best < 0 ? NAN : t.best_ne);
		printf(",\"best_rank\":%d,\"ranks_disagree\":%s", t.best,
		       ss_launch_disagree(&t) ? "true" : "false");
	}
	if (t.with_sync)
		printf(",\"rounds\":%.1f,\"rounds_per_s\":%.2f,\"sync_gap\":%.2f",
		       t.rounds, t.rounds_per_s, t.sync_gap);
	printf(",\"ranks\":[");
	for (int r = 0; r < l->n; r++)
		printf("%s%s", r ? "," : "",
		       l->ranks[r].json ? l->ranks[r].json : "null");
	printf("]}\n");
}

/* @v with @prec decimals, or "-" where a rank gave none (no --test, a
 * rank that failed or was stopped). */
static const char *ss_launch_cell(char *buf, size_t size, double v, int prec)
{
	if (isnan(v))
		return "-";
	snprintf(buf, size, "%.*f", prec, v);
	return buf;
}

static void ss_launch_print_table(const struct ss_launch *l, int failed)
{
	struct ss_launch_totals t;
	int reported = 0;

	ss_launch_totals(l, &t);
	if (l->job_peers)
		printf("launch: rank %ld of the job at %s, over %s, %s",
		       l->first_rank, l->job_peers,
		       ss_transport_name(l->transport),
		       failed ? "FAILED" : "succeeded");
	else
		printf("launch: %d rank%s over %s, %s", l->n,
		       l->n == 1 ? "" : "s", ss_transport_name(l->transport),
		       failed ? "FAILED" : "all succeeded");
	if (l->restarted)
		printf(" (%d restart%s)", l->restarted,
		       l->restarted == 1 ? "" : "s");
	printf("\n");
	printf("%5s  %-22s %10s %12s %8s %7s %6s %9s %8s\n", "rank", "status",
	       "examples", "examples/s", "NE", "AUC", "calib", "rounds/s",
	       "gap");
	for (int r = 0; r < l->n; r++) {
		const struct ss_rank_proc *p = &l->ranks[r];
		const char *j = p->json;
		char what[64], c[7][32];

		ss_launch_describe(p, what, sizeof(what));
		if (p->restarts)
			snprintf(what + strlen(what),
				 sizeof(what) - strlen(what), ", restarted %dx",
				 p->restarts);
		printf("%5ld  %-22s %10s %12s %8s %7s %6s %9s %8s\n",
		       l->first_rank + r, what,
		       ss_launch_cell(c[0], 32, ss_json_number(j, "examples"),
				      0),
		       ss_launch_cell(c[1], 32,
				      ss_json_number(j, "examples_per_s"), 0),
		       ss_launch_cell(c[2], 32, ss_json_number(j, "test_ne"),
				      4),
		       ss_launch_cell(c[3], 32, ss_json_number(j, "test_auc"),
				      4),
		       ss_launch_cell(c[4], 32,
				      ss_json_number(j, "test_calibration"), 3),
		       ss_launch_cell(c[5], 32,
				      ss_json_number(j, "rounds_per_s"), 1),
		       ss_launch_cell(c[6], 32, ss_json_number(j, "sync_gap"),
				      1));
	}
	for (int r = 0; r < l->n; r++)
		reported += l->ranks[r].json != NULL;
	/* a job stopped before any rank's summary has no totals, not 0 */
	if (!reported) {
		printf("  job  no totals: %s\n",
		       failed ? "no rank finished (each rank's messages above "
				"say how far it got)" :
				"no rank printed a summary line (a stdout line "
				"that begins {\"rank\":; train prints one with "
				"--json)");
		return;
	}
	printf("  job  %.0f examples in %.1f s of training (the slowest rank): %.0f examples/s",
	       t.examples, t.seconds, ss_launch_rate(&t));
	if (t.with_sync)
		printf("; %.1f rounds/s, gap %.1f (means)", t.rounds_per_s,
		       t.sync_gap);
	if (reported < l->n)
		printf("; of the %d rank%s that finished", reported,
		       reported == 1 ? "" : "s");
	/* a killed process's examples are in its model, not in a summary */
	if (l->restarted)
		printf("; a restarted rank's count is its last process's");
	printf("\n");
	if (ss_launch_disagree(&t) && isinf(t.worst_ne))
		printf("  ranks disagree: rank %d is worst, its model diverged (NE not a number); rank %d's NE %.4f\n",
		       t.worst, t.best, t.best_ne);
	else if (ss_launch_disagree(&t))
		printf("  ranks disagree: rank %d is worst, NE %.4f, %+.1f%% over rank %d's %.4f\n",
		       t.worst, t.worst_ne, 100 * (t.worst_ne / t.best_ne - 1),
		       t.best, t.best_ne);
}

int ss_cmd_launch(int argc, char **argv)
{
	struct ss_launch l = { 0 };
	struct sigaction sa = { .sa_handler = ss_launch_on_signal };
	int failed, rc = ss_launch_parse(argc, argv, &l);

	if (rc == 1)
		return SS_EXIT_OK;
	if (rc < 0)
		return ss_cmd_fail(ss_launch_prog, rc);
	l.ranks = calloc((size_t)l.n, sizeof(*l.ranks));
	if (!l.ranks)
		return ss_cmd_fail(ss_launch_prog,
				   ss_error_set(-ENOMEM, NULL, NULL, "ranks"));
	for (int r = 0; r < l.n; r++)
		l.ranks[r].out_fd = l.ranks[r].err_fd = l.ranks[r].claim_fd =
			-1;
	sigemptyset(&sa.sa_mask);
	sigemptyset(&ss_launch_signals);
	sigaddset(&ss_launch_signals, SIGINT);
	sigaddset(&ss_launch_signals, SIGTERM);
	sigaddset(&ss_launch_signals, SIGHUP);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	rc = ss_launch_start(&l);
	if (rc < 0 && !l.ranks[0].pid) { /* none started: nothing to show */
		ss_launch_clean_all(&l);
		free(l.ranks);
		free(l.cores);
		free(l.peers);
		return ss_cmd_fail(ss_launch_prog, rc);
	}
	if (rc < 0) {
		ss_error_print(stderr, ss_launch_prog, rc);
		l.start_failed = true; /* stop the ranks that did start */
	}
	failed = ss_launch_wait(&l);
	ss_launch_clean_all(&l);
	if (l.json)
		ss_launch_print_json(&l, failed);
	else
		ss_launch_print_table(&l, failed);
	for (int r = 0; r < l.n; r++) {
		free(l.ranks[r].json);
		free(l.ranks[r].out_buf);
	}
	free(l.ranks);
	free(l.cores);
	free(l.peers);
	return rc < 0 || failed ? SS_EXIT_FAILURE : SS_EXIT_OK;
}
