/*
 * check_runtime - the effect runtime (effects/runtime, SPEC 3.4) against a fake
 * host and a fake brain: an effect's own inputs never cancel it, a cancelled
 * effect cannot dispatch, an effect that ends while still wanted restarts after
 * a growing, capped backoff, and reconcile starts and cancels keys.
 *
 * The fake host is one global `struct world`: its lock is the host's lock, its
 * state is applied with the real machine and stamped like the session does
 * (strictly increasing, from 101 on), and it logs every effect event. The fake
 * brain runs a per-test script on the worker thread and never calls ck_assert
 * there (a worker cannot fail a test): it writes what it saw into the world,
 * and the test asserts that afterwards.
 * Nothing depends on the wall clock: every wait is for a condition, with a
 * generous limit (HANG_MS) that only turns a hang into a failure, and backoff
 * delays are read through the runtime's sleep hook, never measured.
 * The worker pool (e): a test may give the runtime a pool of its own (a few
 * workers) and a per-session cap; the brain notes the order in which asks
 * begin and how many run at once, and the pool's counts are read while the
 * asks hold, so caps and order are checked without timing anything.
 */
#include <limits.h>
#include <pthread.h>
#include <time.h>

#include "base/now.h"
#include "effects/runtime.h"
#include "effects/toolkit.h"
#include "tests/unit/helper_sm.h"

#define HANG_MS    60000
#define LOG_MAX    64
#define LINE_MAX_  (RX_EFFECT_KEY_LEN + 32)
#define RC_MAX     8
#define ASKS_MAX   32
#define SLEEPS_MAX 32

/* The first stamp the world gives an input (states in the tests use times below). */
#define FIRST_STAMP 101

struct world {
    pthread_mutex_t lock; /* the host's lock */
    pthread_cond_t cond;  /* broadcast on every change below */
    struct rx_state state;
    struct runtime *rt;
    struct toolkit *tools;
    struct brain brain;
    int64_t clock;
    int backoff_ms, backoff_max_ms;
    bool real_sleep; /* no sleep hook: the runtime polls the cancel fd itself */

    /* What the host saw. */
    char log[LOG_MAX][LINE_MAX_]; /* "effect-started ask-brain-1", in order */
    const struct effect *log_fx[LOG_MAX];
    int n_log;
    int refs; /* host_ref - host_unref, atomic */
    int host_dispatches, host_chunks, host_reasonings;
    bool unlocked_call; /* event or state called without the lock */

    /* The fake brain: a script per test, and what the asks saw. */
    int (*script)(struct brain_ask *ask, int n);
    int asks;
    int gate; /* the test opens gate n: the script goes on past brain_wait(n) */
    bool hung;
    int rc[RC_MAX];
    int n_rc;
    char resume[ASKS_MAX][RX_ID_MAX + 1]; /* each ask's resume_message_id, or "" */
    char prompt[ASKS_MAX][64];            /* each ask's system prompt */
    int64_t order[ASKS_MAX];              /* each ask's signals_cut_at, in start order */
    int in_flight, max_in_flight;         /* asks running at once, and the most */
    struct runtime_pool *pool; /* the runtime's pool, or NULL: the shared one */
    int session_max;           /* 0: the default */
    int fail_n, fail_rc;       /* script_fail_n */
    int sleeps[SLEEPS_MAX];
    int n_sleeps;
};

static struct world w;

/* ---- waiting without clocks in the assertions -------------------------------- */

/* `ms` from now on the monotonic clock the test condvars run on. */
static struct timespec deadline_in(int ms)
{
    return now_deadline(CLOCK_MONOTONIC, ms * NOW_NS_PER_MS);
}

static bool past(const struct timespec *t)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > t->tv_sec ||
           (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

/* Lock held. Sleep on the world's condition for a short slice: some changes
   (an effect leaving the draining list) broadcast nothing, so waits re-check. */
static void wait_slice(void)
{
    struct timespec t = deadline_in(5);

    pthread_cond_timedwait(&w.cond, &w.lock, &t);
}

/* Wait until pred() holds (it runs with the lock held). false after HANG_MS. */
static bool wait_for(bool (*pred)(const void *arg), const void *arg)
{
    struct timespec limit = deadline_in(HANG_MS);
    bool ok;

    pthread_mutex_lock(&w.lock);
    while (!(ok = pred(arg)) && !past(&limit))
        wait_slice();
    pthread_mutex_unlock(&w.lock);
    return ok;
}

static bool pred_logged(const void *arg)
{
    for (int i = 0; i < w.n_log && i < LOG_MAX; i++)
        if (!strcmp(w.log[i], arg))
            return true;
    return false;
}

static bool pred_running(const void *arg)
{
    return runtime_running(w.rt) == *(const int *)arg;
}

static bool pred_asks(const void *arg)
{
    return w.asks >= *(const int *)arg;
}

static bool pred_rcs(const void *arg)
{
    return w.n_rc >= *(const int *)arg;
}

/* Every tool whose effect `started` (an event log line) names has committed
   its toolkit-start-call: the stamps that follow are then known. */
static bool pred_tools_started(const void *arg)
{
    const char *started = arg;
    char key[96];

    for (size_t i = 0; i < w.state.tools.len; i++) {
        const struct rx_tool_call *c = &w.state.tools.items[i];

        snprintf(key, sizeof(key), "effect-started request-toolkit-%s", c->id);
        if (strstr(started, key) && !c->result.present && !c->started_at)
            return false;
    }
    return true;
}

#define WAIT_LOGGED(line)                                                                \
    ck_assert_msg(wait_for(pred_logged, line), "never logged '%s'", line)
#define WAIT_RUNNING(n)                                                                  \
    do {                                                                                 \
        int n_ = (n);                                                                    \
        ck_assert_msg(wait_for(pred_running, &n_), "never %d running", n_);              \
    } while (0)
#define WAIT_ASKS(n)                                                                     \
    do {                                                                                 \
        int n_ = (n);                                                                    \
        ck_assert_msg(wait_for(pred_asks, &n_), "never %d asks", n_);                    \
    } while (0)
#define WAIT_RCS(n)                                                                      \
    do {                                                                                 \
        int n_ = (n);                                                                    \
        ck_assert_msg(wait_for(pred_rcs, &n_), "the brain never got %d answers", n_);    \
    } while (0)

/* The event log joined by ", " (malloc()ed); sorted when the order is not defined. */
static int cmp_line(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static char *log_text(int from, bool sorted)
{
    const char *lines[LOG_MAX];
    struct rx_buf b;
    char *out;
    int n = 0;

    pthread_mutex_lock(&w.lock);
    for (int i = from; i < w.n_log && i < LOG_MAX; i++)
        lines[n++] = w.log[i];
    if (sorted)
        qsort(lines, (size_t)n, sizeof(lines[0]), cmp_line);
    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    if (rx_buf_puts(&b, ""))
        abort();
    for (int i = 0; i < n; i++)
        if (rx_buf_puts(&b, i ? ", " : "") || rx_buf_puts(&b, lines[i]))
            abort();
    pthread_mutex_unlock(&w.lock);
    out = rx_buf_take(&b, NULL);
    if (!out)
        abort();
    return out;
}

#define ck_assert_log(from, sorted, want)                                                \
    do {                                                                                 \
        char *got_ = log_text(from, sorted);                                             \
        ck_assert_str_eq(got_, want);                                                    \
        free(got_);                                                                      \
    } while (0)

static int log_len(void)
{
    int n;

    pthread_mutex_lock(&w.lock);
    n = w.n_log;
    pthread_mutex_unlock(&w.lock);
    return n;
}

static int running(void)
{
    int n;

    pthread_mutex_lock(&w.lock);
    n = runtime_running(w.rt);
    pthread_mutex_unlock(&w.lock);
    return n;
}

/* ---- the fake host ------------------------------------------------------------ */

static void host_lock(void *ctx)
{
    pthread_mutex_lock(&((struct world *)ctx)->lock);
}

static void host_unlock(void *ctx)
{
    pthread_mutex_unlock(&((struct world *)ctx)->lock);
}

/* Called with the lock held: a trylock that succeeds proves it was not. */
static void check_locked(void)
{
    if (!pthread_mutex_trylock(&w.lock)) {
        w.unlocked_call = true;
        pthread_mutex_unlock(&w.lock);
    }
}

static const struct rx_state *host_state(void *ctx)
{
    check_locked();
    return &((struct world *)ctx)->state;
}

/* Lock held: stamp like the session (strictly increasing), apply, reconcile. */
static int apply_locked(struct rx_input *in, const struct effect *cause,
                        enum rx_verdict *verdict)
{
    struct rx_outcome out;
    int err;

    if (w.clock < w.state.updated_at)
        w.clock = w.state.updated_at;
    in->timestamp = ++w.clock;
    in->has_timestamp = true;
    err = rx_machine_apply(&w.state, in, &out);
    if (err)
        return err;
    *verdict = out.verdict;
    if (out.verdict == RX_ACCEPTED)
        err = runtime_reconcile(w.rt, &w.state, cause);
    pthread_cond_broadcast(&w.cond);
    return err;
}

static int host_dispatch(void *ctx, struct effect *fx, struct rx_input *in)
{
    enum rx_verdict v = RX_REJECTED;
    int err;

    (void)ctx;
    pthread_mutex_lock(&w.lock);
    w.host_dispatches++;
    /* As the session does: a cancel may have landed since the runtime looked. */
    if (effect_is_cancelled(fx)) {
        err = -ECANCELED;
    } else {
        err = apply_locked(in, fx, &v);
        if (!err && v == RX_REJECTED)
            err = -EPROTO;
    }
    pthread_mutex_unlock(&w.lock);
    return err;
}

static int host_chunk(void *ctx, const struct effect *fx, const char *message_id,
                      const char *delta)
{
    int err = 0;

    (void)ctx;
    (void)delta;
    pthread_mutex_lock(&w.lock);
    w.host_chunks++;
    if (effect_is_cancelled(fx))
        err = -ECANCELED;
    else if (!rx_state_find_assistant(&w.state, message_id))
        err = -ENOENT;
    pthread_mutex_unlock(&w.lock);
    return err;
}

static int host_reasoning(void *ctx, const struct effect *fx, const char *message_id,
                          const char *delta)
{
    int err = 0;

    (void)ctx;
    (void)delta;
    pthread_mutex_lock(&w.lock);
    w.host_reasonings++;
    if (effect_is_cancelled(fx))
        err = -ECANCELED;
    else if (!rx_state_find_assistant(&w.state, message_id))
        err = -ENOENT;
    pthread_mutex_unlock(&w.lock);
    return err;
}

static void host_event(void *ctx, const char *type, const struct effect *fx)
{
    (void)ctx;
    check_locked();
    if (w.n_log < LOG_MAX) {
        snprintf(w.log[w.n_log], sizeof(w.log[0]), "%s %s", type, effect_key(fx));
        w.log_fx[w.n_log] = fx;
    }
    w.n_log++;
    pthread_cond_broadcast(&w.cond);
}

static void host_ref(void *ctx)
{
    (void)ctx;
    __atomic_add_fetch(&w.refs, 1, __ATOMIC_ACQ_REL);
}

/* Lock-free: the runtime may call it with the lock held (a failed start). */
static void host_unref(void *ctx)
{
    (void)ctx;
    __atomic_sub_fetch(&w.refs, 1, __ATOMIC_ACQ_REL);
}

static const struct runtime_host host_ops = {
    .lock = host_lock,
    .unlock = host_unlock,
    .state = host_state,
    .dispatch = host_dispatch,
    .chunk = host_chunk,
    .reasoning = host_reasoning,
    .event = host_event,
    .ref = host_ref,
    .unref = host_unref,
};

/* The runtime's restart wait, seen instead of slept. */
static int record_sleep(void *arg, const struct effect *fx, int ms)
{
    (void)arg;
    pthread_mutex_lock(&w.lock);
    if (w.n_sleeps < SLEEPS_MAX)
        w.sleeps[w.n_sleeps] = ms;
    w.n_sleeps++;
    pthread_cond_broadcast(&w.cond);
    pthread_mutex_unlock(&w.lock);
    return effect_is_cancelled(fx) ? -ECANCELED : 0;
}

/* ---- the fake brain ----------------------------------------------------------- */

static int fake_ask(struct brain *self, struct brain_ask *ask)
{
    int n, rc;

    (void)self;
    pthread_mutex_lock(&w.lock);
    n = w.asks++;
    if (++w.in_flight > w.max_in_flight)
        w.max_in_flight = w.in_flight;
    if (n < ASKS_MAX) {
        snprintf(w.resume[n], sizeof(w.resume[n]), "%s",
                 ask->resume_message_id ? ask->resume_message_id : "");
        snprintf(w.prompt[n], sizeof(w.prompt[n]), "%s", ask->system_prompt);
        w.order[n] = ask->signals_cut_at;
    }
    pthread_cond_broadcast(&w.cond);
    pthread_mutex_unlock(&w.lock);
    rc = w.script(ask, n);
    pthread_mutex_lock(&w.lock);
    w.in_flight--;
    pthread_mutex_unlock(&w.lock);
    return rc;
}

/* Brain side: keep what a guarded call returned, for the test to check. */
static int note(int rc)
{
    pthread_mutex_lock(&w.lock);
    if (w.n_rc < RC_MAX)
        w.rc[w.n_rc] = rc;
    w.n_rc++;
    pthread_cond_broadcast(&w.cond);
    pthread_mutex_unlock(&w.lock);
    return rc;
}

/* Brain side: wait until the test opens gate n, or the ask is cancelled. */
static void brain_wait(struct brain_ask *ask, int n)
{
    struct timespec limit = deadline_in(HANG_MS);

    pthread_mutex_lock(&w.lock);
    while (w.gate < n && !ask->is_cancelled(ask)) {
        if (past(&limit)) {
            w.hung = true;
            break;
        }
        wait_slice();
    }
    pthread_mutex_unlock(&w.lock);
}

static void open_gate(int n)
{
    pthread_mutex_lock(&w.lock);
    w.gate = n;
    pthread_cond_broadcast(&w.cond);
    pthread_mutex_unlock(&w.lock);
}

/* "a-<signalsCutAt>": the message id an ask starts (test ids are short). */
static void message_id(const struct brain_ask *ask, char *buf, size_t n)
{
    snprintf(buf, n, "a-%lld", (long long)ask->signals_cut_at);
}

static int brain_start(struct brain_ask *ask, const char *id)
{
    struct rx_input in = {.type = RX_IN_BRAIN_SEND_MESSAGE_START,
                          .called_brain_at = ask->signals_cut_at,
                          .message_id = (char *)id};

    return ask->dispatch(ask, &in);
}

static int brain_complete(struct brain_ask *ask, const char *id, const char *content)
{
    struct rx_input in = {.type = RX_IN_BRAIN_SEND_MESSAGE_COMPLETE,
                          .called_brain_at = ask->signals_cut_at,
                          .message_id = (char *)id,
                          .content = (char *)content};

    return ask->dispatch(ask, &in);
}

static int brain_compress(struct brain_ask *ask)
{
    struct rx_input in = {.type = RX_IN_BRAIN_COMPRESS_HISTORY,
                          .called_brain_at = ask->signals_cut_at,
                          .text = (char *)"summary",
                          .cut_at = 0};

    return ask->dispatch(ask, &in);
}

/* Start, wait for gate 1, stream a chunk, complete. */
static int script_stream(struct brain_ask *ask, int n)
{
    char id[32];

    (void)n;
    message_id(ask, id, sizeof(id));
    note(brain_start(ask, id));
    brain_wait(ask, 1);
    note(ask->chunk(ask, id, "hel"));
    note(brain_complete(ask, id, "hello"));
    return 0;
}

/* Compress (the ask's key goes), wait; start (the key is back), wait; complete. */
static int script_compress_then_stream(struct brain_ask *ask, int n)
{
    char id[32];

    (void)n;
    message_id(ask, id, sizeof(id));
    note(brain_compress(ask));
    note(ask->is_cancelled(ask));
    brain_wait(ask, 1);
    note(brain_start(ask, id));
    note(ask->is_cancelled(ask));
    brain_wait(ask, 2);
    note(brain_complete(ask, id, "hello"));
    return 0;
}

/* Start, relay reasoning then text, complete. */
static int script_reason(struct brain_ask *ask, int n)
{
    char id[32];

    (void)n;
    message_id(ask, id, sizeof(id));
    note(brain_start(ask, id));
    note(ask->reasoning(ask, id, "why"));
    note(ask->chunk(ask, id, "hel"));
    note(brain_complete(ask, id, "hello"));
    return 0;
}

/* Hold until cancelled (or gate 1), and end without a word. */
static int script_hold(struct brain_ask *ask, int n)
{
    (void)n;
    brain_wait(ask, 1);
    return 0;
}

/* Hold until cancelled, then try every guarded call; claim success. */
static int script_probe_after_cancel(struct brain_ask *ask, int n)
{
    (void)n;
    brain_wait(ask, 1);
    note(ask->is_cancelled(ask));
    note(brain_start(ask, "late"));
    note(ask->chunk(ask, "late", "x"));
    note(ask->reasoning(ask, "late", "y"));
    /* An hour: only the cancel fd can end this sleep in a test's time. */
    note(ask->sleep_ms(ask, 3600 * 1000));
    return 0;
}

/* The first fail_n asks end with fail_rc and no input; the next one answers. */
static int script_fail_n(struct brain_ask *ask, int n)
{
    char id[32];

    if (n < w.fail_n)
        return w.fail_rc;
    message_id(ask, id, sizeof(id));
    return note(brain_complete(ask, id, "done"));
}

/* The first ask starts its message and fails; the restart goes on with it. */
static int script_resume(struct brain_ask *ask, int n)
{
    char id[32];

    if (n == 0) {
        message_id(ask, id, sizeof(id));
        note(brain_start(ask, id));
        return -EIO;
    }
    return note(brain_complete(
        ask, ask->resume_message_id ? ask->resume_message_id : "new", "resumed"));
}

/* The ask for the first message calls the calculator and holds; the ask for the
   tool result answers. */
static int script_call_tools(struct brain_ask *ask, int n)
{
    struct rx_input_call call = {.id = (char *)"c1",
                                 .name = (char *)"calculator",
                                 .parameters = (char *)"{\"expression\":\"2+3\"}"};
    struct rx_input in = {.type = RX_IN_BRAIN_CALL_TOOLS,
                          .called_brain_at = ask->signals_cut_at,
                          .calls = &call,
                          .n_calls = 1};
    char id[32];

    (void)n;
    if (ask->signals_cut_at == 1) {
        note(ask->dispatch(ask, &in));
        note(ask->is_cancelled(ask));
        brain_wait(ask, 1);
        return 0;
    }
    message_id(ask, id, sizeof(id));
    return note(brain_complete(ask, id, "2+3 = 5"));
}

/* The ask for time 1 holds; the one for time 3 completes the first one's message. */
static int script_complete_other(struct brain_ask *ask, int n)
{
    (void)n;
    if (ask->signals_cut_at == 1) {
        brain_wait(ask, 1);
        return 0;
    }
    return note(brain_complete(ask, "a1", "finished by another"));
}

/* Two asks at once: the one for time 3 compresses (its key goes), waits for gate
   2, then answers; the one for time 1 waits for gate 1, then completes a1. */
static int script_orphan_and_other(struct brain_ask *ask, int n)
{
    char id[32];

    (void)n;
    if (ask->signals_cut_at == 1) {
        brain_wait(ask, 1);
        return brain_complete(ask, "a1", "first answer");
    }
    message_id(ask, id, sizeof(id));
    note(brain_compress(ask));
    brain_wait(ask, 2);
    note(brain_start(ask, id));
    note(brain_complete(ask, id, "second answer"));
    return 0;
}

/*
 * For the pool: wait for gate 1, then answer: complete the message this ask
 * resumes (the runtime found it streaming), or a new one.
 */
static int script_queued(struct brain_ask *ask, int n)
{
    char id[32];

    (void)n;
    brain_wait(ask, 1);
    message_id(ask, id, sizeof(id));
    return note(brain_complete(ask, ask->resume_message_id ? ask->resume_message_id : id,
                               "done"));
}

/* ---- the world's life --------------------------------------------------------- */

static void setup(void)
{
    pthread_condattr_t ca;
    json_t *hold = qjson("[{'name':'hold','description':'waits to be cancelled',"
                         "'command':['/bin/sleep','60'],'timeout_ms':600000}]");
    struct rx_error err = {""};

    memset(&w, 0, sizeof(w));
    pthread_mutex_init(&w.lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w.cond, &ca);
    pthread_condattr_destroy(&ca);
    ck_assert_int_eq(rx_state_init(&w.state), 0);
    w.tools = toolkit_create();
    ck_assert_ptr_nonnull(w.tools);
    ck_assert_int_eq(toolkit_add_builtins(w.tools), 0);
    ck_assert_msg(!toolkit_add_from_config(w.tools, hold, &err), "%s", err.text);
    json_decref(hold);
    w.brain.name = "fake";
    w.brain.ask = fake_ask;
    w.clock = FIRST_STAMP - 1;
    w.script = script_hold;
}

/* Create the runtime and reconcile `state` as a recovered session would. */
static void world_start(const char *state)
{
    struct runtime_config cfg = {
        .brain = &w.brain,
        .tools = w.tools,
        .system_prompt = "",
        .backoff_ms = w.backoff_ms,
        .backoff_max_ms = w.backoff_max_ms,
        .sleep_ms = w.real_sleep ? NULL : record_sleep,
        .pool = w.pool,
        .session_max = w.session_max,
    };
    int err;

    rx_state_release(&w.state);
    state_from(&w.state, state);
    w.rt = runtime_create(&cfg, &host_ops, &w);
    ck_assert_ptr_nonnull(w.rt);
    pthread_mutex_lock(&w.lock);
    err = runtime_reconcile(w.rt, &w.state, NULL);
    pthread_mutex_unlock(&w.lock);
    ck_assert_int_eq(err, 0);
}

static bool pred_no_refs(const void *arg)
{
    (void)arg;
    return __atomic_load_n(&w.refs, __ATOMIC_ACQUIRE) == 0;
}

static void teardown(void)
{
    bool drained = true, unreffed;
    int zero = 0;

    if (w.rt) {
        open_gate(1000);
        pthread_mutex_lock(&w.lock);
        runtime_cancel_all(w.rt);
        pthread_mutex_unlock(&w.lock);
        drained = wait_for(pred_running, &zero);
        if (drained)
            runtime_wait_idle(w.rt);
    }
    /* A worker's very last act is the host's unref: wait for it before the
       world goes (the runtime is not touched after runtime_wait_idle()). */
    unreffed = wait_for(pred_no_refs, NULL);
    if (drained && unreffed) {
        runtime_destroy(w.rt);
        runtime_pool_destroy(w.pool); /* joins its workers */
    }
    toolkit_destroy(w.tools);
    rx_state_release(&w.state);
    pthread_cond_destroy(&w.cond);
    pthread_mutex_destroy(&w.lock);
    ck_assert_msg(drained && unreffed, "effects did not end");
    ck_assert_msg(!w.hung, "a brain waited for a gate that never opened");
    ck_assert_msg(!w.unlocked_call, "the runtime called the host without the lock");
}

/* An input from elsewhere (a client): applied and reconciled with no cause. */
static void send_input(const char *text, enum rx_verdict want)
{
    struct rx_input in;
    enum rx_verdict v = RX_REJECTED;
    int err;

    input_from(&in, text);
    pthread_mutex_lock(&w.lock);
    err = apply_locked(&in, NULL, &v);
    pthread_mutex_unlock(&w.lock);
    rx_input_release(&in);
    ck_assert_int_eq(err, 0);
    ck_assert_msg(v == want, "%s: %s", text, rx_verdict_name(v));
}

static int rc_at(int i)
{
    int rc;

    pthread_mutex_lock(&w.lock);
    rc = i < w.n_rc ? w.rc[i] : INT_MIN;
    pthread_mutex_unlock(&w.lock);
    return rc;
}

static int counter(const int *c)
{
    int n;

    pthread_mutex_lock(&w.lock);
    n = *c;
    pthread_mutex_unlock(&w.lock);
    return n;
}

static bool effect_logged_once(const char *line)
{
    int n = 0;

    pthread_mutex_lock(&w.lock);
    for (int i = 0; i < w.n_log && i < LOG_MAX; i++)
        n += !strcmp(w.log[i], line);
    pthread_mutex_unlock(&w.lock);
    return n == 1;
}

/* Where `line` is in the log, or -1. */
static int log_index(const char *line)
{
    int at = -1;

    pthread_mutex_lock(&w.lock);
    for (int i = 0; i < w.n_log && i < LOG_MAX && at < 0; i++)
        if (!strcmp(w.log[i], line))
            at = i;
    pthread_mutex_unlock(&w.lock);
    return at;
}

/* The state's encoding, and the keys it wants (static buffer), under the lock. */
static char *world_state_bytes(void)
{
    char *b;

    pthread_mutex_lock(&w.lock);
    b = state_bytes(&w.state);
    pthread_mutex_unlock(&w.lock);
    return b;
}

static const char *world_keys(void)
{
    static char keys[512];
    char *k;

    pthread_mutex_lock(&w.lock);
    k = effect_keys(&w.state);
    pthread_mutex_unlock(&w.lock);
    snprintf(keys, sizeof(keys), "%s", k);
    free(k);
    return keys;
}

/* The assistant message `id` has `status` and `content` (NULL: not checked). */
static void assert_message(const char *id, enum rx_status status, const char *content)
{
    const struct rx_message *m;
    bool found, status_ok, content_ok;

    pthread_mutex_lock(&w.lock);
    m = rx_state_find_assistant(&w.state, id);
    found = m != NULL;
    status_ok = m && m->status == status;
    content_ok = m && (!content || !strcmp(m->content, content));
    pthread_mutex_unlock(&w.lock);
    ck_assert_msg(found, "no message '%s'", id);
    ck_assert_msg(status_ok, "message '%s': wrong status", id);
    ck_assert_msg(content_ok, "message '%s': wrong content", id);
}

#define ONE_MESSAGE ST(1, UM("m1", "hi", 1), "", "", 0, "", 0)
/* An answer streams for m1 while m2 wants a second ask. */
#define TWO_ASKS                                                                         \
    ST(3, UM("m1", "hi", 1) "," UM("m2", "yo", 3), AM("a1", "", 2, 2, "streaming", 1),   \
       "", 1, "", 0)

/* ---- (a) an effect's own inputs never cancel it -------------------------------- */

/* Its start removes the signals key and the streaming message brings it back:
   the same effect runs on, no second one starts, nothing is cancelled. */
START_TEST(test_own_start_is_the_same_effect)
{
    w.script = script_stream;
    world_start(ONE_MESSAGE);
    WAIT_RCS(1);
    ck_assert_int_eq(rc_at(0), 0);
    assert_message("a-1", RX_STATUS_STREAMING, "");
    ck_assert_log(0, false, "effect-started ask-brain-1");
    ck_assert_int_eq(running(), 1);
    open_gate(1);
    WAIT_RUNNING(0);
    ck_assert_log(0, false, "effect-started ask-brain-1, effect-completed ask-brain-1");
    ck_assert_ptr_eq(w.log_fx[0], w.log_fx[1]);
    ck_assert_int_eq(counter(&w.asks), 1);
    ck_assert_int_eq(rc_at(1), 0); /* the chunk */
    ck_assert_int_eq(rc_at(2), 0); /* the complete */
    assert_message("a-1", RX_STATUS_COMPLETE, "hello");
}
END_TEST

/* Its compress input removes its key with nothing to bring it back: it is not
   cancelled and runs on; when its start brings the key back, it is the same one. */
START_TEST(test_own_input_removing_the_key_runs_on)
{
    w.script = script_compress_then_stream;
    world_start(ONE_MESSAGE);
    WAIT_RCS(2);
    ck_assert_int_eq(rc_at(0), 0);      /* compress accepted */
    ck_assert_int_eq(rc_at(1), false);  /* and the ask not cancelled by it */
    ck_assert_str_eq(world_keys(), ""); /* the key is gone from the state */
    ck_assert_int_eq(running(), 1);
    ck_assert_log(0, false, "effect-started ask-brain-1");
    open_gate(1);
    WAIT_RCS(4);
    ck_assert_int_eq(rc_at(2), 0);     /* start accepted: the key is wanted again */
    ck_assert_int_eq(rc_at(3), false); /* still the same, uncancelled effect */
    ck_assert_log(0, false, "effect-started ask-brain-1");
    ck_assert_int_eq(running(), 1);
    open_gate(2);
    WAIT_RUNNING(0);
    ck_assert_log(0, false, "effect-started ask-brain-1, effect-completed ask-brain-1");
    ck_assert_int_eq(counter(&w.asks), 1);
    assert_message("a-1", RX_STATUS_COMPLETE, "hello");
}
END_TEST

/*
 * An effect whose own input removed its key is not cancelled by a later input
 * of another effect either: here the second ask compressed (its key went), then
 * the first ask completed its own answer. Cancelling the second ask then would
 * lose the answer to the second message: nothing wants its key any more.
 */
START_TEST(test_own_input_then_other_effects_input)
{
    w.script = script_orphan_and_other;
    world_start(TWO_ASKS);
    WAIT_RCS(1);
    ck_assert_int_eq(rc_at(0), 0); /* the compress */
    ck_assert_str_eq(world_keys(), "ask-brain-1");
    open_gate(1);
    WAIT_LOGGED("effect-completed ask-brain-1");
    ck_assert_str_eq(world_keys(), ""); /* nothing wants ask-brain-3 */
    ck_assert_int_eq(running(), 1);
    open_gate(2);
    WAIT_RUNNING(0);
    ck_assert_int_eq(rc_at(1), 0); /* its start */
    ck_assert_int_eq(rc_at(2), 0); /* its answer */
    ck_assert_log(0, false,
                  "effect-started ask-brain-1, effect-started ask-brain-3, "
                  "effect-completed ask-brain-1, effect-completed ask-brain-3");
    assert_message("a1", RX_STATUS_COMPLETE, "first answer");
    assert_message("a-3", RX_STATUS_COMPLETE, "second answer");
}
END_TEST

/* But a client's input still cancels it: a stop, or a newer message (which
   wants an ask of its own that replaces it). */
START_TEST(test_own_input_then_client_input_cancels)
{
    static const char *const inputs[] = {
        "{'type':'user-cancel'}",
        "{'type':'user-send-message','messageId':'m9','content':'more'}",
    };
    static const char *const want[] = {
        "effect-started ask-brain-1, effect-canceled ask-brain-1",
        "effect-started ask-brain-1, effect-canceled ask-brain-1, "
        "effect-started ask-brain-102",
    };

    w.script = script_compress_then_stream;
    world_start(ONE_MESSAGE);
    WAIT_RCS(2);
    ck_assert_int_eq(rc_at(0), 0);     /* compressed: its key is gone */
    ck_assert_int_eq(rc_at(1), false); /* yet it runs on */
    send_input(inputs[_i], RX_ACCEPTED);
    ck_assert_log(0, false, want[_i]);
}
END_TEST

/* The same compress input from elsewhere (an external agent) does cancel. */
START_TEST(test_same_input_from_elsewhere_cancels)
{
    world_start(ONE_MESSAGE);
    WAIT_ASKS(1);
    send_input("{'type':'brain-compress-history','calledBrainAt':1,'summary':'s',"
               "'cutAt':0}",
               RX_ACCEPTED);
    ck_assert_log(0, false, "effect-started ask-brain-1, effect-canceled ask-brain-1");
    WAIT_RUNNING(0);
    ck_assert_log(0, false, "effect-started ask-brain-1, effect-canceled ask-brain-1");
}
END_TEST

/* ---- (b) a cancelled effect cannot dispatch ------------------------------------ */

START_TEST(test_cancelled_ask_cannot_dispatch)
{
    char *before, *after;

    w.script = script_probe_after_cancel;
    world_start(ONE_MESSAGE);
    WAIT_ASKS(1);
    send_input("{'type':'user-cancel'}", RX_ACCEPTED);
    before = world_state_bytes();
    WAIT_RUNNING(0);
    ck_assert_int_eq(rc_at(0), true);                 /* it knows it was cancelled */
    ck_assert_int_eq(rc_at(1), -ECANCELED);           /* dispatch */
    ck_assert_int_eq(rc_at(2), -ECANCELED);           /* chunk */
    ck_assert_int_eq(rc_at(3), -ECANCELED);           /* reasoning */
    ck_assert_int_eq(rc_at(4), -ECANCELED);           /* a sleep ends at once */
    ck_assert_int_eq(counter(&w.host_dispatches), 0); /* the runtime refused itself */
    ck_assert_int_eq(counter(&w.host_chunks), 0);
    ck_assert_int_eq(counter(&w.host_reasonings), 0);
    after = world_state_bytes();
    ck_assert_str_eq(after, before); /* nothing was applied */
    free(before);
    free(after);
    /* It returned 0, yet it is not reported as completed. */
    ck_assert_log(0, false, "effect-started ask-brain-1, effect-canceled ask-brain-1");
}
END_TEST

/*
 * An ask gets the session's own system prompt (settings, user-configure) over
 * the configured one (""), and its reasoning reaches the host like chunks.
 */
START_TEST(test_ask_settings_and_reasoning)
{
    w.script = script_reason;
    world_start(STS(1, UM("m1", "hi", 1), "", "", 0, "", 0, "",
                    "'systemPrompt':'Be brief.','model':'m'"));
    WAIT_RCS(4);
    WAIT_RUNNING(0);
    ck_assert_str_eq(w.prompt[0], "Be brief.");
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(rc_at(i), 0);
    ck_assert_int_eq(counter(&w.host_reasonings), 1);
    ck_assert_int_eq(counter(&w.host_chunks), 1);
    assert_message("a-1", RX_STATUS_COMPLETE, "hello");
}
END_TEST

/* A tool cancelled while it runs is stopped and its result never dispatched. */
START_TEST(test_cancelled_tool_reports_nothing)
{
    const struct rx_tool_call *c;
    bool cancelled_error;

    world_start(
        ST(2, UM("m1", "hi", 1), "", TC("c1", "hold", "{}", 2, "null", false), 1, "", 0));
    ck_assert_log(0, false, "effect-started request-toolkit-c1");
    send_input("{'type':'user-cancel'}", RX_ACCEPTED);
    WAIT_RUNNING(0);
    ck_assert_log(
        0, false,
        "effect-started request-toolkit-c1, effect-canceled request-toolkit-c1");
    /* At most its toolkit-start-call (when the cancel came after it), never a result. */
    ck_assert_int_le(counter(&w.host_dispatches), 1);
    pthread_mutex_lock(&w.lock);
    c = rx_state_find_tool(&w.state, "c1");
    cancelled_error = c && c->result.present && !c->result.is_success &&
                      !strcmp(c->result.text, "cancelled");
    pthread_mutex_unlock(&w.lock);
    ck_assert_msg(cancelled_error, "the record is not the user's cancel");
}
END_TEST

/* ---- (c) restarts after a growing, capped backoff ------------------------------ */

static const struct backoff_row {
    const char *name;
    int backoff_ms, max_ms;
    int fails, fail_rc; /* asks that end with fail_rc before one answers */
    int sleeps[SLEEPS_MAX];
} backoff_rows[] = {
    {"doubles, then stays at the cap", 10, 80, 6, -EIO, {10, 20, 40, 80, 80, 80}},
    {"a first delay over the cap is capped", 100, 50, 3, -EIO, {50, 50, 50}},
    {"an ask that returns 0 while still wanted restarts too",
     10,
     1000,
     3,
     0,
     {10, 20, 40}},
    {"no overflow near INT_MAX", 1 << 30, INT_MAX, 3, -EIO, {1 << 30, INT_MAX, INT_MAX}},
    {"zero backoff restarts at once", 0, 0, 2, -EIO, {0, 0}},
    {"a long run reaches the cap",
     1,
     3600000,
     24,
     -EIO,
     {1,     2,      4,      8,      16,      32,      64,      128,
      256,   512,    1024,   2048,   4096,    8192,    16384,   32768,
      65536, 131072, 262144, 524288, 1048576, 2097152, 3600000, 3600000}},
};

START_TEST(test_restart_backoff)
{
    const struct backoff_row *r = &backoff_rows[_i];
    const char *end =
        r->fail_rc ? "effect-failed ask-brain-1" : "effect-completed ask-brain-1";
    struct rx_buf want;
    char *want_text;

    w.script = script_fail_n;
    w.fail_n = r->fails;
    w.fail_rc = r->fail_rc;
    w.backoff_ms = r->backoff_ms;
    w.backoff_max_ms = r->max_ms;
    world_start(ONE_MESSAGE);
    WAIT_RCS(1); /* the answer */
    WAIT_RUNNING(0);
    ck_assert_msg(rc_at(0) == 0, "%s: the answer was refused", r->name);
    ck_assert_int_eq(counter(&w.asks), r->fails + 1);
    /* One wait per restart, each as the table says: never wall-clock time. */
    ck_assert_int_eq(counter(&w.n_sleeps), r->fails);
    for (int i = 0; i < r->fails; i++)
        ck_assert_msg(w.sleeps[i] == r->sleeps[i], "%s: restart %d waited %d, want %d",
                      r->name, i + 1, w.sleeps[i], r->sleeps[i]);
    /* Each restart is a new effect: started, ended, started... then no more. */
    rx_buf_init(&want, RX_BUF_SMALL_MAX);
    for (int i = 0; i < r->fails; i++)
        ck_assert(!rx_buf_printf(&want, "effect-started ask-brain-1, %s, ", end));
    ck_assert(
        !rx_buf_puts(&want, "effect-started ask-brain-1, effect-completed ask-brain-1"));
    want_text = rx_buf_take(&want, NULL);
    ck_assert_log(0, false, want_text);
    free(want_text);
    assert_message("a-1", RX_STATUS_COMPLETE, "done");
}
END_TEST

/* The delay formula itself, for attempts the behaviour test does not reach. */
static const struct {
    int backoff_ms, max_ms, attempt, want;
} delay_rows[] = {
    {250, 10000, 0, 0},        {250, 10000, -3, 0},
    {250, 10000, 1, 250},      {250, 10000, 2, 500},
    {250, 10000, 6, 8000},     {250, 10000, 7, 10000},
    {250, 10000, 1000, 10000}, {1, INT_MAX, 31, 1 << 30},
    {1, INT_MAX, 32, INT_MAX}, {INT_MAX, INT_MAX, 9, INT_MAX},
    {-5, 100, 3, 0},           {100, -1, 3, 0},
};

START_TEST(test_backoff_formula)
{
    struct runtime_config cfg = {.backoff_ms = delay_rows[_i].backoff_ms,
                                 .backoff_max_ms = delay_rows[_i].max_ms};

    ck_assert_int_eq(runtime_backoff_ms(&cfg, delay_rows[_i].attempt),
                     delay_rows[_i].want);
}
END_TEST

/* A cancel during the wait before a restart ends it at once: the brain is not
   asked again. The wait is an hour: only the cancel can end it within the test. */
START_TEST(test_cancel_during_backoff)
{
    w.script = script_fail_n;
    w.fail_n = 1000;
    w.fail_rc = -EIO;
    w.backoff_ms = 3600 * 1000;
    w.backoff_max_ms = 3600 * 1000;
    w.real_sleep = true;
    world_start(ONE_MESSAGE);
    WAIT_LOGGED("effect-failed ask-brain-1");
    ck_assert_log(0, false,
                  "effect-started ask-brain-1, effect-failed ask-brain-1, "
                  "effect-started ask-brain-1");
    send_input("{'type':'user-cancel'}", RX_ACCEPTED);
    WAIT_RUNNING(0);
    ck_assert_int_eq(counter(&w.asks), 1);
    ck_assert_log(0, false,
                  "effect-started ask-brain-1, effect-failed ask-brain-1, "
                  "effect-started ask-brain-1, effect-canceled ask-brain-1");
}
END_TEST

/* An ask that fails after its start: the restart is handed the streaming message
   and finishes it, instead of starting a second answer. */
START_TEST(test_restart_resumes_the_streaming_message)
{
    size_t n;

    w.script = script_resume;
    world_start(ONE_MESSAGE);
    WAIT_RCS(2);
    WAIT_RUNNING(0);
    ck_assert_int_eq(rc_at(0), 0);
    ck_assert_int_eq(rc_at(1), 0);
    ck_assert_int_eq(counter(&w.asks), 2);
    ck_assert_str_eq(w.resume[0], "");
    ck_assert_str_eq(w.resume[1], "a-1");
    ck_assert_int_eq(counter(&w.n_sleeps), 1);
    ck_assert_log(0, false,
                  "effect-started ask-brain-1, effect-failed ask-brain-1, "
                  "effect-started ask-brain-1, effect-completed ask-brain-1");
    assert_message("a-1", RX_STATUS_COMPLETE, "resumed");
    ck_assert_str_eq(world_keys(), ""); /* nothing is wanted any more */
    pthread_mutex_lock(&w.lock);
    n = w.state.assistant.len;
    pthread_mutex_unlock(&w.lock);
    ck_assert_uint_eq(n, 1); /* one answer, not two */
}
END_TEST

/* ---- (d) reconcile: new keys start, vanished keys are cancelled ---------------- */

/* Effects hold until cancelled (asks: script_hold; tools: `hold`, a sleep). Logs
   are sorted: within one reconcile the order of events is not part of the API. */
static const struct reconcile_row {
    const char *name;
    const char *state;
    const char *input; /* from elsewhere; NULL: reconcile the same state again */
    const char *started;
    const char *after;
    int running; /* once the cancelled ones have drained */
} reconcile_rows[] = {
    {"a recovered state starts what it wants; the same state again starts nothing",
     ONE_MESSAGE, NULL, "effect-started ask-brain-1", "", 1},
    {"a user message starts an ask", S0,
     "{'type':'user-send-message','messageId':'m1','content':'hi'}", "",
     "effect-started ask-brain-101", 1},
    {"a newer message replaces an ask that streamed nothing", ONE_MESSAGE,
     "{'type':'user-send-message','messageId':'m2','content':'more'}",
     "effect-started ask-brain-1",
     "effect-canceled ask-brain-1, effect-started ask-brain-101", 1},
    {"a new message while an answer streams adds a second ask",
     ST(2, UM("m1", "hi", 1), AM("a1", "", 2, 2, "streaming", 1), "", 1, "", 0),
     "{'type':'user-send-message','messageId':'m2','content':'more'}",
     "effect-started ask-brain-1", "effect-started ask-brain-101", 2},
    {"user-cancel cancels the streaming ask",
     ST(2, UM("m1", "hi", 1), AM("a1", "", 2, 2, "streaming", 1), "", 1, "", 0),
     "{'type':'user-cancel'}", "effect-started ask-brain-1",
     "effect-canceled ask-brain-1", 0},
    {"user-cancel cancels every pending tool",
     ST(2, UM("m1", "hi", 1), "",
        TC("c1", "hold", "{}", 2, "null", false) "," TC("c2", "hold", "{}", 2, "null",
                                                        false),
        1, "", 0),
     "{'type':'user-cancel'}",
     "effect-started request-toolkit-c1, effect-started request-toolkit-c2",
     "effect-canceled request-toolkit-c1, effect-canceled request-toolkit-c2", 0},
    {"a user message while a tool runs changes nothing",
     ST(2, UM("m1", "hi", 1), "", TC("c1", "hold", "{}", 2, "null", false), 1, "", 0),
     "{'type':'user-send-message','messageId':'m2','content':'more'}",
     "effect-started request-toolkit-c1", "", 1},
    {"a result from elsewhere cancels the tool and starts the next ask (its start took "
     "101)",
     ST(2, UM("m1", "hi", 1), "", TC("c1", "hold", "{}", 2, "null", false), 1, "", 0),
     "{'type':'toolkit-respond','toolCallId':'c1','result':'42'}",
     "effect-started request-toolkit-c1",
     "effect-canceled request-toolkit-c1, effect-started ask-brain-102", 1},
};

START_TEST(test_reconcile_table)
{
    const struct reconcile_row *r = &reconcile_rows[_i];
    int mark, err;

    world_start(r->state);
    ck_assert_log(0, true, r->started);
    /* A running tool stamps its toolkit-start-call first: the input below
       comes after it, whatever the scheduling. */
    ck_assert_msg(wait_for(pred_tools_started, r->started), "a tool never started");
    mark = log_len();
    if (r->input) {
        send_input(r->input, RX_ACCEPTED);
    } else {
        pthread_mutex_lock(&w.lock);
        err = runtime_reconcile(w.rt, &w.state, NULL);
        pthread_mutex_unlock(&w.lock);
        ck_assert_int_eq(err, 0);
    }
    ck_assert_log(mark, true, r->after);
    WAIT_RUNNING(r->running);
    /* Nothing more happened while the cancelled ones drained. */
    ck_assert_log(mark, true, r->after);
}
END_TEST

/* The brain's own call-tools removes its key (not cancelled) and wants a tool
   (started); the tool commits toolkit-start-call (stamp 102) before it acts,
   and its answer (103) ends it and wants the next ask (started). */
START_TEST(test_effect_inputs_start_new_keys)
{
    const struct rx_tool_call *c;
    bool tool_ok;

    w.script = script_call_tools;
    world_start(ONE_MESSAGE);
    WAIT_LOGGED("effect-completed ask-brain-103");
    WAIT_LOGGED("effect-completed request-toolkit-c1");
    /* The first ask notes is_cancelled after its dispatch returns: by then the
       tool and the second ask may be done (under valgrind they often are). */
    WAIT_RCS(3);
    ck_assert_int_eq(rc_at(0), 0); /* call-tools accepted */
    /* and the caller not cancelled by it (false), the second ask's complete
       accepted (0), in either order */
    ck_assert_int_eq(rc_at(1), 0);
    ck_assert_int_eq(rc_at(2), 0);
    ck_assert_log(0, true,
                  "effect-completed ask-brain-103, effect-completed request-toolkit-c1, "
                  "effect-started ask-brain-1, effect-started ask-brain-103, "
                  "effect-started request-toolkit-c1");
    /* Causes come before their effects. */
    ck_assert_int_eq(log_index("effect-started ask-brain-1"), 0);
    ck_assert_int_eq(log_index("effect-started request-toolkit-c1"), 1);
    ck_assert_int_eq(log_index("effect-started ask-brain-103"), 2);
    ck_assert_int_eq(running(), 1); /* the first ask, holding */
    open_gate(1);
    WAIT_RUNNING(0);
    ck_assert(effect_logged_once("effect-completed ask-brain-1"));
    ck_assert(effect_logged_once("effect-started ask-brain-1"));
    pthread_mutex_lock(&w.lock);
    c = rx_state_find_tool(&w.state, "c1");
    tool_ok =
        c && c->result.present && c->result.is_success && !strcmp(c->result.text, "5");
    pthread_mutex_unlock(&w.lock);
    ck_assert_msg(tool_ok, "the calculator's answer is not in the state");
    assert_message("a-103", RX_STATUS_COMPLETE, "2+3 = 5");
}
END_TEST

/* Another effect's input cancels: a second ask completes the first one's answer. */
START_TEST(test_other_effects_input_cancels)
{
    w.script = script_complete_other;
    world_start(TWO_ASKS);
    WAIT_RUNNING(0);
    ck_assert_int_eq(rc_at(0), 0);
    ck_assert_log(0, false,
                  "effect-started ask-brain-1, effect-started ask-brain-3, "
                  "effect-canceled ask-brain-1, effect-completed ask-brain-3");
    assert_message("a1", RX_STATUS_COMPLETE, "finished by another");
}
END_TEST

/* ---- (e) the worker pool: caps, order, cancels of waiting effects -------------- */

/* Five answers in flight (a1..a5, asks at 1, 3, 5, 7, 9): five asks wanted at once. */
#define FIVE_ASKS                                                                        \
    ST(10,                                                                               \
       UM("m1", "q1", 1) "," UM("m2", "q2", 3) "," UM("m3", "q3", 5) "," UM(             \
           "m4", "q4", 7) "," UM("m5", "q5", 9),                                         \
       AM("a1", "", 2, 2, "streaming", 1) "," AM("a2", "", 4, 4, "streaming", 3) "," AM( \
           "a3", "", 6, 6, "streaming", 5) "," AM("a4", "", 8, 8, "streaming",           \
                                                  7) "," AM("a5", "", 10, 10,            \
                                                            "streaming", 9),             \
       "", 9, "", 0)
#define FIVE_STARTED                                                                     \
    "effect-started ask-brain-1, effect-started ask-brain-3, effect-started "            \
    "ask-brain-5, effect-started ask-brain-7, effect-started ask-brain-9"

static struct runtime_pool_stats pool_stats(void)
{
    struct runtime_pool_stats st;

    runtime_pool_stats(w.pool, &st);
    return st;
}

/* Lock held (wait_for): the pool's workers are all back, nothing queued. */
static bool pred_pool_idle(const void *arg)
{
    struct runtime_pool_stats st;

    (void)arg;
    runtime_pool_stats(w.pool, &st);
    return st.busy == 0 && st.queued == 0;
}

static int waiting(void)
{
    int n;

    pthread_mutex_lock(&w.lock);
    n = runtime_waiting(w.rt);
    pthread_mutex_unlock(&w.lock);
    return n;
}

/* One worker, or one place for the session: the asks run one at a time, in the
   order they started, each on the same reused thread. */
static const struct {
    int workers, session_max;
} serial_rows[] = {{1, 8}, {8, 1}};

START_TEST(test_pool_fifo)
{
    struct runtime_pool_stats st;

    w.pool = runtime_pool_create(serial_rows[_i].workers);
    ck_assert_ptr_nonnull(w.pool);
    w.session_max = serial_rows[_i].session_max;
    w.script = script_queued;
    world_start(FIVE_ASKS);
    ck_assert_log(0, false, FIVE_STARTED);
    WAIT_ASKS(1);
    st = pool_stats();
    ck_assert_int_eq(st.busy, 1);
    /* The four others wait: in the pool's queue, or in the session's list. */
    ck_assert_int_eq(st.queued + waiting(), 4);
    ck_assert_int_eq(waiting(), serial_rows[_i].session_max == 1 ? 4 : 0);
    ck_assert_int_eq(running(), 5);
    open_gate(1);
    WAIT_RUNNING(0);
    ck_assert_int_eq(counter(&w.asks), 5);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(w.order[i], 2 * i + 1);
    for (int i = 0; i < 5; i++) /* each resumed its own streaming message */
        ck_assert_int_eq(w.resume[i][1], '1' + i);
    ck_assert_int_eq(counter(&w.max_in_flight), 1);
    /* A worker is counted busy until just after its effect ended. */
    ck_assert(wait_for(pred_pool_idle, NULL));
    ck_assert_int_le(pool_stats().workers, serial_rows[_i].workers);
    ck_assert_str_eq(world_keys(), "");
}
END_TEST

/* Two workers for five asks: two run, three wait in the queue; no more threads. */
START_TEST(test_pool_cap)
{
    struct runtime_pool_stats st;

    w.pool = runtime_pool_create(2);
    ck_assert_ptr_nonnull(w.pool);
    w.script = script_queued;
    world_start(FIVE_ASKS);
    WAIT_ASKS(2);
    st = pool_stats();
    ck_assert_int_eq(st.max, 2);
    ck_assert_int_eq(st.workers, 2);
    ck_assert_int_eq(st.busy, 2);
    ck_assert_int_eq(st.queued, 3);
    ck_assert_int_eq(counter(&w.asks), 2);
    open_gate(1);
    WAIT_RUNNING(0);
    ck_assert_int_eq(counter(&w.asks), 5);
    ck_assert_int_eq(counter(&w.max_in_flight), 2);
    ck_assert_int_eq(pool_stats().workers, 2);
}
END_TEST

/* Eight workers, two places for the session: two run, three wait in the
   session's list (not in the pool's queue). */
START_TEST(test_session_cap)
{
    struct runtime_pool_stats st;

    w.pool = runtime_pool_create(8);
    ck_assert_ptr_nonnull(w.pool);
    w.session_max = 2;
    w.script = script_queued;
    world_start(FIVE_ASKS);
    WAIT_ASKS(2);
    st = pool_stats();
    ck_assert_int_eq(st.busy, 2);
    ck_assert_int_eq(st.queued, 0);
    ck_assert_int_eq(waiting(), 3);
    ck_assert_int_eq(counter(&w.asks), 2);
    open_gate(1);
    WAIT_RUNNING(0);
    ck_assert_int_eq(counter(&w.asks), 5);
    ck_assert_int_eq(counter(&w.max_in_flight), 2);
    ck_assert_int_eq(waiting(), 0);
}
END_TEST

/* An ask waiting for a worker (or for its session's place) is cancelled by a
   newer message: it goes at once, never runs, and the newer ask takes its
   turn after the running one. */
START_TEST(test_cancel_while_waiting)
{
    struct runtime_pool_stats st;
    int mark;

    w.pool = runtime_pool_create(serial_rows[_i].workers);
    ck_assert_ptr_nonnull(w.pool);
    w.session_max = serial_rows[_i].session_max;
    w.script = script_queued;
    world_start(TWO_ASKS);
    ck_assert_log(0, false, "effect-started ask-brain-1, effect-started ask-brain-3");
    WAIT_ASKS(1);
    mark = log_len();
    send_input("{'type':'user-send-message','messageId':'m3','content':'newer'}",
               RX_ACCEPTED);
    ck_assert_log(mark, false,
                  "effect-canceled ask-brain-3, effect-started ask-brain-101");
    /* Gone, not draining: the running ask and the new one are all that is left. */
    ck_assert_int_eq(running(), 2);
    st = pool_stats();
    ck_assert_int_eq(st.queued + waiting(), 1);
    open_gate(1);
    WAIT_RUNNING(0);
    ck_assert_int_eq(counter(&w.asks), 2);
    ck_assert_int_eq(w.order[0], 1);
    ck_assert_int_eq(w.order[1], 101);
    ck_assert(effect_logged_once("effect-canceled ask-brain-3"));
    ck_assert_int_eq(log_index("effect-completed ask-brain-3"), -1);
    assert_message("a1", RX_STATUS_COMPLETE, "done");
    assert_message("a-101", RX_STATUS_COMPLETE, "done");
}
END_TEST

/* A tool gets its own record (its id, name and arguments), not the session. */
START_TEST(test_tool_gets_its_record)
{
    const struct rx_tool_call *c;
    bool ok;

    world_start(
        ST(2, UM("m1", "what is 6*7?", 1), "",
           TC("c1", "calculator", "{\\\"expression\\\":\\\"6*7\\\"}", 2, "null", false),
           1, "", 0));
    WAIT_LOGGED("effect-completed request-toolkit-c1");
    pthread_mutex_lock(&w.lock);
    c = rx_state_find_tool(&w.state, "c1");
    ok = c && c->result.present && c->result.is_success && !strcmp(c->result.text, "42");
    pthread_mutex_unlock(&w.lock);
    ck_assert_msg(ok, "the calculator did not answer 42");
}
END_TEST

Suite *runtime_suite(void);
Suite *runtime_suite(void)
{
    Suite *s = suite_create("runtime");
    TCase *own = tcase_create("own-input");
    TCase *guard = tcase_create("guarded-dispatch");
    TCase *restart = tcase_create("restart");
    TCase *rec = tcase_create("reconcile");
    TCase *pool = tcase_create("pool");
    TCase *all[] = {own, guard, restart, rec, pool};

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        tcase_add_checked_fixture(all[i], setup, teardown);
        tcase_set_timeout(all[i], 2 * HANG_MS / 1000);
        suite_add_tcase(s, all[i]);
    }
    tcase_add_test(own, test_own_start_is_the_same_effect);
    tcase_add_test(own, test_own_input_removing_the_key_runs_on);
    tcase_add_test(own, test_own_input_then_other_effects_input);
    tcase_add_loop_test(own, test_own_input_then_client_input_cancels, 0, 2);
    tcase_add_test(own, test_same_input_from_elsewhere_cancels);
    tcase_add_test(guard, test_cancelled_ask_cannot_dispatch);
    tcase_add_test(guard, test_ask_settings_and_reasoning);
    tcase_add_test(guard, test_cancelled_tool_reports_nothing);
    tcase_add_loop_test(restart, test_restart_backoff, 0,
                        sizeof(backoff_rows) / sizeof(backoff_rows[0]));
    tcase_add_loop_test(restart, test_backoff_formula, 0,
                        sizeof(delay_rows) / sizeof(delay_rows[0]));
    tcase_add_test(restart, test_cancel_during_backoff);
    tcase_add_test(restart, test_restart_resumes_the_streaming_message);
    tcase_add_loop_test(rec, test_reconcile_table, 0,
                        sizeof(reconcile_rows) / sizeof(reconcile_rows[0]));
    tcase_add_test(rec, test_effect_inputs_start_new_keys);
    tcase_add_test(rec, test_other_effects_input_cancels);
    tcase_add_loop_test(pool, test_pool_fifo, 0,
                        sizeof(serial_rows) / sizeof(serial_rows[0]));
    tcase_add_test(pool, test_pool_cap);
    tcase_add_test(pool, test_session_cap);
    tcase_add_loop_test(pool, test_cancel_while_waiting, 0,
                        sizeof(serial_rows) / sizeof(serial_rows[0]));
    tcase_add_test(pool, test_tool_gets_its_record);
    return s;
}
