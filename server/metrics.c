/*
 * metrics - counters for /metrics. See metrics.h.
 */
#include "server/metrics.h"

static long inputs[3];
static long rejected[RX_REASON__COUNT];
static long http_errors[600];
static long effect_count[2], effect_failed[2];
static long effect_ms_bits[2]; /* effect_ms as whole ms, summed atomically */

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

int metrics_render(struct rx_buf *b, size_t sessions, long sse_clients, long sse_dropped,
                   const struct runtime_gauges *fx)
{
    static const char *const kind[] = {"brain", "tool"};
    int err = 0;

    err = err ? err
              : rx_buf_printf(
                    b,
                    "# HELP reflexor_sessions Sessions in memory.\n"
                    "# TYPE reflexor_sessions gauge\nreflexor_sessions %zu\n"
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
                    sessions, sse_clients, sse_dropped, fx->running, fx->waiting,
                    fx->draining, LOAD(inputs[RX_ACCEPTED]), LOAD(inputs[RX_UNCHANGED]),
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
