/*
 * check_follow - a follower session (server/session_follow): a replica fed
 * from the committed log, as a node of a cluster keeps the sessions another
 * node owns. Two session tables share one store (SQLite in a temporary
 * directory: the follower's reads need a log, not PostgreSQL): table `own`
 * applies inputs, table `fol` follows them through session_follow_input as
 * the cluster's listen thread would, with the input's text as the log has it.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/config.h"
#include "server/session.h"
#include "server/session_follow.h"
#include "server/session_table.h"
#include "store/store.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_input.h"

static char tmpdir[64];
static char dbpath[128];

struct pair {
    struct config cfg;
    struct store *st;
    struct session_table *own, *fol;
    struct session *o, *f;
};

/* session_env.relay of the follower's table: marks it a cluster's. Unused. */
static void no_relay(void *ctx, const char *sid, const char *mid, bool reasoning,
                     size_t offset, const char *delta, size_t len)
{
    (void)ctx, (void)sid, (void)mid, (void)reasoning, (void)offset, (void)delta,
        (void)len;
}

static void pair_open(struct pair *p)
{
    struct rx_error err = {""};

    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rx-follow-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    snprintf(dbpath, sizeof(dbpath), "%s/reflexor.db", tmpdir);
    ck_assert_int_eq(config_init(&p->cfg), 0);
    p->cfg.effects = false;
    p->st = store_open(dbpath, &err);
    ck_assert_msg(p->st != NULL, "%s", err.text);
    p->own = session_table_create(&(struct session_env){.cfg = &p->cfg, .store = p->st});
    p->fol = session_table_create(
        &(struct session_env){.cfg = &p->cfg, .store = p->st, .relay = no_relay});
    ck_assert_ptr_nonnull(p->own);
    ck_assert_ptr_nonnull(p->fol);
    ck_assert_int_eq(session_table_create_session(p->own, "x", NULL, &p->o), 0);
    p->f = NULL;
}

static void pair_close(struct pair *p)
{
    DIR *d;
    struct dirent *e;
    char path[512];

    session_unref(p->o);
    session_unref(p->f);
    session_table_destroy(p->fol);
    session_table_destroy(p->own);
    store_close(p->st);
    config_release(&p->cfg);
    if ((d = opendir(tmpdir))) {
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(path, sizeof(path), "%s/%s", tmpdir, e->d_name);
                unlink(path);
            }
        closedir(d);
    }
    rmdir(tmpdir);
}

/* Apply one input, given as JSON text, on the owner: its seq. */
static int64_t own_submit(struct pair *p, const char *json)
{
    struct submit_result res;
    struct rx_input in;
    const char *field = NULL;
    json_t *j = json_loads(json, 0, NULL);

    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(rx_input_parse(j, &in, &field, NULL), 0);
    json_decref(j);
    ck_assert_int_eq(session_submit(p->o, &in, NULL, &res), 0);
    ck_assert_int_eq(res.verdict, RX_ACCEPTED);
    rx_input_release(&in);
    return res.seq;
}

static void say(struct pair *p, const char *mid)
{
    char json[160];

    snprintf(
        json, sizeof(json),
        "{\"type\":\"user-send-message\",\"messageId\":\"%s\",\"content\":\"hi %s\"}",
        mid, mid);
    own_submit(p, json);
}

/* The text input `seq` has in the log, as a notification carries it (malloc'd). */
static char *log_text(struct pair *p, int64_t seq)
{
    json_t *h = NULL;
    char *text;

    ck_assert_int_eq(store_history(p->st, "x", seq - 1, 1, &h), 0);
    ck_assert_int_eq(json_array_size(h), 1);
    text = json_dumps(json_object_get(json_array_get(h, 0), "input"), JSON_COMPACT);
    json_decref(h);
    ck_assert_ptr_nonnull(text);
    return text;
}

static void follow(struct pair *p, int64_t seq)
{
    char *text = log_text(p, seq);

    ck_assert_int_eq(session_follow_input(p->f, seq, text, strlen(text)), 0);
    free(text);
}

/* Both sessions encode the same state. */
static void ck_same_state(struct pair *p)
{
    struct rx_buf a, b;

    rx_buf_init(&a, RX_BUF_STATE_MAX);
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    ck_assert_int_eq(session_state_encode(p->o, &a), 0);
    ck_assert_int_eq(session_state_encode(p->f, &b), 0);
    ck_assert_uint_eq(a.len, b.len);
    ck_assert_int_eq(memcmp(a.data, b.data, a.len), 0);
    rx_buf_release(&a);
    rx_buf_release(&b);
}

static void seq_of(void *arg, const struct rx_state *st, int64_t seq,
                   const struct event_session *entry)
{
    (void)st, (void)entry;
    *(int64_t *)arg = seq;
}

static int64_t seq_now(struct session *s)
{
    int64_t seq = -1;

    ck_assert_int_eq(session_read(s, seq_of, &seq), 0);
    return seq;
}

/* A follower learns of the session from the log, then follows it input by input. */
START_TEST(test_follows_in_order)
{
    struct pair p;

    pair_open(&p);
    say(&p, "m1");
    ck_assert_int_eq(session_table_adopt(p.fol, "x"), 0);
    ck_assert_int_eq(session_table_adopt(p.fol, "x"), -EEXIST);
    p.f = session_table_get(p.fol, "x");
    ck_assert_ptr_nonnull(p.f);
    ck_assert(session_is_follower(p.f));
    ck_assert_int_eq(seq_now(p.f), 1);
    say(&p, "m2");
    say(&p, "m3");
    follow(&p, 2);
    follow(&p, 3);
    ck_assert_int_eq(seq_now(p.f), 3);
    ck_same_state(&p);
    /* A notification seen twice, or late, changes nothing. */
    follow(&p, 2);
    ck_assert_int_eq(seq_now(p.f), 3);
    ck_same_state(&p);
    pair_close(&p);
}
END_TEST

/* Notifications lost, or one without its text: the follower reads the log. */
START_TEST(test_gap_reads_the_log)
{
    struct pair p;

    pair_open(&p);
    ck_assert_int_eq(session_table_adopt(p.fol, "x"), 0);
    p.f = session_table_get(p.fol, "x");
    for (int i = 0; i < 5; i++) {
        char mid[8];

        snprintf(mid, sizeof(mid), "m%d", i);
        say(&p, mid);
    }
    ck_assert_int_eq(session_follow_input(p.f, 5, NULL, 0), 0);
    ck_assert_int_eq(seq_now(p.f), 5);
    ck_same_state(&p);
    say(&p, "m5");
    ck_assert_int_eq(session_follow_catchup(p.f), 0);
    ck_assert_int_eq(seq_now(p.f), 6);
    ck_same_state(&p);
    pair_close(&p);
}
END_TEST

/* Text that does not fold where the follower is: it reloads from the log. */
START_TEST(test_bad_text_reloads)
{
    struct pair p;
    static const char junk[] = "{\"type\":\"user-cancel\",\"timestamp\":1}";

    pair_open(&p);
    say(&p, "m1");
    ck_assert_int_eq(session_table_adopt(p.fol, "x"), 0);
    p.f = session_table_get(p.fol, "x");
    say(&p, "m2");
    /* Stale timestamp: rejected by the machine, so the log is read instead. */
    ck_assert_int_eq(session_follow_input(p.f, 2, junk, strlen(junk)), 0);
    ck_assert_int_eq(seq_now(p.f), 2);
    ck_same_state(&p);
    pair_close(&p);
}
END_TEST

/* A follower takes no input of its own until this node takes it over. */
START_TEST(test_take_and_drop)
{
    struct pair p;
    struct submit_result res;
    struct rx_input in;
    json_t *j;

    pair_open(&p);
    say(&p, "m1");
    ck_assert_int_eq(session_table_adopt(p.fol, "x"), 0);
    p.f = session_table_get(p.fol, "x");
    j = json_pack("{s:s, s:s, s:s}", "type", "user-send-message", "messageId", "f1",
                  "content", "on the follower");
    ck_assert_int_eq(rx_input_parse(j, &in, NULL, NULL), 0);
    json_decref(j);
    ck_assert_int_eq(session_submit(p.f, &in, NULL, &res), -EREMOTE);
    ck_assert_int_eq(seq_now(p.f), 1);
    /* The owner went on; taking over catches up first, then applies here. */
    say(&p, "m2");
    ck_assert_int_eq(session_take(p.f), 0);
    ck_assert(!session_is_follower(p.f));
    ck_assert_int_eq(seq_now(p.f), 2);
    ck_assert_int_eq(session_submit(p.f, &in, NULL, &res), 0);
    ck_assert_int_eq(res.verdict, RX_ACCEPTED);
    ck_assert_int_eq(res.seq, 3);
    session_drop(p.f);
    ck_assert(session_is_follower(p.f));
    ck_assert_int_eq(session_submit(p.f, &in, NULL, &res), -EREMOTE);
    rx_input_release(&in);
    pair_close(&p);
}
END_TEST

static const char *streamed(struct pair *p, json_t **keep)
{
    ck_assert_int_eq(session_message_json(p->f, "a1", keep), 0);
    return json_string_value(json_object_get(*keep, "content"));
}

/* The owner's tokens: what lies past the follower's length is appended. */
START_TEST(test_tokens_append_past_length)
{
    struct pair p;
    int64_t seq;
    json_t *m = NULL;

    pair_open(&p);
    say(&p, "m1");
    ck_assert_int_eq(session_table_adopt(p.fol, "x"), 0);
    p.f = session_table_get(p.fol, "x");
    seq = own_submit(&p, "{\"type\":\"brain-send-message-start\",\"messageId\":\"a1\","
                         "\"calledBrainAt\":1}");
    follow(&p, seq);
    session_follow_token(p.f, "a1", false, 0, "Hel", 3);
    session_follow_token(p.f, "a1", false, 3, "lo", 2);
    ck_assert_str_eq(streamed(&p, &m), "Hello");
    json_decref(m);
    /* A new owner streams the answer again from the start: only what is new. */
    session_follow_token(p.f, "a1", false, 0, "Hello, wo", 9);
    ck_assert_str_eq(streamed(&p, &m), "Hello, wo");
    json_decref(m);
    /* A gap (a lost notification) is not filled with what follows it. */
    session_follow_token(p.f, "a1", false, 20, "xyz", 3);
    session_follow_token(p.f, "other", false, 0, "abc", 3);
    ck_assert_str_eq(streamed(&p, &m), "Hello, wo");
    json_decref(m);
    /* The completion comes through the log and is the truth. */
    seq = own_submit(&p, "{\"type\":\"brain-send-message-complete\",\"messageId\":\"a1\","
                         "\"calledBrainAt\":1,\"content\":\"Hello, world\"}");
    follow(&p, seq);
    ck_assert_str_eq(streamed(&p, &m), "Hello, world");
    json_decref(m);
    ck_same_state(&p);
    pair_close(&p);
}
END_TEST

/* Sessions made, renamed and deleted on another node. */
START_TEST(test_table_follows_the_log)
{
    struct pair p;
    struct session *s;
    char *title = NULL;

    pair_open(&p);
    ck_assert_int_eq(session_table_adopt(p.fol, "nope"), -ENOENT);
    ck_assert_int_eq(session_table_adopt(p.fol, "x"), 0);
    ck_assert_int_eq(store_set_title(p.st, "x", "A title"), 0);
    session_table_retitle(p.fol, "x");
    s = session_table_get(p.fol, "x");
    ck_assert_int_eq(session_title(s, &title), 0);
    ck_assert_str_eq(title, "A title");
    free(title);
    session_unref(s);
    session_table_forget(p.fol, "x");
    /* Gone from memory (a touch would read it again: the log still has it). */
    ck_assert_ptr_null(session_table_peek(p.fol, "x"));
    /* Forgetting touches no log: the owner's session is still there. */
    ck_assert_ptr_nonnull(s = session_table_get(p.own, "x"));
    session_unref(s);
    pair_close(&p);
}
END_TEST

Suite *follow_suite(void);

Suite *follow_suite(void)
{
    Suite *s = suite_create("follow");
    TCase *tc = tcase_create("follower");

    tcase_add_test(tc, test_follows_in_order);
    tcase_add_test(tc, test_gap_reads_the_log);
    tcase_add_test(tc, test_bad_text_reloads);
    tcase_add_test(tc, test_take_and_drop);
    tcase_add_test(tc, test_tokens_append_past_length);
    tcase_add_test(tc, test_table_follows_the_log);
    suite_add_tcase(s, tc);
    return s;
}
