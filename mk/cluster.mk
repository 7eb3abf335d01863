# mk/cluster.mk - many Reflexor nodes on one PostgreSQL log (SPEC 6.1, issue 19),
# tested and measured with real components: Debian's postgresql (a throwaway
# cluster made by scripts/pgtmp.sh in a temp folder, on a Unix socket, stopped
# at the end), the real binary, nginx with config/nginx-cluster.conf.
#
#   make cluster-test         cluster-integration, then cluster-node-test against
#                             the ASan/UBSan build (in make test)
#   make cluster-integration  the whole HTTP integration suite (check_integration)
#                             with every server on a fresh PostgreSQL database
#                             (RX_PG_DIR; SQLite-only tests say SKIP)
#   make cluster-node-test    tests/cluster/*.test.mjs: three nodes behind nginx,
#                             streams from any node, the kill -9 loop, PostgreSQL
#                             restarted (CLUSTER_KILLS, CLUSTER_CLIENTS)
#   make bench-cluster        bench/cluster.sh (in make bench)
#
# Without PostgreSQL each fails, naming the package (scripts/pgtmp.sh exits 3):
# nothing skips. The web UI across a node kill is
# tests/browser/cluster.test.mjs, run by browser-test.

.PHONY: cluster-test cluster-integration cluster-node-test bench-cluster

cluster-test: cluster-integration cluster-node-test-asan

# In make test the nodes are the ASan/UBSan build: the harness fails a test on
# any sanitizer report in a node's log and on any exit but 0 at SIGTERM.
.PHONY: cluster-node-test-asan
cluster-node-test-asan:
	ASAN_OPTIONS=detect_leaks=1 $(MAKE) SANITIZE=address,undefined cluster-node-test

# fsync off: the suite checks behaviour, not durability against power loss
# (the kill -9 loop and the benchmark keep fsync on).
cluster-integration: $(BUILD)/reflexor $(INTEG) $(BUILD)/tests/fake_openai node_modules/.package-lock.json
	@scripts/deps.sh postgresql prometheus
	@scripts/need.sh initdb pg_ctl promtool
	@dir=$$(mktemp -d /tmp/rx-cluster-it-XXXXXX); \
	PGTMP_FSYNC=off scripts/pgtmp.sh start "$$dir" >/dev/null; rc=$$?; \
	if [ $$rc -ne 0 ]; then rm -rf "$$dir"; exit $$rc; fi; \
	trap 'scripts/pgtmp.sh stop "$$dir"; rm -rf "$$dir"' EXIT INT TERM; \
	echo "cluster-integration: the HTTP suite on PostgreSQL ($$dir)"; \
	RX_PG_DIR="$$dir" RX_SERVER=./$(BUILD)/reflexor FAKE_OPENAI=./$(BUILD)/tests/fake_openai ./$(INTEG)

# --test-force-exit: a failed test may leave a request open; the run must end.
cluster-node-test: $(BUILD)/reflexor web-assets
	@scripts/deps.sh postgresql nginx
	@scripts/need.sh initdb pg_ctl nginx
	RX_SERVER=./$(BUILD)/reflexor REFLEXOR_WEB=$(WEB_OUT) node --test --test-concurrency=1 --test-force-exit tests/cluster/

TEST_EXTRA += cluster-test

bench-cluster: $(BUILD)/reflexor $(BUILD)/bench/loadgen
	@scripts/deps.sh postgresql nginx
	BENCH_BUILD=$(BUILD) bench/cluster.sh

BENCH_RUN += bench-cluster
