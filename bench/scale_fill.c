/*
 * scale_fill - fill a store with many finished conversations, fast, through
 * the store API (not HTTP): what `make bench-scale` and the `scale`
 * integration suite start the server on (SPEC 6.2, issue 29).
 *
 *   build/bench/scale_fill --db PATH [--sessions N] [--messages M]
 *       [--word W] [--every K] [--busy-every B] [--ids FILE] [--end-ms T]
 *
 * PATH is a SQLite file or a PostgreSQL connection string (store_open picks
 * the backend). N sessions (default 1000) of about M messages (default 20:
 * M/2 turns of a user message and the answer the builtin brain would give,
 * "Echo: " + the message) are folded through the pure machine, each input
 * checked to be RX_ACCEPTED, and stored with store_import: the session's
 * whole log and a snapshot of its final state, in one transaction per
 * session, with fsync off (store_set_durable) during the fill. A producer
 * thread folds and encodes while the caller's thread imports; the import
 * (the rows and their full-text index) is nearly all the cost: about 35 us
 * an input here, some 900 chats of 20 messages a second on 2 CPUs.
 *
 * Session i (0-based) is created at T - (N - i) s (T: --end-ms, default one
 * minute ago), its inputs 10 ms apart after that, so created and updated
 * times are distinct and in the past (a later live input is never stale).
 * Its first message holds W (default "zephyrquartz") when (i + 1) % K == 0
 * (K default 1000): N / K sessions a search must find. With B > 0, every
 * B-th session (i % B == B - 1) ends on a user message not yet answered: a
 * session with an ask wanted, which a restart must load and answer. --ids
 * writes the ids, one a line, in order i = 0, 1, ...
 *
 * Prints one line: "fill sessions=N inputs=I seconds=S sessions_per_s=R"
 * and exits 0, or says why on stderr and exits 1. Test and bench code only.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "state_machine/rx_effects.h"
#include "state_machine/rx_machine.h"
#include "store/store.h"

/* At most this many messages per session: a fill is about many sessions. */
#define FILL_MESSAGES_MAX 400
#define FILL_INPUTS_MAX   (FILL_MESSAGES_MAX * 2)
/* Sessions folded ahead of the importer. */
#define FILL_RING 64

struct fill_opts {
    const char *db, *word, *ids;
    long sessions, messages, every, busy_every;
    int64_t end_ms;
};

/* One session folded and encoded, waiting for its import. */
struct fill_prep {
    char sid[48];
    int64_t created_at;
    struct rx_buf text, snap;
    size_t off[FILL_INPUTS_MAX], len[FILL_INPUTS_MAX], n;
};

struct fill {
    struct fill_opts o;
    struct fill_prep ring[FILL_RING];
    pthread_mutex_t lock;
    pthread_cond_t cond;
    long made, taken; /* sessions folded / imported so far */
    int err;          /* the producer's failure, 0 if none */
    int64_t inputs;
};

static const char *const topics[] = {"garden", "invoice", "kernel",  "recipe",
                                     "travel", "budget",  "physics", "poetry",
                                     "rust",   "chess",   "weather", "history"};
#define N_TOPICS (sizeof(topics) / sizeof(topics[0]))

static int64_t wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double mono_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Session ids shaped like the server's UUIDs; the last group is i, so unique. */
static void session_id(char *buf, size_t n, long i)
{
    snprintf(buf, n, "%08x-5ca1-4000-8000-%012lx", (unsigned)i * 2654435761u,
             (unsigned long)i & 0xffffffffffffUL);
}

/* Fold `in` into `s` and append its encoding to p: 0, or -EPROTO if not accepted. */
static int fold_one(struct fill_prep *p, struct rx_state *s, const struct rx_input *in)
{
    struct rx_outcome out;
    int err;

    if ((err = rx_machine_apply(s, in, &out)))
        return err;
    if (out.verdict != RX_ACCEPTED) {
        fprintf(stderr, "scale_fill: %s of %s not accepted: %s\n",
                rx_input_type_name(in->type), p->sid, rx_reason_name(out.reason));
        return -EPROTO;
    }
    p->off[p->n] = p->text.len;
    if ((err = rx_input_encode(in, &p->text)))
        return err;
    p->len[p->n] = p->text.len - p->off[p->n];
    p->n++;
    return 0;
}

/*
 * Session i into p: M/2 turns, each a user message (built in place: the
 * machine and the encoder borrow the input, so nothing is allocated for it)
 * and, but for a busy session's last turn, the answer the builtin brain
 * gives: an ask at t+1, its start at t+2, its end at t+3.
 */
static int prepare(const struct fill_opts *o, long i, struct fill_prep *p)
{
    long turns = o->messages / 2 > 0 ? o->messages / 2 : 1;
    bool rare = (i + 1) % o->every == 0;
    bool busy = o->busy_every > 0 && i % o->busy_every == o->busy_every - 1;
    struct rx_state s;
    char uid[24], aid[24], text[256], answer[300];
    int err;

    session_id(p->sid, sizeof(p->sid), i);
    p->created_at = o->end_ms - (o->sessions - i) * 1000;
    p->n = 0;
    rx_buf_reset(&p->text);
    rx_buf_reset(&p->snap);
    if ((err = rx_state_init(&s)))
        return err;
    for (long r = 0; r < turns && !err; r++) {
        int64_t t = p->created_at + 1 + r * 10;
        struct rx_input in = {.has_timestamp = true};

        snprintf(uid, sizeof(uid), "u%ld", r);
        snprintf(aid, sizeof(aid), "a%ld", r);
        snprintf(text, sizeof(text),
                 "%s question %ld of chat %ld: how would you plan the %s work %s?",
                 r ? "Follow-up" : "First", r, i, topics[(i * 7 + r) % N_TOPICS],
                 rare && !r ? o->word : "this week");
        in.type = RX_IN_USER_SEND_MESSAGE;
        in.timestamp = t;
        in.message_id = uid;
        in.content = text;
        if ((err = fold_one(p, &s, &in)) || (busy && r == turns - 1))
            break;
        snprintf(answer, sizeof(answer), "Echo: %s", text);
        in = (struct rx_input){.has_timestamp = true,
                               .type = RX_IN_BRAIN_SEND_MESSAGE_START,
                               .timestamp = t + 2,
                               .called_brain_at = t + 1,
                               .message_id = aid};
        if ((err = fold_one(p, &s, &in)))
            break;
        in.type = RX_IN_BRAIN_SEND_MESSAGE_COMPLETE;
        in.timestamp = t + 3;
        in.content = answer;
        err = fold_one(p, &s, &in);
    }
    if (!err && rx_effects_any(&s) != busy) {
        fprintf(stderr, "scale_fill: session %s %s effects\n", p->sid,
                busy ? "wants no" : "still wants");
        err = -EPROTO;
    }
    if (!err)
        err = rx_state_encode(&s, &p->snap);
    rx_state_release(&s);
    return err;
}

/* The producer: fold sessions into the ring while the importer drains it. */
static void *produce(void *arg)
{
    struct fill *f = arg;
    int err = 0;

    for (long i = 0; i < f->o.sessions && !err; i++) {
        struct fill_prep *p = &f->ring[i % FILL_RING];

        pthread_mutex_lock(&f->lock);
        while (i - f->taken >= FILL_RING && !f->err)
            pthread_cond_wait(&f->cond, &f->lock);
        err = f->err;
        pthread_mutex_unlock(&f->lock);
        if (err || (err = prepare(&f->o, i, p)))
            break;
        pthread_mutex_lock(&f->lock);
        f->made = i + 1;
        pthread_cond_broadcast(&f->cond);
        pthread_mutex_unlock(&f->lock);
    }
    pthread_mutex_lock(&f->lock);
    if (err && !f->err)
        f->err = err;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

/* Import every session the producer folds, in order: 0 or a negative errno. */
static int consume(struct fill *f, struct store *st, FILE *ids)
{
    struct store_text in[FILL_INPUTS_MAX], snap;
    int err = 0;

    for (long i = 0; i < f->o.sessions && !err; i++) {
        struct fill_prep *p = &f->ring[i % FILL_RING];

        pthread_mutex_lock(&f->lock);
        while (f->made <= i && !f->err)
            pthread_cond_wait(&f->cond, &f->lock);
        err = f->err;
        pthread_mutex_unlock(&f->lock);
        if (err)
            break;
        for (size_t k = 0; k < p->n; k++)
            in[k] = (struct store_text){p->text.data + p->off[k], p->len[k]};
        snap = (struct store_text){p->snap.data, p->snap.len};
        if ((err =
                 store_import(st, p->sid, NULL, p->created_at, NULL, in, p->n, &snap))) {
            struct rx_error why;

            store_last_error(st, &why);
            fprintf(stderr, "scale_fill: session %s not stored: %s\n", p->sid, why.text);
            break;
        }
        if (ids && fprintf(ids, "%s\n", p->sid) < 0)
            err = -EIO;
        f->inputs += (int64_t)p->n;
        pthread_mutex_lock(&f->lock);
        f->taken = i + 1;
        pthread_cond_broadcast(&f->cond);
        pthread_mutex_unlock(&f->lock);
    }
    pthread_mutex_lock(&f->lock);
    if (err && !f->err)
        f->err = err;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return err;
}

static int usage(void)
{
    fprintf(stderr, "usage: scale_fill --db PATH [--sessions N] [--messages M] [--word W]"
                    " [--every K] [--busy-every B] [--ids FILE] [--end-ms T]\n");
    return 1;
}

/* Options into o: 0, or 1 after saying what is wrong. */
static int parse_args(int argc, char **argv, struct fill_opts *o)
{
    *o = (struct fill_opts){.word = "zephyrquartz",
                            .sessions = 1000,
                            .messages = 20,
                            .every = 1000,
                            .end_ms = wall_ms() - 60000};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (!v)
            return usage();
        i++;
        if (!strcmp(k, "--db"))
            o->db = v;
        else if (!strcmp(k, "--word"))
            o->word = v;
        else if (!strcmp(k, "--ids"))
            o->ids = v;
        else if (!strcmp(k, "--sessions"))
            o->sessions = strtol(v, NULL, 10);
        else if (!strcmp(k, "--messages"))
            o->messages = strtol(v, NULL, 10);
        else if (!strcmp(k, "--every"))
            o->every = strtol(v, NULL, 10);
        else if (!strcmp(k, "--busy-every"))
            o->busy_every = strtol(v, NULL, 10);
        else if (!strcmp(k, "--end-ms"))
            o->end_ms = strtoll(v, NULL, 10);
        else
            return usage();
    }
    if (!o->db || o->sessions < 1 || o->messages < 1 || o->messages > FILL_MESSAGES_MAX ||
        o->every < 1 || o->busy_every < 0)
        return usage();
    return 0;
}

int main(int argc, char **argv)
{
    static struct fill f; /* the ring is large: not on the stack */
    struct rx_error why;
    struct store *st;
    FILE *ids = NULL;
    pthread_t producer;
    double t0;
    int err;

    if (parse_args(argc, argv, &f.o))
        return 1;
    if (!(st = store_open(f.o.db, &why))) {
        fprintf(stderr, "scale_fill: %s\n", why.text);
        return 1;
    }
    /* A fill is rebuilt, not recovered: no fsync at each of its commits. */
    if (store_set_durable(st, false) || (f.o.ids && !(ids = fopen(f.o.ids, "w")))) {
        fprintf(stderr, "scale_fill: cannot start the fill\n");
        store_close(st);
        return 1;
    }
    pthread_mutex_init(&f.lock, NULL);
    pthread_cond_init(&f.cond, NULL);
    for (size_t k = 0; k < FILL_RING; k++) {
        rx_buf_init(&f.ring[k].text, RX_BUF_STATE_MAX);
        rx_buf_init(&f.ring[k].snap, RX_BUF_STATE_MAX);
    }
    t0 = mono_s();
    err = pthread_create(&producer, NULL, produce, &f) ? -EAGAIN : 0;
    if (!err) {
        err = consume(&f, st, ids);
        pthread_join(producer, NULL);
        err = err ? err : f.err;
    }
    if (ids && fclose(ids) && !err)
        err = -EIO;
    store_close(st);
    for (size_t k = 0; k < FILL_RING; k++) {
        rx_buf_release(&f.ring[k].text);
        rx_buf_release(&f.ring[k].snap);
    }
    if (err) {
        fprintf(stderr, "scale_fill: failed after %ld sessions: %s\n", f.taken,
                strerror(-err));
        return 1;
    }
    double secs = mono_s() - t0;
    printf("fill sessions=%ld inputs=%" PRId64 " seconds=%.3f sessions_per_s=%.0f\n",
           f.o.sessions, f.inputs, secs, (double)f.o.sessions / (secs > 0 ? secs : 1e-9));
    return 0;
}
