# mk/store.mk - the durable input log (store/: the dispatcher, store/sqlite and
# store/pg): its benchmark and the crash loop.
#
#   make bench-store   inputs/s with the store (fsync, no fsync) vs without,
#                      and bytes per input (build/bench/bench_store)
#   make bench-durable group commit and history reads under load, the real
#                      server (bench/durable.sh): POST with fsync vs --db
#                      :memory: at 100 connections over 100 sessions and at
#                      10 on one session; one session's POST p99 while
#                      another's ~100 MB log is paged through
#   make crash-test    kill -9 the real server at random moments, restart,
#                      check nothing acknowledged is lost (build/tests/crash_loop)
#
# The unit tests of the store are tests/unit/check_store.c (in `make check`;
# `make pgstore-test` runs them on PostgreSQL too, mk/pgstore.mk).
# CRASH_SEED / CRASH_ITERATIONS pick the loop's seed and length.

.PHONY: bench-store bench-durable crash-test

# The benchmark needs the store, which is not in libreflexor.a: all of store/.
$(BUILD)/bench/bench_store: $(BUILD)/bench/bench_store.o $(STORE_OBJ) $(BUILD)/libreflexor.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

bench-store: $(BUILD)/bench/bench_store
	./$(BUILD)/bench/bench_store

bench-durable: $(BUILD)/reflexor $(BUILD)/bench/loadgen
	BENCH_BUILD=$(BUILD) bench/durable.sh

$(BUILD)/tests/crash_loop: $(BUILD)/tests/integration/crash_loop.o $(BUILD)/tests/integration/itest.o \
                           $(BUILD)/libreflexor.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

CRASH_SEED ?= 7
CRASH_ITERATIONS ?= 40
crash-test: $(BUILD)/reflexor $(BUILD)/tests/crash_loop
	RX_SERVER=./$(BUILD)/reflexor ./$(BUILD)/tests/crash_loop $(CRASH_SEED) $(CRASH_ITERATIONS)

all: $(BUILD)/bench/bench_store $(BUILD)/tests/crash_loop
BENCH_RUN += bench-store bench-durable
TEST_EXTRA += crash-test
