/*
 * itest - helpers for the integration tests: start the real reflexor binary on
 * 127.0.0.1 (port 0: it prints the port it bound), speak HTTP to it with
 * libcurl, and follow SSE streams on a background thread.
 *
 * Test code only. The server binary is $RX_SERVER (default build/reflexor);
 * $RX_SERVER_WRAPPER (e.g. "valgrind -q --error-exitcode=99") runs it under a tool.
 *
 * PostgreSQL (SPEC 6.1): with $RX_PG_DIR set to the folder of a running
 * throwaway cluster (scripts/pgtmp.sh start DIR), every server runs on
 * PostgreSQL. A server started without --db (the default :memory:) gets a
 * fresh database of its own (scripts/pgtmp.sh createdb), dropped when it
 * stops; a "db" in the test's config is overridden too (the flag wins).
 * `--db FILE` becomes a database named after FILE, kept across restarts like
 * the file and dropped by itest_remove_db(FILE); an explicit `--db :memory:`
 * stays in memory. Tests that only make sense on SQLite (a file removed,
 * replaced, garbage or over a quota) are not run then: itest_skip says so.
 *
 * Ownership: struct itest_server / itest_sse are caller-allocated; _stop/_close
 * release them. Responses (struct itest_resp) own their body: itest_resp_release.
 */
#ifndef ITEST_H
#define ITEST_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

struct itest_server {
    pid_t pid;
    int port;
    char base[64];        /* "http://127.0.0.1:PORT" */
    char config_path[64]; /* temp config file, removed at stop */
    int out_fd;           /* the server's stdout */
    char pg_db[64];       /* RX_PG_DIR: the database it runs on ("" none) */
    bool pg_fresh;        /* ... made for this start: dropped at stop */
};

/* Start with `config_json` (a JSON object text, may be NULL for "{}") plus
 * extra argv entries (NULL-terminated, may be NULL). 0 or -1. */
int itest_server_start(struct itest_server *s, const char *config_json,
                       const char *const *extra_args);
/* Run argv (no shell), its stdout in out (may be NULL; NUL-terminated, cut to n).
   The exit status, or -1. */
int itest_run(char *const argv[], char *out, size_t n);
/* SIGTERM and wait; returns the exit status (0 clean), or -1. */
int itest_server_stop(struct itest_server *s);

struct itest_resp {
    long status;
    char *body;
    size_t len;
    char content_type[128];
};

/* One request; `body` may be NULL; `headers` NULL-terminated, may be NULL.
 * 0, or -1 (no HTTP answer); either way release `r`. */
int itest_request(const char *method, const char *url, const char *body,
                  const char *const *headers, struct itest_resp *r);
/* The same with a time limit of its own (itest_request allows 30 s). */
int itest_request_within(const char *method, const char *url, const char *body,
                         const char *const *headers, long timeout_ms,
                         struct itest_resp *r);
void itest_resp_release(struct itest_resp *r);
/* The body as JSON (NEW reference) or NULL. */
json_t *itest_resp_json(const struct itest_resp *r);

/* A followed SSE stream: each event's data (JSON) lands in `events`. */
struct itest_sse {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char url[512];
    char last_event_id[32];
    json_t *events; /* array of {"id":..,"data":<parsed or string>} */
    char *raw;      /* everything received, for checks on framing */
    size_t raw_len;
    long status;
    char content_type[128];
    bool done;
    bool stop;
    bool stall; /* stop reading (a stuck client) */
};

/* Open `url` with Accept: text/event-stream (and Last-Event-ID if set). */
int itest_sse_open(struct itest_sse *e, const char *url, const char *last_event_id);
/* Wait until an event whose data has "type" == type (and, if key != NULL,
 * data[key] == value) arrives after index `from`. Returns its index or -1. */
int itest_sse_wait(struct itest_sse *e, size_t from, const char *type, const char *key,
                   const char *value, int timeout_ms);
/* The same with any test: the first event after `from` whose data (borrowed)
 * satisfies pred(data, arg), which runs with the stream's lock held. */
int itest_sse_wait_for(struct itest_sse *e, size_t from, bool (*pred)(json_t *, void *),
                       void *arg, int timeout_ms);
/* Wait until the raw stream (comments and all) contains `text`. */
bool itest_sse_wait_raw(struct itest_sse *e, const char *text, int timeout_ms);
/* Wait until the stream ends. true if it did within the time. */
bool itest_sse_wait_done(struct itest_sse *e, int timeout_ms);
/* Borrowed data of event i (valid until close). */
json_t *itest_sse_event(struct itest_sse *e, size_t i);
size_t itest_sse_count(struct itest_sse *e);
void itest_sse_close(struct itest_sse *e);

/* Poll GET url until pred(json) or timeout; returns the last JSON (NEW) or NULL. */
json_t *itest_poll_json(const char *url, bool (*pred)(json_t *, void *), void *arg,
                        int timeout_ms);

/* The value of an unlabelled sample `name` in GET /metrics, or -1. */
long itest_metric(const struct itest_server *s, const char *name);

/*
 * A raw client: connect to 127.0.0.1:port, send `GET path` for an event
 * stream and read nothing. rcvbuf > 0 shrinks the socket's receive buffer (a
 * stuck reader). The socket, or -1.
 */
int itest_raw_get(int port, const char *path, int rcvbuf);
/*
 * Read `fd` until the server closes it. The bytes read, with *out (may be NULL)
 * a malloc'd NUL-terminated copy; -1 if it stayed open for timeout_ms.
 */
long itest_raw_drain(int fd, int timeout_ms, char **out);

/* POST /sessions: the new session's id (malloc'd), or NULL when not 201. */
char *itest_new_session(const struct itest_server *s);
/* In a session's state JSON: the newest assistant message, or NULL (borrowed). */
json_t *itest_last_assistant(json_t *state);
/* In a session's state JSON: tool call record i, or NULL (borrowed). */
json_t *itest_tool_record(json_t *state, size_t i);
/* GET base+path: the HTTP status, or -1 when the request failed. */
long itest_get_status(const struct itest_server *s, const char *path);
/* Remove a SQLite database file and its -wal and -shm files (and, with
 * RX_PG_DIR, drop the PostgreSQL database that stands for it). */
void itest_remove_db(const char *path);

/*
 * A fresh store for `path` (removed first) filled by the filler beside the
 * server (bench/scale_fill, or $RX_SCALE_FILL) with `args` (NULL-terminated,
 * may be NULL), e.g. "--sessions", "20000"; on PostgreSQL the database a
 * server started with `--db path` uses. Its line goes to stderr. 0 or -1.
 */
int itest_fill(const char *path, const char *const *args);

/* True when $RX_PG_DIR makes every server run on PostgreSQL. */
bool itest_on_postgres(void);
/* With RX_PG_DIR: one SQL statement on the database that stands for `path`,
 * its output (psql -At) in out (may be NULL). 0, or -1 (also off PostgreSQL). */
int itest_pg_sql(const char *path, const char *sql, char *out, size_t n);
/* Say on stderr that `test` does not run on PostgreSQL, and why. */
void itest_skip(const char *test, const char *why);

/* POST a JSON input to a session's moorex; returns the HTTP status. */
long itest_post_input(const struct itest_server *s, const char *sid, const char *json,
                      json_t **answer);

/*
 * The fake OpenAI-compatible provider (tests/fakes/fake_openai, or
 * $FAKE_OPENAI) on a free port. It exits with its stdin, a pipe we hold, so
 * a runner that dies cannot leave it behind.
 */
struct itest_fake {
    pid_t pid;
    int port;
    int hold_fd; /* the write end of its stdin */
};
/* 0, or -1 when it did not start. */
int itest_fake_start(struct itest_fake *f);
/* SIGTERM it and reap it. */
void itest_fake_stop(struct itest_fake *f);

/* Milliseconds of CLOCK_MONOTONIC, for waits and measures. */
long itest_now_ms(void);

/* The node binary, found on PATH (absolute: no lookup is left to Reflexor,
   whose MCP servers the tests run with it); NULL when there is none. */
const char *itest_node(void);

/* The resident memory (VmRSS) of process `pid` in KiB, or -1. */
long itest_rss_kb(pid_t pid);

/*
 * A probe of a server under attack: a thread that asks /healthz every 100 ms
 * and records the slowest answer, the failures and the server's peak VmRSS.
 */
struct itest_probe {
    pthread_t thread;
    const struct itest_server *s;
    bool stop; /* atomic */
    long worst_ms, peak_kb;
    int failed, asked;
};
/* 0, or -1 when the thread could not start. */
int itest_probe_start(struct itest_probe *p, const struct itest_server *s);
/* Stop it and print what it saw, named `what`, on stderr. */
void itest_probe_stop(struct itest_probe *p, const char *what);
/*
 * A memory bound of `mb` MiB for this build. Under ASan (make test sets
 * ASAN_OPTIONS for the sanitized run) every allocation carries redzones and
 * freed memory waits in a 256 MiB quarantine: three times the plain bound
 * plus the quarantine.
 */
long itest_mem_bound(long mb);
/* A brain-call-tools input whose calculator parameters nest `depth` arrays
   deep (malloc'd), or NULL. */
char *itest_deep_tool_call(int depth);

#endif
