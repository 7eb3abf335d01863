/*
 * sqlite_store_writer - the SQLite store's write side: the sessions' last
 * seqs, the queue, the writer thread and its group commit (inputs and
 * snapshots into inputs_recent, moved into `inputs` in bulk), the
 * checkpointer thread with its own connection, and creating and deleting
 * sessions; the notifier thread (store/store_notifier) answers each write in
 * queue order. Private to store/sqlite through sqlite_store_internal.h; see
 * store.h for the design.
 */
#include "store/store.h"
#include "store/sqlite/sqlite_store_internal.h"

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
    e->batch = 0; /* batches count from 1 */
    e->row_w = e->title_w = NULL;
    h = sid_hash(sid) % m->n_buckets;
    e->next = m->buckets[h];
    m->buckets[h] = e;
    m->count++;
    return e;
}

void sqlite_store__last_drop(struct last_map *m, const char *sid)
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

void sqlite_store__last_release(struct last_map *m)
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

/* A session to make, forget or copy: the arguments of a write transaction. */
struct session_args {
    const char *sid, *owner;
    int64_t created_at;
};

int sqlite_store__insert_session(struct sqlite_store *st, const char *sid,
                                 const char *owner, int64_t created_at, const char *what)
{
    sqlite3_stmt *q = sqlite_store__stmt(&st->w, Q_SESSION_INSERT);
    int rc;

    sqlite_store__bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, created_at);
    sqlite_store__bind_text(q, 3, owner, strlen(owner));
    rc = sqlite_store__run(q);
    return rc ? sqlite_store__sql_fail(st, &st->w, rc, what) : 0;
}

static int create_rows(struct sqlite_store *st, void *arg)
{
    struct session_args *a = arg;

    return sqlite_store__insert_session(st, a->sid, a->owner, a->created_at,
                                        "creating a session");
}

int sqlite_store_create_session(struct store *base, const char *sid, const char *owner,
                                int64_t created_at)
{
    struct session_args a = {sid, owner, created_at};

    return sqlite_store__write_tx(sqlite_store_of(base), create_rows, NULL, &a);
}

/* Delete the rows of one session. Inside a transaction. */
static int delete_rows(struct sqlite_store *st, void *arg)
{
    static const int ids[] = {Q_INPUTS_DELETE, Q_RECENT_DELETE,  Q_SNAPSHOTS_DELETE,
                              Q_DOCS_DELETE,   Q_PENDING_DELETE, Q_SESSION_DELETE};
    const char *sid = ((struct session_args *)arg)->sid;
    int rc, err;

    if ((err = sqlite_store__session_get(st, &st->w, sid, NULL)))
        return err;
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        sqlite3_stmt *q = sqlite_store__stmt(&st->w, ids[i]);

        sqlite_store__bind_text(q, 1, sid, strlen(sid));
        if ((rc = sqlite_store__run(q)))
            return sqlite_store__sql_fail(st, &st->w, rc, "deleting a session");
    }
    return sqlite_store__index_clamp(st);
}

/* No row of it is left: forget its last seq. */
static int forget_last(struct sqlite_store *st, void *arg)
{
    sqlite_store__last_drop(&st->last, ((struct session_args *)arg)->sid);
    return 0;
}

int sqlite_store_delete_session(struct store *base, const char *sid)
{
    struct session_args a = {.sid = sid};

    return sqlite_store__write_tx(sqlite_store_of(base), delete_rows, forget_last, &a);
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
static int append_rows(struct sqlite_store *st, struct store_write *w,
                       struct last_undo *u, size_t *undo_n)
{
    struct store_conn *c = &st->w;
    struct last_seq *e = last_find(&st->last, w->sid);
    sqlite3_stmt *q;
    int64_t last = e ? e->seq : 0;
    int rc;

    /* Not in the map: none of its rows is in inputs_recent (see struct last_seq). */
    if (!e) {
        int64_t exists = 0;

        q = sqlite_store__stmt(c, Q_APPEND_CHECK);
        sqlite_store__bind_text(q, 1, w->sid, strlen(w->sid));
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
            exists = sqlite3_column_int64(q, 0);
            last = sqlite3_column_int64(q, 1);
        }
        sqlite_store__done(q);
        if (rc != SQLITE_ROW)
            return sqlite_store__sql_fail(st, c, rc, "checking an input");
        if (!exists) {
            store__set_error(&st->base, "no session '%s'", w->sid);
            w->err = -ENOENT;
            return 0;
        }
    }
    /* A gap would make the log unloadable at the next start: refuse it now. */
    if (w->seq != last + 1) {
        store__set_error(&st->base, "session '%s': input %lld does not follow %lld",
                         w->sid, (long long)w->seq, (long long)last);
        w->err = w->seq <= last ? -EEXIST : -EINVAL;
        return 0;
    }
    if ((rc = sqlite_store__put_row(c, Q_RECENT_INSERT, w->sid, w->seq, w->input,
                                    w->input_len)))
        return sqlite_store__sql_fail(st, c, rc, "storing an input");
    if (w->snapshot) {
        if ((rc = sqlite_store__put_row(c, Q_SNAPSHOT_INSERT, w->sid, w->seq, w->snapshot,
                                        w->snapshot_len)))
            return sqlite_store__sql_fail(st, c, rc, "storing a snapshot");
        /* Only the newest snapshot is kept: storage grows with inputs alone. */
        q = sqlite_store__stmt(c, Q_SNAPSHOT_PRUNE);
        sqlite_store__bind_text(q, 1, w->sid, strlen(w->sid));
        sqlite3_bind_int64(q, 2, w->seq);
        if ((rc = sqlite_store__run(q)))
            return sqlite_store__sql_fail(st, c, rc, "pruning snapshots");
    }
    u->created = !e;
    u->old = last;
    if (!e && !(e = last_add(&st->last, w->sid, w->seq))) {
        store__set_error(&st->base, "out of memory storing an input");
        return -ENOMEM;
    }
    e->seq = w->seq;
    u->e = e;
    (*undo_n)++;
    /* The session's row is written once for the batch (rows_write). */
    if (e->batch != st->batch) {
        e->batch = st->batch;
        e->title_w = NULL;
    }
    e->row_w = w;
    if (!e->title_w && w->title && w->title_len)
        e->title_w = w;
    return 0;
}

/*
 * A batch of streamed text (w->message_id), inside the batch's transaction:
 * one row, written only while the session exists (else w->err is -ENOENT
 * and the batch goes on). Any other error fails the transaction. lock held.
 */
static int stream_rows(struct sqlite_store *st, struct store_write *w)
{
    sqlite3_stmt *q = sqlite_store__stmt(&st->w, Q_STREAM_PUT);
    int rc;

    sqlite_store__bind_text(q, 1, w->sid, strlen(w->sid));
    sqlite_store__bind_text(q, 2, w->message_id, strlen(w->message_id));
    sqlite3_bind_int64(q, 3, w->text_offset);
    sqlite_store__bind_text(q, 4, w->input, w->input_len);
    if ((rc = sqlite_store__run(q)))
        return sqlite_store__sql_fail(st, &st->w, rc, "storing streamed text");
    if (!sqlite3_changes(st->w.db)) {
        store__set_error(&st->base, "no session '%s'", w->sid);
        w->err = -ENOENT;
    }
    return 0;
}

/* An input that ends an answer: its streamed text goes (w->stream_done). lock held. */
static int stream_done(struct sqlite_store *st, const struct store_write *w)
{
    sqlite3_stmt *q =
        sqlite_store__stmt(&st->w, *w->stream_done ? Q_STREAM_DONE : Q_STREAM_CLEAR);
    int rc;

    sqlite_store__bind_text(q, 1, w->sid, strlen(w->sid));
    if (*w->stream_done)
        sqlite_store__bind_text(q, 2, w->stream_done, strlen(w->stream_done));
    if ((rc = sqlite_store__run(q)))
        return sqlite_store__sql_fail(st, &st->w, rc, "removing streamed text");
    return 0;
}

/*
 * After the batch's inputs: each session's row once, as its last write in
 * the batch has it (and the title of its first write with one: a later one
 * may carry none), so a session with many inputs in a batch costs one
 * UPDATE, and one with nothing new in its row none (sqlite_store__row_write).
 * Then, once STORE_INDEX_EVERY rows wait unindexed, they are indexed in
 * this transaction (sqlite_store_search.c says why not every batch).
 * lock held, in the batch's transaction.
 */
static int rows_write(struct sqlite_store *st, struct store_write **v, size_t n,
                      size_t added, bool *indexed)
{
    int err = 0;

    for (size_t i = 0; !err && i < n; i++) {
        const struct last_seq *e;

        if (v[i]->err || v[i]->message_id || !(e = last_find(&st->last, v[i]->sid)) ||
            e->row_w != v[i])
            continue;
        err = sqlite_store__row_write(st, v[i], e->title_w);
    }
    /* Counted, not asked: two queries a commit would cost more than the rows. */
    *indexed = !err && st->unindexed + (int64_t)added >= STORE_INDEX_EVERY;
    return err || !*indexed ? err : sqlite_store__index_batch(st, 1);
}

/* A transaction failed: the map as it was before it. lock held. */
static void last_undo(struct sqlite_store *st, size_t n)
{
    while (n--) {
        struct last_undo *u = &st->undo[n];

        if (u->created)
            sqlite_store__last_drop(&st->last, u->e->sid);
        else
            u->e->seq = u->old;
    }
}

/*
 * v[0..n) in one transaction and one fsync. 0, or the error that failed the
 * transaction, which each write not refused on its own gets as its err:
 * nothing of any of them is stored. lock held.
 */
static int commit_some(struct sqlite_store *st, struct store_write **v, size_t n)
{
    int err = sqlite_store__tx_begin(st);
    size_t i, undo_n = 0;
    bool indexed = false;

    st->batch++;
    for (i = 0; !err && i < n; i++) {
        if (v[i]->message_id) {
            err = stream_rows(st, v[i]);
            continue;
        }
        err = append_rows(st, v[i], &st->undo[undo_n], &undo_n);
        if (!err && !v[i]->err && v[i]->stream_done)
            err = stream_done(st, v[i]);
    }
    if (!err)
        err = rows_write(st, v, n, undo_n, &indexed);
    if (!err)
        err = sqlite_store__tx_commit(st);
    else
        sqlite_store__tx_rollback(st);
    if (err) {
        last_undo(st, undo_n);
        for (i = 0; i < n; i++)
            if (!v[i]->err)
                v[i]->err = err;
        return err;
    }
    st->recent_rows += (int64_t)undo_n;
    st->unindexed = indexed ? 0 : st->unindexed + (int64_t)undo_n;
    return 0;
}

/*
 * Move inputs_recent into `inputs`, in one transaction: each session's page
 * of `inputs` is written once for many inputs. 0 or the error (the rows stay
 * where they are, as safe). lock held.
 */
int sqlite_store__recent_merge(struct sqlite_store *st)
{
    int rc, err;

    if ((err = sqlite_store__tx_begin(st)))
        return err;
    /* The tail not yet indexed (under STORE_INDEX_EVERY rows) is indexed
       first, so nothing moves into `inputs` unindexed; the note of what
       still is (search_pending) stays for a failure's sake. */
    if ((err = sqlite_store__index_batch(st, 1)) ||
        (err = sqlite_store__index_defer(st))) {
        sqlite_store__tx_rollback(st);
        goto out_retry;
    }
    if ((rc = sqlite_store__run(sqlite_store__stmt(&st->w, Q_RECENT_MERGE))) ||
        (rc = sqlite_store__run(sqlite_store__stmt(&st->w, Q_RECENT_CLEAR))) ||
        (rc = sqlite_store__run(sqlite_store__stmt(&st->w, Q_INDEX_MARK_CLAMP)))) {
        err = sqlite_store__sql_fail(st, &st->w, rc, "moving recent inputs");
        sqlite_store__tx_rollback(st);
        goto out_retry;
    }
    if (!(err = sqlite_store__tx_commit(st)))
        st->recent_rows = st->unindexed = 0;
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
int sqlite_store__recent_open(struct sqlite_store *st)
{
    sqlite3_stmt *q;
    int rc, err;

    if ((err = sqlite_store__query_i64(st, &st->w, Q_RECENT_COUNT, NULL,
                                       &st->recent_rows)) ||
        !st->recent_rows || !sqlite_store__recent_merge(st))
        return err;
    q = sqlite_store__stmt(&st->w, Q_RECENT_LAST);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (!last_add(&st->last, (const char *)sqlite3_column_text(q, 0),
                      sqlite3_column_int64(q, 1))) {
            sqlite_store__done(q);
            return -ENOMEM;
        }
    }
    sqlite_store__done(q);
    return rc == SQLITE_DONE
               ? 0
               : sqlite_store__sql_fail(st, &st->w, rc, "reading recent inputs");
}

/*
 * One batch. When it found no room, each write is tried again alone: one
 * input too big for the room left must not fail the small ones beside it.
 */
static void commit_batch(struct sqlite_store *st, struct store_write **v, size_t n)
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
 * The writer: take everything queued (up to STORE_BATCH_MAX), commit it as
 * one transaction, and hand the batch to the notifier, which calls each
 * write's `done` in queue order while the next batch commits. What is queued
 * while one commit syncs is the next batch. Idle, it catches up the
 * full-text index (wait_for_writes). At store_close it empties the queue,
 * then tells the notifier it is done.
 *
 * Wait, the queue's lock held, until something is queued or the store stops. With the
 * full-text index behind (`index_due`), a wait of STORE_INDEX_IDLE_MS with
 * nothing queued is the writer's idle time: one step of indexing then
 * (sqlite_store__index_idle), with the queue let go, so a commit waits at most one
 * step. *index_due is the writer thread's own.
 */
static void wait_for_writes(struct sqlite_store *st, bool *index_due)
{
    while (!st->queue.head && !st->queue.stopping) {
        int r;

        if (!store_queue_wait(&st->queue, *index_due ? STORE_INDEX_IDLE_MS : -1))
            continue;
        pthread_mutex_unlock(&st->queue.lock);
        pthread_mutex_lock(&st->lock);
        r = sqlite_store__index_idle(st);
        pthread_mutex_unlock(&st->lock);
        /* Done, or failed: again once something new is committed. */
        *index_due = r > 0;
        pthread_mutex_lock(&st->queue.lock);
    }
}

void *sqlite_store__writer_main(void *arg)
{
    struct sqlite_store *st = arg;
    struct store_write *batch[STORE_BATCH_MAX];
    size_t last_n = 0;
    int64_t last_ns = 0;
    bool index_due = true; /* what a last run left unindexed */

    for (;;) {
        size_t n;
        int64_t t0;

        pthread_mutex_lock(&st->queue.lock);
        wait_for_writes(st, &index_due);
        store_queue_gather(&st->queue, last_n, last_ns, STORE_GATHER_MAX_NS, st->durable);
        n = store_queue_take(&st->queue, batch, STORE_BATCH_MAX);
        pthread_mutex_unlock(&st->queue.lock);
        if (!n)
            break; /* stopping, and nothing is left */
        t0 = mono_ns();
        commit_batch(st, batch, n);
        last_ns = mono_ns() - t0;
        last_n = n;
        index_due = true;
        store_notifier_push_batch(&st->queue.notifier, batch, n);
        /* Between two batches, while the notifier answers this one. */
        pthread_mutex_lock(&st->lock);
        if (st->recent_rows >= st->merge_at)
            (void)sqlite_store__recent_merge(
                st); /* the rows stay where they are, as safe */
        pthread_mutex_unlock(&st->lock);
    }
    store_notifier_end(&st->queue.notifier);
    return NULL;
}

/*
 * SQLite's WAL hook on the writer's connection, after each commit, with the
 * frames now in the WAL: past STORE_CHECKPOINT_FRAMES, wake the
 * checkpointer. Checkpoints never run on the writer (wal_autocheckpoint is
 * off there): copying the WAL into the file and syncing it would hold up
 * every input queued meanwhile.
 */
int sqlite_store__wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    struct sqlite_store *st = arg;

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
void *sqlite_store__checkpointer_main(void *arg)
{
    struct sqlite_store *st = arg;

    if (st->check_later)
        sqlite_store__check_later(st);
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

void sqlite_store_write_queue(struct store *base, struct store_write *w)
{
    store_queue_push(&sqlite_store_of(base)->queue, w);
}

void sqlite_store_commit_counts(struct store *base, int64_t *commits, int64_t *writes)
{
    struct sqlite_store *st = sqlite_store_of(base);
    if (commits)
        *commits = __atomic_load_n(&st->commits, __ATOMIC_RELAXED);
    if (writes)
        *writes = __atomic_load_n(&st->writes, __ATOMIC_RELAXED);
}
