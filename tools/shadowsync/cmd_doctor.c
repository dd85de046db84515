// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync doctor: a preflight of this machine for RDMA training.  It
 * looks where a failed run would have to be debugged (devices, ports,
 * GIDs, MTU, locked-memory limit, hugepages, NIC locality, the BLIS
 * kernels) and says, for each problem, how to fix it.  Exit status 0: no
 * problem; 1: problems.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "command.h"
#include "shadowsync/shadowsync.h"
#include "train_cmd.h"

static const char ss_doctor_prog[] = "shadowsync doctor";

static void ss_doctor_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowsync doctor [OPTIONS]\n"
		"\n"
		"Check this machine for RDMA training: verbs devices, port states, GIDs\n"
		"and their types, active MTU, the locked-memory limit against what a run\n"
		"would register, hugepages, where the NIC sits (NUMA node), and the\n"
		"BLIS kernels training will use.  Each problem comes with its fix.\n"
		"Exit status 0: no problem; 1: problems.\n"
		"\n"
		"  --device NAME     check only this device ($SS_DEVICE)\n"
		"  --ranks N         size the memlock check for N ranks (default 4)\n"
		"  --tables T        sharded (default with several ranks), replicated or\n"
		"                    local, as train's --tables (sharded: one trainer's\n"
		"                    tables)\n"
		"  --emb-dim N --hash-size N --bottom SIZES --top SIZES\n"
		"  --interaction I --cross-layers L --cross-rank R\n"
		"                    the model to size it for (defaults: train's)\n"
		"  -h, --help        this help\n");
}

struct ss_doctor {
	const char *device;
	int ranks, tables; /* tables: enum ss_tables_kind, -1 by --ranks */
	struct ss_model_config model;
	int problems;
	/*
	 * Without --device, a run takes a usable port; then what is wrong
	 * with the others (a storage NIC, a spare port) is only a note.
	 */
	bool any_usable;
};

static void ss_doctor_problem(struct ss_doctor *d, const char *fix,
			      const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void ss_doctor_problem(struct ss_doctor *d, const char *fix,
			      const char *fmt, ...)
{
	va_list ap;

	printf("  PROBLEM: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n      fix: %s\n", fix);
	d->problems++;
}

/* A problem of one port: a note when a run would use another port. */
static void ss_doctor_port_problem(struct ss_doctor *d, const char *fix,
				   const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void ss_doctor_port_problem(struct ss_doctor *d, const char *fix,
				   const char *fmt, ...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (d->device || !d->any_usable)
		ss_doctor_problem(d, fix, "%s", what);
	else
		printf("  note: %s (not the port a run would use; fix: %s)\n",
		       what, fix);
}

static const uint8_t ss_zero_gid[16];

/* A RoCE v2 GID a peer across an IP network can reach: not fe80::. */
static bool ss_routable_v2(const struct ibv_gid_entry *e)
{
	return e->gid_type == IBV_GID_TYPE_ROCE_V2 &&
	       !(e->gid.raw[0] == 0xfe && (e->gid.raw[1] & 0xc0) == 0x80);
}

/* Whether a run could use this port: active, with a GID peers reach. */
static bool ss_doctor_port_usable(struct ibv_context *ctx, uint8_t port)
{
	struct ibv_port_attr pa;

	if (ibv_query_port(ctx, port, &pa) || pa.state != IBV_PORT_ACTIVE)
		return false;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry e;

		if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0) ||
		    !memcmp(e.gid.raw, ss_zero_gid, sizeof(ss_zero_gid)))
			continue;
		if (pa.link_layer != IBV_LINK_LAYER_ETHERNET ||
		    ss_routable_v2(&e))
			return true;
	}
	return false;
}

static int ss_doctor_parse(int argc, char **argv, struct ss_doctor *d)
{
	static const struct option options[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "ranks", required_argument, NULL, 'n' },
		{ "emb-dim", required_argument, NULL, 'e' },
		{ "hash-size", required_argument, NULL, 's' },
		{ "bottom", required_argument, NULL, 'b' },
		{ "top", required_argument, NULL, 't' },
		{ "interaction", required_argument, NULL, 'i' },
		{ "cross-layers", required_argument, NULL, 'L' },
		{ "cross-rank", required_argument, NULL, 'R' },
		{ "tables", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	long v;
	int opt, rc = 0, i;

	ss_model_config_init(&d->model);
	d->ranks = 4;
	d->tables = -1;
	d->device = getenv("SS_DEVICE");
	if (d->device && !*d->device)
		d->device = NULL;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		switch (opt) {
		case 'd':
			d->device = optarg;
			break;
		case 'n':
			rc = ss_parse_long("--ranks", optarg, 1,
					   SS_FABRIC_MAX_PEERS, &v);
			d->ranks = (int)v;
			break;
		case 'e':
			rc = ss_cmd_model_option("--emb-dim", optarg,
						 &d->model);
			break;
		case 's':
			rc = ss_cmd_model_option("--hash-size", optarg,
						 &d->model);
			break;
		case 'b':
			rc = ss_cmd_model_option("--bottom", optarg, &d->model);
			break;
		case 't':
			rc = ss_cmd_model_option("--top", optarg, &d->model);
			break;
		case 'i':
			rc = ss_cmd_model_option("--interaction", optarg,
						 &d->model);
			break;
		case 'L':
			rc = ss_cmd_model_option("--cross-layers", optarg,
						 &d->model);
			break;
		case 'R':
			rc = ss_cmd_model_option("--cross-rank", optarg,
						 &d->model);
			break;
		case 'T':
			rc = ss_parse_choice("--tables", optarg,
					     ss_tables_names, &i);
			d->tables = i;
			break;
		case 'h':
			ss_doctor_usage(stdout);
			return 1;
		default:
			return ss_cmd_unknown_option("doctor", argv, options);
		}
		if (rc < 0)
			return rc;
	}
	rc = ss_cmd_no_more_args(argc, argv);
	if (rc < 0)
		return rc;
	if (d->tables < 0) /* as train: sharded with several ranks */
		d->tables =
			d->ranks > 1 ? SS_TABLES_SHARDED : SS_TABLES_REPLICATED;
	ss_cmd_model_top_spelling(&d->model); /* as train reads --top */
	return ss_model_check(&d->model);
}

static int ss_mtu_bytes(enum ibv_mtu mtu)
{
	return mtu ? 128 << mtu : 0;
}

static const char *ss_gid_type_name(uint32_t type)
{
	switch (type) {
	case IBV_GID_TYPE_IB:
		return "IB";
	case IBV_GID_TYPE_ROCE_V1:
		return "RoCE v1";
	case IBV_GID_TYPE_ROCE_V2:
		return "RoCE v2";
	default:
		return "?";
	}
}

/* The GID table of one port; on Ethernet, whether a RoCE v2 entry exists. */
static void ss_doctor_gids(struct ss_doctor *d, struct ibv_context *ctx,
			   const char *dev, uint8_t port,
			   const struct ibv_port_attr *pa)
{
	bool ethernet = pa->link_layer == IBV_LINK_LAYER_ETHERNET;
	bool v2 = false, routable = false;
	int shown = 0;

	for (int i = 0; i < pa->gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		char text[INET6_ADDRSTRLEN], ifname[IF_NAMESIZE] = "";

		if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0) ||
		    !memcmp(e.gid.raw, ss_zero_gid, sizeof(ss_zero_gid)))
			continue;
		inet_ntop(AF_INET6, e.gid.raw, text, sizeof(text));
		if (e.ndev_ifindex)
			if_indextoname(e.ndev_ifindex, ifname);
		printf("    GID %-3d %-40s %-8s %s\n", i, text,
		       ss_gid_type_name(e.gid_type), ifname);
		v2 |= e.gid_type == IBV_GID_TYPE_ROCE_V2;
		routable |= ss_routable_v2(&e);
		shown++;
	}
	if (!shown)
		ss_doctor_port_problem(
			d,
			ethernet ?
				"give the port's netdev an IP address: ip addr add ADDR/LEN dev NETDEV" :
				"bring the port up with a subnet manager (opensm) on the fabric",
			"%s port %u has no GID", dev, port);
	else if (ethernet && !v2)
		ss_doctor_port_problem(
			d,
			"give the netdev an IPv4 or global IPv6 address, or enable RoCE v2 in the NIC's firmware",
			"%s port %u has no RoCE v2 GID (v1 does not cross IP routers)",
			dev, port);
	else if (ethernet && !routable)
		ss_doctor_port_problem(
			d,
			"give the netdev an IPv4 or global IPv6 address: the ranks listen on it (--peers host:port)",
			"%s port %u has only a link-local RoCE v2 GID", dev,
			port);
}

static void ss_doctor_port(struct ss_doctor *d, struct ibv_context *ctx,
			   const char *dev, uint8_t port)
{
	struct ibv_port_attr pa;
	bool ethernet;
	int rc = ibv_query_port(ctx, port, &pa);

	if (rc) {
		ss_doctor_port_problem(d, "check the driver: dmesg, rdma link",
				       "ibv_query_port %s port %u: %s", dev,
				       port, strerror(rc));
		return;
	}
	ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	printf("  %s port %u: %s, %s, active MTU %d (max %d), messages up to %u bytes\n",
	       dev, port, ibv_port_state_str(pa.state),
	       ethernet ? "Ethernet (RoCE)" : "InfiniBand",
	       ss_mtu_bytes(pa.active_mtu), ss_mtu_bytes(pa.max_mtu),
	       pa.max_msg_sz);
	if (pa.state != IBV_PORT_ACTIVE)
		ss_doctor_port_problem(
			d,
			ethernet ?
				"bring the netdev up (ip link set NETDEV up) and check the cable and switch port" :
				"check the cable, and that a subnet manager runs (ibstat, sminfo)",
			"%s port %u is %s, not ACTIVE", dev, port,
			ibv_port_state_str(pa.state));
	else if (ethernet && pa.active_mtu < IBV_MTU_4096 &&
		 pa.active_mtu < pa.max_mtu)
		printf("  note: active MTU %d: a netdev MTU of 9000 (jumbo frames) "
		       "gives RoCE a 4096-byte path MTU\n",
		       ss_mtu_bytes(pa.active_mtu));
	ss_doctor_gids(d, ctx, dev, port, &pa);
}

/* Where the NIC sits: the plan the trainers would get next to it. */
static void ss_doctor_locality(struct ss_doctor *d, const char *dev)
{
	struct ss_topo *topo = NULL;
	struct ss_plan *plan = NULL;
	struct ss_plan_request req;

	ss_plan_request_init(&req);
	req.device = dev;
	req.oversubscribe = true;
	if (ss_topo_open(&topo, NULL) == 0 &&
	    ss_topo_plan(topo, &req, &plan) == 0) {
		printf("  %s locality: %s; replica on NUMA node %d\n", dev,
		       plan->note, plan->replica_numa);
	} else {
		ss_doctor_problem(d, "install hwloc and check lstopo's output",
				  "the machine's topology: %s: %s",
				  ss_last_error()->what, ss_last_error()->why);
	}
	ss_plan_free(&plan);
	ss_topo_close(&topo);
}

static void ss_doctor_devices(struct ss_doctor *d)
{
	int n = 0, checked = 0;
	struct ibv_device **devs = ibv_get_device_list(&n);

	printf("RDMA devices\n");
	if (!devs) {
		ss_doctor_problem(
			d,
			"load the RDMA drivers (modprobe ib_uverbs and the NIC's module, e.g. mlx5_ib); to test without a NIC: tools/rxe-vm, or --transport shm on one host",
			"no RDMA device: %s",
			errno == ENOSYS ? "this kernel has no RDMA support" :
					  strerror(errno));
		return;
	}
	/* First pass: is there a port a run could use at all? */
	for (int i = 0; i < n && !d->any_usable; i++) {
		struct ibv_context *ctx = ibv_open_device(devs[i]);
		struct ibv_device_attr da;

		if (ctx && ibv_query_device(ctx, &da) == 0)
			for (uint8_t p = 1; p <= da.phys_port_cnt; p++)
				d->any_usable |= ss_doctor_port_usable(ctx, p);
		if (ctx)
			ibv_close_device(ctx);
	}
	for (int i = 0; i < n; i++) {
		const char *name = ibv_get_device_name(devs[i]);
		struct ibv_context *ctx;
		struct ibv_device_attr da;
		int rc;

		if (d->device && strcmp(d->device, name))
			continue;
		checked++;
		ctx = ibv_open_device(devs[i]);
		rc = ctx ? ibv_query_device(ctx, &da) : errno;
		if (!ctx || rc) {
			ss_doctor_port_problem(
				d,
				"check /dev/infiniband permissions and the driver (dmesg)",
				"cannot open %s: %s", name, strerror(rc));
			if (ctx)
				ibv_close_device(ctx);
			continue;
		}
		printf("  %s: %s, firmware %s, %d port%s, %d outstanding READs per QP\n",
		       name, ibv_node_type_str(devs[i]->node_type), da.fw_ver,
		       da.phys_port_cnt, da.phys_port_cnt == 1 ? "" : "s",
		       da.max_qp_rd_atom);
		for (uint8_t p = 1; p <= da.phys_port_cnt; p++)
			ss_doctor_port(d, ctx, name, p);
		ibv_close_device(ctx);
		ss_doctor_locality(d, name);
	}
	ibv_free_device_list(devs);
	if (d->device && !checked)
		ss_doctor_problem(
			d, "'shadowsync doctor' without --device lists them",
			"no RDMA device named '%s'", d->device);
	else if (!checked)
		ss_doctor_problem(
			d,
			"install the NIC's driver (rdma-core; mlx5_ib, irdma, ...); to test without one: tools/rxe-setup (soft-RoCE) or --transport shm on one host",
			"no RDMA device on this machine");
}

static void ss_doctor_memlock(struct ss_doctor *d)
{
	struct ss_train_options t;
	size_t n = ss_model_len(&d->model), need;
	uint64_t limit;
	int rc;

	struct ss_sync_options so;

	ss_train_options_init(&t);
	ss_sync_options_init(&so, SS_SYNC_MA); /* train's defaults */
	t.prefetch = 1;
	need = ss_train_registered_bytes(&d->model, &t, SS_SPARSE, d->tables,
					 &so, d->ranks);
	rc = ss_memlock_check(0, need, "a run", &limit);
	printf("locked memory\n");
	printf("  a run of this model (%zu parameters, tables %s) on %d rank%s registers %.1f MiB a rank; the limit is ",
	       n, ss_tables_names[d->tables], d->ranks,
	       d->ranks == 1 ? "" : "s", (double)need / (1 << 20));
	if (limit == UINT64_MAX)
		printf("unlimited\n");
	else
		printf("%.1f MiB%s\n", (double)limit / (1 << 20),
		       rc == 0 && limit < need ?
			       ", but this process has CAP_IPC_LOCK" :
			       "");
	if (rc < 0)
		ss_doctor_problem(
			d, ss_last_error()->hint,
			"RLIMIT_MEMLOCK (%.1f MiB) is below what a run registers (%.1f MiB)",
			(double)limit / (1 << 20), (double)need / (1 << 20));
}

/* Hugepages are advice, not a problem: registration works without them. */
static void ss_doctor_hugepages(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256], thp[128] = "";
	long total = -1, free_pages = -1, size_kb = 0;

	printf("hugepages\n");
	while (f && fgets(line, sizeof(line), f)) {
		sscanf(line, "HugePages_Total: %ld", &total);
		sscanf(line, "HugePages_Free: %ld", &free_pages);
		sscanf(line, "Hugepagesize: %ld", &size_kb);
	}
	if (f)
		fclose(f);
	f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	if (f) {
		if (!fgets(thp, sizeof(thp), f))
			thp[0] = '\0';
		thp[strcspn(thp, "\n")] = '\0';
		fclose(f);
	}
	printf("  %ld of %ld hugepages of %ld KiB free; transparent hugepages: %s\n",
	       free_pages, total, size_kb, thp[0] ? thp : "unknown");
	if (thp[0] && !strstr(thp, "[always]") && !strstr(thp, "[madvise]"))
		printf("  note: with transparent hugepages off, large replicas "
		       "use more IOMMU/MTT entries; 'madvise' is enough\n");
}

/* The matrix kernels train will run on: a problem only when
 * BLIS_ARCH_TYPE asks for kernels this CPU cannot run (train refuses). */
static void ss_doctor_blas(struct ss_doctor *d)
{
	char note[256];

	printf("blas\n");
	if (ss_blas_check() < 0) {
		const struct ss_error *e = ss_last_error();

		ss_doctor_problem(d, e->hint, "%s: %s", e->what, e->why);
		return;
	}
	ss_blas_setup(note, sizeof(note));
	printf("  %s\n", note);
}

int ss_cmd_doctor(int argc, char **argv)
{
	struct ss_doctor d = { 0 };
	int rc = ss_doctor_parse(argc, argv, &d);

	if (rc == 1)
		return SS_EXIT_OK;
	if (rc < 0)
		return ss_cmd_fail(ss_doctor_prog, rc);
	ss_doctor_devices(&d);
	ss_doctor_memlock(&d);
	ss_doctor_hugepages();
	ss_doctor_blas(&d);
	if (d.problems)
		printf("\n%d problem%s found; see the fixes above\n",
		       d.problems, d.problems == 1 ? "" : "s");
	else
		printf("\nno problem found: this machine can train over RDMA\n");
	return d.problems ? SS_EXIT_FAILURE : SS_EXIT_OK;
}
