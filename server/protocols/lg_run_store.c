/*
 * lg_run_store - the durable record of a LangGraph run that is over (SPEC
 * 6.2): written behind its end (server/records: the engine calls back with
 * the session's lock held), read back to show a run the registry does not
 * hold (after a restart, another node's, or one the registry let go), and
 * merged into a thread's run list. See lg_run.h.
 *
 * A record is the run object's own fields, compact JSON with times in
 * milliseconds: {"run_id","status","created_at","updated_at",
 * "multitask_strategy","metadata","kwargs"[,"error"]}; metadata and kwargs
 * are copied in as the text the record already keeps. Frames and final
 * values are not stored: they would copy the thread's messages once per
 * run (checkpoint bloat, SPEC 6); a revived run's join reads the thread's
 * values instead, and its stream replays them as one `values` event.
 */
#include "server/protocols/lg_run_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "server/protocols/lg_msg.h"
#include "server/records.h"
#include "server/session.h"
#include "state_machine/rx_buf.h"
#include "store/store.h"

/* The store's records of each thread's last run's status. */
#define LG_LAST_KIND "lg.last"
/* "<tid>/<rid>": a thread id and a run id, within STORE_RECORD_KEY_MAX. */
#define LG_RUN_KEY_LEN (SESSION_ID_MAX + RX_UUID_LEN + 2)

static void run_key(const char *tid, const char *rid, char key[LG_RUN_KEY_LEN])
{
    snprintf(key, LG_RUN_KEY_LEN, "%s/%s", tid, rid);
}

/* The record's text into `b` (record's lock held). 0 or -ENOMEM. */
static int record_encode(struct lg_run *lr, struct rx_buf *b)
{
    json_t *error = lr->final ? json_object_get(lr->final, "__error__") : NULL;
    char *etext = error ? json_dumps(error, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    int err =
        rx_buf_puts(b, "{\"run_id\":") || rx_buf_put_json_str(b, lr->id) ||
        rx_buf_printf(b,
                      ",\"status\":\"%s\",\"created_at\":%lld,\"updated_at\":%lld,"
                      "\"multitask_strategy\":\"%s\",\"metadata\":",
                      run_status_name(lr->status), (long long)lr->created_at,
                      (long long)lr->updated_at, lg_run__mt_names[lr->mt]) ||
        rx_buf_puts(b, lr->metadata ? lr->metadata : "{}") ||
        rx_buf_puts(b, ",\"kwargs\":") ||
        rx_buf_puts(b, lr->kwargs ? lr->kwargs : "{}") ||
        (error && (!etext || rx_buf_puts(b, ",\"error\":") || rx_buf_puts(b, etext))) ||
        rx_buf_putc(b, '}');

    free(etext);
    return err ? -ENOMEM : 0;
}

/*
 * The thread's last run's status, a record of its own (kind LG_LAST_KIND,
 * key the thread id), so a thread's status after a restart costs one read,
 * not a list of its runs. Queued after the run's record: written in order.
 */
static void persist_last(struct lg_run *lr, enum run_status status)
{
    char text[64];
    int n = snprintf(text, sizeof(text), "{\"status\":\"%s\"}", run_status_name(status));
    int err = records_put_later(LG_LAST_KIND, lr->tid, lr->tid, text, (size_t)n);

    if (err)
        log_warn("thread %s: its last run's status is not stored (%s)", lr->tid,
                 strerror(-err));
}

void lg_run__persist(struct lg_run *lr)
{
    char key[LG_RUN_KEY_LEN];
    enum run_status status;
    struct rx_buf b;
    int err;

    if (!records_store())
        return;
    rx_buf_init(&b, STORE_RECORD_TEXT_MAX);
    pthread_mutex_lock(&lr->lock);
    err = record_encode(lr, &b);
    status = lr->status;
    pthread_mutex_unlock(&lr->lock);
    run_key(lr->tid, lr->id, key);
    if (err || (err = records_put_later(LG_RUN_KIND, key, lr->tid, b.data, b.len)))
        log_warn("run %s: its record is not stored (%s): it is lost at restart", lr->id,
                 strerror(-err));
    rx_buf_release(&b);
    persist_last(lr, status);
}

bool lg_run__last_failed(const char *tid)
{
    struct store *st = records_store();
    struct store_record r;
    bool failed;

    if (!st || store_record_get(st, LG_LAST_KIND, tid, &r))
        return false;
    failed = strstr(r.text, "\"error\"") != NULL;
    store_record_release(&r);
    return failed;
}

void lg_run__unstore(struct lg_run *lr)
{
    struct store *st = records_store();
    char key[LG_RUN_KEY_LEN];
    int err;

    if (!st)
        return;
    records_flush(); /* a record still queued would come back after the delete */
    run_key(lr->tid, lr->id, key);
    if ((err = store_record_delete(st, LG_RUN_KIND, key)) && err != -ENOENT)
        log_warn("run %s: its record is not deleted (%s)", lr->id, strerror(-err));
}

/* NEW text of a stored JSON value, compact; "{}" when absent. NULL on ENOMEM. */
static char *field_text(json_t *rec, const char *name)
{
    json_t *v = json_object_get(rec, name);

    return v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY)
             : strdup("{}");
}

/* The status's enum from its word; -1 when none. */
static int status_parse(const char *s)
{
    for (int i = RUN_PENDING; s && i <= RUN_INTERRUPTED; i++)
        if (!strcmp(run_status_name((enum run_status)i), s))
            return i;
    return -1;
}

/*
 * A record of `tid` (its text) as a run that is over, not registered. NEW,
 * or NULL: -ENOMEM, or -EPROTO (not a record this code writes).
 */
static struct lg_run *record_decode(const struct config *cfg, const char *tid,
                                    const char *text, size_t len, int *err)
{
    json_t *rec = json_loadb(text, len, 0, NULL), *error;
    const char *rid = json_string_value(json_object_get(rec, "run_id"));
    int status = status_parse(json_string_value(json_object_get(rec, "status")));
    enum lg_multitask mt = LG_MT_ENQUEUE;
    struct lg_run *lr = NULL;

    *err = -EPROTO;
    if (!rid || strlen(rid) >= RX_UUID_LEN || status < 0)
        goto out_decref;
    *err = -ENOMEM;
    if (!(lr = lg_run__alloc(cfg, tid, field_text(rec, "metadata"),
                             field_text(rec, "kwargs"))))
        goto out_decref;
    if (lg_multitask_parse(json_string_value(json_object_get(rec, "multitask_strategy")),
                           &mt))
        mt = LG_MT_ENQUEUE; /* an older word: shown as the default */
    strcpy(lr->id, rid);
    lr->status = (enum run_status)status;
    lr->mt = mt;
    lr->created_at = json_integer_value(json_object_get(rec, "created_at"));
    lr->updated_at = json_integer_value(json_object_get(rec, "updated_at"));
    lr->over = true;
    if ((error = json_object_get(rec, "error")))
        lr->final = json_pack("{s:O}", "__error__", error);
    *err = 0;
out_decref:
    json_decref(rec);
    return lr;
}

/* session_read_fn: the thread's values now, for a revived run's joins. */
static void read_values(void *arg, const struct rx_state *st, int64_t seq,
                        const struct event_session *entry)
{
    (void)seq;
    (void)entry;
    *(json_t **)arg = json_pack("{s:o}", "messages", lg_msg_messages(st));
}

int lg_run_load(const struct config *cfg, struct session *s, const char *rid,
                struct lg_run **out)
{
    struct store *st = records_store();
    const char *tid = session_id(s);
    char key[LG_RUN_KEY_LEN];
    struct store_record r;
    struct lg_run *lr;
    int err;

    if (!st)
        return -ENOENT;
    run_key(tid, rid, key);
    if ((err = store_record_get(st, LG_RUN_KIND, key, &r)))
        return err;
    lr = record_decode(cfg, tid, r.text, r.len, &err);
    store_record_release(&r);
    if (err)
        return err;
    if (!lr->final && session_read(s, read_values, &lr->final))
        lr->final = NULL; /* the thread went meanwhile: no values */
    *out = lr;
    return 0;
}

/* ---- the list ------------------------------------------------------------------ */

/* The run objects of the stored records of `tid` not in `have` (ids), appended to `out`.
 */
static int add_stored(const struct config *cfg, const char *tid, json_t *have,
                      json_t *out)
{
    struct store_records l = {0};
    int err = store_record_list(records_store(), LG_RUN_KIND, tid, NULL, 0, &l);

    for (size_t i = 0; !err && i < l.n; i++) {
        struct lg_run *lr = record_decode(cfg, tid, l.v[i].text, l.v[i].len, &err);

        if (err == -EPROTO) {
            log_warn("run record '%s' is damaged: not listed", l.v[i].key);
            err = 0;
            continue;
        }
        if (!err && !json_object_get(have, lr->id) &&
            json_array_append_new(out, lg_run_json(lr)))
            err = -ENOMEM;
        lg_run_unref(lr);
    }
    store_records_release(&l);
    return err;
}

/* Newest first (ISO times of one format compare as strings), then by id. */
static int newest_first(const void *a, const void *b)
{
    json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    const char *tx = json_string_value(json_object_get(x, "created_at"));
    const char *ty = json_string_value(json_object_get(y, "created_at"));
    int c = strcmp(ty ? ty : "", tx ? tx : "");

    return c ? c
             : strcmp(json_string_value(json_object_get(y, "run_id")),
                      json_string_value(json_object_get(x, "run_id")));
}

/* The page of `all` (sorted here) that passes `status`, as a NEW array. */
static json_t *page(json_t *all, const char *status, size_t limit, size_t offset)
{
    size_t n = json_array_size(all), seen = 0;
    json_t **v = calloc(n + 1, sizeof(*v)), *out = json_array();

    for (size_t i = 0; v && i < n; i++)
        v[i] = json_array_get(all, i);
    if (v)
        qsort(v, n, sizeof(*v), newest_first);
    for (size_t i = 0; v && out && i < n && json_array_size(out) < limit; i++) {
        const char *s = json_string_value(json_object_get(v[i], "status"));

        if ((!status || (s && !strcmp(status, s))) && seen++ >= offset &&
            json_array_append(out, v[i])) {
            json_decref(out);
            out = NULL;
        }
    }
    if (!v) {
        json_decref(out);
        out = NULL;
    }
    free(v);
    return out;
}

json_t *lg_run_list(const struct config *cfg, const char *tid, const char *status,
                    size_t limit, size_t offset)
{
    json_t *all, *have = NULL, *out = NULL, *e;
    size_t i;
    int err;

    if (!records_store())
        return lg_run__list_memory(tid, status, limit, offset);
    /* The registry's runs (the live ones too), then the stored ones it lacks. */
    if (!(all = lg_run__list_memory(tid, NULL, SIZE_MAX, 0)) || !(have = json_object()))
        goto out_decref;
    json_array_foreach(all, i, e)
    {
        if (json_object_set(have, json_string_value(json_object_get(e, "run_id")),
                            json_true()))
            goto out_decref;
    }
    if ((err = add_stored(cfg, tid, have, all))) {
        log_warn("thread %s: its stored runs cannot be listed (%s)", tid, strerror(-err));
        goto out_decref;
    }
    out = page(all, status, limit, offset);
out_decref:
    json_decref(have);
    json_decref(all);
    return out;
}
