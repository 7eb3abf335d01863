/*
 * lg_run_table - the registry of LangGraph runs (lg_run.h): newest first,
 * bounded (LG_RUNS_MAX records, LG_RUNS_REPLAYABLE finished runs keep their
 * frames, and what the finished ones keep at most limits.lg_runs_bytes).
 * Its lock is taken before a record's, never after.
 */
#include "server/protocols/lg_run_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "server/config.h"

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lg_run *reg_head, *reg_tail;
static size_t reg_count;
static size_t reg_bytes;        /* the `bytes` of the finished records listed */
static struct lg_run *reg_gone; /* unlisted where no reference may be dropped */

static void unlink_locked(struct lg_run *lr)
{
    if (lr->counted)
        reg_bytes -= lr->bytes;
    lr->counted = false;
    if (lr->prev)
        lr->prev->next = lr->next;
    else
        reg_head = lr->next;
    if (lr->next)
        lr->next->prev = lr->prev;
    else
        reg_tail = lr->prev;
    lr->prev = lr->next = NULL;
    lr->listed = false;
    reg_count--;
}

/* Drop a finished record's frames (both locks held), and their bytes from the sum. */
static void shed_frames_locked(struct lg_run *lr)
{
    size_t b = lr->frames.bytes;

    lg_frames_release(&lr->frames);
    lr->kept = false;
    /* The record's own size always loses them, counted in the sum yet or not
       (it may be measured before it is counted): the sum only when counted. */
    lr->bytes -= b < lr->bytes ? b : lr->bytes;
    if (lr->counted)
        reg_bytes -= b < reg_bytes ? b : reg_bytes;
}

/*
 * Keep the registry bounded (registry's lock held): finished runs past the
 * LG_RUNS_REPLAYABLE newest drop their frames; past LG_RUNS_MAX records
 * the oldest finished go. Running ones are never dropped. Returns the
 * records removed (their registry reference, to drop without the lock).
 */
static struct lg_run *trim_locked(void)
{
    struct lg_run *gone = NULL, *lr, *prev;
    size_t finished = 0;

    for (lr = reg_head; lr; lr = lr->next) {
        if (!lg_run_is_over(lr) || !lr->kept || ++finished <= LG_RUNS_REPLAYABLE)
            continue;
        pthread_mutex_lock(&lr->lock);
        shed_frames_locked(lr);
        pthread_mutex_unlock(&lr->lock);
    }
    for (lr = reg_tail; lr && reg_count > LG_RUNS_MAX; lr = prev) {
        prev = lr->prev;
        if (!lg_run_is_over(lr))
            continue;
        unlink_locked(lr);
        lr->next = gone;
        gone = lr;
    }
    return gone;
}

static void drop_list(struct lg_run *gone)
{
    while (gone) {
        struct lg_run *next = gone->next;

        gone->next = NULL;
        lg_run_unref(gone);
        gone = next;
    }
}

/* Records unlisted by lg_run__ended: their references, taken (registry's lock). */
static struct lg_run *take_gone_locked(void)
{
    struct lg_run *gone = reg_gone;

    reg_gone = NULL;
    return gone;
}

void lg_run__ended(struct lg_run *lr)
{
    struct lg_run *old, *prev;
    size_t max = __atomic_load_n(&lr->cfg->lg_runs_bytes, __ATOMIC_RELAXED);

    pthread_mutex_lock(&reg_lock);
    if (lr->listed && !lr->counted) {
        lr->counted = true;
        reg_bytes += lr->bytes;
    }
    /* Oldest first; the one that just ended stays (a join may follow it). */
    for (old = reg_tail; old && reg_bytes > max; old = prev) {
        prev = old->prev;
        if (old == lr || !old->counted)
            continue;
        unlink_locked(old);
        pthread_mutex_lock(&old->lock);
        lg_frames_release(&old->frames);
        free(old->metadata);
        free(old->kwargs);
        old->metadata = old->kwargs = NULL; /* the object shows {} */
        pthread_mutex_unlock(&old->lock);
        old->next = reg_gone;
        reg_gone = old;
    }
    pthread_mutex_unlock(&reg_lock);
}

void lg_run__add(struct lg_run *lr)
{
    struct lg_run *gone, *dropped;

    lg_run_ref(lr); /* the registry's */
    pthread_mutex_lock(&reg_lock);
    dropped = take_gone_locked();
    lr->next = reg_head;
    if (reg_head)
        reg_head->prev = lr;
    else
        reg_tail = lr;
    reg_head = lr;
    lr->listed = lr->kept = true;
    reg_count++;
    gone = trim_locked();
    pthread_mutex_unlock(&reg_lock);
    drop_list(gone);
    drop_list(dropped);
}

void lg_run__remove(struct lg_run *lr)
{
    bool was;

    pthread_mutex_lock(&reg_lock);
    if ((was = lr->listed))
        unlink_locked(lr);
    pthread_mutex_unlock(&reg_lock);
    if (was)
        lg_run_unref(lr);
}

struct lg_run *lg_run_find(const char *tid, const char *rid)
{
    struct lg_run *lr, *dropped;

    pthread_mutex_lock(&reg_lock);
    dropped = take_gone_locked();
    for (lr = reg_head; lr; lr = lr->next)
        if (!strcmp(lr->id, rid) && !strcmp(lr->tid, tid)) {
            lg_run_ref(lr);
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    drop_list(dropped); /* an HTTP thread, no lock held */
    return lr;
}

bool lg_run_thread_failed(const char *tid)
{
    bool failed = false, known = false;

    pthread_mutex_lock(&reg_lock);
    for (struct lg_run *lr = reg_head; lr; lr = lr->next)
        if (!strcmp(lr->tid, tid)) {
            failed = lg_run_is_over(lr) && lr->status == RUN_ERROR;
            known = true;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    /* None here (a restart, another node's runs): the store knows the last. */
    return known ? failed : lg_run__last_failed(tid);
}

/* NEW references to the runs of `tid` not over yet, in *out (n of them). */
static int live_runs(const char *tid, struct lg_run ***out, size_t *n)
{
    struct lg_run **v = NULL, **grown;
    size_t len = 0, cap = 0;
    int err = 0;

    pthread_mutex_lock(&reg_lock);
    for (struct lg_run *lr = reg_head; lr && !err; lr = lr->next) {
        if (strcmp(lr->tid, tid) || lg_run_is_over(lr))
            continue;
        if (len == cap) {
            cap = cap ? cap * 2 : 4;
            if (!(grown = realloc(v, cap * sizeof(*v)))) {
                err = -ENOMEM;
                break;
            }
            v = grown;
        }
        lg_run_ref(lr);
        v[len++] = lr;
    }
    pthread_mutex_unlock(&reg_lock);
    *out = v;
    *n = len;
    return err;
}

void lg_run_cancel_thread(const char *tid)
{
    struct lg_run **v;
    size_t n;

    if (live_runs(tid, &v, &n))
        log_warn("thread %s: out of memory listing its runs to cancel", tid);
    for (size_t i = 0; i < n; i++) {
        lg_run_cancel(v[i]);
        lg_run_unref(v[i]);
    }
    free(v);
}

void lg_run_forget_thread(const char *tid)
{
    struct lg_run *gone = NULL, *lr, *next;

    pthread_mutex_lock(&reg_lock);
    for (lr = reg_head; lr; lr = next) {
        next = lr->next;
        if (strcmp(lr->tid, tid))
            continue;
        unlink_locked(lr);
        lr->next = gone;
        gone = lr;
    }
    pthread_mutex_unlock(&reg_lock);
    drop_list(gone);
}

void lg_run_shutdown(void)
{
    struct lg_run *gone, *dropped;

    pthread_mutex_lock(&reg_lock);
    gone = reg_head;
    reg_head = reg_tail = NULL;
    reg_count = 0;
    reg_bytes = 0;
    for (struct lg_run *lr = gone; lr; lr = lr->next)
        lr->listed = lr->counted = false;
    dropped = take_gone_locked();
    pthread_mutex_unlock(&reg_lock);
    drop_list(gone);
    drop_list(dropped);
}

json_t *lg_run__list_memory(const char *tid, const char *status, size_t limit,
                            size_t offset)
{
    json_t *out = json_array();
    size_t seen = 0;

    pthread_mutex_lock(&reg_lock);
    for (struct lg_run *lr = reg_head; out && lr && json_array_size(out) < limit;
         lr = lr->next) {
        json_t *j;

        if (strcmp(lr->tid, tid))
            continue;
        pthread_mutex_lock(&lr->lock);
        j = NULL;
        if ((!status || !strcmp(status, run_status_name(lr->status))) && seen++ >= offset)
            j = lg_run__json_locked(lr);
        pthread_mutex_unlock(&lr->lock);
        if (j && json_array_append_new(out, j)) {
            json_decref(out);
            out = NULL;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    return out;
}

void lg_run_forget(struct lg_run *lr)
{
    lg_run__remove(lr);
    lg_run__unstore(lr);
}
