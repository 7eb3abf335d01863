# mk/bench.mk - the server benchmark suite (issue 8), run by `make bench`:
#
#   make bench-suite   pure-layer cost vs history, POST throughput/latency,
#                      SSE fan-out (and a table of offered rates), memory (a
#                      stream that never reads, GET of a large state), token
#                      relay and the durable store, each server figure beside a
#                      bare libmicrohttpd baseline where there is one; one table
#                      on stdout, the figures in build/bench/results.json
#
# Benchmarks measure and never fail on a slow figure; goals are reported as
# met/missed in the table. BENCH_QUICK=1 shortens every run (a smoke test).

BENCH_SUITE := $(BUILD)/bench/bench_pure $(BUILD)/bench/bare_server \
               $(BUILD)/bench/loadgen $(BUILD)/bench/fake_llm

.PHONY: bench-suite bench-tools

bench-tools: $(BENCH_SUITE)

bench-suite: $(BENCH_SUITE) $(BUILD)/reflexor
	BENCH_BUILD=$(BUILD) bench/run.sh

# Issue 13, item 1: the full loop with 20 000 messages in the session against a
# fresh one and against --no-effects (bench/loop.sh).
.PHONY: bench-loop
bench-loop: $(BENCH_SUITE) $(BUILD)/reflexor
	BENCH_BUILD=$(BUILD) bench/loop.sh

BENCH_RUN += bench-suite bench-loop

# Issue 31: durable streamed text, on against off (REFLEXOR_DURABLE_TEXT=0),
# and the bytes it writes per answer (bench/durable_text.sh).
.PHONY: bench-durable-text
bench-durable-text: $(BENCH_SUITE) $(BUILD)/reflexor
	BENCH_BUILD=$(BUILD) bench/durable_text.sh

BENCH_RUN += bench-durable-text

# Issue 30: the POST loop with auth.mode keys against none (bench/users.sh).
.PHONY: bench-users
bench-users: $(BENCH_SUITE) $(BUILD)/reflexor
	BENCH_BUILD=$(BUILD) bench/users.sh

BENCH_RUN += bench-users
