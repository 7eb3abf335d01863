# mk/scale.mk - sessions beyond memory (SPEC 6.2, issue 29): a store of many
# stored sessions, filled through the store API, and the real server on it.
#
#   make bench-scale   bench/scale.sh (in make bench): for each N of SCALE_NS
#                      (default "10000 100000 1000000") fill a SQLite store
#                      with N sessions of about 20 messages (build/bench/scale_fill),
#                      start build/reflexor on it and measure exec to listening,
#                      idle RSS, first touch of cold sessions, the list's first
#                      page, a search, a sweep of touches under
#                      limits.resident_sessions, and the hot loop against an
#                      empty store and bench-loop's server; figures in
#                      build/bench/scale.json (SCALE_NS, SCALE_DIR, SCALE_KEEP,
#                      SCALE_REUSE, SCALE_BEFORE: see bench/scale.sh)
#   make bench-scale-pg  bench/scale_pg.sh (in make bench): the same on a
#                      throwaway PostgreSQL under /var/tmp, three nodes: for
#                      each N of SCALE_PG_NS (default "10000 100000";
#                      1000000 on request: some 35 minutes of fill, 21 GB)
#                      a database of N chats, one in 1000 in flight and every
#                      one owned by a node long gone; one node on an empty
#                      database against three started at once on the filled
#                      one: exec to listening (the ratio), idle RSS, what each
#                      loaded at start, the chats in flight each claimed (each
#                      by exactly one node) and answered once, first touches
#                      of cold chats through each node and that each touch
#                      claimed its chat; figures in build/bench/scale-pg.json
#
# The integration suites `scale` and `scale_crash` (tests/integration/check_scale*.c)
# run the filler too: they find it beside $RX_SERVER (build/bench/scale_fill, or
# build/san/bench/scale_fill for the sanitized server), so `all` builds it.

.PHONY: bench-scale bench-scale-pg

# The filler needs the store, which is not in libreflexor.a: all of store/.
$(BUILD)/bench/scale_fill: $(BUILD)/bench/scale_fill.o $(STORE_OBJ) $(BUILD)/libreflexor.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

# Its timed requests, one keep-alive connection of libcurl.
$(BUILD)/bench/scale_probe: $(BUILD)/bench/scale_probe.o
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

bench-scale: $(BUILD)/reflexor $(BUILD)/bench/scale_fill $(BUILD)/bench/scale_probe \
             $(BUILD)/bench/loadgen
	BENCH_BUILD=$(BUILD) bench/scale.sh

all: $(BUILD)/bench/scale_fill
integration valgrind cluster-integration: $(BUILD)/bench/scale_fill
BENCH_RUN += bench-scale

bench-scale-pg: $(BUILD)/reflexor $(BUILD)/bench/scale_fill $(BUILD)/bench/scale_probe
	@scripts/deps.sh postgresql
	BENCH_BUILD=$(BUILD) bench/scale_pg.sh

BENCH_RUN += bench-scale-pg

# What the scale suites share, linked into the integration runner.
$(INTEG): $(BUILD)/tests/integration/itest_scale.o
