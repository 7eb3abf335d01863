/*
 * sqlite_store_lag - the row's lag: when the writer writes a session's row
 * (schema 4, SPEC 6.2) at once, and when later. See sqlite_store_internal.h.
 *
 * A restart reads the rows, not the sessions, to know which ones to resume:
 * a row that says "busy" too late would leave a session's effects unresumed
 * after a crash, so busy rising is written with the input that raised it.
 * A row that says "busy" too long only costs a load at the next start, and
 * a count or a time a second old only a list that is a second behind for a
 * session not in memory. Those wait: in a hot chat every turn raises and
 * lowers busy and grows the count, and writing the row each time costs each
 * commit a page of `sessions` and two of its busy index (about a tenth of
 * the hot loop's rate, bench/scale.sh). What waits is written a second
 * after it began to, by the writer after a batch, or as soon as the writer
 * is idle, or at close; a failed batch changes nothing here (its writes are
 * not stored), and a failed flush leaves the rows lagging, to try again.
 */
#include "store/store.h"
#include "store/sqlite/sqlite_store_internal.h"

#include <stdbool.h>
#include <stdint.h>

#include "base/now.h"

/* How long a row may lag its session's last write. */
#define STORE_ROW_LAG_MS 1000

bool sqlite_store__row_now(const struct last_seq *e, const struct store_write *w,
                           const struct store_write *titled, int64_t now_ms)
{
    return !e->row_ms || titled || (w->busy && !e->row_busy) ||
           now_ms - e->row_ms >= STORE_ROW_LAG_MS;
}

void sqlite_store__lag_remove(struct last_map *m, struct last_seq *e)
{
    if (!e->lag)
        return;
    *e->lag_pprev = e->lag_next;
    if (e->lag_next)
        e->lag_next->lag_pprev = e->lag_pprev;
    else
        m->lag_end = e->lag_pprev;
    e->lag = false;
}

static void lag_add(struct last_map *m, struct last_seq *e, int64_t now_ms)
{
    if (e->lag)
        return;
    if (!m->lag) {
        m->lag_end = &m->lag;
        m->lag_since_ms = now_ms;
    }
    e->lag = true;
    e->lag_next = NULL;
    e->lag_pprev = m->lag_end;
    *m->lag_end = e;
    m->lag_end = &e->lag_next;
}

/* The row of `e` is written: it holds `busy` as of now. */
static void row_written(struct last_map *m, struct last_seq *e, bool busy, int64_t now_ms)
{
    e->row_ms = now_ms;
    e->row_busy = busy;
    sqlite_store__lag_remove(m, e);
}

void sqlite_store__rows_done(struct last_map *m, struct store_write **v, size_t n,
                             int64_t now_ms)
{
    for (size_t i = 0; i < n; i++) {
        struct last_seq *e;

        if (v[i]->err || !(e = sqlite_store__last_find(m, v[i]->sid)) || e->row_w != v[i])
            continue;
        if (sqlite_store__row_now(e, v[i], e->title_w, now_ms)) {
            row_written(m, e, v[i]->busy, now_ms);
            continue;
        }
        e->lag_updated = v[i]->updated_at;
        e->lag_messages = v[i]->messages;
        e->lag_busy = v[i]->busy;
        lag_add(m, e, now_ms);
    }
}

int sqlite_store__rows_flush(struct sqlite_store *st, bool force)
{
    struct last_map *m = &st->last;
    int64_t now = now_mono_ms();
    int err;

    if (!m->lag || (!force && now - m->lag_since_ms < STORE_ROW_LAG_MS))
        return 0;
    if ((err = sqlite_store__tx_begin(st)))
        return err;
    for (struct last_seq *e = m->lag; e && !err; e = e->lag_next) {
        struct store_write w = {.sid = e->sid,
                                .updated_at = e->lag_updated,
                                .messages = e->lag_messages,
                                .busy = e->lag_busy};

        err = sqlite_store__row_write(st, &w, NULL);
    }
    if (!err)
        err = sqlite_store__tx_commit(st);
    else
        sqlite_store__tx_rollback(st);
    if (err)
        return err;
    while (m->lag)
        row_written(m, m->lag, m->lag->lag_busy, now);
    return 0;
}
