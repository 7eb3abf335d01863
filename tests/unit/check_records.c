/*
 * check_records - the protocols' records in the store (server/records) and
 * the /v1 continuity map on top of them (server/protocols/oai_memo), on a
 * SQLite file in a temporary directory:
 *  - without a store nothing is queued (-ENODEV) and the map is the ring;
 *  - a put written behind is in the store once records_flush returns, and
 *    a map with an empty ring (a restart, another node) finds the entry
 *    there, with its session, user count and seq;
 *  - an entry of a deleted session is not found; a put for a session that
 *    is gone is dropped quietly;
 *  - the queue's bound refuses a put past RECORDS_QUEUE_BYTES, nothing
 *    queued;
 *  - records_stop writes what is queued before it returns.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/protocols/oai_memo.h"
#include "server/records.h"
#include "store/store.h"

Suite *records_suite(void);

static char dir[64], path[128];
static struct store *st;

static void setup(void)
{
    struct rx_error err = {""};

    snprintf(dir, sizeof(dir), "/tmp/rx-records-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/r.db", dir);
    st = store_open(path, &err);
    ck_assert_msg(st != NULL, "store_open: %s", err.text);
    ck_assert_int_eq(store_create_session(st, "s1", NULL, 1000), 0);
    ck_assert_int_eq(records_start(st), 0);
}

static void teardown(void)
{
    char p[160];

    records_stop();
    store_close(st);
    st = NULL;
    for (const char *const *f =
             (const char *const[]){"r.db", "r.db-wal", "r.db-shm", NULL};
         *f; f++) {
        snprintf(p, sizeof(p), "%s/%s", dir, *f);
        unlink(p);
    }
    rmdir(dir);
}

/* A fingerprint of one user message `text`. */
static struct oai_fp fp_of(const char *text)
{
    struct oai_fp fp;

    oai_fp_init(&fp);
    ck_assert_int_eq(oai_fp_add(&fp, OAI_ROLE_USER, text), 0);
    return fp;
}

static struct oai_memo_entry entry(const char *text, const char *sid, size_t n_user,
                                   int64_t seq)
{
    struct oai_memo_entry e = {.fp = fp_of(text), .n_user = n_user, .seq = seq};

    snprintf(e.sid, sizeof(e.sid), "%s", sid);
    return e;
}

START_TEST(test_no_store)
{
    struct oai_memo m;
    struct oai_memo_entry e = entry("alone", "s1", 1, 2), got;

    records_stop(); /* the fixture's: this one runs without */
    ck_assert_ptr_null(records_store());
    ck_assert_int_eq(records_put_later("k", "key", NULL, "{}", 2), -ENODEV);
    oai_memo_init(&m);
    ck_assert_int_eq(oai_memo_put(&m, &e), 0);
    ck_assert(oai_memo_get(&m, &e.fp, &got));
    ck_assert_str_eq(got.sid, "s1");
    oai_memo_release(&m);
    /* A map with an empty ring knows nothing: there is no store. */
    oai_memo_init(&m);
    ck_assert(!oai_memo_get(&m, &e.fp, &got));
    oai_memo_release(&m);
}
END_TEST

START_TEST(test_memo_from_the_store)
{
    struct oai_memo a, b;
    struct oai_memo_entry e = entry("hello", "s1", 3, 7), got;
    struct oai_fp other = fp_of("another conversation");

    oai_memo_init(&a);
    ck_assert_int_eq(oai_memo_put(&a, &e), 0);
    records_flush();
    /* `b` is a restarted server, or another node: its ring is empty. */
    oai_memo_init(&b);
    ck_assert(oai_memo_get(&b, &e.fp, &got));
    ck_assert_str_eq(got.sid, "s1");
    ck_assert_uint_eq(got.n_user, 3);
    ck_assert_int_eq(got.seq, 7);
    ck_assert(oai_fp_equal(&got.fp, &e.fp));
    ck_assert(!oai_memo_get(&b, &other, &got));
    /* The session deleted: its entries went with it. */
    ck_assert_int_eq(store_delete_session(st, "s1"), 0);
    ck_assert(!oai_memo_get(&b, &e.fp, &got));
    oai_memo_release(&a);
    oai_memo_release(&b);
}
END_TEST

START_TEST(test_put_later_and_stop)
{
    struct store_record r;
    char *big = malloc(RECORDS_QUEUE_BYTES + 1);

    ck_assert_ptr_nonnull(big);
    memset(big, 'x', RECORDS_QUEUE_BYTES + 1);
    /* Past the bound: refused, nothing queued. */
    ck_assert_int_eq(records_put_later("k", "big", "s1", big, RECORDS_QUEUE_BYTES + 1),
                     -ENOBUFS);
    free(big);
    /* A session that is gone: dropped quietly by the writer. */
    ck_assert_int_eq(records_put_later("k", "gone", "nobody", "{}", 2), 0);
    ck_assert_int_eq(records_put_later("k", "one", "s1", "{\"a\":1}", 7), 0);
    ck_assert_int_eq(records_put_later("k", "one", "s1", "{\"a\":2}", 7), 0);
    /* records_stop writes what is queued first; in order, so the last wins. */
    records_stop();
    ck_assert_int_eq(store_record_get(st, "k", "one", &r), 0);
    ck_assert_str_eq(r.text, "{\"a\":2}");
    store_record_release(&r);
    ck_assert_int_eq(store_record_get(st, "k", "gone", &r), -ENOENT);
    ck_assert_int_eq(store_record_get(st, "k", "big", &r), -ENOENT);
}
END_TEST

Suite *records_suite(void)
{
    Suite *s = suite_create("records");
    TCase *tc = tcase_create("records");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_no_store);
    tcase_add_test(tc, test_memo_from_the_store);
    tcase_add_test(tc, test_put_later_and_stop);
    suite_add_tcase(s, tc);
    return s;
}
