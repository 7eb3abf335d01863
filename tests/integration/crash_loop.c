/*
 * crash_loop - kill -9 the real server at random moments and check that the
 * input log keeps its promise (SPEC 6, 3.4).
 *
 *   build/tests/crash_loop [SEED [ITERATIONS]]     (RX_SERVER: the binary)
 *
 * One temporary database under /tmp. Each iteration starts build/reflexor on
 * it (--db), checks what the restart recovered, then drives a scripted
 * conversation (arithmetic questions that call the calculator, a clock
 * question, plain messages whose answers stream in small delayed chunks,
 * retries of messages whose answer never came) while a killer thread sends
 * SIGKILL after a random delay drawn from the seeded PRNG. After each restart:
 *   - every input acknowledged with 200 is in the history and the state, and
 *     no id is there twice;
 *   - the history is seq 1..N without gaps and folds (locally, through the
 *     same pure machine) to exactly the state the server serves;
 *   - GET ?at=k equals the local fold of the first k inputs, and (every few
 *     iterations) a fork at k has those k inputs and that state.
 * Then the binary itself: a garbage database and a path under a regular file
 * stop it at once with one line naming the file, and `reflexor --gc` with
 * retention.max_age_days=1 removes a session made two days old, rows and
 * all, and keeps the conversation whole.
 * At the end the server runs undisturbed and the conversation must finish by
 * itself: no answer streaming, no tool pending, nothing left to answer, and
 * every answer that was streaming at a crash completed under its own id.
 * Prints "crash_loop: N passed, M failed" and exits non-zero on a failure.
 * Test code only: 127.0.0.1, and it kills only the servers it started.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <sqlite3.h>

#include "state_machine/rx_machine.h"
#include "tests/integration/itest.h"

#define MAX_MSGS  512
#define SETTLE_MS 60000
#define PREFIX    "/api/reflexor/sessions/"

static const char config_json[] =
    "{\"brain\":{\"builtin\":{\"chunk_chars\":3,\"chunk_delay_ms\":5}},"
    " \"store\":{\"snapshot_every\":7}}";

/* ---- bookkeeping -------------------------------------------------------------- */

static int passed, failed;
static char dbpath[128], tmpdir[64], sid[80];

static void fail(int iter, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(int iter, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "crash_loop: iteration %d: FAIL: ", iter);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    failed++;
}

static void check(bool ok, int iter, const char *what)
{
    if (ok)
        passed++;
    else
        fail(iter, "%s", what);
}

/* A user message of the script: its id, its text, and whether a 200 came back. */
struct msg {
    char id[32];
    char content[200];
    bool acked;
    bool cut; /* a POST got no answer: killed in flight */
};

static int n_cut, n_cut_stored;

static struct msg msgs[MAX_MSGS];
static int n_msgs;
static pthread_mutex_t msgs_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t acked_inputs;

/* Answers seen streaming after a restart: they must complete under that id. */
static char resumed[MAX_MSGS][64];
static int n_resumed;

/* xorshift64*: the whole run follows from the seed. */
static uint64_t rng;

static uint64_t rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ULL;
}

static int rnd_int(int lo, int hi)
{
    return lo + (int)(rnd() % (uint64_t)(hi - lo + 1));
}

static long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* ---- HTTP --------------------------------------------------------------------- */

/* GET base+path as JSON (NEW) with the status in *status; NULL when no JSON. */
static json_t *get_json(const struct itest_server *s, const char *path, long *status)
{
    char url[512];
    struct itest_resp r;
    json_t *j = NULL;

    snprintf(url, sizeof(url), "%s%s", s->base, path);
    *status = -1;
    if (!itest_request("GET", url, NULL, NULL, &r)) {
        *status = r.status;
        j = itest_resp_json(&r);
    }
    itest_resp_release(&r);
    return j;
}

/* The history as an array of {seq, input} (NEW), whatever the envelope. */
static json_t *get_history(const struct itest_server *s, const char *id)
{
    char path[256];
    long status;
    json_t *j, *arr;

    snprintf(path, sizeof(path), PREFIX "%s/history", id);
    j = get_json(s, path, &status);
    if (status != 200 || !j) {
        json_decref(j);
        return NULL;
    }
    if (json_is_array(j))
        return j;
    arr = json_object_get(j, "inputs");
    if (!arr)
        arr = json_object_get(j, "history");
    arr = json_is_array(arr) ? json_incref(arr) : NULL;
    json_decref(j);
    return arr;
}

static json_t *get_state(const struct itest_server *s, const char *id, long at)
{
    char path[256];
    long status;
    json_t *j, *inner;

    if (at >= 0)
        snprintf(path, sizeof(path), PREFIX "%s?at=%ld", id, at);
    else
        snprintf(path, sizeof(path), PREFIX "%s", id);
    j = get_json(s, path, &status);
    if (status != 200) {
        json_decref(j);
        return NULL;
    }
    /* Accept the state itself or {"state": ...}. */
    inner = json_object_get(j, "state");
    if (json_is_object(inner) && !json_object_get(j, "userMessages")) {
        json_incref(inner);
        json_decref(j);
        return inner;
    }
    return j;
}

static long post_json(const struct itest_server *s, const char *path, const char *body,
                      json_t **answer)
{
    char url[512];
    struct itest_resp r;
    long status;

    snprintf(url, sizeof(url), "%s%s", s->base, path);
    if (answer)
        *answer = NULL;
    if (itest_request("POST", url, body, NULL, &r)) {
        itest_resp_release(&r);
        return -1;
    }
    status = r.status;
    if (answer)
        *answer = itest_resp_json(&r);
    itest_resp_release(&r);
    return status;
}

/* ---- the local fold ---------------------------------------------------------------- */

/*
 * Fold history entries [0, upto) through the pure machine into JSON (NEW), or
 * NULL with `why` when an entry does not fold as accepted.
 */
static json_t *fold_history(json_t *hist, size_t upto, char *why, size_t n)
{
    struct rx_state s;
    struct rx_buf b;
    json_t *out = NULL;

    if (rx_state_init(&s)) {
        snprintf(why, n, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < upto; i++) {
        json_t *e = json_array_get(hist, i);
        struct rx_input in;
        struct rx_outcome o;
        const char *field = NULL;

        if (json_integer_value(json_object_get(e, "seq")) != (json_int_t)(i + 1)) {
            snprintf(why, n, "history entry %zu has seq %lld", i,
                     (long long)json_integer_value(json_object_get(e, "seq")));
            goto out_release;
        }
        if (rx_input_parse(json_object_get(e, "input"), &in, &field, NULL)) {
            snprintf(why, n, "input %zu does not parse (%s)", i + 1, field ? field : "?");
            goto out_release;
        }
        if (rx_machine_apply(&s, &in, &o) || o.verdict != RX_ACCEPTED) {
            snprintf(why, n, "input %zu does not fold (%s)", i + 1,
                     rx_reason_name(o.reason));
            rx_input_release(&in);
            goto out_release;
        }
        rx_input_release(&in);
    }
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    if (!rx_state_encode(&s, &b))
        out = json_loadb(b.data, b.len, 0, NULL);
    rx_buf_release(&b);
    if (!out)
        snprintf(why, n, "cannot encode the fold");
out_release:
    rx_state_release(&s);
    return out;
}

/* ---- checks after a restart ------------------------------------------------------- */

static bool has_id(json_t *list, const char *id)
{
    size_t i;
    json_t *m;

    json_array_foreach(list, i, m)
    {
        const char *x = json_string_value(json_object_get(m, "id"));

        if (x && !strcmp(x, id))
            return true;
    }
    return false;
}

static bool ids_unique(json_t *list)
{
    size_t i, k;
    json_t *a, *b;

    json_array_foreach(list, i, a)
    {
        json_array_foreach(list, k, b)
        {
            if (k <= i)
                continue;
            if (json_equal(json_object_get(a, "id"), json_object_get(b, "id")))
                return false;
        }
    }
    return true;
}

/* A consistent view: the state served while the history did not move. */
static bool stable_view(const struct itest_server *s, json_t **hist, json_t **state)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        json_t *h1 = get_history(s, sid), *st = get_state(s, sid, -1);
        json_t *h2 = get_history(s, sid);

        if (h1 && h2 && st && json_array_size(h1) == json_array_size(h2)) {
            json_decref(h1);
            *hist = h2;
            *state = st;
            return true;
        }
        json_decref(h1);
        json_decref(h2);
        json_decref(st);
        usleep(10000);
    }
    return false;
}

static void check_fork(const struct itest_server *s, int iter, json_t *hist, size_t k,
                       json_t *want)
{
    char body[64], path[256];
    json_t *ans = NULL, *fh = NULL, *fs = NULL;
    const char *fid;
    long st;

    snprintf(body, sizeof(body), "{\"at\":%zu}", k);
    snprintf(path, sizeof(path), PREFIX "%s/fork", sid);
    st = post_json(s, path, body, &ans);
    fid = json_string_value(json_object_get(ans, "id"));
    if (!fid)
        fid = json_string_value(json_object_get(ans, "sessionId"));
    if ((st != 200 && st != 201) || !fid) {
        fail(iter, "fork at %zu: status %ld", k, st);
        goto out;
    }
    passed++;
    fh = get_history(s, fid);
    fs = get_state(s, fid, (long)k);
    check(fh && json_array_size(fh) >= k, iter, "the fork's history has the k inputs");
    for (size_t i = 0; fh && i < k && i < json_array_size(fh); i++)
        if (!json_equal(json_array_get(fh, i), json_array_get(hist, i))) {
            fail(iter, "fork at %zu: input %zu differs", k, i + 1);
            break;
        }
    check(fs && json_equal(fs, want), iter, "the fork's state at k equals the fold");
    snprintf(path, sizeof(path), "%s" PREFIX "%s", s->base, fid);
    {
        struct itest_resp r;

        if (!itest_request("DELETE", path, NULL, NULL, &r))
            check(r.status == 204 || r.status == 200, iter, "the fork deletes");
        itest_resp_release(&r);
    }
out:
    json_decref(ans);
    json_decref(fh);
    json_decref(fs);
}

static void check_recovered(const struct itest_server *s, int iter)
{
    json_t *hist = NULL, *state = NULL, *fold, *want_k, *at_k;
    char why[160] = "";
    size_t n, k;

    if (!stable_view(s, &hist, &state)) {
        fail(iter, "no history/state from the restarted server");
        return;
    }
    n = json_array_size(hist);
    /* Every acknowledged message is in the log and in the state. */
    pthread_mutex_lock(&msgs_lock);
    for (int i = 0; i < n_msgs; i++) {
        bool in_log = false;
        size_t h;
        json_t *e;

        json_array_foreach(hist, h, e)
        {
            const char *mid = json_string_value(
                json_object_get(json_object_get(e, "input"), "messageId"));

            in_log |= mid && !strcmp(mid, msgs[i].id);
        }
        /* Cut in flight: stored or not, both are fine; the retry settles it. */
        if (!msgs[i].acked) {
            if (msgs[i].cut && in_log) {
                n_cut_stored++;
                msgs[i].cut = false;
            }
            continue;
        }
        if (!in_log || !has_id(json_object_get(state, "userMessages"), msgs[i].id))
            fail(iter, "acknowledged message %s was lost", msgs[i].id);
        else
            passed++;
    }
    pthread_mutex_unlock(&msgs_lock);
    check(ids_unique(json_object_get(state, "userMessages")) &&
              ids_unique(json_object_get(state, "assistantMessages")) &&
              ids_unique(json_object_get(state, "toolCallRecords")),
          iter, "no id twice in the state");

    /* The served state is the fold of the served log. */
    fold = fold_history(hist, n, why, sizeof(why));
    if (!fold)
        fail(iter, "the log does not fold: %s", why);
    else if (!json_equal(fold, state))
        fail(iter, "the state is not the fold of its %zu inputs", n);
    else
        passed++;

    /* Time travel: the state at a random k. */
    k = n ? (size_t)rnd_int(0, (int)n) : 0;
    want_k = fold_history(hist, k, why, sizeof(why));
    at_k = get_state(s, sid, (long)k);
    check(want_k && at_k && json_equal(want_k, at_k), iter, "?at=k equals the fold of k");
    if (want_k && iter % 5 == 1)
        check_fork(s, iter, hist, k, want_k);

    /* Answers cut off by the crash must complete under the same id later. */
    {
        size_t i;
        json_t *m;

        json_array_foreach(json_object_get(state, "assistantMessages"), i, m)
        {
            const char *st = json_string_value(json_object_get(m, "status"));
            const char *id = json_string_value(json_object_get(m, "id"));

            if (st && id && !strcmp(st, "streaming") && n_resumed < MAX_MSGS)
                snprintf(resumed[n_resumed++], sizeof(resumed[0]), "%s", id);
        }
    }
    json_decref(fold);
    json_decref(want_k);
    json_decref(at_k);
    json_decref(hist);
    json_decref(state);
}

/* ---- driving and killing ---------------------------------------------------------- */

/*
 * The killer: after delay_ms; or, aimed at the window between the commit and
 * the answer, delay_us after the driver starts its post number `at_post`.
 */
struct killer {
    pid_t pid;
    int delay_ms;
    int at_post; /* 0: by time only */
    int delay_us;
    pthread_t thread;
    volatile bool fired;
};

static int posts_started; /* by the driver, atomic */

static void *killer_main(void *arg)
{
    struct killer *k = arg;

    if (k->at_post) {
        for (long until = now_ms() + 5000;
             __atomic_load_n(&posts_started, __ATOMIC_ACQUIRE) < k->at_post &&
             now_ms() < until;)
            usleep(50);
        usleep((useconds_t)k->delay_us);
    } else {
        usleep((useconds_t)k->delay_ms * 1000);
    }
    kill(k->pid, SIGKILL);
    k->fired = true;
    return NULL;
}

static void new_message(int iter)
{
    struct msg *m;
    int kind = rnd_int(0, 5);

    if (n_msgs >= MAX_MSGS)
        return;
    m = &msgs[n_msgs];
    snprintf(m->id, sizeof(m->id), "m%d-%d", iter, n_msgs);
    if (kind <= 1)
        snprintf(m->content, sizeof(m->content), "what is %d*(%d+%d)?", rnd_int(2, 99),
                 rnd_int(1, 50), rnd_int(1, 50));
    else if (kind == 2)
        snprintf(m->content, sizeof(m->content), "what time is it?");
    else
        snprintf(m->content, sizeof(m->content),
                 "tell me something long about the number %d, so that the answer "
                 "streams for a while in many small chunks before it completes",
                 rnd_int(1, 1000));
    pthread_mutex_lock(&msgs_lock);
    n_msgs++;
    pthread_mutex_unlock(&msgs_lock);
}

/* POST message i; true when the server acknowledged it (200). */
static bool post_message(const struct itest_server *s, int i)
{
    char path[256];
    json_t *body = json_pack("{s:s, s:s, s:s}", "type", "user-send-message", "messageId",
                             msgs[i].id, "content", msgs[i].content);
    char *text = json_dumps(body, JSON_COMPACT);
    long st;

    snprintf(path, sizeof(path), PREFIX "%s/moorex", sid);
    __atomic_add_fetch(&posts_started, 1, __ATOMIC_RELEASE);
    st = post_json(s, path, text, NULL);
    free(text);
    json_decref(body);
    if (st == 200) {
        pthread_mutex_lock(&msgs_lock);
        if (!msgs[i].acked)
            acked_inputs++;
        msgs[i].acked = true;
        pthread_mutex_unlock(&msgs_lock);
        return true;
    }
    if (st < 0 && !msgs[i].cut) {
        msgs[i].cut = true;
        n_cut++;
    }
    return false;
}

/* Post until the killer fires: retries of unanswered messages first, then new ones. */
static void drive(const struct itest_server *s, int iter, struct killer *k)
{
    for (int i = 0; i < n_msgs && !k->fired; i++)
        if (!msgs[i].acked)
            (void)post_message(s, i);
    while (!k->fired) {
        /* Back-to-back posts at times, so kills also land inside a POST. */
        int gap = rnd_int(0, 9) < 3 ? 0 : rnd_int(0, 400);

        new_message(iter);
        if (!post_message(s, n_msgs - 1))
            break;
        for (long until = now_ms() + gap; !k->fired && now_ms() < until;)
            usleep(2000);
    }
}

/* ---- the end: left alone, the conversation finishes ----------------------------------
 */

static bool finished(json_t *st, void *arg)
{
    json_int_t called = json_integer_value(json_object_get(st, "calledBrainAt"));
    json_int_t last_user = 0, last_answer = 0;
    size_t i;
    json_t *m;

    (void)arg;
    if (!st)
        return false;
    json_array_foreach(json_object_get(st, "userMessages"), i, m)
    {
        json_int_t t = json_integer_value(json_object_get(m, "receivedAt"));

        if (t > last_user)
            last_user = t;
    }
    json_array_foreach(json_object_get(st, "assistantMessages"), i, m)
    {
        const char *status = json_string_value(json_object_get(m, "status"));

        if (!status || !strcmp(status, "streaming"))
            return false;
        if (json_integer_value(json_object_get(m, "receivedAt")) > last_answer)
            last_answer = json_integer_value(json_object_get(m, "receivedAt"));
    }
    json_array_foreach(json_object_get(st, "toolCallRecords"), i, m)
    {
        if (json_is_null(json_object_get(m, "result")))
            return false;
    }
    return called >= last_user && last_answer > last_user;
}

static void check_finished(const struct itest_server *s, int iter)
{
    char url[512];
    json_t *st;

    snprintf(url, sizeof(url), "%s" PREFIX "%s", s->base, sid);
    st = itest_poll_json(url, finished, NULL, SETTLE_MS);
    if (!finished(st, NULL)) {
        char *text = st ? json_dumps(st, JSON_COMPACT) : NULL;

        fail(iter, "the conversation did not finish by itself: %.600s",
             text ? text : "(no state)");
        free(text);
    } else {
        passed++;
    }
    for (int i = 0; st && i < n_resumed; i++) {
        json_t *m;
        size_t k;
        bool done = false;

        json_array_foreach(json_object_get(st, "assistantMessages"), k, m)
        {
            const char *id = json_string_value(json_object_get(m, "id"));
            const char *status = json_string_value(json_object_get(m, "status"));

            if (id && !strcmp(id, resumed[i]))
                done = status && !strcmp(status, "complete");
        }
        if (!done)
            fail(iter, "answer %s, streaming at a crash, did not complete", resumed[i]);
        else
            passed++;
    }
    json_decref(st);
}

/* ---- the binary's own errors and retention ------------------------------------------
 */

/* Run the server binary with `args` (shell words); its output (both streams). */
static int run_binary(const char *args, char *out, size_t n)
{
    const char *bin = getenv("RX_SERVER") ? getenv("RX_SERVER") : "build/reflexor";
    char cmd[1024];
    size_t len = 0;
    FILE *p;
    int status;

    snprintf(cmd, sizeof(cmd), "timeout 20 %s --listen 127.0.0.1:0 %s 2>&1", bin, args);
    p = popen(cmd, "r");
    if (!p)
        return -1;
    while (len + 1 < n && fgets(out + len, (int)(n - len), p))
        len += strlen(out + len);
    out[len] = '\0';
    status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int count_lines(const char *s)
{
    int n = 0;

    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static long long sql_count(const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    long long n = -1;

    if (sqlite3_open_v2(dbpath, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK) {
        int rc = sqlite3_step(q);

        n = rc == SQLITE_ROW ? sqlite3_column_int64(q, 0) : rc == SQLITE_DONE ? 0 : -1;
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    return n;
}

/*
 * A garbage file and a path under a regular file: the server exits at once
 * with one line naming the file. Then retention through `reflexor --gc`: a
 * session made old is removed with its rows, the conversation is kept.
 */
static void check_cli(int iter, const char *old_sid)
{
    char path[256], args[600], out[4096], sql[512], cfg[256];
    long long inputs_before, inputs_after;
    FILE *f;
    int rc;

    snprintf(path, sizeof(path), "%s/garbage.db", tmpdir);
    f = fopen(path, "w");
    for (int i = 0; f && i < 3000; i++)
        fputc((int)(rnd() & 0xff), f);
    if (f)
        fclose(f);
    snprintf(args, sizeof(args), "--db '%s'", path);
    rc = run_binary(args, out, sizeof(out));
    if (rc == 0 || rc == 124 || !strstr(out, path) || count_lines(out) != 1)
        fail(iter, "a garbage database: exit %d, output: %s", rc, out);
    else
        passed++;
    unlink(path);

    snprintf(path, sizeof(path), "%s/plain", tmpdir);
    f = fopen(path, "w");
    if (f)
        fclose(f);
    snprintf(args, sizeof(args), "--db '%s/plain/reflexor.db'", tmpdir);
    rc = run_binary(args, out, sizeof(out));
    if (rc == 0 || rc == 124 || !strstr(out, "plain/reflexor.db") ||
        count_lines(out) != 1)
        fail(iter, "a database under a regular file: exit %d, output: %s", rc, out);
    else
        passed++;
    unlink(path);

    if (!old_sid)
        return;
    snprintf(cfg, sizeof(cfg), "%s/retention.json", tmpdir);
    f = fopen(cfg, "w");
    if (f) {
        fputs("{\"retention\":{\"max_age_days\":1}}", f);
        fclose(f);
    }
    /* Make one session two days old; the conversation stays recent. */
    snprintf(sql, sizeof(sql),
             "UPDATE sessions SET created_at=1000, updated_at=strftime('%%s','now')*1000"
             "-2*86400000 WHERE id='%s' RETURNING 1",
             old_sid);
    check(sql_count(sql) == 1, iter, "a session made old");
    /* The log is `inputs` and `inputs_recent` (store/sqlite). */
    snprintf(sql, sizeof(sql),
             "SELECT (SELECT count(*) FROM inputs WHERE session_id='%s')"
             " + (SELECT count(*) FROM inputs_recent WHERE session_id='%s')",
             sid, sid);
    inputs_before = sql_count(sql);
    snprintf(args, sizeof(args), "--config '%s' --db '%s' --gc", cfg, dbpath);
    rc = run_binary(args, out, sizeof(out));
    printf("crash_loop: reflexor --gc: %s", out);
    check(rc == 0 && strstr(out, "removed 1 session") && !strstr(out, " 0 input"), iter,
          "--gc removes the old one and its inputs");
    inputs_after = sql_count(sql);
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM sessions WHERE id='%s'", old_sid);
    check(sql_count(sql) == 0, iter, "the old session is gone");
    snprintf(sql, sizeof(sql),
             "SELECT (SELECT count(*) FROM inputs WHERE session_id='%s')"
             " + (SELECT count(*) FROM inputs_recent WHERE session_id='%s')"
             " + (SELECT count(*) FROM snapshots WHERE session_id='%s')",
             old_sid, old_sid, old_sid);
    check(sql_count(sql) == 0, iter, "its rows are gone");
    check(inputs_before > 0 && inputs_after == inputs_before, iter,
          "the recent conversation is kept whole");
    unlink(cfg);
}

/* ---- main ------------------------------------------------------------------------- */

static int start(struct itest_server *s)
{
    const char *args[] = {"--db", dbpath, NULL};

    return itest_server_start(s, config_json, args);
}

static void cleanup_files(void)
{
    static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
    char p[300];

    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        snprintf(p, sizeof(p), "%s%s", dbpath, suffix[i]);
        unlink(p);
    }
    rmdir(tmpdir);
}

int main(int argc, char **argv)
{
    unsigned long seed = argc > 1 ? strtoul(argv[1], NULL, 10) : 1;
    int iterations = argc > 2 ? atoi(argv[2]) : 40;
    struct itest_server s;
    json_t *ans = NULL;
    char old_sid[80] = "";
    int kills = 0, early = 0, aimed = 0;
    long t0 = now_ms();

    rng = seed * 0x9E3779B97F4A7C15ULL + 1;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rx-crash-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("crash_loop: mkdtemp");
        return 1;
    }
    snprintf(dbpath, sizeof(dbpath), "%s/reflexor.db", tmpdir);
    printf("crash_loop: seed %lu, %d iterations, database %s\n", seed, iterations,
           dbpath);

    if (start(&s)) {
        fprintf(stderr, "crash_loop: the server did not start\n");
        return 1;
    }
    if (post_json(&s, "/api/reflexor/sessions", "{}", &ans) != 201 ||
        !json_string_value(json_object_get(ans, "id"))) {
        fprintf(stderr, "crash_loop: cannot create a session\n");
        itest_server_stop(&s);
        return 1;
    }
    snprintf(sid, sizeof(sid), "%s", json_string_value(json_object_get(ans, "id")));
    json_decref(ans);

    for (int iter = 0; iter < iterations; iter++) {
        struct killer k = {.pid = s.pid};

        /* Mostly mid-conversation, sometimes right as recovered effects start. */
        bool at_start = iter > 0 && rnd_int(0, 9) < 2;

        k.delay_ms = at_start ? rnd_int(0, 60) : rnd_int(60, 1500);
        /* A quarter of the kills aim at a POST in flight. */
        if (!at_start && iter > 0 && rnd_int(0, 3) == 0) {
            k.at_post = rnd_int(1, 3);
            k.delay_us = rnd_int(0, 3000);
        }
        __atomic_store_n(&posts_started, 0, __ATOMIC_RELEASE);
        if (iter > 0) {
            if (start(&s)) {
                fail(iter, "the server did not restart on the database");
                break;
            }
            k.pid = s.pid;
            if (!at_start)
                check_recovered(&s, iter);
        }
        if (pthread_create(&k.thread, NULL, killer_main, &k)) {
            fail(iter, "cannot start the killer");
            break;
        }
        if (!at_start)
            drive(&s, iter, &k);
        pthread_join(k.thread, NULL);
        kills++;
        early += at_start;
        aimed += k.at_post > 0;
        (void)itest_server_stop(&s); /* reaps the killed server */
    }

    /* Left alone, it must finish the conversation by itself. */
    if (!start(&s)) {
        for (int i = 0; i < n_msgs; i++)
            if (!msgs[i].acked)
                (void)post_message(&s, i);
        check_recovered(&s, iterations);
        check_finished(&s, iterations);
        /* A second session, to be made old for the retention check. */
        if (post_json(&s, "/api/reflexor/sessions", "{}", &ans) == 201 &&
            json_string_value(json_object_get(ans, "id")))
            snprintf(old_sid, sizeof(old_sid), "%s",
                     json_string_value(json_object_get(ans, "id")));
        json_decref(ans);
        if (old_sid[0]) {
            char path[256];

            snprintf(path, sizeof(path), PREFIX "%s/moorex", old_sid);
            check(post_json(&s, path,
                            "{\"type\":\"user-send-message\",\"content\":\"hi\"}",
                            NULL) == 200,
                  iterations, "a message to the session that will be old");
        }
        check(itest_server_stop(&s) == 0, iterations, "a clean stop at the end");
        check_cli(iterations, old_sid[0] ? old_sid : NULL);
    } else {
        fail(iterations, "the server did not start for the final check");
    }
    printf("crash_loop: %d kill -9 (%d as recovery starts, %d aimed at a POST), %d "
           "messages posted, %lld acknowledged, %d answers resumed after a crash, "
           "%.1f s\n",
           kills, early, aimed, n_msgs, (long long)acked_inputs, n_resumed,
           (double)(now_ms() - t0) / 1000.0);
    printf("crash_loop: %d POSTs cut by a kill, %d of them stored before the kill "
           "(then answered 200 to the retry)\n",
           n_cut, n_cut_stored);
    printf("crash_loop: %d passed, %d failed\n", passed, failed);
    if (!failed)
        cleanup_files();
    else
        printf("crash_loop: database kept at %s\n", dbpath);
    curl_global_cleanup();
    return failed ? 1 : 0;
}
