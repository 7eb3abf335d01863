/*
 * check_checkpoint_sqlite - the SQLite checkpointer (SPEC 8): the state API
 * gives the same snapshots as over the memory store; a process killed with
 * SIGKILL mid-step is continued by another process without running the
 * finished tasks again (node runs counted in a file); what is stored is what
 * changed (an unchanged key is not written again, add_messages keys store
 * only new messages); retention deletes a thread; corrupt rows, unknown ids
 * and bad paths are clear errors.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3.h>

#include "graph/rx_checkpoint_sqlite.h"
#include "graph/rx_graph.h"

static const struct rx_reducer schema[] = {
    {"log", RX_REDUCER_APPEND, NULL, NULL},
    {"messages", RX_REDUCER_ADD_MESSAGES, NULL, NULL},
};

static char dir[64], db[96], counts[96];

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/rx_cp_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(db, sizeof(db), "%s/cp.db", dir);
    snprintf(counts, sizeof(counts), "%s/runs", dir);
}

static void teardown(void)
{
    char p[128];
    const char *const suffix[] = {"", "-wal", "-shm"};
    size_t i;

    for (i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s%s", db, suffix[i]);
        unlink(p);
    }
    unlink(counts);
    rmdir(dir);
}

/* One line per node run, in a file, so runs in other processes count too. */
static void count_run(const char *name)
{
    int fd = open(counts, O_WRONLY | O_CREAT | O_APPEND, 0600);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, name, 1), 1);
    close(fd);
}

static int runs_of(char node)
{
    FILE *f = fopen(counts, "r");
    int c, n = 0;

    while (f && (c = fgetc(f)) != EOF)
        n += c == node;
    if (f)
        fclose(f);
    return n;
}

static int log_node(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    const char *name = rx_graph_task_node(task);

    (void)input;
    (void)ctx;
    count_run(name);
    *update = json_pack("{s:[s]}", "log", name);
    return *update ? 0 : -ENOMEM;
}

/* In the doomed process: tell the parent it is mid-step, then hang. */
static int slow_node(struct rx_graph_task *task, json_t *input, void *ctx,
                     json_t **update)
{
    int *pipe_w = ctx;
    struct timespec ts = {0, 200 * 1000 * 1000};

    if (*pipe_w >= 0) {
        nanosleep(&ts, NULL); /* a has long finished and stored its result */
        count_run("b");
        if (write(*pipe_w, "x", 1) != 1)
            _exit(3);
        for (;;)
            pause();
    }
    return log_node(task, input, NULL, update);
}

/* START -> a, b (parallel) -> c. */
static struct rx_graph *crash_graph(int *pipe_w)
{
    const char *srcs[] = {"a", "b"};
    struct rx_graph *g = rx_graph_create(schema, 2);

    ck_assert_int_eq(rx_graph_add_node(g, "a", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "b", slow_node, pipe_w), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "c", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "a"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "b"), 0);
    ck_assert_int_eq(rx_graph_add_join(g, srcs, 2, "c"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    return g;
}

START_TEST(kill_mid_step_then_resume)
{
    int fds[2], no_pipe = -1, status;
    pid_t child;
    char c;

    ck_assert_int_eq(pipe(fds), 0);
    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        struct rx_checkpoint *cp = rx_checkpoint_sqlite_open(db, NULL);
        struct rx_graph_config cfg = {.checkpointer = cp, .thread_id = "t"};
        struct rx_graph_result res = {0};
        struct rx_graph *g;
        json_t *in = json_object();

        close(fds[0]);
        g = crash_graph(&fds[1]);
        if (!cp || rx_graph_invoke(g, in, &cfg, &res, NULL))
            _exit(2);
        _exit(1); /* never: b hangs until killed */
    }
    close(fds[1]);
    ck_assert_int_eq(read(fds[0], &c, 1), 1); /* mid-step: a done, b running */
    ck_assert_int_eq(kill(child, SIGKILL), 0);
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFSIGNALED(status));
    close(fds[0]);
    ck_assert_int_eq(runs_of('a'), 1);
    ck_assert_int_eq(runs_of('b'), 1);

    /* Another process (this one) continues the thread from the file. */
    {
        struct rx_checkpoint *cp = rx_checkpoint_sqlite_open(db, NULL);
        struct rx_graph_config cfg = {.checkpointer = cp, .thread_id = "t"};
        struct rx_graph_result res = {0};
        struct rx_graph *g = crash_graph(&no_pipe);
        struct rx_error e = {{0}};
        json_t *want = json_pack("[s,s,s]", "a", "b", "c");

        ck_assert_ptr_nonnull(cp);
        ck_assert_msg(rx_graph_invoke(g, NULL, &cfg, &res, &e) == 0, "%s", e.text);
        ck_assert(json_equal(json_object_get(res.state, "log"), want));
        ck_assert_int_eq(runs_of('a'), 1); /* its stored result was used */
        ck_assert_int_eq(runs_of('b'), 2); /* killed mid-run: runs again */
        ck_assert_int_eq(runs_of('c'), 1);
        rx_graph_result_release(&res);
        json_decref(want);
        rx_graph_destroy(g);
        rx_checkpoint_destroy(cp);
    }
}
END_TEST

/* ---- the same snapshots over both stores ---- */

static json_t *scenario(struct rx_checkpoint *cp)
{
    const char *before[] = {"b", NULL};
    struct rx_graph *g = rx_graph_create(schema, 2);
    struct rx_graph_config cfg = {
        .checkpointer = cp, .thread_id = "t", .interrupt_before = before};
    struct rx_graph_result res = {0};
    struct rx_error e = {{0}};
    json_t *in = json_pack("{s:s}", "messages", "hi"), *hist = NULL, *edit;
    char id[RX_CHECKPOINT_ID_LEN];

    ck_assert_int_eq(rx_graph_add_node(g, "a", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "b", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "a"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, "a", "b"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, &e), 0);
    rx_graph_result_release(&res);
    edit = json_pack("{s:[s],s:[{s:s,s:s}]}", "log", "edit", "messages", "id", "e",
                     "content", "edited");
    ck_assert_msg(rx_graph_update_state(g, &cfg, edit, "a", id, &e) == 0, "%s", e.text);
    cfg.interrupt_before = NULL;
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &cfg, &res, &e), 0);
    rx_graph_result_release(&res);
    /* A fork from the first checkpoint after a. */
    cfg.checkpoint_id = "2";
    ck_assert_msg(rx_graph_update_state(g, &cfg, edit, "a", id, &e) == 0, "%s", e.text);
    cfg.checkpoint_id = NULL;
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &cfg, &res, &e), 0);
    rx_graph_result_release(&res);
    ck_assert_int_eq(rx_graph_get_state_history(g, &cfg, &hist, &e), 0);
    json_decref(edit);
    json_decref(in);
    rx_graph_destroy(g);
    return hist;
}

START_TEST(same_history_as_memory)
{
    struct rx_checkpoint *mem = rx_checkpoint_memory_create();
    struct rx_checkpoint *sql = rx_checkpoint_sqlite_open(db, NULL);
    json_t *hm, *hs;
    char *a, *b;

    ck_assert_ptr_nonnull(sql);
    hm = scenario(mem);
    hs = scenario(sql);
    /* Message ids are random; everything else must match. */
    a = json_dumps(json_array_get(hm, 0), JSON_COMPACT | JSON_SORT_KEYS);
    ck_assert_uint_eq(json_array_size(hm), json_array_size(hs));
    {
        size_t i;

        for (i = 0; i < json_array_size(hm); i++) {
            json_t *x = json_array_get(hm, i), *y = json_array_get(hs, i);

            json_object_del(json_object_get(x, "values"), "messages");
            json_object_del(json_object_get(y, "values"), "messages");
            free(a);
            a = json_dumps(x, JSON_COMPACT | JSON_SORT_KEYS);
            b = json_dumps(y, JSON_COMPACT | JSON_SORT_KEYS);
            ck_assert_msg(!strcmp(a, b), "snapshot %zu: memory %s, sqlite %s", i, a, b);
            free(b);
        }
    }
    free(a);
    json_decref(hm);
    json_decref(hs);
    rx_checkpoint_destroy(mem);
    rx_checkpoint_destroy(sql);
}
END_TEST

/* ---- it stores what changed ---- */

static int chat(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    (void)task;
    (void)ctx;
    *update = json_pack("{s:[{s:s,s:I}]}", "messages", "type", "ai", "content",
                        (json_int_t)json_array_size(json_object_get(input, "messages")));
    return *update ? 0 : -ENOMEM;
}

static long long db_sum(const char *sql)
{
    sqlite3 *h;
    sqlite3_stmt *st;
    long long v = -1;

    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

START_TEST(stores_what_changed)
{
    struct rx_checkpoint *cp = rx_checkpoint_sqlite_open(db, NULL);
    struct rx_graph *g = rx_graph_create(schema, 2);
    struct rx_graph_config cfg = {.checkpointer = cp, .thread_id = "chat"};
    struct rx_graph_result res = {0};
    char big[8192];
    json_t *in;
    long long max_delta, total;
    int turn;

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ck_assert_int_eq(rx_graph_add_node(g, "bot", chat, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "bot"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    for (turn = 0; turn < 50; turn++) {
        /* "doc" is sent on the first turn only and never changes after. */
        in = turn ? json_pack("{s:s}", "messages", "question")
                  : json_pack("{s:s,s:s}", "messages", "question", "doc", big);
        ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, NULL), 0);
        rx_graph_result_release(&res);
        json_decref(in);
    }
    rx_checkpoint_destroy(cp);
    /* 100 messages in the state at the end, yet no row holds more than its own. */
    max_delta = db_sum("SELECT max(length(delta)) FROM rx_checkpoints WHERE id > 1");
    ck_assert_msg(max_delta < 200, "a checkpoint stored %lld bytes of state", max_delta);
    total = db_sum("SELECT sum(length(delta)) FROM rx_checkpoints");
    ck_assert_msg(total < (long long)sizeof(big) + 100 * 200, "%lld bytes in all", total);
    ck_assert_int_eq(db_sum("SELECT count(*) FROM rx_writes"), 0); /* all folded in */
    rx_graph_destroy(g);
}
END_TEST

/* ---- retention, corrupt rows, unknown ids, bad paths ---- */

START_TEST(delete_thread_and_bad_input)
{
    struct rx_error e = {{0}};
    struct rx_checkpoint *cp = rx_checkpoint_sqlite_open(db, &e);
    struct rx_graph *g = rx_graph_create(schema, 2);
    struct rx_graph_config cfg = {.checkpointer = cp, .thread_id = "t"};
    struct rx_graph_result res = {0};
    json_t *in = json_object(), *snap = NULL, *out = NULL;
    char id[RX_CHECKPOINT_ID_LEN];
    sqlite3 *h;

    ck_assert_int_eq(rx_graph_add_node(g, "a", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "a"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, &e), 0);
    rx_graph_result_release(&res);
    cfg.thread_id = "t|sub:1"; /* a subgraph's namespace of t */
    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, &e), 0);
    rx_graph_result_release(&res);
    cfg.thread_id = "t2";
    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, &e), 0);
    rx_graph_result_release(&res);

    /* Unknown and malformed ids. */
    cfg.thread_id = "t";
    ck_assert_int_eq(rx_checkpoint_get(cp, "t", "999", &out), -ENOENT);
    ck_assert_int_eq(rx_checkpoint_get(cp, "t", "abc", &out), -ENOENT);
    ck_assert_int_eq(rx_checkpoint_get(cp, "t", "5", &out), -ENOENT); /* t2's */
    cfg.checkpoint_id = "999";
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &cfg, &res, &e), -ENOENT);
    cfg.checkpoint_id = NULL;

    /* Retention: t and its namespaces go, t2 stays. */
    ck_assert_int_eq(rx_checkpoint_delete_thread(cp, "t"), 0);
    ck_assert_int_eq(rx_graph_get_state(g, &cfg, &snap, &e), 0);
    ck_assert(json_is_null(json_object_get(snap, "checkpoint_id")));
    json_decref(snap);
    ck_assert_int_eq(rx_checkpoint_list(cp, "t|sub:1", &out), -ENOENT);
    ck_assert_int_eq(rx_checkpoint_list(cp, "t2", &out), 0);
    json_decref(out);
    ck_assert_int_eq(rx_checkpoint_delete_thread(cp, NULL), -EINVAL);

    /* A corrupt row: a clear error, no crash. */
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(h,
                                  "UPDATE rx_checkpoints SET delta='{broken' WHERE "
                                  "thread='t2' AND parent IS NOT NULL",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    rx_checkpoint_destroy(cp);
    cp = rx_checkpoint_sqlite_open(db, &e); /* no cached state to hide the row */
    cfg.checkpointer = cp;
    cfg.thread_id = "t2";
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &cfg, &res, &e), -EBADMSG);
    ck_assert_msg(strstr(e.text, "corrupt"), "%s", e.text);
    ck_assert_int_eq(rx_graph_get_state(g, &cfg, &snap, &e), -EBADMSG);
    ck_assert_msg(strstr(e.text, "corrupt"), "%s", e.text);
    ck_assert_int_eq(rx_graph_get_state_history(g, &cfg, &snap, &e), -EBADMSG);
    ck_assert_int_eq(rx_graph_update_state(g, &cfg, NULL, "a", id, &e), -EBADMSG);
    rx_checkpoint_destroy(cp);

    /* Bad paths. */
    ck_assert_ptr_null(rx_checkpoint_sqlite_open(NULL, &e));
    ck_assert_ptr_null(rx_checkpoint_sqlite_open("/nonexistent/dir/x.db", &e));
    ck_assert_msg(strstr(e.text, "checkpoint database"), "%s", e.text);
    ck_assert_ptr_null(rx_checkpoint_sqlite_open(dir, &e)); /* a directory */
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

Suite *checkpoint_sqlite_suite(void);
Suite *checkpoint_sqlite_suite(void)
{
    Suite *s = suite_create("checkpoint_sqlite");
    TCase *tc = tcase_create("sqlite");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, kill_mid_step_then_resume);
    tcase_add_test(tc, same_history_as_memory);
    tcase_add_test(tc, stores_what_changed);
    tcase_add_test(tc, delete_thread_and_bad_input);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    return s;
}
