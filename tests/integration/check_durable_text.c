/*
 * check_durable_text - an answer survives a crash (SPEC 3.7, issue 31 item 4).
 *
 * The real server on a database file (on PostgreSQL with RX_PG_DIR, a
 * short cluster lease so the restarted node takes its sessions back),
 * killed with SIGKILL in the middle of a streaming answer and started again
 * on the same log:
 *  - builtin: a long echo streamed slowly, killed at a random moment
 *    (seeded: RX_DURABLE_SEED) KILLS times; the final answer is byte for
 *    byte the answer of an uninterrupted run (the brain continues at the
 *    kept offset), and after every restart the message's text holds what
 *    was durable: what a /messages subscriber was shown up to TEXT_SLACK_MS
 *    before the kill (the batch's 250 ms and a commit) is a prefix of the
 *    snapshot the resumed subscriber (Last-Event-ID: its offset) gets, and
 *    the text it goes on to see extends what it was shown;
 *  - openai with brain.openai.continue: after the kill, the continuation
 *    request to the fake provider carries the text kept as a trailing
 *    assistant message, and the final answer begins with it.
 * Waits only bound hangs; no timing is asserted but the batch window.
 */
#include <check.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/itest.h"

#define WAIT_MS       20000
#define KILLS         7
#define TEXT_SLACK_MS 400

static struct itest_server srv;
static char db_path[64];

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static void start(const char *config)
{
    const char *args[] = {"--db", db_path, NULL};

    ck_assert_int_eq(itest_server_start(&srv, config, args), 0);
}

static void kill9(void)
{
    ck_assert_int_eq(kill(srv.pid, SIGKILL), 0);
    (void)itest_server_stop(&srv); /* reaps it: not a clean exit */
}

static void url_of(char *buf, size_t n, const char *sid, const char *tail)
{
    snprintf(buf, n, "%s/api/reflexor/sessions/%s%s", srv.base, sid, tail);
}

/* The newest assistant message's id once there is one (malloc'd). */
static bool has_assistant(json_t *j, void *arg)
{
    (void)arg;
    return json_is_string(json_object_get(itest_last_assistant(j), "id"));
}

static bool answer_done(json_t *j, void *arg)
{
    const char *status =
        json_string_value(json_object_get(itest_last_assistant(j), "status"));

    (void)arg;
    return status && strcmp(status, "streaming");
}

static char *assistant_id(const char *sid)
{
    char url[256];
    json_t *j;
    char *id;

    url_of(url, sizeof(url), sid, "");
    j = itest_poll_json(url, has_assistant, NULL, WAIT_MS);
    ck_assert_msg(j && has_assistant(j, NULL), "no answer started");
    id = strdup(json_string_value(json_object_get(itest_last_assistant(j), "id")));
    json_decref(j);
    return id;
}

/* The final answer's content (malloc'd). */
static char *final_answer(const char *sid)
{
    char url[256];
    json_t *j;
    char *t;

    url_of(url, sizeof(url), sid, "");
    j = itest_poll_json(url, answer_done, NULL, 60000);
    ck_assert_msg(j && answer_done(j, NULL), "the answer never completed");
    t = strdup(json_string_value(json_object_get(itest_last_assistant(j), "content")));
    json_decref(j);
    return t;
}

/*
 * What a /messages subscriber was shown, event by event: the text (snapshot
 * content, then the chunks' deltas at their offsets) and, per event, when
 * it arrived and the length shown then.
 */
struct shown {
    char text[65536];
    size_t len;
    size_t n;
    long at[4096];
    size_t len_at[4096];
};

/*
 * Fold events [*from, count) of `e` into `s`; *pos is where the stream's
 * next chunk goes (a snapshot sets it: after a restart it may be behind
 * what was shown, by what was not yet durable, and the chunks then say the
 * same bytes again).
 */
static void shown_update(struct shown *s, struct itest_sse *e, size_t *from, size_t *pos)
{
    size_t n = itest_sse_count(e);

    for (; *from < n; (*from)++) {
        json_t *d = itest_sse_event(e, *from);
        const char *type = json_string_value(json_object_get(d, "type"));
        const char *t = NULL;
        size_t off = 0, len, same;

        if (!type)
            continue;
        if (!strcmp(type, "snapshot") || !strcmp(type, "complete") ||
            !strcmp(type, "stopped")) {
            t = json_string_value(json_object_get(d, "content"));
        } else if (!strcmp(type, "chunk")) {
            t = json_string_value(json_object_get(d, "delta"));
            off = *pos;
        }
        if (!t)
            continue;
        len = strlen(t);
        *pos = off + len;
        ck_assert_msg(off <= s->len, "a gap in the text shown");
        /* Never changes: what it says again must be what was shown. */
        same = off + len < s->len ? len : s->len - off;
        ck_assert_msg(!strncmp(s->text + off, t, same),
                      "a %s changed the text shown at %zu", type, off);
        if (off + len > s->len) {
            ck_assert_uint_lt(off + len, sizeof(s->text));
            memcpy(s->text + s->len, t + same, len - same);
            s->len = off + len;
            s->text[s->len] = '\0';
        }
        if (s->n < sizeof(s->at) / sizeof(s->at[0])) {
            s->at[s->n] = itest_now_ms();
            s->len_at[s->n++] = *pos; /* what this stream showed by then */
        }
    }
}

/* The most a stream showed by time `t` (ms), of events [first, n). */
static size_t shown_len_at(const struct shown *s, size_t first, long t)
{
    size_t len = 0;

    for (size_t i = first; i < s->n && s->at[i] <= t; i++)
        if (s->len_at[i] > len)
            len = s->len_at[i];
    return len;
}

static const char *builtin_config(void)
{
    return itest_on_postgres()
               ? "{\"brain\":{\"builtin\":{\"chunk_chars\":4,\"chunk_delay_ms\":20}},"
                 " \"cluster\":{\"lease_ms\":1000}}"
               : "{\"brain\":{\"builtin\":{\"chunk_chars\":4,\"chunk_delay_ms\":20}}}";
}

/* A question whose echo streams for about 2.5 s (660 bytes, 4 a chunk). */
static char *long_question(void)
{
    char *q = malloc(700);
    size_t n = 0;

    for (int i = 0; n < 640; i++)
        n += (size_t)snprintf(q + n, 700 - n, "word%03d ", i);
    q[n - 1] = '\0';
    return q;
}

static void ask(const char *sid, const char *question)
{
    char body[1024];

    snprintf(body, sizeof(body), "{\"type\":\"user-send-message\",\"content\":\"%s\"}",
             question);
    ck_assert_int_eq(itest_post_input(&srv, sid, body, NULL), 200);
}

/* The first text frame of a message stream: a snapshot, or (resumed with
   Last-Event-ID at an offset the server holds) a chunk of what follows it. */
static bool is_text_frame(json_t *d, void *arg)
{
    const char *type = json_string_value(json_object_get(d, "type"));

    (void)arg;
    return type && (!strcmp(type, "snapshot") || !strcmp(type, "chunk"));
}

START_TEST(test_builtin_answer_continues_byte_for_byte)
{
    const char *env = getenv("RX_DURABLE_SEED");
    unsigned seed = env ? (unsigned)atoi(env) : 31;
    char *q = long_question(), *sid, *mid, *want, *got, url[512], last[32];
    struct shown shown = {.len = 0};
    int kills = 0, mid_answer = 0;
    size_t durable = 0; /* what was durable at some kill stays so */

    snprintf(db_path, sizeof(db_path), "/tmp/rx-durable-%d.db", (int)getpid());
    itest_remove_db(db_path);
    /* The uninterrupted answer. */
    start(builtin_config());
    sid = itest_new_session(&srv);
    ck_assert_ptr_nonnull(sid);
    ask(sid, q);
    want = final_answer(sid);
    ck_assert_uint_gt(strlen(want), 600);
    free(sid);

    /* The same question, killed KILLS times while it streams. */
    sid = itest_new_session(&srv);
    ck_assert_ptr_nonnull(sid);
    ask(sid, q);
    mid = assistant_id(sid);
    for (;;) {
        struct itest_sse e;
        size_t from = 0, pos = 0, before, first = shown.n;
        long kill_at, delay = 100 + (long)(rand_r(&seed) % 400);
        bool over;

        /* A restarted server listens on another port. */
        url_of(url, sizeof(url), sid, "/messages/");
        strncat(url, mid, sizeof(url) - strlen(url) - 1);
        snprintf(last, sizeof(last), "%zu", shown.len);
        ck_assert_int_eq(itest_sse_open(&e, url, shown.len ? last : NULL), 0);
        ck_assert_msg(itest_sse_wait_for(&e, 0, is_text_frame, NULL, WAIT_MS) >= 0,
                      "no snapshot or chunk");
        pos = shown.len; /* a resumed stream's chunks go on from there */
        sleep_ms(30);
        before = shown.len;
        shown_update(&shown, &e, &from, &pos);
        /* What was durable before the kill is there after it. */
        if (kills)
            ck_assert_msg(shown.len >= before, "the text went backwards: %zu < %zu",
                          shown.len, before);
        if (kills == KILLS) {
            itest_sse_close(&e);
            break;
        }
        sleep_ms(delay);
        shown_update(&shown, &e, &from, &pos);
        over = itest_sse_count(&e) &&
               json_string_value(json_object_get(
                   itest_sse_event(&e, itest_sse_count(&e) - 1), "type")) &&
               !strcmp(json_string_value(json_object_get(
                           itest_sse_event(&e, itest_sse_count(&e) - 1), "type")),
                       "complete");
        kill_at = itest_now_ms();
        kill9();
        shown_update(&shown, &e, &from, &pos);
        itest_sse_close(&e);
        kills++;
        mid_answer += !over;
        fprintf(stderr, "check_durable_text: kill %d at %ld ms, %zu of %zu bytes shown\n",
                kills, delay, shown.len, strlen(want));
        start(builtin_config());
        {
            /* The message's text after the restart: at least what was shown
               TEXT_SLACK_MS before the kill (durable by then). */
            struct itest_resp r;
            json_t *j;
            const char *c;
            size_t need = shown_len_at(&shown, first, kill_at - TEXT_SLACK_MS);

            url_of(url, sizeof(url), sid, "/messages/");
            strncat(url, mid, sizeof(url) - strlen(url) - 1);

            ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
            j = itest_resp_json(&r);
            c = json_string_value(json_object_get(j, "content"));
            ck_assert_msg(c != NULL, "GET %s: %ld", url, r.status);
            if (need > durable)
                durable = need;
            need = durable;
            ck_assert_msg(strlen(c) >= need,
                          "after kill %d the message keeps %zu bytes, %zu were durable",
                          kills, strlen(c), need);
            ck_assert_msg(
                !strncmp(c, shown.text, strlen(c) < shown.len ? strlen(c) : shown.len),
                "after kill %d the text differs from what was shown:\n%s\n---\n%s", kills,
                c, shown.text);
            json_decref(j);
            itest_resp_release(&r);
        }
    }
    got = final_answer(sid);
    ck_assert_msg(!strcmp(got, want), "the answer after %d kills differs:\n%s\n---\n%s",
                  kills, got, want);
    ck_assert_msg(shown.len <= strlen(got) && !strncmp(got, shown.text, shown.len),
                  "the final answer does not begin with the text shown");
    ck_assert_msg(mid_answer >= 5, "only %d kills landed mid-answer", mid_answer);
    ck_assert_int_eq(itest_server_stop(&srv), 0);
    itest_remove_db(db_path);
    free(got);
    free(want);
    free(mid);
    free(sid);
    free(q);
}
END_TEST

/* The final answer of session `sid` as node `n` has it (malloc'd). */
static char *final_answer_on(const struct itest_server *n, const char *sid)
{
    char url[256];
    json_t *j;
    char *t;

    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s", n->base, sid);
    j = itest_poll_json(url, answer_done, NULL, 60000);
    ck_assert_msg(j && answer_done(j, NULL), "the answer never completed");
    t = strdup(json_string_value(json_object_get(itest_last_assistant(j), "content")));
    json_decref(j);
    return t;
}

static bool is_complete(json_t *d, void *arg)
{
    (void)arg;
    return json_is_string(json_object_get(d, "type")) &&
           !strcmp(json_string_value(json_object_get(d, "type")), "complete");
}

/*
 * A cluster (PostgreSQL): node a owns the session and streams the answer,
 * a subscriber follows it on node b; node a is killed mid-answer. Node b
 * takes the session over, loads the text a made durable and the brain
 * continues it: b's subscriber never sees its text change, a subscriber
 * that joins b after the kill (Last-Event-ID: what the first was shown)
 * gets a snapshot that agrees with it, and the answer is byte for byte the
 * uninterrupted one.
 */
START_TEST(test_takeover_continues_on_another_node)
{
    struct itest_server b;
    struct itest_sse e, late;
    struct shown shown = {.len = 0}, shown2 = {.len = 0};
    size_t from = 0, pos = 0, from2 = 0, pos2 = 0;
    char *q = long_question(), *sid, *mid, *want, *got, url[512], last[32];

    if (!itest_on_postgres()) {
        itest_skip(__func__, "two nodes share a log on PostgreSQL only (RX_PG_DIR)");
        free(q);
        return;
    }
    snprintf(db_path, sizeof(db_path), "/tmp/rx-durable-2n-%d.db", (int)getpid());
    itest_remove_db(db_path);
    start(builtin_config());
    {
        const char *args[] = {"--db", db_path, NULL};

        ck_assert_int_eq(itest_server_start(&b, builtin_config(), args), 0);
    }
    sid = itest_new_session(&srv);
    ck_assert_ptr_nonnull(sid);
    ask(sid, q);
    want = final_answer(sid);
    free(sid);
    sid = itest_new_session(&srv);
    ck_assert_ptr_nonnull(sid);
    ask(sid, q);
    mid = assistant_id(sid);
    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s/messages/%s", b.base, sid,
             mid);
    for (int i = 0; i < 100 && itest_get_status(&b, url + strlen(b.base)) != 200; i++)
        sleep_ms(50);
    ck_assert_int_eq(itest_sse_open(&e, url, NULL), 0);
    ck_assert_int_ge(itest_sse_wait(&e, 0, "snapshot", NULL, NULL, WAIT_MS), 0);
    sleep_ms(700);
    shown_update(&shown, &e, &from, &pos);
    kill9();
    fprintf(stderr, "check_durable_text: node a killed, node b showed %zu of %zu bytes\n",
            shown.len, strlen(want));
    ck_assert_uint_lt(shown.len, strlen(want));
    snprintf(last, sizeof(last), "%zu", shown.len);
    memcpy(shown2.text, shown.text, shown.len + 1);
    shown2.len = shown.len;
    pos2 = shown.len; /* resumed there: its first chunk goes on from it */
    ck_assert_int_eq(itest_sse_open(&late, url, last), 0);
    ck_assert_int_ge(itest_sse_wait_for(&e, 0, is_complete, NULL, 60000), 0);
    ck_assert_int_ge(itest_sse_wait_for(&late, 0, is_complete, NULL, 60000), 0);
    shown_update(&shown, &e, &from, &pos);
    shown_update(&shown2, &late, &from2, &pos2);
    got = final_answer_on(&b, sid);
    ck_assert_msg(!strcmp(got, want),
                  "the answer after the takeover differs:\n%s\n---\n%s", got, want);
    ck_assert_str_eq(shown.text, want);
    ck_assert_str_eq(shown2.text, want);
    itest_sse_close(&late);
    itest_sse_close(&e);
    ck_assert_int_eq(itest_server_stop(&b), 0);
    itest_remove_db(db_path);
    free(got);
    free(want);
    free(mid);
    free(sid);
    free(q);
}
END_TEST

/* The last request the fake provider got for `model` (NEW), or NULL. */
static json_t *last_request(const struct itest_fake *f)
{
    char url[128];
    struct itest_resp r;
    json_t *all, *last = NULL;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/__requests", f->port);
    if (itest_request("GET", url, NULL, NULL, &r))
        return NULL;
    all = itest_resp_json(&r);
    itest_resp_release(&r);
    if (json_array_size(all))
        last = json_incref(json_array_get(all, json_array_size(all) - 1));
    json_decref(all);
    return last;
}

START_TEST(test_openai_continue_sends_the_kept_text)
{
    struct itest_fake fake;
    char config[512], *sid, *mid, url[512], *got;
    json_t *req, *msgs, *tail;
    struct itest_resp r;
    const char *kept;
    json_t *j;

    ck_assert_int_eq(itest_fake_start(&fake), 0);
    snprintf(config, sizeof(config),
             "{\"brain\":{\"provider\":\"openai\",\"openai\":{\"base_url\":"
             "\"http://127.0.0.1:%d/v1\",\"model\":\"slow\",\"api_key\":\"k\","
             "\"continue\":true}}%s}",
             fake.port, itest_on_postgres() ? ",\"cluster\":{\"lease_ms\":1000}" : "");
    snprintf(db_path, sizeof(db_path), "/tmp/rx-durable-oa-%d.db", (int)getpid());
    itest_remove_db(db_path);
    start(config);
    sid = itest_new_session(&srv);
    ck_assert_ptr_nonnull(sid);
    ask(sid, "tick please");
    mid = assistant_id(sid);
    sleep_ms(1500); /* "tick " every 20 ms: about 75 of them */
    kill9();
    start(config);
    url_of(url, sizeof(url), sid, "/messages/");
    strncat(url, mid, sizeof(url) - strlen(url) - 1);
    /* The text kept is there at once, and the continuation carries it. */
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    j = itest_resp_json(&r);
    kept = json_string_value(json_object_get(j, "content"));
    ck_assert_msg(kept && strlen(kept) >= 5 * 10, "kept: %s", kept ? kept : "(none)");
    got = final_answer(sid);
    req = last_request(&fake);
    msgs = json_object_get(json_object_get(req, "body"), "messages");
    tail = json_array_get(msgs, json_array_size(msgs) - 1);
    ck_assert_str_eq(json_string_value(json_object_get(tail, "role")), "assistant");
    ck_assert_uint_ge(strlen(json_string_value(json_object_get(tail, "content"))),
                      5 * 10);
    ck_assert_msg(!strncmp(kept, json_string_value(json_object_get(tail, "content")),
                           strlen(json_string_value(json_object_get(tail, "content")))),
                  "the continuation does not carry the kept text");
    ck_assert_msg(!strncmp(got, json_string_value(json_object_get(tail, "content")),
                           strlen(json_string_value(json_object_get(tail, "content")))),
                  "the answer does not begin with the kept text");
    ck_assert_uint_eq(strlen(got),
                      strlen(json_string_value(json_object_get(tail, "content"))) +
                          200 * 5);
    fprintf(stderr, "check_durable_text: openai kept %zu bytes, answer %zu bytes\n",
            strlen(kept), strlen(got));
    json_decref(req);
    json_decref(j);
    itest_resp_release(&r);
    ck_assert_int_eq(itest_server_stop(&srv), 0);
    itest_fake_stop(&fake);
    itest_remove_db(db_path);
    free(got);
    free(mid);
    free(sid);
}
END_TEST

Suite *durable_text_suite(void);
Suite *durable_text_suite(void)
{
    Suite *s = suite_create("durable_text");
    TCase *tc = tcase_create("kill");

    tcase_set_timeout(tc, getenv("RX_SERVER_WRAPPER") ? 900 : 240);
    tcase_add_test(tc, test_builtin_answer_continues_byte_for_byte);
    tcase_add_test(tc, test_openai_continue_sends_the_kept_text);
    tcase_add_test(tc, test_takeover_continues_on_another_node);
    suite_add_tcase(s, tc);
    return s;
}
