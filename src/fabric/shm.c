// SPDX-License-Identifier: BSD-2-Clause
/*
 * The shm backend: ranks that share a host.  Each region is a POSIX shared
 * memory object that peers map with the rights the region grants (read-only
 * when it is remote-READ only).  READ and WRITE are copies.  Each rank has
 * a control object with its hello, its region table, and one ring of
 * immediates per sending peer: the sender copies the data, then publishes
 * the immediate with a release store, so the receiver that sees it with an
 * acquire load sees the data too.
 *
 * A rank restarted while the others run creates its objects again (the old
 * names are unlinked and replaced) and maps its peers as at the first
 * connect, writing its pid in their "attached" word; a peer that had
 * failed it notices the new pid (or retries on its backoff), drops what
 * the old process left, maps the new objects and attaches in turn.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <stddef.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fabric_internal.h"

#define SS_SHM_RING 1024 /* immediates in flight per sender */
#define SS_SHM_LIVENESS_NS 100000000u /* how often to look for dead peers */

enum { SS_SHM_CREATING, SS_SHM_READY, SS_SHM_CLOSED };

struct ss_shm_ring {
	_Atomic uint64_t tail; /* written by the sender */
	_Atomic uint32_t attached; /* pid of the sender that has mapped us */
	/* set by a sender that refused us, once refused_why is written: so
	 * that we say why at once, not "no answer" at our timeout */
	_Atomic uint32_t refused;
	char refused_why[44];
	char pad1[4];
	_Atomic uint64_t head; /* written by the receiver */
	char pad2[56];
	uint32_t imm[SS_SHM_RING];
};

/* tail and attached on the sender's cache line, head on the receiver's */
_Static_assert(offsetof(struct ss_shm_ring, head) == 64, "ss_shm_ring layout");

struct ss_shm_ctl {
	struct ss__hello hello; /* big-endian, as on the wire */
	struct ss__table table; /* big-endian; addresses unused */
	_Atomic uint32_t state;
	int32_t pid;
	/* the owner's start time (/proc/PID/stat): pid and start name one
	 * process, whatever later reuses the pid; 0 if unknown */
	uint64_t start;
	struct ss_shm_ring rings[]; /* one per sending rank */
};

struct ss_shm_peer {
	struct ss_shm_ctl *ctl;
	size_t ctl_len;
	void *maps[SS_FABRIC_MAX_REGIONS];
	int32_t pid; /* the process mapped */
	uint64_t start; /* and its start time (a pid can be reused) */
	uint32_t knock_tried; /* the last process that attached to us, tried */
	bool remapped; /* failed, and a new process of it mapped */
	bool given_up; /* mapped, then failed by a partial connect */
	uint64_t alive_ns; /* when its process was last seen alive */
};

struct ss_shm {
	int claim_fd; /* our address's claim, locked while we live */
	struct ss_shm_ctl *ctl;
	size_t ctl_len;
	struct ss_shm_peer *peers;
	uint64_t next_liveness_ns;
	int next_peer; /* where poll starts, for fairness */
};

static const char ss_shm_hint[] =
	"is /dev/shm mounted, writable and large enough? (df -h /dev/shm)";

/*
 * Objects are named after the rank's address, not the job key, so that a
 * peer started with another key is found and refused with the reason.
 */
static void ss_shm_name(const struct ss_fabric *f, int rank, int region,
			char *name, size_t size)
{
	ss__shm_name(f->addrs[rank], region < 0 ? SS_SHM_CTL : region, name,
		     size);
}

static size_t ss_shm_ctl_len(const struct ss_fabric *f)
{
	return ss__page_round(sizeof(struct ss_shm_ctl) +
			      (size_t)f->opts.world *
				      sizeof(struct ss_shm_ring));
}

/*
 * Reserve @len bytes of /dev/shm for @fd's object now: a sparse object
 * whose first touch finds /dev/shm full dies of SIGBUS in the middle of
 * training.  After the placement, so that the pages come from the node
 * its policy names.
 */
static int ss_shm_reserve(int fd, const char *name, size_t len)
{
	struct statvfs vfs;
	int err = posix_fallocate(fd, 0, (off_t)len);

	if (err == 0)
		return 0;
	if (err != ENOSPC || fstatvfs(fd, &vfs) < 0)
		return ss_error_set(-err, NULL, ss_shm_hint,
				    "reserving %zu bytes for %s", len, name);
	return ss_error_set(
		-ENOSPC, "/dev/shm is too small",
		"free /dev/shm (shadowsync shm-clean), make the "
		"model smaller (--hash-size), or mount a larger "
		"/dev/shm (mount -o remount,size=...)",
		"%s needs %zu MiB, /dev/shm has %llu MiB free", name, len >> 20,
		(unsigned long long)vfs.f_bavail * vfs.f_frsize >> 20);
}

/*
 * Create (replacing a stale one: we hold the address's claim), place with
 * @f's placement (NULL: none), reserve and map a shared object of @len
 * bytes.
 */
static int ss_shm_create(struct ss_fabric *f, const char *name, size_t len,
			 void **ptr)
{
	void *p;
	int fd, rc = 0;

	/* Remembered before it exists: a signal between the create and the
	 * remember would leave it behind.  The name is ours to remove
	 * either way, since we hold the address's claim. */
	ss__shm_remember(name);
	shm_unlink(name); /* left over by a rank that crashed */
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = ss_error_set(-errno, NULL, ss_shm_hint, "shm_open %s",
				  name);
		ss__shm_forget(name);
		return rc;
	}
	if (ftruncate(fd, (off_t)len) < 0)
		rc = ss_error_set(-errno, NULL, ss_shm_hint,
				  "ftruncate %s to %zu bytes", name, len);
	p = rc ? MAP_FAILED :
		 mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (rc == 0 && p == MAP_FAILED)
		rc = ss_error_set(-errno, NULL, ss_shm_hint,
				  "mmap %s (%zu bytes)", name, len);
	if (rc == 0 && f && f->place) /* mapped, not yet touched */
		f->place(f->place_ctx, p, len);
	if (rc == 0)
		rc = ss_shm_reserve(fd, name, len);
	close(fd);
	if (rc < 0) {
		if (p != MAP_FAILED)
			munmap(p, len);
		ss__shm_forget(name);
		shm_unlink(name);
		return rc;
	}
	*ptr = p;
	return 0;
}

/* Map a peer's object; -ENOENT while it does not exist (yet). */
static int ss_shm_map(const char *name, size_t len, int prot, void **ptr)
{
	struct stat st;
	void *p;
	int fd = shm_open(name, prot & PROT_WRITE ? O_RDWR : O_RDONLY, 0);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || (size_t)st.st_size < len) {
		close(fd);
		return -ENOENT; /* still being sized */
	}
	p = mmap(NULL, len, prot, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return -errno;
	*ptr = p;
	return 0;
}

static bool ss_shm_alive(const struct ss_shm_ctl *ctl);

/*
 * Objects are replaced when their owner crashed, never while it lives: a
 * second process given the same address (another job, a mistyped peer
 * list) is refused by the address's claim, taken before any object is
 * made, instead of taking a running rank's memory.
 */
/*
 * Whether the host of @addr ("host:port", "[v6]:port") is an IP literal
 * that is on no interface of this machine: shm cannot reach it.  Names
 * are not looked up (no resolver waits here); loopback is ours.
 */
static bool ss_shm_addr_elsewhere(const char *addr, const struct ifaddrs *ifs)
{
	char host[INET6_ADDRSTRLEN];
	unsigned char ip[16];
	int family = AF_INET;

	if (ss__addr_host(addr, host, sizeof(host)) < 0)
		return false; /* no IP literal */
	if (inet_pton(AF_INET, host, ip) != 1) {
		family = AF_INET6;
		if (inet_pton(AF_INET6, host, ip) != 1)
			return false; /* a name */
	}
	if (family == AF_INET ? ip[0] == 127 :
				!memcmp(ip, &in6addr_loopback, 16))
		return false;
	for (const struct ifaddrs *i = ifs; i; i = i->ifa_next) {
		const struct sockaddr *sa = i->ifa_addr;

		if (!sa || sa->sa_family != family)
			continue;
		if (family == AF_INET &&
		    !memcmp(&((const struct sockaddr_in *)(const void *)sa)
				     ->sin_addr,
			    ip, 4))
			return false;
		if (family == AF_INET6 &&
		    !memcmp(&((const struct sockaddr_in6 *)(const void *)sa)
				     ->sin6_addr,
			    ip, 16))
			return false;
	}
	return true;
}

/*
 * shm joins the ranks of one machine: a peer at an address of another
 * is refused at once, rather than waited for until the timeout.
 */
static int ss_shm_check_local(const struct ss_fabric *f)
{
	struct ifaddrs *ifs = NULL;
	int rc = 0;

	if (getifaddrs(&ifs) < 0)
		return 0; /* cannot tell: the wait says it */
	for (int p = 0; p < f->opts.world && rc == 0; p++)
		if (ss_shm_addr_elsewhere(f->addrs[p], ifs))
			rc = ss_error_set(
				SS_EUSAGE,
				"it is on no interface of this machine, and "
				"shm joins the ranks of one machine",
				"use --transport verbs for ranks on several "
				"hosts (auto picks shm when no RDMA port is "
				"active here: ibv_devinfo)",
				"shm: address of rank %d '%s'", p, f->addrs[p]);
	freeifaddrs(ifs);
	return rc;
}

static int ss_shm_open(struct ss_fabric *f)
{
	struct ss_shm *s;
	char name[160];
	int rc = ss_shm_check_local(f);

	if (rc < 0)
		return rc;
	s = calloc(1, sizeof(*s));
	if (!s)
		return ss_error_set(-ENOMEM, NULL, NULL, "shm fabric");
	s->claim_fd = -1;
	s->peers = calloc((size_t)f->opts.world, sizeof(*s->peers));
	if (!s->peers) {
		free(s);
		return ss_error_set(-ENOMEM, NULL, NULL, "shm fabric");
	}
	rc = ss__shm_claim(f->addrs[f->opts.rank], f->opts.rank, &s->claim_fd);
	if (rc < 0) {
		free(s->peers);
		free(s);
		return rc;
	}
	ss__shm_name(f->addrs[f->opts.rank], SS_SHM_CLAIM, name, sizeof(name));
	ss__shm_remember(name);
	f->backend = s;
	return 0;
}

/*
 * A rank alone (a job of one) has no peer to map its regions: they are
 * private memory, not objects in /dev/shm, whose size (64 MiB in a
 * container by default) refused a one-rank run that never synchronizes
 * (the replica and the sync layer's regions, 6 times the model).
 */
static int ss_shm_alloc_alone(struct ss_fabric *f, struct ss_region *r)
{
	void *p = mmap(NULL, r->len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return ss_error_set(-errno, NULL, NULL,
				    "mapping %zu bytes for region %d", r->len,
				    r->index);
	if (f->place) /* mapped, not yet touched */
		f->place(f->place_ctx, p, r->len);
	r->ptr = p;
	return 0;
}

static int ss_shm_alloc(struct ss_fabric *f, struct ss_region *r)
{
	char name[160];

	if (f->opts.world == 1)
		return ss_shm_alloc_alone(f, r);
	ss_shm_name(f, f->opts.rank, r->index, name, sizeof(name));
	return ss_shm_create(f, name, r->len, &r->ptr);
}

static void ss_shm_free_region(struct ss_fabric *f, struct ss_region *r)
{
	char name[160];

	if (!r->ptr)
		return;
	munmap(r->ptr, r->len);
	if (f->opts.world == 1) { /* private: no name */
		r->ptr = NULL;
		return;
	}
	ss_shm_name(f, f->opts.rank, r->index, name, sizeof(name));
	ss__shm_forget(name);
	shm_unlink(name);
	r->ptr = NULL;
}

/* A process that exited is gone, even while a zombie nobody reaped. */
/*
 * Process @pid's state letter and start time (clock ticks after boot,
 * field 22 of /proc/PID/stat); false when there is no such process or no
 * /proc to ask.
 */
static bool ss_proc_stat(int32_t pid, char *state, uint64_t *start)
{
	char path[64], stat[512];
	const char *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, stat, sizeof(stat) - 1);
	close(fd);
	stat[n > 0 ? n : 0] = '\0';
	/* the name may hold spaces and parentheses: fields follow the last */
	p = strrchr(stat, ')');
	if (!p || p[1] != ' ')
		return false;
	*state = p[2];
	*start = 0;
	/* the space before field k counts k: after ')' comes field 3 */
	for (int field = 2; *p && field < 22; p++)
		if (*p == ' ' && ++field == 22)
			*start = strtoull(p + 1, NULL, 10);
	return true;
}

/*
 * Whether the process that made @ctl still runs: its pid exists, is not a
 * zombie, and started when the owner did (a pid reused by another process
 * after the owner died is not the owner: with a pid_max of 32768 that
 * happens within minutes on a busy machine).
 */
static bool ss_shm_alive(const struct ss_shm_ctl *ctl)
{
	uint64_t start;
	char state;

	if (kill(ctl->pid, 0) < 0 && errno == ESRCH)
		return false;
	if (!ss_proc_stat(ctl->pid, &state, &start)) {
		/* gone between the two looks, or no /proc: trust kill() */
		return access("/proc/self/stat", F_OK) != 0;
	}
	return state != 'Z' && (!ctl->start || !start || start == ctl->start);
}

/* Process @pid's start time, 0 when unknown. */
static uint64_t ss_proc_start(int32_t pid)
{
	uint64_t start;
	char state;

	return ss_proc_stat(pid, &state, &start) ? start : 0;
}

bool ss__shm_ctl_owner(const char *name, int32_t *pid, uint64_t *job_key,
		       bool check_alive)
{
	struct ss_shm_ctl *ctl;
	struct stat st;
	bool alive = false;
	int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);

	if (fd < 0)
		return true;
	if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(*ctl)) {
		close(fd);
		return true; /* a creator that died before sizing it */
	}
	ctl = mmap(NULL, sizeof(*ctl), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (ctl == MAP_FAILED)
		return true;
	if (ctl->pid > 0)
		*pid = ctl->pid;
	*job_key = be64toh(ctl->hello.job_key);
	if (check_alive && ctl->pid > 0)
		alive = ss_shm_alive(ctl);
	munmap(ctl, sizeof(*ctl));
	return !alive;
}

/* Map a peer's regions with the rights they grant. */
static int ss_shm_map_regions(struct ss_fabric *f, int p)
{
	struct ss_shm *s = f->backend;
	struct ss__peer *peer = &f->peers[p];
	char name[160];
	int rc;

	rc = ss__table_read(&s->peers[p].ctl->table, f->n_regions, peer);
	if (rc < 0)
		return ss_error_set(SS_EHANDSHAKE,
				    "its region table is corrupt", NULL,
				    "peer %d (%s)", p, peer->addr);
	for (int i = 0; i < peer->n_regions; i++) {
		int prot = peer->regions[i].access & (SS_ACCESS_REMOTE_WRITE |
						      SS_ACCESS_REMOTE_ATOMIC) ?
				   PROT_READ | PROT_WRITE :
			   peer->regions[i].access & SS_ACCESS_REMOTE_READ ?
				   PROT_READ :
				   PROT_NONE;

		if (prot == PROT_NONE)
			continue;
		ss_shm_name(f, p, i, name, sizeof(name));
		rc = ss_shm_map(name, peer->regions[i].len, prot,
				&s->peers[p].maps[i]);
		if (rc < 0)
			return ss_error_set(rc, NULL, ss_shm_hint,
					    "mapping region %d of peer %d (%s)",
					    i, p, peer->addr);
	}
	return 0;
}

static const char ss_shm_refused_hint[] =
	"start every rank with the same job key, world size and model (and the same part of it synchronized)";

/*
 * Leave @why (its part before any ':', which names what differs) in the
 * ring that @ctl's owner keeps for us, the sender @rank: the owner, which
 * may have started first and be waiting for us, says it at once.
 */
static void ss_shm_tell_refused(struct ss_shm_ctl *ctl, int rank,
				const char *why)
{
	struct ss_shm_ring *ring = &ctl->rings[rank];
	size_t len = strcspn(why, ":");

	if (len >= sizeof(ring->refused_why))
		len = sizeof(ring->refused_why) - 1;
	memcpy(ring->refused_why, why, len);
	ring->refused_why[len] = '\0';
	atomic_store_explicit(&ring->refused, 1, memory_order_release);
}

/* A peer that has refused us, as ss_shm_tell_refused() left it: an error. */
static int ss_shm_check_refused(struct ss_fabric *f, int p)
{
	struct ss_shm *s = f->backend;
	struct ss_shm_ring *ring = &s->ctl->rings[p];
	char why[sizeof(ring->refused_why)];

	if (!atomic_load_explicit(&ring->refused, memory_order_acquire))
		return 0;
	memcpy(why, ring->refused_why, sizeof(why));
	why[sizeof(why) - 1] = '\0';
	return ss_error_set(SS_EHANDSHAKE, why, ss_shm_refused_hint,
			    "peer %d (%s) refused us (its own message says "
			    "more)",
			    p, f->peers[p].addr);
}

/* Drop what is in our ring from @p: nobody waits for it any more. */
static void ss_shm_drop_ring(struct ss_fabric *f, int p)
{
	struct ss_shm_ring *ring =
		&((struct ss_shm *)f->backend)->ctl->rings[p];

	atomic_store_explicit(
		&ring->head,
		atomic_load_explicit(&ring->tail, memory_order_acquire),
		memory_order_release);
}

/* One attempt at mapping a peer: 1 mapped, 0 retry later, or < 0. */
static int ss_shm_try_peer(struct ss_fabric *f, int p,
			   const struct ss__hello *mine)
{
	struct ss_shm *s = f->backend;
	struct ss_shm_peer *sp = &s->peers[p];
	struct ss__hello theirs;
	char name[160], why[160];
	int rc;

	ss_shm_name(f, p, -1, name, sizeof(name));
	rc = ss_shm_map(name, s->ctl_len, PROT_READ | PROT_WRITE,
			(void **)&sp->ctl);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return ss_error_set(rc, NULL, ss_shm_hint, "shm_open %s", name);
	sp->ctl_len = s->ctl_len;
	if (atomic_load_explicit(&sp->ctl->state, memory_order_acquire) !=
		    SS_SHM_READY ||
	    !ss_shm_alive(sp->ctl)) {
		munmap(sp->ctl, s->ctl_len); /* not ready, or stale */
		sp->ctl = NULL;
		return 0;
	}
	ss__hello_from_wire(&sp->ctl->hello, &theirs);
	if (ss__hello_check(mine, &theirs, p, why, sizeof(why)) < 0) {
		ss_shm_tell_refused(sp->ctl, f->opts.rank, why);
		return ss_error_set(SS_EHANDSHAKE, why, ss_shm_refused_hint,
				    "peer %d (%s) refused", p,
				    f->peers[p].addr);
	}
	rc = ss_shm_map_regions(f, p);
	if (rc < 0)
		return rc;
	/*
	 * Another process than the one mapped before: nobody waits for what
	 * the old one sent.  The new one cannot have sent anything yet: it
	 * waits for us to attach first.  (The same process, reconnecting
	 * after ss_fabric_fail_peer, may have: that is kept.)
	 */
	if (sp->ctl->pid != sp->pid || sp->ctl->start != sp->start)
		ss_shm_drop_ring(f, p);
	/* Tell the peer we are here; connected once it has said so too. */
	sp->pid = sp->ctl->pid;
	sp->start = sp->ctl->start;
	sp->alive_ns = 0; /* a new process: look at it at once */
	atomic_store_explicit(&sp->ctl->rings[f->opts.rank].attached,
			      (uint32_t)getpid(), memory_order_release);
	f->peers[p].connected = true;
	return 1;
}

/* Both sides have mapped each other: 1, else 0 to wait. */
static int ss_shm_attached(struct ss_fabric *f, int p)
{
	struct ss_shm *s = f->backend;

	if (!atomic_load_explicit(&s->ctl->rings[p].attached,
				  memory_order_acquire))
		return 0;
	ss_log_debug("shm: connected to peer %d (pid %d)", p,
		     s->peers[p].ctl->pid);
	return 1;
}

/*
 * A partial connect's end: the peers that have not attached by the
 * timeout are failed, and retried as any failed peer (ss_shm_retry).
 */
static void ss_shm_give_up_on(struct ss_fabric *f, const bool *attached)
{
	struct ss_shm *s = f->backend;

	for (int p = 0; p < f->opts.world; p++) {
		if (p == f->opts.rank || attached[p])
			continue;
		/* mapped, not yet attached to us: its attach, when it comes,
		 * is taken at once (ss_shm_retry), not at the backoff */
		s->peers[p].given_up = f->peers[p].connected;
		ss__peer_fail(f, p,
			      "no answer within %u ms of our partial connect",
			      ss__partial_wait_ms(f->opts.timeout_ms));
	}
}

static int ss_shm_connect(struct ss_fabric *f)
{
	struct ss_shm *s = f->backend;
	uint64_t deadline = ss_deadline_ns(f->opts.timeout_ms),
		 partial = ss_deadline_ns(
			 ss__partial_wait_ms(f->opts.timeout_ms));
	struct ss__hello mine;
	char name[160], missing[256];
	int left = f->opts.world - 1, rc = 0;
	bool *attached = calloc((size_t)f->opts.world, sizeof(*attached));

	if (!attached)
		return ss_error_set(-ENOMEM, NULL, NULL, "shm connect");
	s->ctl_len = ss_shm_ctl_len(f);
	ss_shm_name(f, f->opts.rank, -1, name, sizeof(name));
	rc = ss_shm_create(NULL, name, s->ctl_len, (void **)&s->ctl);
	if (rc < 0)
		goto out;
	ss__hello_make(f, &mine);
	ss__hello_to_wire(&mine, &s->ctl->hello);
	ss__table_make(f, NULL, &s->ctl->table);
	s->ctl->pid = (int32_t)getpid();
	s->ctl->start = ss_proc_start(s->ctl->pid);
	atomic_store_explicit(&s->ctl->state, SS_SHM_READY,
			      memory_order_release);

	while (left > 0) {
		for (int p = 0; p < f->opts.world; p++) {
			if (p == f->opts.rank || attached[p])
				continue;
			rc = ss_shm_check_refused(f, p);
			if (rc < 0)
				goto out;
			if (!f->peers[p].connected) {
				rc = ss_shm_try_peer(f, p, &mine);
				if (rc < 0)
					goto out;
			}
			if (f->peers[p].connected && ss_shm_attached(f, p)) {
				attached[p] = true;
				left--;
			}
		}
		if (left == 0)
			break;
		if (ss_deadline_passed(partial) && f->opts.partial_connect &&
		    left < f->opts.world - 1) {
			ss_shm_give_up_on(f, attached);
			break;
		}
		if (ss_deadline_passed(deadline)) {
			size_t len = 0;

			missing[0] = '\0';
			for (int p = 0; p < f->opts.world; p++)
				if (p != f->opts.rank && !attached[p] &&
				    len < sizeof(missing))
					len += (size_t)snprintf(
						missing + len,
						sizeof(missing) - len,
						"%s%d (%s)", len ? ", " : "", p,
						f->peers[p].addr);
			rc = ss_error_set(
				-ETIMEDOUT, "no answer",
				"start the ranks named, within the connect "
				"timeout, each with the same peer list",
				"shm: waiting %u ms for peers %s",
				f->opts.timeout_ms, missing);
			goto out;
		}
		ss_sleep_ns(2000000);
	}
	rc = 0;
	s->next_liveness_ns = ss_now_ns() + SS_SHM_LIVENESS_NS;
out:
	free(attached);
	return rc;
}

/* Refuse when the peer is gone; a CLOSED peer has left in order (a dead
 * one's state stays as it was: its process is found gone). */
static int ss_shm_check_peer(struct ss_fabric *f, int p)
{
	struct ss_shm_peer *sp = &((struct ss_shm *)f->backend)->peers[p];
	struct ss_shm_ctl *ctl = sp->ctl;
	uint64_t now;

	if (atomic_load_explicit(&ctl->state, memory_order_acquire) ==
	    SS_SHM_CLOSED)
		return ss__peer_left(f, p);
	/* it failed us (ss_fabric_fail_peer): we reconnect, as it does */
	if (atomic_load_explicit(&ctl->rings[f->opts.rank].attached,
				 memory_order_acquire) !=
	    (uint32_t)((struct ss_shm *)f->backend)->ctl->pid)
		return ss__peer_fail(f, p, "it dropped our connection");
	/*
	 * Whether its process lives costs a kill() and a read of /proc: once
	 * a millisecond, not for every operation (a batch of row READs posts
	 * thousands; its memory stays mapped, so an operation to a process
	 * that just died harms nothing).
	 */
	now = ss_now_ns();
	if (now - sp->alive_ns < 1000000)
		return 0;
	if (!ss_shm_alive(ctl))
		return ss__peer_fail(f, p, "its process %d is gone", ctl->pid);
	sp->alive_ns = now;
	return 0;
}

/* A fetch-add, to a peer's mapping or our own region: a CPU atomic. */
static int ss_shm_fetch_add(struct ss_fabric *f, const struct ss__op *op,
			    char *remote, struct ss_completion *c)
{
	uint64_t old = __atomic_fetch_add(
		(uint64_t *)(void *)(remote + op->remote_off), op->add,
		__ATOMIC_SEQ_CST);

	memcpy((char *)op->local->ptr + op->local_off, &old, sizeof(old));
	return ss__backlog_push(f, c);
}

static int ss_shm_poll(struct ss_fabric *f, struct ss_completion *out, int max);

/*
 * Move the immediates peers have sent us into the backlog.  A rank that
 * waits for room in a peer's ring keeps emptying its own: two ranks that
 * fill each other's rings would otherwise wait on each other until the
 * timeout.
 */
static int ss_shm_take_rings(struct ss_fabric *f)
{
	struct ss_completion c[64];
	int n = ss_shm_poll(f, c, 64);

	for (int i = 0; i < n; i++)
		if (ss__backlog_push(f, &c[i]) < 0)
			return -ENOMEM;
	return n;
}

static int ss_shm_post(struct ss_fabric *f, const struct ss__op *op)
{
	struct ss_shm *s = f->backend;
	struct ss_shm_peer *sp = &s->peers[op->peer];
	const struct ss__remote_region *rr =
		&f->peers[op->peer].regions[op->remote_index];
	unsigned need = op->op == SS_OP_READ	  ? SS_ACCESS_REMOTE_READ :
			op->op == SS_OP_FETCH_ADD ? SS_ACCESS_REMOTE_ATOMIC :
						    SS_ACCESS_REMOTE_WRITE;
	struct ss_completion c = { .wr_id = op->wr_id,
				   .peer = op->peer,
				   .op = op->op };
	bool self = op->peer == f->opts.rank;
	char *local = (char *)op->local->ptr + op->local_off;
	char *remote = self ? (char *)f->regions[op->remote_index].ptr :
			      (char *)sp->maps[op->remote_index];
	struct ss_shm_ring *ring = NULL;
	uint64_t tail = 0;
	int rc = self ? 0 : ss_shm_check_peer(f, op->peer);

	if (rc < 0)
		return rc;
	if (!(rr->access & need)) {
		/* As a NIC would: the peer refuses, the completion says so. */
		c.status = SS_EREMOTE;
		ss_log_debug(
			"shm: %s to region %d of peer %d refused: it lacks the right",
			ss_op_name(op->op), op->remote_index, op->peer);
		return ss__backlog_push(f, &c);
	}
	if (op->op == SS_OP_FETCH_ADD)
		return ss_shm_fetch_add(f, op, remote, &c);
	if (op->op == SS_OP_WRITE_IMM) {
		uint64_t deadline = ss_deadline_ns(f->post_wait_ms);

		ring = &sp->ctl->rings[f->opts.rank];
		tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
		while (tail - atomic_load_explicit(&ring->head,
						   memory_order_acquire) >=
		       SS_SHM_RING) {
			if (!f->post_wait_ms)
				return ss_error_set(
					-EAGAIN,
					"its queue of immediates is full",
					"post it again later", "peer %d (%s)",
					op->peer, f->peers[op->peer].addr);
			if (ss_deadline_passed(deadline))
				return ss_error_set(
					-ETIMEDOUT,
					"its queue of immediates stayed full",
					"the peer is not polling",
					"peer %d (%s)", op->peer,
					f->peers[op->peer].addr);
			rc = ss_shm_check_peer(f, op->peer);
			if (rc == 0)
				rc = ss_shm_take_rings(f);
			if (rc < 0)
				return rc;
			if (rc == 0)
				ss_sleep_ns(10000);
		}
	}
	if (op->pieces) /* a READ list */
		for (int i = 0; i < op->n_pieces; i++)
			memcpy((char *)op->local->ptr + op->pieces[i].local_off,
			       remote + op->pieces[i].remote_off,
			       op->pieces[i].len);
	else if (op->op == SS_OP_READ)
		memcpy(local, remote + op->remote_off, op->len);
	else
		memcpy(remote + op->remote_off, local, op->len);
	if (ring) {
		ring->imm[tail % SS_SHM_RING] = op->imm;
		atomic_store_explicit(&ring->tail, tail + 1,
				      memory_order_release);
	}
	return ss__backlog_push(f, &c);
}

static int ss_shm_poll(struct ss_fabric *f, struct ss_completion *out, int max)
{
	struct ss_shm *s = f->backend;
	int world = f->opts.world, n = 0;

	for (int k = 0; k < world && n < max; k++) {
		int p = (s->next_peer + k) % world;
		struct ss_shm_ring *ring = &s->ctl->rings[p];
		uint64_t head, tail;

		if (p == f->opts.rank || !f->peers[p].connected)
			continue;
		head = atomic_load_explicit(&ring->head, memory_order_relaxed);
		tail = atomic_load_explicit(&ring->tail, memory_order_acquire);
		while (head != tail && n < max) {
			out[n].wr_id = 0;
			out[n].peer = p;
			out[n].op = SS_OP_RECV_IMM;
			out[n].status = 0;
			out[n].imm = ring->imm[head % SS_SHM_RING];
			n++;
			head++;
		}
		atomic_store_explicit(&ring->head, head, memory_order_release);
	}
	s->next_peer = (s->next_peer + 1) % world;
	return n;
}

/*
 * Forget a failed peer's mappings (its immediates: ss_shm_try_peer, once
 * it knows whether the process it maps is another).
 */
static void ss_shm_forget(struct ss_fabric *f, int p)
{
	struct ss_shm *s = f->backend;
	struct ss_shm_peer *sp = &s->peers[p];

	for (int i = 0; i < f->peers[p].n_regions; i++) {
		if (sp->maps[i])
			munmap(sp->maps[i], f->peers[p].regions[i].len);
		sp->maps[i] = NULL;
	}
	if (sp->ctl)
		munmap(sp->ctl, sp->ctl_len);
	sp->ctl = NULL;
}

/*
 * A failed peer: map a new process of its rank as connecting does, when
 * one has attached to us (its pid in our ring; once a process, so that
 * one that died before we mapped it is not tried at every poll) or the
 * backoff says so.  It is back once both sides have attached.
 */
static void ss_shm_retry(struct ss_fabric *f, int p)
{
	struct ss_shm *s = f->backend;
	struct ss_shm_peer *sp = &s->peers[p];
	uint32_t knock = atomic_load_explicit(&s->ctl->rings[p].attached,
					      memory_order_acquire);
	struct ss__hello mine;
	char how[64];
	int rc;

	if (!sp->remapped) {
		bool now = sp->given_up && knock == (uint32_t)sp->pid;

		if (!now &&
		    (!knock || knock == (uint32_t)sp->pid ||
		     knock == sp->knock_tried) &&
		    !ss__retry_due(f, p))
			return;
		sp->given_up = false;
		sp->knock_tried = knock;
		ss_shm_forget(f, p);
		ss__hello_make(f, &mine);
		rc = ss_shm_try_peer(f, p, &mine);
		if (rc < 0)
			ss_log_warn("shm: reconnecting: %s: %s",
				    ss_last_error()->what,
				    ss_last_error()->why);
		if (rc <= 0)
			return;
		sp->remapped = true;
	}
	if (knock == (uint32_t)sp->pid) {
		sp->remapped = false;
		snprintf(how, sizeof(how), "shm: new process %d", sp->pid);
		ss__peer_back(f, p, how);
	} else if (ss__retry_due(f, p) && !ss_shm_alive(sp->ctl)) {
		sp->remapped = false; /* died before attaching: look again */
	}
}

/*
 * Look for peers that closed or died, at most every 100 ms; look for new
 * processes of failed peers.
 */
static void ss_shm_progress(struct ss_fabric *f)
{
	struct ss_shm *s = f->backend;
	uint64_t now;

	/* (one never connected, given up on by a partial connect, too) */
	for (int p = 0; p < f->opts.world; p++)
		if (p != f->opts.rank && f->peers[p].failed)
			ss_shm_retry(f, p);
	now = ss_now_ns();
	if (now < s->next_liveness_ns)
		return;
	for (int p = 0; p < f->opts.world; p++)
		if (p != f->opts.rank && f->peers[p].connected &&
		    !f->peers[p].failed)
			ss_shm_check_peer(f, p);
	s->next_liveness_ns = now + SS_SHM_LIVENESS_NS;
}

static void ss_shm_close(struct ss_fabric *f)
{
	struct ss_shm *s = f->backend;
	char name[160];

	if (s->ctl)
		atomic_store_explicit(&s->ctl->state, SS_SHM_CLOSED,
				      memory_order_release);
	for (int p = 0; p < f->opts.world; p++) {
		for (int i = 0; i < f->peers[p].n_regions; i++)
			if (s->peers[p].maps[i])
				munmap(s->peers[p].maps[i],
				       f->peers[p].regions[i].len);
		if (s->peers[p].ctl)
			munmap(s->peers[p].ctl, s->peers[p].ctl_len);
	}
	for (int i = 0; i < f->n_regions; i++)
		ss_shm_free_region(f, &f->regions[i]);
	if (s->ctl) {
		munmap(s->ctl, s->ctl_len);
		ss_shm_name(f, f->opts.rank, -1, name, sizeof(name));
		ss__shm_forget(name);
		shm_unlink(name);
	}
	ss__shm_unclaim(f->addrs[f->opts.rank], s->claim_fd);
	free(s->peers);
	free(s);
	f->backend = NULL;
}

/*
 * Over shm operations complete as they are posted: nothing is in flight.
 * The peer is told, as a verbs peer is by its queue pair's error: its
 * place in our ring is let go, which its next operation or look at us
 * finds (ss_shm_check_peer); both sides then reconnect, and both count a
 * new epoch.  (Unseen, it went on sending into a ring we emptied, while
 * we took it for a new process.)  What it sends once it is back with us
 * waits in the ring until we are back with it.
 */
static void ss_shm_fail_peer(struct ss_fabric *f, int p, const char *why)
{
	struct ss_shm *s = f->backend;

	atomic_store_explicit(&s->ctl->rings[p].attached, 0,
			      memory_order_release);
	ss_shm_drop_ring(f, p); /* as a failed queue pair flushes */
	ss__peer_fail(f, p, "%s", why);
}

const struct ss__fabric_ops ss__shm_ops = {
	.name = "shm",
	.open = ss_shm_open,
	.alloc = ss_shm_alloc,
	.free_region = ss_shm_free_region,
	.connect = ss_shm_connect,
	.post = ss_shm_post,
	.poll = ss_shm_poll,
	.progress = ss_shm_progress,
	.fail_peer = ss_shm_fail_peer,
	.close = ss_shm_close,
};
