# mk/library.mk - the embeddable library's extras (graph/):
#   make examples-check   run every example and check its output (in make test)
#   make bench            invoke overhead of rx_graph, with and without the SQLite
#                         checkpointer, and its bytes on disk over 500 chat turns
#   make graph-layer-check graph/ includes nothing from effects/ or server/ (in make test;
#                         state_machine/ and base/ are its floor)

.PHONY: examples-check bench-graph graph-layer-check

examples-check: $(EXAMPLES)
	test "$$($(BUILD)/examples/echo '你好')" = '你好'
	$(BUILD)/examples/chain | grep -qx 'hello world! -- reflexor'
	$(BUILD)/examples/map_reduce | grep -qx 'map=3 reduce=6 with=4 send=4 '
	$(BUILD)/examples/map_reduce | grep -qx 'total: 17'
	$(BUILD)/examples/interrupt | grep -qx 'resumed with true: outcome done'
	rm -f $(BUILD)/examples/react.db*
	echo y | $(BUILD)/examples/react 'what is 6*7?' $(BUILD)/examples/react.db | grep -qxF 'answer: 6*7 = 42'
	echo n | $(BUILD)/examples/react 'what is 2+3?' $(BUILD)/examples/react.db \
	  | grep -qxF 'tool: Error: the user said no'
	rm -f $(BUILD)/examples/react.db*
	$(BUILD)/examples/subgraph | grep -qxF 'paused in research: are 3 sources enough?'
	$(BUILD)/examples/subgraph | grep -qx 'searches: 1'
	@echo "examples-check: every example printed what it should"

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BUILD)/libreflexor.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

bench-graph: $(BUILD)/bench/bench_graph
	./$(BUILD)/bench/bench_graph

BENCH_RUN += bench-graph

# SPEC 1: state_machine <- base <- graph. graph/ may use threads and libuuid
# (through base/), but no header of effects/ or server/ (state_machine/ and
# base/ are checked by layer-check).
graph-layer-check:
	@! grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](effects|server)/' \
	  graph/*.[ch] || { echo 'graph-layer-check: graph/ must not include effects/ or server/'; exit 1; }
	@echo "graph-layer-check: graph/ depends on state_machine/, base/ and itself only"

TEST_EXTRA += examples-check graph-layer-check
