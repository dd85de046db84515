# ShadowSync: plain GNU make.  `make` builds everything, `make check` runs
# every test (installing missing Debian packages first), `make help` lists
# the targets.

CC      ?= cc
CFLAGS  ?= -O2 -g
PREFIX  ?= /usr/local
DESTDIR ?=
# Output folder; the sanitizer builds use their own ($(O)/asan, $(O)/tsan).
O       ?= build
# Extra compile and link flags, e.g. -fsanitize=address (used by check).
SAN     ?=

# The version is the one include/shadowsync/shadowsync.h gives, so that the
# two never drift.  SOVERSION changes only with an incompatible change of
# the ABI (docs/architecture.md, "The library surface").
VERSION := $(shell awk '$$2 ~ /^SS_VERSION_(MAJOR|MINOR|PATCH)$$/ \
	{ v[$$2] = $$3 } END { print v["SS_VERSION_MAJOR"] "." \
	v["SS_VERSION_MINOR"] "." v["SS_VERSION_PATCH"] }' \
	include/shadowsync/shadowsync.h)
SOVERSION := 0

# -std, -Werror and the include paths are not left to CFLAGS: the code
# relies on them.
# BLIS: Debian's single-threaded build (libblis-serial-dev), under the
# multiarch folders; each trainer thread owns a core, BLIS adds no threads.
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
BLIS_INC := /usr/include/$(MULTIARCH)/blis-serial
BLIS_LIB := /usr/lib/$(MULTIARCH)/blis-serial

SS_CFLAGS := -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC -pthread \
	-Iinclude -Isrc -isystem $(BLIS_INC) -MMD -MP $(SAN)
SS_LIBS := -lhwloc -lrdmacm -libverbs -L$(BLIS_LIB) -Wl,-rpath,$(BLIS_LIB) \
	-lblis -lpthread -lm -lz
TEST_LIBS := -lcriterion

LIB_SRCS := $(sort $(wildcard src/*/*.c))
CMD_SRCS := $(sort $(wildcard tools/shadowsync/*.c))
TEST_SRCS := $(sort $(wildcard tests/test_*.c))
PERF_SRCS := $(sort $(wildcard perf/*.c))

LIB_OBJS := $(LIB_SRCS:%.c=$(O)/obj/%.o)
CMD_OBJS := $(CMD_SRCS:%.c=$(O)/obj/%.o)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(O)/tests/%)
PERF_BINS := $(PERF_SRCS:perf/%.c=$(O)/perf/%)
# The SimGrid simulator (perf/sim): its own program, on libsimgrid only.
SIM_SRCS := $(sort $(wildcard perf/sim/*.c))
SIM := $(O)/sim/ss-sim

STATIC_LIB := $(O)/lib/libshadowsync.a
SHARED_LIB := $(O)/lib/libshadowsync.so
COMMAND := $(O)/bin/shadowsync

# Tests that also run over verbs, inside the soft-RoCE guest.
VERBS_TESTS := test_fabric test_sync test_train_sync test_cmd_doctor test_table
# and in a guest with two NUMA nodes
NUMA_TESTS := test_sync_numa
# and across soft-RoCE clusters of two and three guests, a boot each (the
# fabric's two-rank tests in the three guests' boot took about 100 s
# against 49 s in a boot of two: the wire is a hub, and the third guest
# takes every frame too)
CLUSTER2_TESTS := tests/cluster/fabric
# (in one boot: host-dies powers a host off, so it comes last)
CLUSTER3_TESTS := tests/cluster/link-flap tests/cluster/mtu-and-loss \
	tests/cluster/host-dies

# 2-rank jobs under the real launchers: Open MPI's mpirun, and srun on a
# one-node Slurm the script starts itself (root; skipped otherwise)
LAUNCHER_TESTS := tests/launchers/mpirun tests/launchers/srun

# The simulator's messages, a lost node and slow nodes, against what the
# algorithms must give
SIM_TESTS := tests/sim/messages tests/sim/node-lost tests/sim/stragglers

# The K-logical-node trainer of perf/quality-scale against the trainer
PERF_TESTS := tests/perf/quality-k

# The Python package's tests (pytest, against build/lib and build/bin):
# over shm here, and those marked verbs in the soft-RoCE guest
PYTHON_TESTS := tests/python/pytest

# Tests that start threads also run under ThreadSanitizer.
THREADED_TESTS := test_topo_pin test_sync_threads test_train_threads test_table_threads
TSAN_BINS := $(THREADED_TESTS:%=$(O)/tsan/%)

.SECONDARY:

.PHONY: all lib command tests perf check test deps format format-check \
	install uninstall clean help demo demo-rxe perf-deps fuzz fuzz-deps \
	fuzz-bins fuzz-replay sim

all: lib command tests perf $(SIM)

lib: $(STATIC_LIB) $(SHARED_LIB)
command: $(COMMAND)
tests: $(TEST_BINS)
tsan-tests: $(TSAN_BINS)
perf: $(PERF_BINS)

$(O)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(SS_CFLAGS) $(CFLAGS) -c $< -o $@

# Adagrad's dense loop vectorizes only where sqrtf needs not set errno
# (a pragma does not reach GCC's builtin): src/train/adagrad_wide.c.
$(O)/obj/src/train/adagrad_wide.o: SS_CFLAGS += -fno-math-errno

$(STATIC_LIB): $(LIB_OBJS)
	@mkdir -p $(@D)
	rm -f $@
	$(AR) rcs $@ $^

# Only the public functions leave the shared library, under the version
# nodes of the map (tests/exports checks it against the headers).  The
# command, the tests and perf link the static library, internals and all.
LIB_MAP := src/libshadowsync.map

$(SHARED_LIB): $(LIB_OBJS) $(LIB_MAP)
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-soname,libshadowsync.so.$(SOVERSION) \
		-Wl,--version-script=$(LIB_MAP) $(SAN) \
		$(CFLAGS) $(LDFLAGS) -o $@ $(LIB_OBJS) $(SS_LIBS)

$(COMMAND): $(CMD_OBJS) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(SAN) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(SS_LIBS)

# Tests know where the sources and the command are.
$(O)/obj/tests/%.o: SS_CFLAGS += -DSS_SOURCE_DIR='"$(CURDIR)"' \
	-DSS_COMMAND='"$(abspath $(COMMAND))"'

# test_api loads the shared library and checks the Makefile's version.
$(O)/obj/tests/test_api.o: SS_CFLAGS += \
	-DSS_SHARED_LIB='"$(abspath $(SHARED_LIB))"' \
	-DSS_MAKE_VERSION='"$(VERSION)"'
$(O)/tests/test_api: | $(SHARED_LIB)

# Helpers that tests share, linked into each; the Criterion-only ones are
# left out of the ThreadSanitizer builds, which run without Criterion.
TEST_HELPERS := ranks
CRITERION_HELPERS := cmd

$(O)/tests/%: $(O)/obj/tests/%.o \
		$(TEST_HELPERS:%=$(O)/obj/tests/%.o) \
		$(CRITERION_HELPERS:%=$(O)/obj/tests/%.o) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(SAN) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(SS_LIBS) $(TEST_LIBS)

# Threaded tests built for ThreadSanitizer run under tests/tsan_runner.c
# instead of Criterion (see tests/scenario.h).

$(O)/obj/tsan/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(SS_CFLAGS) -DSS_TSAN_RUNNER $(CFLAGS) -c $< -o $@

$(O)/tsan/%: $(O)/obj/tsan/%.o $(O)/obj/tsan/tsan_runner.o \
		$(TEST_HELPERS:%=$(O)/obj/tsan/%.o) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(SAN) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(SS_LIBS)

# The fuzz harnesses (tests/fuzz/): each built twice, for libFuzzer with
# clang (`make fuzz`, in $(O)/libfuzzer) and around tests/fuzz/replay.c
# with $(CC) and ASan/UBSan (`make check` replays the corpora and the
# regression inputs; no clang needed).
FUZZ_NAMES := checkpoint criteo_file criteo_line handshake hostfile \
	launcher nodelist numbers region_table
FUZZ ?= $(FUZZ_NAMES)
FUZZ_SECONDS ?= 60
FUZZ_HELPERS := $(O)/obj/tests/fuzz/fuzz.o

fuzz-bins: $(FUZZ:%=$(O)/fuzz/%)
fuzz-replay: $(FUZZ_NAMES:%=$(O)/fuzz-replay/%)

$(O)/fuzz/%: $(O)/obj/tests/fuzz/%.o $(FUZZ_HELPERS) $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(SAN) -fsanitize=fuzzer $(CFLAGS) $(LDFLAGS) -o $@ $^ $(SS_LIBS)

$(O)/fuzz-replay/%: $(O)/obj/tests/fuzz/%.o $(FUZZ_HELPERS) \
		$(O)/obj/tests/fuzz/replay.o $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(SAN) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(SS_LIBS)

$(O)/perf/%: $(O)/obj/perf/%.o $(STATIC_LIB)
	@mkdir -p $(@D)
	$(CC) $(SAN) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(SS_LIBS)

$(SIM): $(SIM_SRCS:%.c=$(O)/obj/%.o)
	@mkdir -p $(@D)
	$(CC) $(SAN) $(CFLAGS) $(LDFLAGS) -o $@ $^ -lsimgrid -lm

# The tests run against the command too, so build it first.
$(TEST_BINS): | $(COMMAND)

# ---- tests ----------------------------------------------------------------

deps:
	@tools/install-deps

# PyTorch too, for perf/vs-torch (large; no test needs it).
perf-deps:
	@tools/install-deps --perf

# check installs what is missing, then re-reads this Makefile in a fresh
# make so that nothing is evaluated before the packages are there; its
# builds (plain, ASan, TSan) use every core, the tests run one program
# after another as the recipe lists them.
check: deps
	@$(MAKE) --no-print-directory -j$$(nproc) test

# Every test: the unit tests once, under ASan+UBSan (the plain build's
# binaries run over verbs in the guests, the threaded ones under TSan
# too), then the Python tests, the launchers, the simulator, the soft-RoCE
# guests, and an install into a temporary prefix.
test: format-check all
	@SS_TEST_TALLY=$(O)/test-tally tests/run --reset
	@$(MAKE) --no-print-directory O=$(O)/asan \
		SAN='-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all' \
		tests fuzz-replay
	@SS_TEST_TALLY=$(O)/test-tally tests/run --label asan $(TEST_SRCS:tests/%.c=$(O)/asan/tests/%)
	@SS_TEST_TALLY=$(O)/test-tally tests/run --label fuzz-replay \
		$(FUZZ_NAMES:%=$(O)/asan/fuzz-replay/%)
	@SS_TEST_TALLY=$(O)/test-tally tests/run --label python $(PYTHON_TESTS)
	@SS_TEST_TALLY=$(O)/test-tally SS_BIN=$(COMMAND) tests/run \
		--label launchers --scripts $(LAUNCHER_TESTS)
	@SS_TEST_TALLY=$(O)/test-tally SS_SIM=$(SIM) tests/run \
		--label sim --scripts $(SIM_TESTS)
	@SS_TEST_TALLY=$(O)/test-tally SS_BIN=$(COMMAND) SS_QK=$(O)/perf/quality-k \
		tests/run --label perf --scripts $(PERF_TESTS)
	@SS_TEST_TALLY=$(O)/test-tally tests/run --vm $(VERBS_TESTS:%=$(O)/tests/%) \
		$(PYTHON_TESTS)
	@SS_TEST_TALLY=$(O)/test-tally tests/run --vm-numa $(NUMA_TESTS:%=$(O)/tests/%)
	@SS_TEST_TALLY=$(O)/test-tally SS_TESTS=$(O)/tests tests/run --cluster 2 $(CLUSTER2_TESTS)
	@SS_TEST_TALLY=$(O)/test-tally SS_BIN=$(COMMAND) tests/run --cluster 3 $(CLUSTER3_TESTS)
	@$(MAKE) --no-print-directory O=$(O)/tsan SAN='-fsanitize=thread' \
		tsan-tests
	@SS_TEST_TALLY=$(O)/test-tally tests/run --label tsan \
		$(THREADED_TESTS:%=$(O)/tsan/tsan/%)
	@tests/install-test
	@SS_TEST_TALLY=$(O)/test-tally tests/run --summary

# ---- fuzzing ---------------------------------------------------------------

# Each harness under libFuzzer for FUZZ_SECONDS (FUZZ=names: some only);
# clang is installed first when missing.  The inputs it finds go to
# $(O)/fuzz-work; a crash's input to tests/fuzz/regressions/NAME/.
# kernels.c's GCC pragma is unknown to clang.
FUZZ_SAN := -fsanitize=fuzzer-no-link,address,undefined \
	-fno-sanitize-recover=all -fno-omit-frame-pointer -Wno-unknown-pragmas

fuzz: fuzz-deps
	@$(MAKE) --no-print-directory O=$(O)/libfuzzer CC=clang \
		SAN='$(FUZZ_SAN)' FUZZ='$(FUZZ)' fuzz-bins
	@tests/fuzz/run --seconds $(FUZZ_SECONDS) --bins $(O)/libfuzzer/fuzz \
		--work $(O)/fuzz-work $(FUZZ)

fuzz-deps:
	@tools/install-deps --fuzz

# ---- scale, simulated --------------------------------------------------------

# The default scenario of the SimGrid simulator (perf/sim/sweep --help):
# shadow and foreground S-MA, flat and hierarchical, on 8 to 64 HDR nodes,
# CSV and plots in $(O)/sim.  Calibrated by perf/sim/calibrate.
sim: deps
	@$(MAKE) --no-print-directory -j$$(nproc) $(SIM)
	@perf/sim/sweep --out $(O)/sim $(SIM_ARGS)

# ---- the main job -----------------------------------------------------------

# demo installs what is missing, builds the command, then trains on
# generated data four ways and prints one table (tools/demo --help).
demo: deps
	@$(MAKE) --no-print-directory -j$$(nproc) command
	@tools/demo --bin $(COMMAND) --out $(O)/demo $(DEMO_ARGS)

# The 4-node shadow S-MA line over verbs, inside the soft-RoCE guest.
demo-rxe: deps
	@$(MAKE) --no-print-directory -j$$(nproc) command
	@tools/rxe-vm --hosts 4 -- tools/demo --bin $(COMMAND) \
		--out $(O)/demo-rxe --cluster $$$$ --examples 12000 \
		--max-rounds-per-s 0.5 $(DEMO_ARGS)

# ---- install --------------------------------------------------------------

# The Python package goes where Debian's python3 looks for packages of a
# prefix (/usr/local/lib/python3.11/dist-packages for /usr/local, on
# Debian 12); it finds the library two folders up, in PREFIX/lib.
PYTHON_VERSION := $(shell /usr/bin/python3 -c 'import sys; \
	print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo 3)
# (/usr: Debian's own folder for packages of any 3.X)
PYTHON_DIR ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(PYTHON_VERSION)/dist-packages)

# The .pc file is written at install time: it holds PREFIX.
install: lib command
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/include/shadowsync $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(STATIC_LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SHARED_LIB) \
		$(DESTDIR)$(PREFIX)/lib/libshadowsync.so.$(VERSION)
	ln -sf libshadowsync.so.$(VERSION) \
		$(DESTDIR)$(PREFIX)/lib/libshadowsync.so.$(SOVERSION)
	ln -sf libshadowsync.so.$(SOVERSION) \
		$(DESTDIR)$(PREFIX)/lib/libshadowsync.so
	install -m 644 include/shadowsync/*.h \
		$(DESTDIR)$(PREFIX)/include/shadowsync/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
		-e 's|@BLIS_LIB@|$(BLIS_LIB)|g' \
		shadowsync.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/shadowsync.pc
	install -m 755 $(COMMAND) $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PYTHON_DIR)/shadowsync/examples
	install -m 644 src/python/shadowsync/*.py $(DESTDIR)$(PYTHON_DIR)/shadowsync/
	install -m 644 src/python/shadowsync/examples/*.py \
		$(DESTDIR)$(PYTHON_DIR)/shadowsync/examples/

uninstall:
	rm -rf $(DESTDIR)$(PREFIX)/include/shadowsync $(DESTDIR)$(PYTHON_DIR)/shadowsync
	rm -f $(DESTDIR)$(PREFIX)/lib/libshadowsync.* \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig/shadowsync.pc \
		$(DESTDIR)$(PREFIX)/bin/shadowsync

# ---- housekeeping ---------------------------------------------------------

FORMAT_FILES = $(wildcard include/shadowsync/*.h src/*/*.[ch] \
	tools/shadowsync/*.[ch] tools/examples/*.[ch] tests/*.[ch] tests/fuzz/*.[ch] perf/*.[ch] perf/sim/*.[ch])

format:
	clang-format -i $(FORMAT_FILES)

format-check:
	@clang-format --dry-run --Werror $(FORMAT_FILES) || \
		{ echo "format-check: run 'make format' to fix the layout" >&2; exit 1; }

clean:
	rm -rf $(O)

help:
	@echo "make              build the library, the command, tests and perf programs"
	@echo "make demo         the main job: train four ways, print one comparison table"
	@echo "make demo-rxe     its 4-node shadow S-MA line over verbs on 4 soft-RoCE guests"
	@echo "make sim          simulate 8 to 64 nodes on SimGrid: CSV and plots in build/sim"
	@echo "make check        install missing packages, then run every test"
	@echo "make deps         install missing Debian packages (root) or print the command"
	@echo "make perf-deps    the same, and PyTorch for perf/vs-torch"
	@echo "make fuzz         run each libFuzzer harness FUZZ_SECONDS=60 s (installs clang)"
	@echo "make install      install into PREFIX=$(PREFIX) (honours DESTDIR)"
	@echo "make format       reformat the sources with clang-format"
	@echo "make format-check fail when a source is not formatted"
	@echo "make clean        remove $(O)/"
	@echo "variables: CC CFLAGS PREFIX DESTDIR O FUZZ FUZZ_SECONDS SIM_ARGS (perf/sim/sweep --help)"

-include $(LIB_OBJS:.o=.d) $(CMD_OBJS:.o=.d) $(TEST_BINS:$(O)/tests/%=$(O)/obj/tests/%.d) \
	$(PERF_BINS:$(O)/perf/%=$(O)/obj/perf/%.d) \
	$(TEST_HELPERS:%=$(O)/obj/tests/%.d) $(CRITERION_HELPERS:%=$(O)/obj/tests/%.d) \
	$(wildcard $(O)/obj/tests/fuzz/*.d) $(wildcard $(O)/obj/perf/sim/*.d) \
	$(wildcard $(O)/obj/tsan/*.d)
