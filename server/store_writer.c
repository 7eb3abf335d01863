/*
 * store_writer - the store's write side: the sessions' last seqs, the queue,
 * the writer thread and its group commit (inputs and snapshots into
 * inputs_recent, moved into `inputs` in bulk), the notifier thread that
 * answers each write in queue order, the checkpointer thread with its own
 * connection, and creating and deleting sessions. Private to server/store*.c
 * through store_internal.h; see store.h for the design.
 */
#include "server/store.h"
#include "server/store_internal.h"
#include "server/pgstore.h"
#include "base/now.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "state_machine/rx_buf.h"

/* The longest a batch waits for the writes the last commit answered (gather). */
#define STORE_GATHER_MAX_NS 1000000
/* WAL frames past which the checkpointer copies the WAL into the file. */
#define STORE_CHECKPOINT_FRAMES 4000
/* How many times in a row it copies what commits added meanwhile. */
#define STORE_CHECKPOINT_PASSES 8

/* ---- the sessions' last seqs -------------------------------------------------- */

/* FNV-1a: ids are short and chosen by the server or a client; no secret needed. */
static size_t sid_hash(const char *sid)
{
    uint64_t h = 1469598103934665603ULL;

    for (; *sid; sid++)
        h = (h ^ (unsigned char)*sid) * 1099511628211ULL;
    return (size_t)h;
}

static struct last_seq *last_find(const struct last_map *m, const char *sid)
{
    if (!m->n_buckets)
        return NULL;
    for (struct last_seq *e = m->buckets[sid_hash(sid) % m->n_buckets]; e; e = e->next)
        if (!strcmp(e->sid, sid))
            return e;
    return NULL;
}

/* A new entry (sid not in the map). NULL on ENOMEM, the map unchanged. */
static struct last_seq *last_add(struct last_map *m, const char *sid, int64_t seq)
{
    size_t len = strlen(sid), h;
    struct last_seq *e;

    if (m->count >= m->n_buckets) { /* load <= 1: grow twofold */
        size_t n = m->n_buckets ? m->n_buckets * 2 : 64;
        struct last_seq **b = calloc(n, sizeof(*b));

        if (!b)
            return NULL;
        for (size_t i = 0; i < m->n_buckets; i++) {
            while (m->buckets[i]) {
                struct last_seq *x = m->buckets[i];

                m->buckets[i] = x->next;
                h = sid_hash(x->sid) % n;
                x->next = b[h];
                b[h] = x;
            }
        }
        free(m->buckets);
        m->buckets = b;
        m->n_buckets = n;
    }
    e = malloc(sizeof(*e) + len + 1);
    if (!e)
        return NULL;
    memcpy(e->sid, sid, len + 1);
    e->seq = seq;
    h = sid_hash(sid) % m->n_buckets;
    e->next = m->buckets[h];
    m->buckets[h] = e;
    m->count++;
    return e;
}

void store__last_drop(struct last_map *m, const char *sid)
{
    if (!m->n_buckets)
        return;
    for (struct last_seq **p = &m->buckets[sid_hash(sid) % m->n_buckets]; *p;
         p = &(*p)->next) {
        if (!strcmp((*p)->sid, sid)) {
            struct last_seq *e = *p;

            *p = e->next;
            free(e);
            m->count--;
            return;
        }
    }
}

void store__last_release(struct last_map *m)
{
    for (size_t i = 0; i < m->n_buckets; i++) {
        while (m->buckets[i]) {
            struct last_seq *e = m->buckets[i];

            m->buckets[i] = e->next;
            free(e);
        }
    }
    free(m->buckets);
    memset(m, 0, sizeof(*m));
}

/* ---- sessions ------------------------------------------------------------------ */

int store_create_session(struct store *st, const char *sid, int64_t created_at)
{
    if (st->pg)
        return pgstore_create_session(st->pg, sid, created_at);
    sqlite3_stmt *q;
    int rc, err;

    pthread_mutex_lock(&st->lock);
    if ((err = store__tx_begin(st)))
        goto out_unlock;
    q = store__stmt(&st->w, Q_SESSION_INSERT);
    store__bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, created_at);
    if ((rc = store__run(q))) {
        err = store__sql_fail(st, &st->w, rc, "creating a session");
        store__tx_rollback(st);
        goto out_unlock;
    }
    err = store__tx_commit(st);
out_unlock:
    pthread_mutex_unlock(&st->lock);
    return err;
}

/* Delete the rows of one session. Inside a transaction. */
static int delete_rows(struct store *st, const char *sid)
{
    static const int ids[] = {Q_INPUTS_DELETE, Q_RECENT_DELETE,  Q_SNAPSHOTS_DELETE,
                              Q_DOCS_DELETE,   Q_PENDING_DELETE, Q_SESSION_DELETE};
    int rc;

    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        sqlite3_stmt *q = store__stmt(&st->w, ids[i]);

        store__bind_text(q, 1, sid, strlen(sid));
        if ((rc = store__run(q)))
            return store__sql_fail(st, &st->w, rc, "deleting a session");
    }
    return store__index_clamp(st);
}

int store_delete_session(struct store *st, const char *sid)
{
    if (st->pg)
        return pgstore_delete_session(st->pg, sid);
    int err;

    pthread_mutex_lock(&st->lock);
    if ((err = store__tx_begin(st)))
        goto out_unlock;
    if ((err = store__session_get(st, &st->w, sid, NULL)) ||
        (err = delete_rows(st, sid))) {
        store__tx_rollback(st);
        goto out_unlock;
    }
    if (!(err = store__tx_commit(st)))
        store__last_drop(&st->last, sid); /* no row of it is left */
out_unlock:
    pthread_mutex_unlock(&st->lock);
    return err;
}

/* ---- group commit ------------------------------------------------------------------ */

/*
 * The rows of one write, inside the batch's transaction, and the session's
 * last seq in the map, noted in `u` to be put back if the transaction fails
 * (*undo_n counts them). A write refused on its own (no such session, a seq
 * that does not follow: -ENOENT, -EEXIST, -EINVAL) is refused before
 * anything of it is written: its error goes to w->err and this returns 0, so
 * the others of the batch go on. Any other error fails the whole transaction
 * and is returned. lock held.
 */
static int append_rows(struct store *st, struct store_write *w, struct last_undo *u,
                       size_t *undo_n)
{
    struct store_conn *c = &st->w;
    struct last_seq *e = last_find(&st->last, w->sid);
    sqlite3_stmt *q;
    int64_t last = e ? e->seq : 0;
    int rc;

    /* Not in the map: none of its rows is in inputs_recent (see struct last_seq). */
    if (!e) {
        int64_t exists = 0;

        q = store__stmt(c, Q_APPEND_CHECK);
        store__bind_text(q, 1, w->sid, strlen(w->sid));
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
            exists = sqlite3_column_int64(q, 0);
            last = sqlite3_column_int64(q, 1);
        }
        store__done(q);
        if (rc != SQLITE_ROW)
            return store__sql_fail(st, c, rc, "checking an input");
        if (!exists) {
            store__set_error(st, "no session '%s'", w->sid);
            w->err = -ENOENT;
            return 0;
        }
    }
    /* A gap would make the log unloadable at the next start: refuse it now. */
    if (w->seq != last + 1) {
        store__set_error(st, "session '%s': input %lld does not follow %lld", w->sid,
                         (long long)w->seq, (long long)last);
        w->err = w->seq <= last ? -EEXIST : -EINVAL;
        return 0;
    }
    if ((rc = store__put_row(c, Q_RECENT_INSERT, w->sid, w->seq, w->input, w->input_len)))
        return store__sql_fail(st, c, rc, "storing an input");
    q = store__stmt(c, Q_SESSION_TOUCH);
    store__bind_text(q, 1, w->sid, strlen(w->sid));
    sqlite3_bind_int64(q, 2, w->updated_at);
    if ((rc = store__run(q)))
        return store__sql_fail(st, c, rc, "updating the session");
    if (w->snapshot) {
        if ((rc = store__put_row(c, Q_SNAPSHOT_INSERT, w->sid, w->seq, w->snapshot,
                                 w->snapshot_len)))
            return store__sql_fail(st, c, rc, "storing a snapshot");
        /* Only the newest snapshot is kept: storage grows with inputs alone. */
        q = store__stmt(c, Q_SNAPSHOT_PRUNE);
        store__bind_text(q, 1, w->sid, strlen(w->sid));
        sqlite3_bind_int64(q, 2, w->seq);
        if ((rc = store__run(q)))
            return store__sql_fail(st, c, rc, "pruning snapshots");
    }
    u->created = !e;
    u->old = last;
    if (!e && !(e = last_add(&st->last, w->sid, w->seq))) {
        store__set_error(st, "out of memory storing an input");
        return -ENOMEM;
    }
    e->seq = w->seq;
    u->e = e;
    (*undo_n)++;
    return 0;
}

/* A transaction failed: the map as it was before it. lock held. */
static void last_undo(struct store *st, size_t n)
{
    while (n--) {
        struct last_undo *u = &st->undo[n];

        if (u->created)
            store__last_drop(&st->last, u->e->sid);
        else
            u->e->seq = u->old;
    }
}

/*
 * v[0..n) in one transaction and one fsync. 0, or the error that failed the
 * transaction, which each write not refused on its own gets as its err:
 * nothing of any of them is stored. lock held.
 */
static int commit_some(struct store *st, struct store_write **v, size_t n)
{
    int err = store__tx_begin(st);
    size_t i, undo_n = 0;

    for (i = 0; !err && i < n; i++)
        err = append_rows(st, v[i], &st->undo[undo_n], &undo_n);
    if (!err)
        err = store__tx_commit(st);
    else
        store__tx_rollback(st);
    if (err) {
        last_undo(st, undo_n);
        for (i = 0; i < n; i++)
            if (!v[i]->err)
                v[i]->err = err;
        return err;
    }
    st->recent_rows += (int64_t)undo_n;
    return 0;
}

/*
 * Move inputs_recent into `inputs`, in one transaction: each session's page
 * of `inputs` is written once for many inputs. 0 or the error (the rows stay
 * where they are, as safe). lock held.
 */
int store__recent_merge(struct store *st)
{
    int rc, err;

    if ((err = store__tx_begin(st)))
        return err;
    /* What is not indexed yet is noted, not indexed: merges stay as cheap as
       they were (store_search.c). */
    if ((err = store__index_defer(st))) {
        store__tx_rollback(st);
        goto out_retry;
    }
    if ((rc = store__run(store__stmt(&st->w, Q_RECENT_MERGE))) ||
        (rc = store__run(store__stmt(&st->w, Q_RECENT_CLEAR))) ||
        (rc = store__run(store__stmt(&st->w, Q_INDEX_MARK_CLAMP)))) {
        err = store__sql_fail(st, &st->w, rc, "moving recent inputs");
        store__tx_rollback(st);
        goto out_retry;
    }
    if (!(err = store__tx_commit(st)))
        st->recent_rows = 0;
out_retry:
    /* After a failure, not at every batch: once as many rows again came. */
    st->merge_at = st->recent_rows + STORE_RECENT_MERGE;
    return err;
}

/*
 * At open: inputs_recent holds what a process that did not close cleanly left
 * there. Move it (reads then never scan much of it); if that cannot be done
 * now, note each of its sessions' last seq instead. 0 or an error. lock held
 * or not yet shared.
 */
int store__recent_open(struct store *st)
{
    sqlite3_stmt *q;
    int rc, err;

    if ((err = store__query_i64(st, &st->w, Q_RECENT_COUNT, NULL, &st->recent_rows)) ||
        !st->recent_rows || !store__recent_merge(st))
        return err;
    q = store__stmt(&st->w, Q_RECENT_LAST);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (!last_add(&st->last, (const char *)sqlite3_column_text(q, 0),
                      sqlite3_column_int64(q, 1))) {
            store__done(q);
            return -ENOMEM;
        }
    }
    store__done(q);
    return rc == SQLITE_DONE ? 0
                             : store__sql_fail(st, &st->w, rc, "reading recent inputs");
}

/*
 * One batch. When it found no room, each write is tried again alone: one
 * input too big for the room left must not fail the small ones beside it.
 */
static void commit_batch(struct store *st, struct store_write **v, size_t n)
{
    __atomic_add_fetch(&st->commits, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&st->writes, (int64_t)n, __ATOMIC_RELAXED);
    pthread_mutex_lock(&st->lock);
    if (commit_some(st, v, n) == -ENOSPC && n > 1) {
        for (size_t i = 0; i < n; i++) {
            if (v[i]->err != -ENOSPC)
                continue; /* refused on its own: the same again */
            v[i]->err = 0;
            (void)commit_some(st, &v[i], 1);
        }
    }
    pthread_mutex_unlock(&st->lock);
}

/* Nanoseconds on the monotonic clock. */
static int64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * Group commit's one judgement call: after a commit that synced, the writes
 * it answered come back within moments (clients send their next input), so
 * a batch that is still smaller than the last one waits a little for them:
 * until it is as big, or for at most half the last commit's time (capped by
 * STORE_GATHER_MAX_NS). One fsync then carries them all instead of two. A
 * commit that does not sync is cheap, and nothing waits for it. Only the
 * write that completes the batch wakes it (wake_at), not each one on the
 * way. qlock held.
 */
static void gather(struct store *st, size_t want, int64_t last_commit_ns)
{
    int64_t wait_ns = last_commit_ns / 2;
    struct timespec until;

    if (!st->durable || st->queued >= want || wait_ns <= 0)
        return;
    if (wait_ns > STORE_GATHER_MAX_NS)
        wait_ns = STORE_GATHER_MAX_NS;
    until = now_deadline(CLOCK_REALTIME, wait_ns);
    st->wake_at = want;
    while (st->queued < want && !st->stopping &&
           pthread_cond_timedwait(&st->queued_cond, &st->qlock, &until) == 0)
        ;
    st->wake_at = 1; /* wait_for_writes wants the first one */
}

/*
 * The writer: take everything queued (up to STORE_BATCH_MAX), commit it as
 * one transaction, and hand the batch to the notifier, which calls each
 * write's `done` in queue order while the next batch commits. What is queued
 * while one commit syncs is the next batch. Idle, it catches up the
 * full-text index (wait_for_writes). At store_close it empties the queue,
 * then tells the notifier it is done.
 */
/*
 * Wait, qlock held, until something is queued or the store stops. With the
 * full-text index behind (`index_due`), a wait of STORE_INDEX_IDLE_MS with
 * nothing queued is the writer's idle time: one step of indexing then
 * (store__index_idle), with qlock let go, so a commit waits at most one
 * step. *index_due is the writer thread's own.
 */
static void wait_for_writes(struct store *st, bool *index_due)
{
    while (!st->head && !st->stopping) {
        struct timespec until;
        int r;

        if (!*index_due) {
            pthread_cond_wait(&st->queued_cond, &st->qlock);
            continue;
        }
        until = now_deadline(CLOCK_REALTIME, STORE_INDEX_IDLE_MS * NOW_NS_PER_MS);
        if (pthread_cond_timedwait(&st->queued_cond, &st->qlock, &until) != ETIMEDOUT ||
            st->head || st->stopping)
            continue;
        pthread_mutex_unlock(&st->qlock);
        pthread_mutex_lock(&st->lock);
        r = store__index_idle(st);
        pthread_mutex_unlock(&st->lock);
        /* Done, or failed: again once something new is committed. */
        *index_due = r > 0;
        pthread_mutex_lock(&st->qlock);
    }
}

void *store__writer_main(void *arg)
{
    struct store *st = arg;
    struct store_write *batch[STORE_BATCH_MAX];
    size_t last_n = 0;
    int64_t last_ns = 0;
    bool index_due = true; /* what a last run left unindexed */

    for (;;) {
        size_t n = 0;
        int64_t t0;

        pthread_mutex_lock(&st->qlock);
        wait_for_writes(st, &index_due);
        gather(st, last_n, last_ns);
        while (st->head && n < STORE_BATCH_MAX) {
            batch[n++] = st->head;
            st->head = st->head->next;
        }
        if (!st->head)
            st->tail = &st->head;
        st->queued -= n;
        pthread_mutex_unlock(&st->qlock);
        if (!n)
            break; /* stopping, and nothing is left */
        t0 = mono_ns();
        commit_batch(st, batch, n);
        last_ns = mono_ns() - t0;
        last_n = n;
        index_due = true;
        /* To the notifier, in order: the writes are linked again as queued. */
        for (size_t i = 0; i + 1 < n; i++)
            batch[i]->next = batch[i + 1];
        store_notifier_push(&st->notifier, batch[0], batch[n - 1]);
        /* Between two batches, while the notifier answers this one. */
        pthread_mutex_lock(&st->lock);
        if (st->recent_rows >= st->merge_at)
            (void)store__recent_merge(st); /* the rows stay where they are, as safe */
        pthread_mutex_unlock(&st->lock);
    }
    store_notifier_end(&st->notifier);
    return NULL;
}

/*
 * SQLite's WAL hook on the writer's connection, after each commit, with the
 * frames now in the WAL: past STORE_CHECKPOINT_FRAMES, wake the
 * checkpointer. Checkpoints never run on the writer (wal_autocheckpoint is
 * off there): copying the WAL into the file and syncing it would hold up
 * every input queued meanwhile.
 */
int store__wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    struct store *st = arg;

    (void)db;
    (void)name;
    if (frames >= STORE_CHECKPOINT_FRAMES) {
        pthread_mutex_lock(&st->cklock);
        st->ck_due = true;
        pthread_cond_signal(&st->ckcond);
        pthread_mutex_unlock(&st->cklock);
    }
    return SQLITE_OK;
}

/*
 * The checkpointer: a connection of its own that copies the WAL into the
 * database file (PASSIVE: it never blocks the writer or a reader, and does
 * what it can), so the writer can start the WAL over. A failure leaves the
 * frames in the WAL, where they are as safe; the next wake tries again.
 */
void *store__checkpointer_main(void *arg)
{
    struct store *st = arg;

    for (;;) {
        pthread_mutex_lock(&st->cklock);
        while (!st->ck_due && !st->ck_stop)
            pthread_cond_wait(&st->ckcond, &st->cklock);
        if (st->ck_stop) {
            pthread_mutex_unlock(&st->cklock);
            return NULL;
        }
        st->ck_due = false;
        pthread_mutex_unlock(&st->cklock);
        /* Again while commits add frames during the copy, a few times: once
           it has caught up, the writer starts the WAL over, in place. */
        for (int i = 0; i < STORE_CHECKPOINT_PASSES; i++) {
            int log = 0, done_frames = 0;

            if (sqlite3_wal_checkpoint_v2(st->ck, "main", SQLITE_CHECKPOINT_PASSIVE, &log,
                                          &done_frames) != SQLITE_OK ||
                done_frames >= log)
                break;
        }
    }
}

void store_write_queue(struct store *st, struct store_write *w)
{
    if (st->pg) {
        pgstore_write_queue(st->pg, w);
        return;
    }
    w->next = NULL;
    w->err = 0;
    pthread_mutex_lock(&st->qlock);
    *st->tail = w;
    st->tail = &w->next;
    st->queued++;
    if (st->queued >= st->wake_at)
        pthread_cond_signal(&st->queued_cond);
    pthread_mutex_unlock(&st->qlock);
}

void store_commit_counts(struct store *st, int64_t *commits, int64_t *writes)
{
    if (st->pg) {
        pgstore_commit_counts(st->pg, commits, writes);
        return;
    }
    if (commits)
        *commits = __atomic_load_n(&st->commits, __ATOMIC_RELAXED);
    if (writes)
        *writes = __atomic_load_n(&st->writes, __ATOMIC_RELAXED);
}

/* store_append's write and the caller waiting for it. */
struct append_wait {
    struct store_write w; /* first: `done` gets its address */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool finished;
};

static void append_done(struct store_write *w, int err)
{
    struct append_wait *a = (struct append_wait *)w;

    (void)err; /* also in w->err */
    pthread_mutex_lock(&a->lock);
    a->finished = true;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
}

int store_append(struct store *st, const char *sid, int64_t seq,
                 const struct rx_input *in, const struct rx_state *after,
                 int snapshot_every)
{
    struct append_wait a = {
        .w = {.sid = sid, .seq = seq, .updated_at = in->timestamp, .done = append_done}};
    struct rx_buf input, snap;
    int err;

    rx_buf_init(&input, RX_BUF_SMALL_MAX);
    rx_buf_init(&snap, RX_BUF_STATE_MAX);
    if ((err = rx_input_encode(in, &input))) {
        store__set_error(st, "session '%s': cannot encode input %lld", sid,
                         (long long)seq);
        goto out_release;
    }
    if (snapshot_every > 0 && seq % snapshot_every == 0) {
        if ((err = rx_state_encode(after, &snap))) {
            store__set_error(st, "session '%s': cannot encode the state at %lld", sid,
                             (long long)seq);
            goto out_release;
        }
        a.w.snapshot = snap.data;
        a.w.snapshot_len = snap.len;
    }
    a.w.input = input.data;
    a.w.input_len = input.len;
    pthread_mutex_init(&a.lock, NULL);
    pthread_cond_init(&a.cond, NULL);
    store_write_queue(st, &a.w);
    pthread_mutex_lock(&a.lock);
    while (!a.finished)
        pthread_cond_wait(&a.cond, &a.lock);
    pthread_mutex_unlock(&a.lock);
    pthread_cond_destroy(&a.cond);
    pthread_mutex_destroy(&a.lock);
    err = a.w.err;
out_release:
    rx_buf_release(&input);
    rx_buf_release(&snap);
    return err == -E2BIG ? -ENOMEM : err;
}
