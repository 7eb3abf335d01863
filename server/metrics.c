/*
 * metrics - counters for /metrics. See metrics.h.
 */
#include "server/metrics.h"

static long inputs[3];
static long rejected[RX_REASON__COUNT];
static long http_errors[600];
static long effect_count[2], effect_failed[2];
static long effect_ms_bits[2]; /* effect_ms as whole ms, summed atomically */
/* Session loads by time taken: the bounds of the histogram's buckets, in ms. */
static const int64_t load_le_ms[] = {1, 2, 5, 10, 20, 50, 100, 250, 1000};
#define LOAD_BUCKETS (sizeof(load_le_ms) / sizeof(load_le_ms[0]))
static long load_count[LOAD_BUCKETS + 1]; /* the last: over every bound */
static long load_ms_sum;

void metrics_session_loaded(int64_t ms)
{
    size_t i = 0;

    while (i < LOAD_BUCKETS && ms > load_le_ms[i])
        i++;
    __atomic_add_fetch(&load_count[i], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&load_ms_sum, (long)ms, __ATOMIC_RELAXED);
}

void metrics_input(enum rx_verdict v, enum rx_reason r)
{
    __atomic_add_fetch(&inputs[v], 1, __ATOMIC_RELAXED);
    if (v == RX_REJECTED)
        __atomic_add_fetch(&rejected[r], 1, __ATOMIC_RELAXED);
}

void metrics_http_error(int status)
{
    if (status >= 0 && status < 600)
        __atomic_add_fetch(&http_errors[status], 1, __ATOMIC_RELAXED);
}

void metrics_effect_done(int kind, double ms, int failed)
{
    __atomic_add_fetch(&effect_count[kind], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&effect_ms_bits[kind], (long)(ms * 1000.0), __ATOMIC_RELAXED);
    if (failed)
        __atomic_add_fetch(&effect_failed[kind], 1, __ATOMIC_RELAXED);
}

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

/* The sessions' figures (SPEC 6.2), and how long loads took, cumulatively. */
static int render_sessions(struct rx_buf *b, const struct session_figures *f)
{
    long total = 0;
    int err = rx_buf_printf(
        b,
        "# HELP reflexor_sessions Sessions stored (in memory with --db :memory:).\n"
        "# TYPE reflexor_sessions gauge\nreflexor_sessions %lld\n"
        "# HELP reflexor_sessions_resident Sessions in memory.\n"
        "# TYPE reflexor_sessions_resident gauge\nreflexor_sessions_resident %zu\n"
        "# HELP reflexor_sessions_resident_bytes What the sessions in memory hold, "
        "about.\n"
        "# TYPE reflexor_sessions_resident_bytes gauge\n"
        "reflexor_sessions_resident_bytes %zu\n"
        "# HELP reflexor_sessions_loaded_total Sessions read from the store on a "
        "touch.\n"
        "# TYPE reflexor_sessions_loaded_total counter\n"
        "reflexor_sessions_loaded_total %lld\n"
        "# HELP reflexor_sessions_evicted_total Idle sessions that left memory.\n"
        "# TYPE reflexor_sessions_evicted_total counter\n"
        "reflexor_sessions_evicted_total %lld\n"
        "# HELP reflexor_stream_text_batches_total Batches of streamed answer text "
        "handed to the store (SPEC 3.7).\n"
        "# TYPE reflexor_stream_text_batches_total counter\n"
        "reflexor_stream_text_batches_total %lld\n"
        "# HELP reflexor_stream_text_bytes_total Bytes of streamed answer text "
        "handed to the store.\n"
        "# TYPE reflexor_stream_text_bytes_total counter\n"
        "reflexor_stream_text_bytes_total %lld\n"
        "# HELP reflexor_session_load_seconds Time to read a session from the store.\n"
        "# TYPE reflexor_session_load_seconds histogram\n",
        (long long)f->stored, f->resident, f->bytes, (long long)f->loads,
        (long long)f->evictions, (long long)f->text_batches, (long long)f->text_bytes);

    for (size_t i = 0; i < LOAD_BUCKETS && !err; i++) {
        total += LOAD(load_count[i]);
        err = rx_buf_printf(b, "reflexor_session_load_seconds_bucket{le=\"%g\"} %ld\n",
                            (double)load_le_ms[i] / 1000.0, total);
    }
    total += LOAD(load_count[LOAD_BUCKETS]);
    return err ? err
               : rx_buf_printf(b,
                               "reflexor_session_load_seconds_bucket{le=\"+Inf\"} %ld\n"
                               "reflexor_session_load_seconds_sum %.3f\n"
                               "reflexor_session_load_seconds_count %ld\n",
                               total, (double)LOAD(load_ms_sum) / 1000.0, total);
}

int metrics_render(struct rx_buf *b, const struct session_figures *sessions,
                   long sse_clients, long sse_dropped, const struct runtime_gauges *fx)
{
    static const char *const kind[] = {"brain", "tool"};
    int err = render_sessions(b, sessions);

    err = err ? err
              : rx_buf_printf(
                    b,
                    "# HELP reflexor_sse_streams Open SSE streams.\n"
                    "# TYPE reflexor_sse_streams gauge\nreflexor_sse_streams %ld\n"
                    "# HELP reflexor_sse_dropped_total SSE clients dropped for a full "
                    "queue.\n"
                    "# TYPE reflexor_sse_dropped_total counter\n"
                    "reflexor_sse_dropped_total %ld\n"
                    "# HELP reflexor_effects_running Effects on a worker now.\n"
                    "# TYPE reflexor_effects_running gauge\n"
                    "reflexor_effects_running %ld\n"
                    "# HELP reflexor_effects_waiting Effects started and waiting for a "
                    "worker or a place in their session.\n"
                    "# TYPE reflexor_effects_waiting gauge\n"
                    "reflexor_effects_waiting %ld\n"
                    "# HELP reflexor_effects_draining Cancelled effects still ending "
                    "on a worker.\n"
                    "# TYPE reflexor_effects_draining gauge\n"
                    "reflexor_effects_draining %ld\n"
                    "# HELP reflexor_inputs_total Inputs by the machine's verdict.\n"
                    "# TYPE reflexor_inputs_total counter\n"
                    "reflexor_inputs_total{verdict=\"accepted\"} %ld\n"
                    "reflexor_inputs_total{verdict=\"unchanged\"} %ld\n"
                    "reflexor_inputs_total{verdict=\"rejected\"} %ld\n"
                    "# HELP reflexor_inputs_rejected_total Rejected inputs by reason.\n"
                    "# TYPE reflexor_inputs_rejected_total counter\n",
                    sse_clients, sse_dropped, fx->running, fx->waiting, fx->draining,
                    LOAD(inputs[RX_ACCEPTED]), LOAD(inputs[RX_UNCHANGED]),
                    LOAD(inputs[RX_REJECTED]));
    for (int r = 1; r < RX_REASON__COUNT && !err; r++)
        err = rx_buf_printf(b, "reflexor_inputs_rejected_total{reason=\"%s\"} %ld\n",
                            rx_reason_name((enum rx_reason)r), LOAD(rejected[r]));
    /* Every family declared has samples: a status never seen is a zero, and
       the 4xx/5xx classes are always there, so the family is never empty. */
    if (!err)
        err =
            rx_buf_puts(b, "# HELP reflexor_http_errors_total Error answers by status.\n"
                           "# TYPE reflexor_http_errors_total counter\n");
    for (int s = 400; s < 600 && !err; s++)
        if (s == 400 || s == 500 || LOAD(http_errors[s]))
            err = rx_buf_printf(b, "reflexor_http_errors_total{status=\"%d\"} %ld\n", s,
                                LOAD(http_errors[s]));
    if (!err)
        err = rx_buf_puts(b, "# HELP reflexor_effect_seconds Time effects ran, by kind.\n"
                             "# TYPE reflexor_effect_seconds summary\n");
    for (int k = 0; k < 2 && !err; k++)
        err = rx_buf_printf(b,
                            "reflexor_effect_seconds_sum{kind=\"%s\"} %.6f\n"
                            "reflexor_effect_seconds_count{kind=\"%s\"} %ld\n",
                            kind[k], (double)LOAD(effect_ms_bits[k]) / 1e6, kind[k],
                            LOAD(effect_count[k]));
    if (!err)
        err = rx_buf_puts(b, "# HELP reflexor_effect_failed_total Effects that failed.\n"
                             "# TYPE reflexor_effect_failed_total counter\n");
    for (int k = 0; k < 2 && !err; k++)
        err = rx_buf_printf(b, "reflexor_effect_failed_total{kind=\"%s\"} %ld\n", kind[k],
                            LOAD(effect_failed[k]));
    return err;
}
