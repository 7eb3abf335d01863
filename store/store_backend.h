/*
 * store_backend - the one interface of the input log's two implementations
 * (store/sqlite on SQLite, store/pg on PostgreSQL), as git's struct
 * ref_storage_be: a table with one function pointer per operation, and the
 * part of struct store every backend embeds. store/store.c holds the table
 * of backends and is the only caller of these pointers: each public
 * function of store.h that a backend implements is one line there,
 * `return st->be->x(st, ...)`, so no caller asks which backend it has.
 * What both backends need alike lives in store.c too, declared below (the
 * error sentence, one stored input folded, a snapshot decoded, a history
 * row, a session listed), in store/store_row.c (what a session's row keeps
 * of its state) and in store/store_notifier.h.
 *
 * Private to store/: server/ and the tests use store.h. Depends on
 * store/store.h, state_machine/ and pthreads only; a backend includes this,
 * its own headers and its library (sqlite3, libpq), never the other
 * backend.
 * Locks: `hlock` is a leaf (the sentence store_last_error gives, and each
 * backend's health, which it guards too); no callback is called with it.
 * Ownership: a backend's open allocates its own struct with a struct store
 * first (`base`), sets it up with store__base_init and gives &base to the
 * caller; its `close` releases it (store__base_release) and frees it. Every
 * operation has the arguments, ownership and errors of its public twin in
 * store.h.
 */
#ifndef STORE_BACKEND_H
#define STORE_BACKEND_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"
#include "state_machine/rx_state.h"
#include "store/store.h"

struct store_backend {
    const char *name; /* "sqlite", "postgresql": for messages */
    /* The log may be shared by several processes at once (a cluster, SPEC 6.1). */
    bool shared;
    /* Does `path` name a store of this backend? The last backend takes the rest. */
    bool (*accepts)(const char *path);
    struct store *(*open)(const char *path, struct rx_error *err);
    struct store *(*open_beside)(const char *path, struct rx_error *err);
    void (*close)(struct store *st);

    /* Settings and health. set_node may be NULL: nothing to fence. */
    int (*set_durable)(struct store *st, bool fsync_each_commit);
    int (*set_max_bytes)(struct store *st, int64_t max_bytes);
    void (*set_node)(struct store *st, const char *node);
    enum store_health (*health)(struct store *st, struct rx_error *why);
    int (*stats)(struct store *st, int64_t *inputs, int64_t *bytes);

    /* Sessions. An owner given to create, fork and import is never NULL (store.c
       puts STORE_OWNER_DEFAULT there) and has been checked. */
    int (*create_session)(struct store *st, const char *sid, const char *owner,
                          int64_t created_at);
    int (*delete_session)(struct store *st, const char *sid);
    int (*session_created)(struct store *st, const char *sid, int64_t *created_at);
    int (*list_sessions)(struct store *st, const struct store_cursor *after, size_t limit,
                         struct store_list *out);
    int (*fork)(struct store *st, const char *sid, int64_t at, const char *new_sid,
                const char *owner, int64_t created_at);
    int (*import)(struct store *st, const char *sid, const char *owner,
                  int64_t created_at, const char *title, const struct store_text *inputs,
                  size_t n, const struct store_text *snapshot);
    int (*gc_list)(struct store *st, int64_t older_than_ms, json_t **removed_ids,
                   int64_t *removed_inputs);
    /* The sessions' rows (SPEC 6.2): pages newest first (of one owner, or of
       everyone's when owner is NULL), the busy set, counts, one. */
    int (*sessions_page)(struct store *st, const char *owner, const char *const *words,
                         size_t n, int64_t before, size_t limit, struct store_list *out);
    int (*sessions_busy)(struct store *st, struct store_list *out);
    int (*sessions_count)(struct store *st, int64_t *n);
    int (*sessions_owned)(struct store *st, const char *owner, int64_t *n);
    int (*session_info)(struct store *st, const char *sid,
                        struct store_session_info *out);

    /* Group commit. */
    void (*write_queue)(struct store *st, struct store_write *w);
    void (*commit_counts)(struct store *st, int64_t *commits, int64_t *writes);
    /* Streamed text (store_stream_text). */
    int (*stream_text)(struct store *st, const char *sid, const char *message_id,
                       struct rx_buf *out);

    /* Reading the log: one session on demand (snapshot + tail), time travel. */
    int (*session_load)(struct store *st, const char *sid, struct rx_state *out,
                        int64_t *seq);
    int (*state_at)(struct store *st, const char *sid, int64_t seq, struct rx_state *out);
    int (*history_page)(struct store *st, const char *sid, int64_t after_seq, int limit,
                        struct rx_buf *out, int64_t *last);

    /* Titles and search. */
    int (*set_title)(struct store *st, const char *sid, const char *title);
    int (*session_title)(struct store *st, const char *sid, char **out);
    int (*search)(struct store *st, const char *const *words, size_t n, json_t **out);

    /* Records (store.h): names and bounds checked by store.c. */
    int (*record_put)(struct store *st, const char *kind, const char *key,
                      const char *sid, const char *text, size_t len);
    int (*record_get)(struct store *st, const char *kind, const char *key,
                      struct store_record *out);
    int (*record_delete)(struct store *st, const char *kind, const char *key);
    int (*record_list)(struct store *st, const char *kind, const char *sid,
                       const char *after, size_t limit, struct store_records *out);
};

/* What every backend's struct begins with. */
struct store {
    const struct store_backend *be;
    pthread_mutex_t hlock; /* a leaf: guards err, and the backend's health */
    char err[RX_ERR_LEN];  /* store_last_error */
    int64_t stream_batches, stream_bytes; /* store_stream_counts (atomic) */
};

/* The backends (store/sqlite/sqlite_store.c, store/pg/pg_store.c). */
extern const struct store_backend sqlite_store_backend;
extern const struct store_backend pg_store_backend;

/* Set up / release the embedded part. Never fails. */
void store__base_init(struct store *st, const struct store_backend *be);
void store__base_release(struct store *st);

/* The sentence store_last_error gives, under hlock (taken here). */
void store__set_error(struct store *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void store__set_error_v(struct store *st, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/*
 * Apply input `seq` of session `sid` (its stored text) to s: 0, or -EPROTO
 * / -ENOMEM with the error set to "session '<sid>': input <seq> ...".
 */
int store__fold_one(struct store *st, const char *sid, int64_t seq, const char *text,
                    size_t len, struct rx_state *s) RX_WUR;
/*
 * A snapshot's text (rx_state_encode's JSON, taken at `seq`) decoded into
 * caller-allocated `out`: 0, -EPROTO (does not decode) or -ENOMEM, with the
 * error set. On failure `out` needs no release.
 */
int store__snapshot_decode(struct store *st, const char *sid, int64_t seq,
                           const char *text, size_t len, struct rx_state *out) RX_WUR;
/*
 * Append input `seq`'s stored text to a history page that began at byte
 * `start` of `out` and holds `rows` rows: 0, 1 when the page is as big as
 * pages get (nothing appended: the client asks on), -EPROTO (the text is not
 * an object: damage, the error set) or -ENOMEM.
 */
int store__history_row(struct store *st, const char *sid, struct rx_buf *out,
                       size_t start, size_t rows, int64_t seq, const char *text,
                       size_t len) RX_WUR;
/*
 * The end of a history page begun at byte `start` of `out` (its '[' there):
 * with err 0, ']' appended and *last = after_seq (the seq of its last row);
 * otherwise (or when ']' does not fit: -ENOMEM, named) the page taken back.
 * Gives the error.
 */
int store__history_end(struct store *st, const char *sid, struct rx_buf *out,
                       size_t start, int err, int64_t after_seq, int64_t *last) RX_WUR;
/*
 * What a session's row keeps of its state (SPEC 6.2), as store_write carries
 * it: messages (user + assistant), whether it wants effects, and the title
 * from its first message (malloc'd, NULL: none). Filled by the writes that do
 * not come through store_write (import, fork, the upgrade of an older log).
 */
struct store_row {
    int64_t messages;
    bool busy;
    char *title;
};
/* The row of state `s` into `out`: 0 or -ENOMEM (out untouched). */
int store__row_of(const struct rx_state *s, struct store_row *out) RX_WUR;
/*
 * The row of a log about to be imported: its inputs folded one by one (its
 * snapshot, may be NULL, is not decoded: see store_row.c). 0, -EPROTO or
 * -ENOMEM, with the error set.
 */
int store__row_of_log(struct store *st, const char *sid, const struct store_text *inputs,
                      size_t n, const struct store_text *snapshot,
                      struct store_row *out) RX_WUR;
void store__row_release(struct store_row *r);

/*
 * One session at the end of `l`: id, title (NULL: none) and owner (NULL:
 * STORE_OWNER_DEFAULT) copied. 0 or -ENOMEM (l unchanged).
 */
int store__list_add(struct store_list *l, const char *id, const char *title,
                    const char *owner, int64_t created_at, int64_t updated_at,
                    int64_t messages) RX_WUR;

/*
 * One record at the end of `l`: key, sid (NULL: none) and text[0..len)
 * copied, the text NUL-terminated. 0 or -ENOMEM (l unchanged).
 */
int store__records_add(struct store_records *l, const char *key, const char *sid,
                       const char *text, size_t len) RX_WUR;
/* Copy one record into `out` (as store__records_add). 0 or -ENOMEM (out untouched). */
int store__record_fill(struct store_record *out, const char *key, const char *sid,
                       const char *text, size_t len) RX_WUR;

#endif
