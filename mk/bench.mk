# mk/bench.mk - the server benchmark suite (issue 8), run by `make bench`:
#
#   make bench-suite   pure-layer cost vs history, POST throughput/latency,
#                      SSE fan-out, memory, token relay and the durable store,
#                      each server figure beside a bare libmicrohttpd baseline;
#                      one table on stdout, the figures in build/bench/results.json
#
# Benchmarks measure and never fail on a slow figure; goals are reported as
# met/missed in the table. BENCH_QUICK=1 shortens every run (a smoke test).

BENCH_SUITE := $(BUILD)/bench/bench_pure $(BUILD)/bench/bare_server \
               $(BUILD)/bench/loadgen $(BUILD)/bench/fake_llm

.PHONY: bench-suite bench-tools

bench-tools: $(BENCH_SUITE)

bench-suite: $(BENCH_SUITE) $(BUILD)/reflexor
	BENCH_BUILD=$(BUILD) bench/run.sh

BENCH_RUN += bench-suite
