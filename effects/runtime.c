/*
 * runtime - the keyed effect runtime. See runtime.h.
 */
#include "effects/runtime.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "effects/toolkit.h"

struct effect {
    struct runtime *rt;
    struct effect *next; /* in rt->running or rt->draining */
    struct rx_effect spec;
    struct rx_state snapshot;
    int cancel_fd; /* eventfd, readable once cancelled */
    bool cancelled;
    /* Its own input removed its key, which is still gone: only a client's input
       cancels it now (see runtime_reconcile). Lock held. */
    bool orphan;
    int attempt; /* 0 for a start by reconcile, n for the nth restart since */
    struct timespec started;
};

struct runtime {
    struct runtime_config cfg;
    struct runtime_host host;
    struct effect *running;  /* live, not cancelled: at most one per key */
    struct effect *draining; /* cancelled, thread still ending */
    int threads;
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

struct runtime *runtime_create(const struct runtime_config *cfg,
                               const struct runtime_host *host)
{
    struct runtime *rt = calloc(1, sizeof(*rt));

    if (!rt)
        return NULL;
    rt->cfg = *cfg;
    rt->host = *host;
    rx_effect_set_init(&rt->wanted);
    pthread_mutex_init(&rt->idle_lock, NULL);
    pthread_cond_init(&rt->idle, NULL);
    return rt;
}

static void effect_free(struct effect *fx)
{
    rx_state_release(&fx->snapshot);
    free(fx->spec.tool_call_id);
    if (fx->cancel_fd >= 0)
        close(fx->cancel_fd);
    free(fx);
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

/* Lock held. Moves fx from running to draining and wakes its worker. */
static void effect_cancel(struct runtime *rt, struct effect *fx)
{
    uint64_t one = 1;

    __atomic_store_n(&fx->cancelled, true, __ATOMIC_RELEASE);
    if (write(fx->cancel_fd, &one, sizeof(one)) < 0) {
        /* An eventfd write only fails on overflow, which one write cannot cause. */
    }
    list_remove(&rt->running, fx);
    fx->next = rt->draining;
    rt->draining = fx;
    rt->host.event(rt->host.ctx, "effect-canceled", fx);
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
    return fx->rt->host.dispatch(fx->rt->host.ctx, fx, in);
}

static int ask_chunk(struct brain_ask *ask, const char *message_id, const char *delta)
{
    struct effect *fx = ask_effect(ask);

    if (effect_is_cancelled(fx))
        return -ECANCELED;
    return fx->rt->host.chunk(fx->rt->host.ctx, fx, message_id, delta);
}

static bool ask_is_cancelled(struct brain_ask *ask)
{
    return effect_is_cancelled(ask_effect(ask));
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

static int run_ask(struct effect *fx)
{
    struct runtime *rt = fx->rt;
    struct brain_ask ask = {
        .state = &fx->snapshot,
        .signals_cut_at = fx->spec.signals_cut_at,
        .system_prompt = rt->cfg.system_prompt ? rt->cfg.system_prompt : "",
        .tools = rt->cfg.tools,
        .dispatch = ask_dispatch,
        .chunk = ask_chunk,
        .is_cancelled = ask_is_cancelled,
        .cancel_fd = fx->cancel_fd,
        .sleep_ms = ask_sleep_ms,
        .runtime = fx,
    };

    /* A restarted ask whose answer already streams continues that message. */
    for (size_t i = 0; i < fx->snapshot.assistant.len; i++) {
        const struct rx_message *m = &fx->snapshot.assistant.items[i];

        if (m->status == RX_STATUS_STREAMING &&
            m->called_brain_at == fx->spec.signals_cut_at)
            ask.resume_message_id = m->id;
    }
    return rt->cfg.brain->ask(rt->cfg.brain, &ask);
}

static int run_tool(struct effect *fx)
{
    struct runtime *rt = fx->rt;
    const struct rx_tool_call *c =
        rx_state_find_tool(&fx->snapshot, fx->spec.tool_call_id);
    struct rx_input in = {0};
    char *result = NULL;
    bool is_error = false;
    int err;

    if (!c)
        return -ENOENT;
    err = toolkit_call(rt->cfg.tools, c->name, c->parameters, fx->cancel_fd, &result,
                       &is_error);
    if (err)
        return err;
    in.type = is_error ? RX_IN_TOOLKIT_ERROR : RX_IN_TOOLKIT_RESPOND;
    in.tool_call_id = fx->spec.tool_call_id;
    in.text = result;
    err = effect_is_cancelled(fx) ? -ECANCELED : rt->host.dispatch(rt->host.ctx, fx, &in);
    free(result);
    return err;
}

static int effect_start(struct runtime *rt, const struct rx_state *s,
                        const struct rx_effect *spec, int attempt);

/* Lock held. */
static bool effect_running(const struct runtime *rt, const char *key)
{
    for (struct effect *fx = rt->running; fx; fx = fx->next)
        if (!strcmp(fx->spec.key, key))
            return true;
    return false;
}

static void *effect_main(void *arg)
{
    struct effect *fx = arg;
    struct runtime *rt = fx->rt;
    /* Read now: once the thread count drops, rt may be freed under us. */
    void (*unref)(void *ctx) = rt->host.unref;
    void *host_ctx = rt->host.ctx;
    const struct rx_state *now;
    int err;

    err = fx->attempt ? restart_wait(fx) : 0;
    if (!err)
        err = fx->spec.kind == RX_EFFECT_ASK_BRAIN ? run_ask(fx) : run_tool(fx);

    rt->host.lock(rt->host.ctx);
    if (effect_is_cancelled(fx)) {
        list_remove(&rt->draining, fx); /* effect-canceled went out at cancel time */
    } else {
        list_remove(&rt->running, fx);
        rt->host.event(rt->host.ctx, err ? "effect-failed" : "effect-completed", fx);
        /* Still wanted after it ended: try again, a little later each time. */
        now = rt->host.state(rt->host.ctx);
        if (!rx_effects_at(now, &rt->wanted) && !effect_running(rt, fx->spec.key)) {
            const struct rx_effect *w = rx_effect_set_find(&rt->wanted, fx->spec.key);

            if (w && effect_start(rt, now, w, fx->attempt + 1)) {
                /* Out of memory: the next input reconciles again. */
            }
        }
    }
    rt->host.unlock(rt->host.ctx);

    effect_free(fx);
    pthread_mutex_lock(&rt->idle_lock);
    if (--rt->threads == 0)
        pthread_cond_broadcast(&rt->idle);
    pthread_mutex_unlock(&rt->idle_lock);
    /* From here on rt is not touched: runtime_wait_idle() may have returned and
       the runtime been destroyed. Last, as it may free the host itself. */
    unref(host_ctx);
    return NULL;
}

/* Lock held. */
static int effect_start(struct runtime *rt, const struct rx_state *s,
                        const struct rx_effect *spec, int attempt)
{
    struct effect *fx = calloc(1, sizeof(*fx));
    pthread_attr_t attr;
    pthread_t th;
    int err = -ENOMEM;

    if (!fx)
        return -ENOMEM;
    fx->rt = rt;
    fx->attempt = attempt;
    fx->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    fx->spec = *spec;
    fx->spec.tool_call_id = spec->tool_call_id ? strdup(spec->tool_call_id) : NULL;
    clock_gettime(CLOCK_MONOTONIC, &fx->started);
    if (fx->cancel_fd < 0 || (spec->tool_call_id && !fx->spec.tool_call_id) ||
        rx_state_copy(s, &fx->snapshot))
        goto out_free;
    pthread_mutex_lock(&rt->idle_lock);
    rt->threads++;
    pthread_mutex_unlock(&rt->idle_lock);
    rt->host.ref(rt->host.ctx);
    fx->next = rt->running;
    rt->running = fx;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    err = -pthread_create(&th, &attr, effect_main, fx);
    pthread_attr_destroy(&attr);
    if (err) {
        rt->running = fx->next;
        rt->host.unref(rt->host.ctx);
        pthread_mutex_lock(&rt->idle_lock);
        rt->threads--;
        pthread_mutex_unlock(&rt->idle_lock);
        goto out_free;
    }
    rt->host.event(rt->host.ctx, "effect-started", fx);
    return 0;

out_free:
    effect_free(fx);
    return err;
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

        if (!effect_running(rt, w->key) && (err = effect_start(rt, s, w, 0)))
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

void runtime_wait_idle(struct runtime *rt)
{
    pthread_mutex_lock(&rt->idle_lock);
    while (rt->threads)
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
