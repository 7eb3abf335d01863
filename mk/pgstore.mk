# mk/pgstore.mk - the input log on PostgreSQL (store/pg/): its tests
# against a throwaway PostgreSQL.
#
#   make pgstore-test   tests/unit/check_store.c, its "pg" case: the tests both
#                       backends share and PostgreSQL's own
#                       (CK_RUN_SUITE=store CK_RUN_CASE=pg)
#                       with RX_PG_URL set to a cluster started for it by
#                       scripts/pgtmp.sh in a fresh /tmp directory (and
#                       RX_PG_DIR, so the test can kill and restart it),
#                       stopped and removed afterwards
#
# `make check` runs the suite without RX_PG_URL: the "pg" case is left out, saying so.

.PHONY: pgstore-test

pgstore-test: $(BUILD)/tests/check_unit
	@scripts/deps.sh postgresql
	@scripts/need.sh initdb pg_ctl
	@d=$$(mktemp -d /tmp/rx-pgstore-XXXXXX) && \
	url=$$(scripts/pgtmp.sh start $$d) || { echo "pgstore-test: no PostgreSQL" >&2; rm -rf $$d; exit 1; }; \
	RX_PG_URL="$$url" RX_PG_DIR="$$d" CK_RUN_SUITE=store CK_RUN_CASE=pg ./$(BUILD)/tests/check_unit; rc=$$?; \
	scripts/pgtmp.sh stop $$d; rm -rf $$d; exit $$rc

TEST_EXTRA += pgstore-test
