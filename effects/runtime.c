/*
 * runtime - the keyed effect runtime. See runtime.h. Its effects run on the
 * workers of a runtime_pool (runtime_pool.c); struct effect, its places and
 * the queues both use are in runtime_internal.h.
 */
#include "effects/runtime.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "effects/runtime_internal.h"
#include "effects/runtime_pool.h"
#include "effects/toolkit.h"
#include "state_machine/rx_context.h"

struct runtime {
    struct runtime_config cfg;
    const struct runtime_host *host;
    void *ctx; /* the host's */
    struct runtime_pool *pool;
    struct effect *running;  /* live, not cancelled: at most one per key */
    struct effect *draining; /* cancelled, still on a worker */
    struct fx_queue waiting; /* over session_max, in start order */
    int active;              /* queued in the pool or on a worker */
    int live;                /* effects not yet freed (idle_lock) */
    pthread_mutex_t idle_lock;
    pthread_cond_t idle;
    struct rx_effect_set wanted; /* scratch for reconcile */
};

const char *effect_key(const struct effect *fx)
{
    return fx->spec.key;
}

bool effect_is_cancelled(const struct effect *fx)
{
    return __atomic_load_n(&fx->cancelled, __ATOMIC_ACQUIRE);
}

enum rx_effect_kind effect_kind(const struct effect *fx)
{
    return fx->spec.kind;
}

double effect_elapsed_ms(const struct effect *fx)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - fx->started.tv_sec) * 1e3 +
           (double)(now.tv_nsec - fx->started.tv_nsec) / 1e6;
}

/* ---- the runtime -------------------------------------------------------------- */

struct runtime *runtime_create(const struct runtime_config *cfg,
                               const struct runtime_host *host, void *ctx)
{
    struct runtime *rt = calloc(1, sizeof(*rt));

    if (!rt)
        return NULL;
    rt->cfg = *cfg;
    rt->host = host;
    rt->ctx = ctx;
    rt->pool = cfg->pool ? cfg->pool : runtime_pool_shared(RUNTIME_POOL_MAX_DEFAULT);
    if (!rt->pool) {
        free(rt);
        return NULL;
    }
    if (rt->cfg.session_max < 1)
        rt->cfg.session_max = RUNTIME_SESSION_MAX_DEFAULT;
    rx_effect_set_init(&rt->wanted);
    pthread_mutex_init(&rt->idle_lock, NULL);
    pthread_cond_init(&rt->idle, NULL);
    return rt;
}

static long gauges[4]; /* by enum fx_gauge; [FX_G_NONE] is never read */

/* Host lock held: fx is counted in `to` from now on. */
static void gauge_move(struct effect *fx, enum fx_gauge to)
{
    if (fx->gauge != FX_G_NONE)
        __atomic_sub_fetch(&gauges[fx->gauge], 1, __ATOMIC_RELAXED);
    if (to != FX_G_NONE)
        __atomic_add_fetch(&gauges[to], 1, __ATOMIC_RELAXED);
    fx->gauge = to;
}

void runtime_gauges(struct runtime_gauges *g)
{
    g->running = __atomic_load_n(&gauges[FX_G_RUNNING], __ATOMIC_RELAXED);
    g->waiting = __atomic_load_n(&gauges[FX_G_WAITING], __ATOMIC_RELAXED);
    g->draining = __atomic_load_n(&gauges[FX_G_DRAINING], __ATOMIC_RELAXED);
}

static void effect_free(struct effect *fx)
{
    if (fx->has_view)
        rx_state_release(&fx->view);
    free(fx->resume_id);
    free(fx->resume_text);
    free(fx->tool_name);
    free(fx->tool_parameters);
    free(fx->spec.tool_call_id);
    if (fx->cancel_fd >= 0)
        close(fx->cancel_fd);
    free(fx);
}

static void live_add(struct runtime *rt, int n)
{
    pthread_mutex_lock(&rt->idle_lock);
    rt->live += n;
    if (rt->live == 0)
        pthread_cond_broadcast(&rt->idle);
    pthread_mutex_unlock(&rt->idle_lock);
}

/*
 * Lock held. Free an effect that never reached a worker (cancelled while
 * waiting). The caller holds a host reference of its own (runtime.h), so this
 * unref is not the last.
 */
static void effect_drop(struct runtime *rt, struct effect *fx)
{
    gauge_move(fx, FX_G_NONE);
    effect_free(fx);
    live_add(rt, -1);
    rt->host->unref(rt->ctx);
}

static void list_remove(struct effect **head, struct effect *fx)
{
    for (struct effect **p = head; *p; p = &(*p)->next) {
        if (*p == fx) {
            *p = fx->next;
            fx->next = NULL;
            return;
        }
    }
}

/* Lock held. Hand waiting effects to the pool while the session has room. */
static void admit_waiting(struct runtime *rt)
{
    while (rt->waiting.head && rt->active < rt->cfg.session_max) {
        struct effect *fx = fx_queue_pop(&rt->waiting);

        if (runtime_pool_push(rt->pool, fx)) {
            /* No worker at all: it waits for the next place to free up. */
            fx_queue_push(&rt->waiting, fx);
            return;
        }
        rt->active++;
    }
}

/* Lock held. Moves fx out of running; a waiting one goes at once. */
static void effect_cancel(struct runtime *rt, struct effect *fx)
{
    uint64_t one = 1;

    __atomic_store_n(&fx->cancelled, true, __ATOMIC_RELEASE);
    if (fx->cancel_fd >= 0 && write(fx->cancel_fd, &one, sizeof(one)) < 0) {
        /* An eventfd write only fails on overflow, which one write cannot cause. */
    }
    list_remove(&rt->running, fx);
    rt->host->event(rt->ctx, "effect-canceled", fx);
    switch (runtime_pool_take_back(rt->pool, fx)) {
    case FX_WAITING:
        fx_queue_unlink(&rt->waiting, fx);
        effect_drop(rt, fx);
        break;
    case FX_QUEUED:
        rt->active--;
        effect_drop(rt, fx);
        admit_waiting(rt);
        break;
    case FX_ACTIVE:
        fx->next = rt->draining; /* a worker has it: it ends there */
        rt->draining = fx;
        gauge_move(fx, FX_G_DRAINING);
        break;
    }
}

/* ---- the brain's side of an ask ------------------------------------------ */

static struct effect *ask_effect(struct brain_ask *ask)
{
    return ask->runtime;
}

static int ask_dispatch(struct brain_ask *ask, struct rx_input *in)
{
    struct effect *fx = ask_effect(ask);

    if (effect_is_cancelled(fx))
        return -ECANCELED;
    return fx->rt->host->dispatch(fx->rt->ctx, fx, in);
}

/* No lock of the runtime or the pool: a token goes straight to the host. */
static int ask_chunk(struct brain_ask *ask, const char *message_id, const char *delta)
{
    struct effect *fx = ask_effect(ask);

    if (effect_is_cancelled(fx))
        return -ECANCELED;
    return fx->rt->host->chunk(fx->rt->ctx, fx, message_id, delta);
}

/* The same for reasoning; a host that takes none drops it. */
static int ask_reasoning(struct brain_ask *ask, const char *message_id, const char *delta)
{
    struct effect *fx = ask_effect(ask);

    if (effect_is_cancelled(fx))
        return -ECANCELED;
    if (!fx->rt->host->reasoning)
        return 0;
    return fx->rt->host->reasoning(fx->rt->ctx, fx, message_id, delta);
}

static bool ask_is_cancelled(struct brain_ask *ask)
{
    return effect_is_cancelled(ask_effect(ask));
}

static bool ask_tool_exists(struct brain_ask *ask, const char *id)
{
    struct runtime *rt = ask_effect(ask)->rt;
    bool found;

    rt->host->lock(rt->ctx);
    found = rx_state_find_tool(rt->host->state(rt->ctx), id) != NULL;
    rt->host->unlock(rt->ctx);
    return found;
}

/* Sleep, waking at once when cancelled. 0, -ECANCELED or -errno of poll(2). */
static int effect_sleep(struct effect *fx, int ms)
{
    struct pollfd p = {.fd = fx->cancel_fd, .events = POLLIN};

    if (ms > 0 && poll(&p, 1, ms) < 0 && errno != EINTR)
        return -errno;
    return effect_is_cancelled(fx) ? -ECANCELED : 0;
}

int runtime_backoff_ms(const struct runtime_config *cfg, int attempt)
{
    int max = cfg->backoff_max_ms > 0 ? cfg->backoff_max_ms : 0;
    int ms = cfg->backoff_ms > 0 ? cfg->backoff_ms : 0;

    if (attempt <= 0)
        return 0;
    /* Doubling stops at the cap, so it never overflows whatever the config. */
    for (int i = 1; i < attempt && ms < max; i++)
        ms = ms > max / 2 ? max : ms * 2;
    return ms < max ? ms : max;
}

/* The wait before a restart: the configured hook, or poll(2) on the cancel fd. */
static int restart_wait(struct effect *fx)
{
    const struct runtime_config *cfg = &fx->rt->cfg;
    int ms = runtime_backoff_ms(cfg, fx->attempt);

    if (cfg->sleep_ms)
        return cfg->sleep_ms(cfg->sleep_arg, fx, ms);
    return effect_sleep(fx, ms);
}

static int ask_sleep_ms(struct brain_ask *ask, int ms)
{
    return effect_sleep(ask_effect(ask), ms);
}

static int copy_str(char **dst, const char *src)
{
    *dst = strdup(src);
    return *dst ? 0 : -ENOMEM;
}

/*
 * Lock held, `s` the host's state. What the effect gets, never the session:
 * an ask its view and its resume id, a tool its record. Bounded by what the
 * context holds (rx_context_view) and by the messages still streaming.
 */
static int effect_prepare(struct effect *fx, const struct rx_state *s)
{
    const struct rx_tool_call *c;
    int err;

    if (fx->spec.kind == RX_EFFECT_REQUEST_TOOLKIT) {
        c = rx_state_find_tool(s, fx->spec.tool_call_id);
        if (!c)
            return -ENOENT;
        if ((err = copy_str(&fx->tool_name, c->name)) ||
            (err = copy_str(&fx->tool_parameters, c->parameters)))
            return err;
        return 0;
    }
    /* A restarted ask whose answer already streams continues that message.
       Only records after `settled` can still stream. */
    for (size_t i = s->assistant.settled; i < s->assistant.len; i++) {
        const struct rx_message *m = &s->assistant.items[i];

        if (m->status == RX_STATUS_STREAMING &&
            m->called_brain_at == fx->spec.signals_cut_at) {
            free(fx->resume_id);
            if ((err = copy_str(&fx->resume_id, m->id)))
                return err;
        }
    }
    /* The text already shown of it, which the brain continues (SPEC 3.7). */
    if (fx->resume_id && fx->rt->host->resume) {
        free(fx->resume_text);
        fx->resume_text = NULL;
        fx->resume_len = 0;
        if ((err = fx->rt->host->resume(fx->rt->ctx, fx->resume_id, &fx->resume_text,
                                        &fx->resume_len)))
            return err;
    }
    if ((err = rx_context_view(s, fx->rt->cfg.brain->view_messages, &fx->view)))
        return err;
    fx->has_view = true;
    return 0;
}

static int run_ask(struct effect *fx)
{
    struct runtime *rt = fx->rt;
    const char *prompt = rt->cfg.system_prompt ? rt->cfg.system_prompt : "";
    struct brain_ask ask = {
        .view = &fx->view,
        .signals_cut_at = fx->spec.signals_cut_at,
        .system_prompt = prompt,
        .tools = rt->cfg.tools,
        .resume_message_id = fx->resume_id,
        .resume_text = fx->resume_text,
        .resume_len = fx->resume_len,
        .dispatch = ask_dispatch,
        .chunk = ask_chunk,
        .reasoning = ask_reasoning,
        .is_cancelled = ask_is_cancelled,
        .cancel_fd = fx->cancel_fd,
        .sleep_ms = ask_sleep_ms,
        .tool_exists = ask_tool_exists,
        .runtime = fx,
    };

    /* The session's own system prompt ("" included) over the server's. */
    if (fx->view.settings.system_prompt)
        ask.system_prompt = fx->view.settings.system_prompt;
    return rt->cfg.brain->ask(rt->cfg.brain, &ask);
}

/*
 * A tool call (SPEC 3.7): toolkit-start-call is in the log before the tool
 * can act (dispatch returns once the input is durable), so a crash from
 * here on leaves the call started and unanswered: in doubt, never silently
 * run twice. The tool gets the call's idempotency key.
 */
static int run_tool(struct effect *fx)
{
    struct runtime *rt = fx->rt;
    struct rx_input in = {.type = RX_IN_TOOLKIT_START_CALL,
                          .tool_call_id = fx->spec.tool_call_id};
    char *result = NULL, *key = NULL;
    bool is_error = false;
    int err;

    if ((err = rt->host->dispatch(rt->ctx, fx, &in)))
        return err;
    if (asprintf(&key, "%s/%s", rt->cfg.key_prefix ? rt->cfg.key_prefix : "",
                 fx->spec.tool_call_id) < 0)
        return -ENOMEM;
    err = toolkit_call(rt->cfg.tools, fx->tool_name, fx->tool_parameters, key,
                       fx->cancel_fd, &result, &is_error);
    free(key);
    in = (struct rx_input){0};
    if (err)
        return err;
    in.type = is_error ? RX_IN_TOOLKIT_ERROR : RX_IN_TOOLKIT_RESPOND;
    in.tool_call_id = fx->spec.tool_call_id;
    in.text = result;
    err = effect_is_cancelled(fx) ? -ECANCELED : rt->host->dispatch(rt->ctx, fx, &in);
    free(result);
    return err;
}

static int effect_start(struct runtime *rt, const struct rx_effect *spec, int attempt);

/* Lock held. */
static bool effect_running(const struct runtime *rt, const char *key)
{
    for (struct effect *fx = rt->running; fx; fx = fx->next)
        if (!strcmp(fx->spec.key, key))
            return true;
    return false;
}

/* Lock held. Its worker is done with fx: report, maybe restart, free the place. */
static void effect_end(struct runtime *rt, struct effect *fx, int err)
{
    const struct rx_state *now;
    const struct rx_effect *w;
    bool again = false;

    if (effect_is_cancelled(fx)) {
        list_remove(&rt->draining, fx); /* effect-canceled went out at cancel time */
    } else {
        list_remove(&rt->running, fx);
        rt->host->event(rt->ctx, err ? "effect-failed" : "effect-completed", fx);
        /* Still wanted after it ended: try again, a little later each time. */
        now = rt->host->state(rt->ctx);
        again = !rx_effects_at(now, &rt->wanted) && !effect_running(rt, fx->spec.key);
    }
    rt->active--;
    gauge_move(fx, FX_G_NONE);
    /* Those already waiting go first; a restart is a new start, behind them. */
    admit_waiting(rt);
    if (again && (w = rx_effect_set_find(&rt->wanted, fx->spec.key)) &&
        effect_start(rt, w, fx->attempt + 1)) {
        /* Out of memory: the next input reconciles again. */
    }
}

/*
 * On a worker: make what the effect gets (under the lock), wait before a
 * restart, run it (no lock), end it (under the lock), free it.
 */
void effect_run(struct effect *fx)
{
    struct runtime *rt = fx->rt;
    /* Read now: once `live` drops, rt may be freed under us. */
    void (*unref)(void *ctx) = rt->host->unref;
    void *host_ctx = rt->ctx;
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), err = fd < 0 ? -errno : 0;

    rt->host->lock(host_ctx);
    fx->cancel_fd = fd;
    if (fx->gauge == FX_G_WAITING) /* not cancelled while on its way here */
        gauge_move(fx, FX_G_RUNNING);
    if (!err && effect_is_cancelled(fx))
        err = -ECANCELED;
    if (!err && !fx->attempt)
        err = effect_prepare(fx, rt->host->state(host_ctx));
    rt->host->unlock(host_ctx);
    if (!err && fx->attempt) {
        /* A restart sees the state after its wait, not before it. */
        err = restart_wait(fx);
        if (!err) {
            rt->host->lock(host_ctx);
            err = effect_is_cancelled(fx) ? -ECANCELED
                                          : effect_prepare(fx, rt->host->state(host_ctx));
            rt->host->unlock(host_ctx);
        }
    }
    if (!err)
        err = fx->spec.kind == RX_EFFECT_ASK_BRAIN ? run_ask(fx) : run_tool(fx);

    rt->host->lock(host_ctx);
    effect_end(rt, fx, err);
    rt->host->unlock(host_ctx);

    effect_free(fx);
    live_add(rt, -1);
    /* From here on rt is not touched: runtime_wait_idle() may have returned and
       the runtime been destroyed. Last, as it may free the host itself. */
    unref(host_ctx);
}

/* Lock held. Start an effect: it runs when a worker and a place are free. */
static int effect_start(struct runtime *rt, const struct rx_effect *spec, int attempt)
{
    struct effect *fx = calloc(1, sizeof(*fx));
    int err;

    if (!fx)
        return -ENOMEM;
    fx->rt = rt;
    fx->attempt = attempt;
    fx->cancel_fd = -1;
    fx->spec = *spec;
    fx->spec.tool_call_id = spec->tool_call_id ? strdup(spec->tool_call_id) : NULL;
    clock_gettime(CLOCK_MONOTONIC, &fx->started);
    if (spec->tool_call_id && !fx->spec.tool_call_id) {
        effect_free(fx);
        return -ENOMEM;
    }
    fx->place = FX_WAITING;
    if (rt->active < rt->cfg.session_max) {
        if ((err = runtime_pool_push(rt->pool, fx))) {
            effect_free(fx);
            return err;
        }
        rt->active++;
    } else {
        fx_queue_push(&rt->waiting, fx);
    }
    live_add(rt, 1);
    gauge_move(fx, FX_G_WAITING);
    rt->host->ref(rt->ctx);
    fx->next = rt->running;
    rt->running = fx;
    /* Under the lock: a worker that took fx already waits for it to end this. */
    rt->host->event(rt->ctx, "effect-started", fx);
    return 0;
}

int runtime_reconcile(struct runtime *rt, const struct rx_state *s,
                      const struct effect *cause)
{
    struct effect *fx, *next;
    int err = rx_effects_at(s, &rt->wanted);

    if (err)
        return err;
    for (fx = rt->running; fx; fx = next) {
        next = fx->next;
        if (rx_effect_set_find(&rt->wanted, fx->spec.key)) {
            fx->orphan = false; /* wanted (again): the same effect runs on */
        } else if (fx == cause) {
            fx->orphan = true; /* gone by its own input: it runs on to its end */
        } else if (!fx->orphan || !cause) {
            /*
             * Gone by an input from elsewhere. An orphan's key was already gone
             * before this input, so another effect's input (a tool result, a
             * second ask's answer) says nothing about it: cancelling it would lose
             * the answer it is about to give. A client's input (a stop, a newer
             * message whose own ask replaces it) does cancel it.
             */
            effect_cancel(rt, fx);
        }
    }
    for (size_t i = 0; i < rt->wanted.len; i++) {
        const struct rx_effect *w = &rt->wanted.items[i];

        if (!effect_running(rt, w->key) && (err = effect_start(rt, w, 0)))
            return err;
    }
    return 0;
}

void runtime_cancel_all(struct runtime *rt)
{
    while (rt->running)
        effect_cancel(rt, rt->running);
}

int runtime_running(const struct runtime *rt)
{
    int n = 0;

    for (struct effect *fx = rt->running; fx; fx = fx->next)
        n++;
    for (struct effect *fx = rt->draining; fx; fx = fx->next)
        n++;
    return n;
}

int runtime_active(const struct runtime *rt)
{
    int n = 0;

    for (struct effect *fx = rt->running; fx; fx = fx->next)
        n++;
    return n;
}

int runtime_waiting(const struct runtime *rt)
{
    return rt->waiting.len;
}

void runtime_wait_idle(struct runtime *rt)
{
    pthread_mutex_lock(&rt->idle_lock);
    while (rt->live)
        pthread_cond_wait(&rt->idle, &rt->idle_lock);
    pthread_mutex_unlock(&rt->idle_lock);
}

void runtime_destroy(struct runtime *rt)
{
    if (!rt)
        return;
    rx_effect_set_release(&rt->wanted);
    pthread_mutex_destroy(&rt->idle_lock);
    pthread_cond_destroy(&rt->idle);
    free(rt);
}
