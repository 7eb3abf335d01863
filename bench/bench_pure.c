/*
 * bench_pure - what one input costs the pure layer as history grows: the
 * transition (rx_machine_apply), effects_at (rx_effects_at) and encoding the
 * new state (rx_state_encode, what every state-updated event carries), for
 * states of 10, 100, 1 000 and 10 000 messages.
 *
 * Each sample starts from a fresh copy of the N-message state (copied outside
 * the timed region) and applies one new user-send-message, so the state never
 * drifts away from N however many samples are taken. The history alternates
 * user messages and completed assistant answers of realistic length, as a
 * conversation does. Three rounds; each figure is the median over the rounds
 * of the per-round median.
 *
 * Output: one line per size, `pure msgs=N apply_ns=.. effects_ns=..
 * encode_ns=.. total_ns=.. state_bytes=.. samples=..`, read by bench/run.sh.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "state_machine/rx_effects.h"
#include "state_machine/rx_input.h"
#include "state_machine/rx_machine.h"
#include "state_machine/rx_state.h"

#define ROUNDS 3

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

static int64_t median(int64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_i64);
    return v[n / 2];
}

/* Apply one input given as JSON text; it must be accepted. */
static int apply_json(struct rx_state *s, const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    struct rx_outcome out;
    struct rx_input in;
    const char *field = NULL;
    int err;

    if (!j)
        return -EINVAL;
    err = rx_input_parse(j, &in, &field, NULL);
    json_decref(j);
    if (err)
        return err;
    err = rx_machine_apply(s, &in, &out);
    rx_input_release(&in);
    if (!err && out.verdict != RX_ACCEPTED) {
        fprintf(stderr, "bench_pure: input refused (%s): %s\n",
                rx_reason_name(out.reason), text);
        err = -EINVAL;
    }
    return err;
}

/* A conversation of `n` messages: user question, assistant answer, ... */
static int build_state(struct rx_state *s, int n)
{
    char text[512];
    int i, err = rx_state_init(s);

    for (i = 0; !err && i < n; i++) {
        int64_t t = 1000 + 2 * (int64_t)i;

        if (i % 2 == 0)
            snprintf(text, sizeof(text),
                     "{\"type\":\"user-send-message\",\"timestamp\":%" PRId64
                     ",\"messageId\":\"u-%d\",\"content\":\"Question %d: what does "
                     "the benchmark measure when the history grows?\"}",
                     t, i, i);
        else
            snprintf(text, sizeof(text),
                     "{\"type\":\"brain-send-message-complete\",\"timestamp\":%" PRId64
                     ",\"calledBrainAt\":%" PRId64
                     ",\"messageId\":\"a-%d\",\"content\":\"Echo: Question %d: what "
                     "does the benchmark measure when the history grows?\"}",
                     t, t - 2, i, i - 1);
        err = apply_json(s, text);
    }
    if (err)
        rx_state_release(s);
    return err;
}

struct figures {
    int64_t apply, effects, encode, total;
    size_t bytes;
};

static int round_at(const struct rx_state *base, const struct rx_input *in, int samples,
                    struct figures *f)
{
    int64_t *t = calloc(4 * (size_t)samples, sizeof(*t));
    struct rx_effect_set set;
    struct rx_buf b;
    int i, err = 0;

    if (!t)
        return -ENOMEM;
    rx_effect_set_init(&set);
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    for (i = 0; !err && i < samples; i++) {
        struct rx_state s;
        struct rx_outcome out;
        int64_t t0, t1, t2, t3;

        if ((err = rx_state_copy(base, &s)))
            break;
        rx_buf_reset(&b);
        t0 = now_ns();
        err = rx_machine_apply(&s, in, &out);
        t1 = now_ns();
        if (!err)
            err = rx_effects_at(&s, &set);
        t2 = now_ns();
        if (!err)
            err = rx_state_encode(&s, &b);
        t3 = now_ns();
        if (!err && out.verdict != RX_ACCEPTED)
            err = -EINVAL;
        rx_state_release(&s);
        t[i] = t1 - t0;
        t[samples + i] = t2 - t1;
        t[2 * samples + i] = t3 - t2;
        t[3 * samples + i] = t3 - t0;
    }
    if (!err) {
        f->bytes = b.len;
        f->apply = median(t, (size_t)samples);
        f->effects = median(t + samples, (size_t)samples);
        f->encode = median(t + 2 * samples, (size_t)samples);
        f->total = median(t + 3 * samples, (size_t)samples);
    }
    rx_buf_release(&b);
    rx_effect_set_release(&set);
    free(t);
    return err;
}

static int measure(int n)
{
    /* About the same wall time per size: fewer samples for bigger states. */
    int samples = n <= 10 ? 10000 : n <= 100 ? 3000 : n <= 1000 ? 500 : 60;
    int64_t apply[ROUNDS], effects[ROUNDS], encode[ROUNDS], total[ROUNDS];
    struct figures f = {0};
    struct rx_state base;
    struct rx_input in;
    const char *field = NULL;
    char text[256];
    json_t *j;
    int r, err;

    if ((err = build_state(&base, n)))
        return err;
    snprintf(text, sizeof(text),
             "{\"type\":\"user-send-message\",\"timestamp\":%" PRId64
             ",\"messageId\":\"bench-new\",\"content\":\"One more question, please.\"}",
             (int64_t)1000 + 2 * (int64_t)n + 5);
    j = json_loads(text, 0, NULL);
    err = j ? rx_input_parse(j, &in, &field, NULL) : -ENOMEM;
    json_decref(j);
    if (err) {
        rx_state_release(&base);
        return err;
    }
    for (r = 0; !err && r < ROUNDS; r++) {
        err = round_at(&base, &in, samples, &f);
        apply[r] = f.apply;
        effects[r] = f.effects;
        encode[r] = f.encode;
        total[r] = f.total;
    }
    if (!err)
        printf("pure msgs=%d apply_ns=%" PRId64 " effects_ns=%" PRId64
               " encode_ns=%" PRId64 " total_ns=%" PRId64 " state_bytes=%zu samples=%d\n",
               n, median(apply, ROUNDS), median(effects, ROUNDS), median(encode, ROUNDS),
               median(total, ROUNDS), f.bytes, samples * ROUNDS);
    rx_input_release(&in);
    rx_state_release(&base);
    return err;
}

int main(void)
{
    static const int sizes[] = {10, 100, 1000, 10000};
    size_t i;
    int err;

    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if ((err = measure(sizes[i]))) {
            fprintf(stderr, "bench_pure: %d messages: %s\n", sizes[i], strerror(-err));
            return 1;
        }
        fflush(stdout);
    }
    return 0;
}
