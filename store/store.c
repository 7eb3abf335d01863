/*
 * store - the dispatcher over the input log's backends (store_backend.h):
 * store_open picks the backend that accepts the path, and every operation a
 * backend implements is one call through its table. Here too is what both
 * backends share: the error sentence, one stored input parsed and folded, a
 * snapshot decoded, a history row, the sessions listed and loaded at start,
 * store_append (a queued write waited for) and the history as JSON. See
 * store.h.
 */
#include "store/store.h"
#include "store/store_backend.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_effects.h"
#include "state_machine/rx_json.h"
#include "state_machine/rx_machine.h"

/* Room for one history row's framing: {"seq":N,"input":...}, */
#define STORE_HISTORY_ROW_OVERHEAD 40

/* PostgreSQL first: it accepts connection strings only; SQLite takes any path. */
static const struct store_backend *const backends[] = {&pg_store_backend,
                                                       &sqlite_store_backend};

/* ---- the embedded part, errors ------------------------------------------------ */

void store__base_init(struct store *st, const struct store_backend *be)
{
    st->be = be;
    pthread_mutex_init(&st->hlock, NULL);
    st->err[0] = '\0';
    st->stream_batches = st->stream_bytes = 0;
}

void store__base_release(struct store *st)
{
    pthread_mutex_destroy(&st->hlock);
}

void store__set_error_v(struct store *st, const char *fmt, va_list ap)
{
    pthread_mutex_lock(&st->hlock);
    vsnprintf(st->err, sizeof(st->err), fmt, ap);
    pthread_mutex_unlock(&st->hlock);
}

void store__set_error(struct store *st, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    store__set_error_v(st, fmt, ap);
    va_end(ap);
}

void store_last_error(struct store *st, struct rx_error *err)
{
    pthread_mutex_lock(&st->hlock);
    rx_error_set(err, 0, "%s", st->err);
    pthread_mutex_unlock(&st->hlock);
}

/* ---- open, close, settings ---------------------------------------------------- */

/* The backend whose store `path` names; NULL for an empty path (err set). */
static const struct store_backend *backend_of(const char *path, struct rx_error *err)
{
    size_t n = sizeof(backends) / sizeof(backends[0]);

    if (!path || !*path) {
        rx_error_set(err, 0, "'': empty database path");
        return NULL;
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (backends[i]->accepts(path))
            return backends[i];
    return backends[n - 1];
}

struct store *store_open(const char *path, struct rx_error *err)
{
    const struct store_backend *be = backend_of(path, err);

    return be ? be->open(path, err) : NULL;
}

struct store *store_open_beside(const char *path, struct rx_error *err)
{
    const struct store_backend *be = backend_of(path, err);

    return be ? be->open_beside(path, err) : NULL;
}

void store_close(struct store *st)
{
    if (st)
        st->be->close(st);
}

bool store_is_shared(const struct store *st)
{
    return st->be->shared;
}

void store_set_node(struct store *st, const char *node)
{
    if (st->be->set_node)
        st->be->set_node(st, node);
}

int store_set_durable(struct store *st, bool fsync_each_commit)
{
    return st->be->set_durable(st, fsync_each_commit);
}

int store_set_max_bytes(struct store *st, int64_t max_bytes)
{
    return max_bytes < 0 ? -EINVAL : st->be->set_max_bytes(st, max_bytes);
}

enum store_health store_health(struct store *st, struct rx_error *why)
{
    return st->be->health(st, why);
}

const char *store_health_name(enum store_health h)
{
    switch (h) {
    case STORE_OK:
        return "ok";
    case STORE_FULL:
        return "full";
    case STORE_UNAVAILABLE:
        return "unavailable";
    }
    return "?";
}

int store_stats(struct store *st, int64_t *inputs, int64_t *bytes)
{
    return st->be->stats(st, inputs, bytes);
}

/* ---- sessions ------------------------------------------------------------------ */

/*
 * An owner a call was given, checked: NULL stays NULL, anything else must
 * be 1 to STORE_OWNER_MAX bytes (a C string holds no NUL). 0 or -EINVAL,
 * named.
 */
static int owner_check(struct store *st, const char *owner)
{
    size_t len;

    if (!owner)
        return 0;
    len = strnlen(owner, STORE_OWNER_MAX + 1);
    if (!len || len > STORE_OWNER_MAX) {
        store__set_error(st, "owner %s: it must be 1 to %d bytes",
                         len ? "too long" : "empty", STORE_OWNER_MAX);
        return -EINVAL;
    }
    return 0;
}

/* The owner of a session being made: checked, NULL the default. */
static int owner_of_new(struct store *st, const char **owner)
{
    int err = owner_check(st, *owner);

    if (!err && !*owner)
        *owner = STORE_OWNER_DEFAULT;
    return err;
}

int store_create_session(struct store *st, const char *sid, const char *owner,
                         int64_t created_at)
{
    int err = owner_of_new(st, &owner);

    return err ? err : st->be->create_session(st, sid, owner, created_at);
}

int store_delete_session(struct store *st, const char *sid)
{
    return st->be->delete_session(st, sid);
}

int store_session_created(struct store *st, const char *sid, int64_t *created_at)
{
    return st->be->session_created(st, sid, created_at);
}

int store_fork(struct store *st, const char *sid, int64_t at, const char *new_sid,
               const char *owner, int64_t created_at)
{
    int err = owner_of_new(st, &owner);

    return err ? err : st->be->fork(st, sid, at, new_sid, owner, created_at);
}

int store_import(struct store *st, const char *sid, const char *owner, int64_t created_at,
                 const char *title, const struct store_text *inputs, size_t n,
                 const struct store_text *snapshot)
{
    int err = owner_of_new(st, &owner);

    return err ? err
               : st->be->import(st, sid, owner, created_at, title, inputs, n, snapshot);
}

int store_gc_list(struct store *st, int64_t older_than_ms, json_t **removed_ids,
                  int64_t *removed_inputs)
{
    return st->be->gc_list(st, older_than_ms, removed_ids, removed_inputs);
}

int store_gc(struct store *st, int64_t older_than_ms, int *removed_sessions,
             int64_t *removed_inputs)
{
    json_t *ids = NULL;
    int err = store_gc_list(st, older_than_ms, &ids, removed_inputs);

    if (!err && removed_sessions)
        *removed_sessions = (int)json_array_size(ids);
    json_decref(ids);
    return err;
}

int store_set_title(struct store *st, const char *sid, const char *title)
{
    return st->be->set_title(st, sid, title);
}

int store_session_title(struct store *st, const char *sid, char **out)
{
    return st->be->session_title(st, sid, out);
}

int store_search(struct store *st, const char *const *words, size_t n, json_t **out)
{
    if (!n || n > STORE_SEARCH_WORDS_MAX)
        return -EINVAL;
    return st->be->search(st, words, n, out);
}

/* ---- listing ------------------------------------------------------------------ */

int store__list_add(struct store_list *l, const char *id, const char *title,
                    const char *owner, int64_t created_at, int64_t updated_at,
                    int64_t messages)
{
    struct store_session_info *e;

    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        struct store_session_info *v = realloc(l->v, cap * sizeof(*v));

        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    e = &l->v[l->n];
    e->id = strdup(id);
    e->title = title ? strdup(title) : NULL;
    e->owner = strdup(owner ? owner : STORE_OWNER_DEFAULT);
    if (!e->id || (title && !e->title) || !e->owner) {
        free(e->id);
        free(e->title);
        free(e->owner);
        return -ENOMEM;
    }
    e->created_at = created_at;
    e->updated_at = updated_at;
    e->messages = messages;
    l->n++;
    return 0;
}

/* Drop the entries of l from `keep` on. */
static void list_truncate(struct store_list *l, size_t keep)
{
    while (l->n > keep) {
        l->n--;
        free(l->v[l->n].id);
        free(l->v[l->n].title);
        free(l->v[l->n].owner);
    }
}

void store_list_release(struct store_list *l)
{
    list_truncate(l, 0);
    free(l->v);
    memset(l, 0, sizeof(*l));
}

int store_list_sessions(struct store *st, const struct store_cursor *after, size_t limit,
                        struct store_list *out)
{
    size_t n0 = out->n;
    int err = st->be->list_sessions(st, after, limit, out);

    if (err == -ENOMEM)
        store__set_error(st, "out of memory listing sessions");
    if (err)
        list_truncate(out, n0);
    return err;
}

/* A page (or the busy set): what failed is taken back, an ENOMEM named. */
static int list_done(struct store *st, struct store_list *out, size_t n0, int err)
{
    if (err == -ENOMEM)
        store__set_error(st, "out of memory listing sessions");
    if (err)
        list_truncate(out, n0);
    return err;
}

int store_sessions_page(struct store *st, const char *owner, const char *const *words,
                        size_t n, int64_t before, size_t limit, struct store_list *out)
{
    size_t n0 = out->n;

    if (n > STORE_SEARCH_WORDS_MAX || !limit || owner_check(st, owner))
        return -EINVAL;
    return list_done(st, out, n0,
                     st->be->sessions_page(st, owner, words, n,
                                           before < 0 ? INT64_MAX : before, limit, out));
}

int store_sessions_busy(struct store *st, struct store_list *out)
{
    size_t n0 = out->n;

    return list_done(st, out, n0, st->be->sessions_busy(st, out));
}

int store_sessions_count(struct store *st, int64_t *n)
{
    return st->be->sessions_count(st, n);
}

int store_sessions_owned(struct store *st, const char *owner, int64_t *n)
{
    if (!owner)
        return st->be->sessions_count(st, n);
    return owner_check(st, owner) ? -EINVAL : st->be->sessions_owned(st, owner, n);
}

int store_session_info(struct store *st, const char *sid, struct store_session_info *out)
{
    return st->be->session_info(st, sid, out);
}

void store_session_info_release(struct store_session_info *info)
{
    free(info->id);
    free(info->title);
    free(info->owner);
    info->id = info->title = info->owner = NULL;
}

/*
 * Every session, oldest first: the list first, then each one loaded on its
 * own, so no store lock is held while the callback runs. A session deleted
 * between the two (another node's retention) is skipped, not made up empty.
 * Nothing here holds a descriptor per session: one list, then one read at a
 * time on the backend's reader. A callback that refuses a session names it
 * (its errno alone left "cannot load the sessions:" with no reason).
 */
int store_load(struct store *st, store_each_fn each, void *ctx)
{
    struct store_list l = {0};
    int err = store_list_sessions(st, NULL, 0, &l);

    for (size_t i = 0; !err && i < l.n; i++) {
        const struct store_session_info *e = &l.v[i];
        struct rx_state s;
        int64_t seq;

        err = st->be->session_load(st, e->id, &s, &seq);
        if (err == -ENOENT) {
            err = 0;
            continue;
        }
        if (err)
            break;
        err = each(ctx, e->id, e->created_at, e->title, e->owner, &s, seq);
        if (err) {
            rx_state_release(&s);
            store__set_error(st, "session '%s' (%zu of %zu) was not taken: %s", e->id,
                             i + 1, l.n, err < 0 ? strerror(-err) : "refused");
        }
    }
    store_list_release(&l);
    return err;
}

/* ---- reading the log ---------------------------------------------------------- */

int store_input_parse(const char *text, size_t len, struct rx_input *in,
                      struct rx_error *why)
{
    struct rx_error e = {""}, je;
    const char *field = NULL;
    json_t *j;
    int err = rx_json_parse(text, len, 0, &j, &je);

    if (err == -ENOMEM)
        return rx_error_set(why, -ENOMEM, "could not be read: out of memory");
    if (err)
        return rx_error_set(why, -EPROTO, "is not JSON: %s", je.text);
    err = rx_input_parse(j, in, &field, &e);
    json_decref(j);
    if (err == -ENOMEM)
        return rx_error_set(why, -ENOMEM, "could not be read: out of memory");
    if (err)
        return rx_error_set(why, -EPROTO, "is invalid: %s",
                            e.text[0] ? e.text
                            : field   ? field
                                      : "?");
    return 0;
}

int store_input_fold(const char *text, size_t len, struct rx_state *s,
                     struct rx_error *why)
{
    struct rx_outcome out;
    struct rx_input in;
    int err = store_input_parse(text, len, &in, why);

    if (err)
        return err;
    err = rx_machine_apply(s, &in, &out);
    rx_input_release(&in);
    if (err)
        return rx_error_set(why, -ENOMEM, "could not be read: out of memory");
    if (out.verdict != RX_ACCEPTED)
        return rx_error_set(why, -EPROTO, "does not fold (%s: %s)",
                            rx_verdict_name(out.verdict), rx_reason_name(out.reason));
    return 0;
}

int store__fold_one(struct store *st, const char *sid, int64_t seq, const char *text,
                    size_t len, struct rx_state *s)
{
    struct rx_error why = {""};
    int err = store_input_fold(text, len, s, &why);

    if (err)
        store__set_error(st, "session '%s': input %lld %s", sid, (long long)seq,
                         why.text);
    return err;
}

int store__snapshot_decode(struct store *st, const char *sid, int64_t seq,
                           const char *text, size_t len, struct rx_state *out)
{
    struct rx_error why = {""}, je;
    json_t *j;
    int err = rx_json_parse(text, len, 0, &j, &je);

    if (!err)
        err = rx_state_decode(j, out, &why);
    json_decref(j);
    if (err == -ENOMEM) {
        store__set_error(st, "session '%s': out of memory decoding a snapshot", sid);
    } else if (err) {
        store__set_error(st, "session '%s': snapshot at %lld does not decode: %s", sid,
                         (long long)seq, j ? why.text : je.text);
        err = -EPROTO;
    }
    return err;
}

int store_session_load(struct store *st, const char *sid, struct rx_state *out,
                       int64_t *seq)
{
    return st->be->session_load(st, sid, out, seq);
}

int store_state_at(struct store *st, const char *sid, int64_t seq, struct rx_state *out)
{
    return st->be->state_at(st, sid, seq, out);
}

int store__history_row(struct store *st, const char *sid, struct rx_buf *out,
                       size_t start, size_t rows, int64_t seq, const char *text,
                       size_t len)
{
    if (rows &&
        out->len - start + len + STORE_HISTORY_ROW_OVERHEAD > STORE_HISTORY_PAGE_MAX)
        return 1;
    /* The stored text is rx_input_encode's compact JSON, copied as it is; a
       row that cannot be an object is damage, not an input. */
    if (!text || len < 2 || text[0] != '{' || text[len - 1] != '}') {
        store__set_error(st, "session '%s': input %lld is not JSON", sid, (long long)seq);
        return -EPROTO;
    }
    if ((rows && rx_buf_putc(out, ',')) ||
        rx_buf_printf(out, "{\"seq\":%lld,\"input\":", (long long)seq) ||
        rx_buf_append(out, text, len) || rx_buf_putc(out, '}'))
        return -ENOMEM;
    return 0;
}

int store__history_end(struct store *st, const char *sid, struct rx_buf *out,
                       size_t start, int err, int64_t after_seq, int64_t *last)
{
    if (!err && rx_buf_putc(out, ']'))
        err = -ENOMEM;
    if (err == -ENOMEM)
        store__set_error(st, "session '%s': out of memory reading history", sid);
    if (err)
        rx_buf_truncate(out, start);
    else
        *last = after_seq;
    return err;
}

int store_history_page(struct store *st, const char *sid, int64_t after_seq, int limit,
                       struct rx_buf *out, int64_t *last)
{
    return st->be->history_page(st, sid, after_seq, limit, out, last);
}

int store_history_text(struct store *st, const char *sid, int64_t after_seq, int limit,
                       struct rx_buf *out)
{
    int64_t last;

    return store_history_page(st, sid, after_seq, limit, out, &last);
}

int store_history(struct store *st, const char *sid, int64_t after_seq, int limit,
                  json_t **out)
{
    struct rx_buf b;
    json_t *arr = NULL;
    int err;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    err = store_history_text(st, sid, after_seq, limit, &b);
    if (!err && (err = rx_json_parse(b.data, b.len, 0, &arr, NULL)) == -EINVAL) {
        store__set_error(st, "session '%s': history is not JSON", sid);
        err = -EPROTO;
    } else if (err == -ENOMEM) {
        store__set_error(st, "out of memory");
    }
    rx_buf_release(&b);
    if (!err)
        *out = arr;
    return err;
}

/* ---- group commit -------------------------------------------------------------- */

void store_write_queue(struct store *st, struct store_write *w)
{
    if (w->message_id) {
        __atomic_add_fetch(&st->stream_batches, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&st->stream_bytes, (int64_t)w->input_len, __ATOMIC_RELAXED);
    }
    st->be->write_queue(st, w);
}

int store_stream_text(struct store *st, const char *sid, const char *message_id,
                      struct rx_buf *out)
{
    return st->be->stream_text(st, sid, message_id, out);
}

void store_stream_counts(struct store *st, int64_t *batches, int64_t *bytes)
{
    if (batches)
        *batches = __atomic_load_n(&st->stream_batches, __ATOMIC_RELAXED);
    if (bytes)
        *bytes = __atomic_load_n(&st->stream_bytes, __ATOMIC_RELAXED);
}

void store_commit_counts(struct store *st, int64_t *commits, int64_t *writes)
{
    st->be->commit_counts(st, commits, writes);
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
    /* What the session's row keeps (SPEC 6.2), as of `after`. */
    a.w.messages = (int64_t)(after->user.len + after->assistant.len);
    a.w.busy = rx_effects_any(after);
    a.w.title_len = rx_state_title(after, &a.w.title);
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

/* ---- records ------------------------------------------------------------------- */

/* A kind and a key within their bounds (and no sid that is not a name). */
static bool record_names_ok(const char *kind, const char *key)
{
    size_t k = kind ? strlen(kind) : 0, n = key ? strlen(key) : 0;

    return k && k <= STORE_RECORD_KIND_MAX && n && n <= STORE_RECORD_KEY_MAX;
}

int store__record_fill(struct store_record *out, const char *key, const char *sid,
                       const char *text, size_t len)
{
    struct store_record r = {.key = strdup(key), .len = len};

    r.sid = sid ? strdup(sid) : NULL;
    r.text = malloc(len + 1);
    if (!r.key || (sid && !r.sid) || !r.text) {
        store_record_release(&r);
        return -ENOMEM;
    }
    if (len)
        memcpy(r.text, text, len);
    r.text[len] = '\0';
    *out = r;
    return 0;
}

void store_record_release(struct store_record *r)
{
    free(r->key);
    free(r->sid);
    free(r->text);
    memset(r, 0, sizeof(*r));
}

int store__records_add(struct store_records *l, const char *key, const char *sid,
                       const char *text, size_t len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        struct store_record *v = realloc(l->v, cap * sizeof(*v));

        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    if (store__record_fill(&l->v[l->n], key, sid, text, len))
        return -ENOMEM;
    l->n++;
    return 0;
}

void store_records_release(struct store_records *l)
{
    for (size_t i = 0; i < l->n; i++)
        store_record_release(&l->v[i]);
    free(l->v);
    memset(l, 0, sizeof(*l));
}

int store_record_put(struct store *st, const char *kind, const char *key, const char *sid,
                     const char *text, size_t len)
{
    if (!record_names_ok(kind, key) || (sid && !*sid) || (!text && len) ||
        len > STORE_RECORD_TEXT_MAX || (len && memchr(text, '\0', len)))
        return -EINVAL;
    return st->be->record_put(st, kind, key, sid, text ? text : "", len);
}

int store_record_get(struct store *st, const char *kind, const char *key,
                     struct store_record *out)
{
    if (!record_names_ok(kind, key))
        return -EINVAL;
    return st->be->record_get(st, kind, key, out);
}

int store_record_delete(struct store *st, const char *kind, const char *key)
{
    if (!record_names_ok(kind, key))
        return -EINVAL;
    return st->be->record_delete(st, kind, key);
}

int store_record_list(struct store *st, const char *kind, const char *sid,
                      const char *after, size_t limit, struct store_records *out)
{
    size_t n0 = out->n;
    int err;

    if (!record_names_ok(kind, "k") || (sid && !*sid))
        return -EINVAL;
    err = st->be->record_list(st, kind, sid, after, limit, out);
    if (err) {
        while (out->n > n0)
            store_record_release(&out->v[--out->n]);
        if (err == -ENOMEM)
            store__set_error(st, "out of memory listing records");
    }
    return err;
}
