# The client protocols (SPEC 4.3) spoken to by the real client libraries from
# npm (openai, @langchain/langgraph-sdk, @ag-ui/client; package-lock.json pins
# them), against the real binary on 127.0.0.1 (AG-UI's reasoning test also runs
# the fake OpenAI server as the brain).
#
#   make clients-test     tests/clients/*.test.mjs (REFLEXOR_BIN: the binary)
#   make clients-test-asan  the same against the ASan/UBSan build
#   make bench-protocols  their overhead over the native API (bench/protocols.sh)
#   make bench-streams    AG-UI's and A2A's token streams against the native SSE
#                         (bench/streams.sh)

.PHONY: clients-test

clients-test: $(BUILD)/reflexor $(BUILD)/tests/fake_openai node_modules/.package-lock.json
	REFLEXOR_BIN=$(BUILD)/reflexor FAKE_OPENAI=$(BUILD)/tests/fake_openai \
	  node --test --test-concurrency=1 tests/clients/

# make test runs them against the ASan/UBSan build only (clients-test-asan, below):
# the same assertions, plus the sanitizers, in the time of one run.

# Their overhead over the native API, one turn each (bench/protocols.sh).
.PHONY: bench-protocols
bench-protocols: $(BUILD)/reflexor node_modules/.package-lock.json
	BENCH_BUILD=$(BUILD) bench/protocols.sh

BENCH_RUN += bench-protocols

# AG-UI's and A2A's streaming against the session API's own SSE (issue 32).
.PHONY: bench-streams
bench-streams: $(BUILD)/reflexor node_modules/.package-lock.json
	BENCH_BUILD=$(BUILD) bench/streams.sh

BENCH_RUN += bench-streams

# The same against the sanitizer build: the tests check the server's exit and log.
.PHONY: clients-test-asan
clients-test-asan:
	ASAN_OPTIONS=detect_leaks=1 $(MAKE) SANITIZE=address,undefined clients-test

TEST_EXTRA += clients-test-asan
