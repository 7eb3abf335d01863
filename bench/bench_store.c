/*
 * bench_store - what the durable input log costs: inputs per second through
 * rx_machine_apply alone (the server with --db :memory:) and through
 * rx_machine_apply + store_append on a file (fsync at every commit, the
 * default, and without fsync), plus the bytes the file spends per input; and
 * group commit: one input of every session queued together
 * (store_write_queue), as the server queues the inputs that arrive together.
 *
 *   build/bench/bench_store [INPUTS [SESSIONS [SNAPSHOT_EVERY]]]
 *
 * The inputs are a scripted conversation (user message, tool call, tool
 * result, answer start, answer complete) spread round-robin over SESSIONS
 * sessions, each input stamped strictly later than the one before, as the
 * server stamps them. The file goes in a temporary directory under
 * $TMPDIR (default /tmp), removed afterwards.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pthread.h>

#include <jansson.h>
#include <sqlite3.h>

#include "store/store.h"
#include "state_machine/rx_machine.h"

struct run {
    const char *name;
    const char *path; /* NULL: no store */
    bool durable;
    bool grouped; /* a round of one input per session queued together */
    double seconds;
    int64_t inputs, bytes, json_bytes;
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Input k of one session (0-based) at time ts. NEW reference. */
static json_t *make_input(int k, long long ts)
{
    int r = k / 5;
    char id[32], params[64], text[96];

    switch (k % 5) {
    case 0:
        snprintf(id, sizeof(id), "u%d", r);
        snprintf(text, sizeof(text), "What is %d times 7, and why does it matter?", r);
        return json_pack("{s:s, s:I, s:s, s:s}", "type", "user-send-message", "timestamp",
                         ts, "messageId", id, "content", text);
    case 1:
        snprintf(id, sizeof(id), "call_%d", r);
        snprintf(params, sizeof(params), "{\"expression\":\"%d*7\"}", r);
        return json_pack("{s:s, s:I, s:I, s:{s:{s:s, s:s}}}", "type", "brain-call-tools",
                         "timestamp", ts, "calledBrainAt", ts - 1, "toolCalls", id,
                         "name", "calculator", "parameters", params);
    case 2:
        snprintf(id, sizeof(id), "call_%d", r);
        snprintf(text, sizeof(text), "%d", r * 7);
        return json_pack("{s:s, s:I, s:s, s:s}", "type", "toolkit-respond", "timestamp",
                         ts, "toolCallId", id, "result", text);
    case 3:
        snprintf(id, sizeof(id), "a%d", r);
        return json_pack("{s:s, s:I, s:I, s:s}", "type", "brain-send-message-start",
                         "timestamp", ts, "calledBrainAt", ts - 1, "messageId", id);
    default:
        snprintf(id, sizeof(id), "a%d", r);
        snprintf(text, sizeof(text),
                 "The calculator says %d. It matters because the question asked.", r * 7);
        return json_pack("{s:s, s:I, s:I, s:s, s:s}", "type",
                         "brain-send-message-complete", "timestamp", ts, "calledBrainAt",
                         ts - 2, "messageId", id, "content", text);
    }
}

/* Parse every input once up front, so the runs time apply + append only. */
static struct rx_input *make_inputs(int n, int sessions)
{
    struct rx_input *v = calloc((size_t)n, sizeof(*v));

    if (!v)
        return NULL;
    for (int i = 0; i < n; i++) {
        json_t *j = make_input(i / sessions, 1700000000000LL + i);
        const char *field = NULL;

        if (!j || rx_input_parse(j, &v[i], &field, NULL)) {
            fprintf(stderr, "bench_store: input %d does not parse (%s)\n", i,
                    field ? field : "?");
            exit(1);
        }
        json_decref(j);
    }
    return v;
}

/* Session ids as long as the server's (UUIDs): the log repeats them per row. */
static void session_id(char *buf, size_t n, int s)
{
    snprintf(buf, n, "%08x-0000-4000-8000-%012x", (unsigned)s * 2654435761u, (unsigned)s);
}

/* Bytes of the snapshots in a closed database file, read directly. */
static int64_t snapshot_bytes(const char *path)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    int64_t n = -1;

    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT coalesce(sum(length(state)), 0) FROM snapshots",
                           -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        n = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return n;
}

/* One round's writes and the wait for them (the grouped runs). */
struct round {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int pending, failed;
};

struct round_write {
    struct store_write w; /* first: `done` gets its address */
    struct round *round;
    struct rx_buf text, snap;
    char sid[48];
};

static void round_done(struct store_write *w, int err)
{
    struct round *r = ((struct round_write *)w)->round;

    pthread_mutex_lock(&r->lock);
    r->failed |= err != 0;
    if (--r->pending == 0)
        pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

/* Queue inputs [i, i + k) (one per session) together and wait for them. */
static int append_round(struct store *db, struct round_write *rw,
                        const struct rx_input *in, const struct rx_state *st, int i,
                        int k, int sessions, int snapshot_every)
{
    struct round r = {.pending = k};

    pthread_mutex_init(&r.lock, NULL);
    pthread_cond_init(&r.cond, NULL);
    for (int j = 0; j < k; j++) {
        struct round_write *x = &rw[j];
        int64_t seq = (i + j) / sessions + 1;

        rx_buf_reset(&x->text);
        rx_buf_reset(&x->snap);
        if (rx_input_encode(&in[i + j], &x->text) ||
            (snapshot_every > 0 && seq % snapshot_every == 0 &&
             rx_state_encode(&st[(i + j) % sessions], &x->snap)))
            return -ENOMEM;
        session_id(x->sid, sizeof(x->sid), (i + j) % sessions);
        x->round = &r;
        x->w = (struct store_write){.sid = x->sid,
                                    .seq = seq,
                                    .updated_at = in[i + j].timestamp,
                                    .input = x->text.data,
                                    .input_len = x->text.len,
                                    .snapshot = x->snap.len ? x->snap.data : NULL,
                                    .snapshot_len = x->snap.len,
                                    .done = round_done};
        store_write_queue(db, &x->w);
    }
    pthread_mutex_lock(&r.lock);
    while (r.pending)
        pthread_cond_wait(&r.cond, &r.lock);
    pthread_mutex_unlock(&r.lock);
    pthread_cond_destroy(&r.cond);
    pthread_mutex_destroy(&r.lock);
    return r.failed ? -EIO : 0;
}

static int run_one(struct run *r, const struct rx_input *in, int n, int sessions,
                   int snapshot_every)
{
    struct round_write *rw = calloc((size_t)sessions, sizeof(*rw));
    struct rx_state *st = calloc((size_t)sessions, sizeof(*st));
    struct rx_error err;
    char sid[48];
    struct store *db = NULL;
    double t0;
    int rc = -1;

    if (!st || !rw) {
        free(st);
        free(rw);
        return -ENOMEM;
    }
    for (int s = 0; s < sessions; s++) {
        rx_buf_init(&rw[s].text, RX_BUF_SMALL_MAX);
        rx_buf_init(&rw[s].snap, RX_BUF_STATE_MAX);
        if (rx_state_init(&st[s]))
            goto out_release;
    }
    if (r->path) {
        if (!(db = store_open(r->path, &err))) {
            fprintf(stderr, "bench_store: %s\n", err.text);
            goto out_release;
        }
        if (store_set_durable(db, r->durable))
            goto out_close;
        for (int s = 0; s < sessions; s++) {
            session_id(sid, sizeof(sid), s);
            if (store_create_session(db, sid, NULL, 1))
                goto out_close;
        }
    }
    t0 = now_s();
    for (int i = 0; i < n; i++) {
        int s = i % sessions;
        struct rx_outcome out;

        if (rx_machine_apply(&st[s], &in[i], &out) || out.verdict != RX_ACCEPTED) {
            fprintf(stderr, "bench_store: input %d not accepted\n", i);
            goto out_close;
        }
        if (db && r->grouped) {
            /* The round is queued once every session's input is applied. */
            if (s == sessions - 1 || i == n - 1) {
                int first = i - s;

                if (append_round(db, rw, in, st, first, i - first + 1, sessions,
                                 snapshot_every)) {
                    fprintf(stderr, "bench_store: round at %d failed\n", first);
                    goto out_close;
                }
            }
        } else if (db) {
            session_id(sid, sizeof(sid), s);
            if (store_append(db, sid, i / sessions + 1, &in[i], &st[s], snapshot_every)) {
                store_last_error(db, &err);
                fprintf(stderr, "bench_store: append %d: %s\n", i, err.text);
                goto out_close;
            }
        }
    }
    r->seconds = now_s() - t0;
    r->inputs = n;
    if (db && store_stats(db, &r->inputs, &r->bytes))
        goto out_close;
    rc = 0;

out_close:
    store_close(db);
out_release:
    for (int s = 0; s < sessions; s++) {
        rx_state_release(&st[s]);
        rx_buf_release(&rw[s].text);
        rx_buf_release(&rw[s].snap);
    }
    free(st);
    free(rw);
    return rc;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    int sessions = argc > 2 ? atoi(argv[2]) : 20;
    int snapshot_every = argc > 3 ? atoi(argv[3]) : 200;
    const char *tmp = getenv("TMPDIR");
    char dir[256], path_full[300], path_normal[300], path_group[300];
    struct rx_input *in;
    int64_t json_bytes = 0;
    struct rx_buf b;
    int rc = 0;

    if (n <= 0 || sessions <= 0 || n < sessions) {
        fprintf(stderr, "usage: bench_store [INPUTS [SESSIONS [SNAPSHOT_EVERY]]]\n");
        return 2;
    }
    snprintf(dir, sizeof(dir), "%s/rx-bench-store-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("bench_store: mkdtemp");
        return 1;
    }
    snprintf(path_full, sizeof(path_full), "%s/full.db", dir);
    snprintf(path_normal, sizeof(path_normal), "%s/normal.db", dir);
    snprintf(path_group, sizeof(path_group), "%s/group.db", dir);
    in = make_inputs(n, sessions);
    if (!in)
        return 1;
    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    for (int i = 0; i < n; i++) {
        rx_buf_reset(&b);
        if (!rx_input_encode(&in[i], &b))
            json_bytes += (int64_t)b.len;
    }
    rx_buf_release(&b);

    struct run runs[] = {
        {"no store (--db :memory:)", NULL, false, false, 0, 0, 0, 0},
        {"store, fsync each commit", path_full, true, false, 0, 0, 0, 0},
        {"store, no fsync", path_normal, false, false, 0, 0, 0, 0},
        {"store, fsync, grouped", path_group, true, true, 0, 0, 0, 0},
    };
    printf("bench_store: %d inputs over %d sessions, snapshot every %d; "
           "input JSON %.1f bytes on average\n",
           n, sessions, snapshot_every, (double)json_bytes / n);
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        if (run_one(&runs[i], in, n, sessions, snapshot_every)) {
            rc = 1;
            continue;
        }
        printf("  %-26s %10.0f inputs/s", runs[i].name, n / runs[i].seconds);
        if (runs[i].path) {
            int64_t snap = snapshot_bytes(runs[i].path);

            printf("   %6.1f bytes/input in the file (%lld inputs, %lld bytes, of which "
                   "%lld in snapshots)",
                   (double)runs[i].bytes / (double)runs[i].inputs,
                   (long long)runs[i].inputs, (long long)runs[i].bytes, (long long)snap);
        }
        printf("\n");
    }
    for (int i = 0; i < n; i++)
        rx_input_release(&in[i]);
    free(in);
    /* The direct read of snapshot_bytes() leaves -wal/-shm files behind. */
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        static const char *const suffix[] = {"", "-wal", "-shm"};
        char p[320];

        for (size_t k = 0; runs[i].path && k < sizeof(suffix) / sizeof(suffix[0]); k++) {
            snprintf(p, sizeof(p), "%s%s", runs[i].path, suffix[k]);
            unlink(p);
        }
    }
    rmdir(dir);
    return rc;
}
