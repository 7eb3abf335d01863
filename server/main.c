/*
 * main - wiring only: settings, brain, tools, sessions, HTTP, signals.
 */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "effects/brain_builtin.h"
#include "effects/brain_openai.h"
#include "effects/toolkit.h"
#include "base/fail_alloc.h"
#include "base/now.h"
#include "server/config.h"
#include "server/http.h"
#include "server/protocols/a2a.h"
#include "server/protocols/lg.h"
#include "server/protocols/oai.h"
#include "server/run.h"
#include "server/records.h"
#include "effects/log.h"
#include "server/session.h"
#include "server/session_table.h"
#include "server/sse.h"
#include "store/store.h"
#include "server/cluster.h"
#include "server/reply.h"
#include "server/users_cmd.h"

static const char usage[] =
    "usage: reflexor [options]\n"
    "       reflexor [--config F] [--db D] users add NAME [--admin] | list |\n"
    "                remove NAME | rotate NAME\n"
    "\n"
    "An event-driven HTTP/SSE AI-agent server.\n"
    "\n"
    "  -c, --config FILE      JSON config (see config/README.md); flags override it\n"
    "  -l, --listen HOST:PORT address to serve on (default 127.0.0.1:8080; port 0\n"
    "                         picks a free port, printed at start-up)\n"
    "      --db PATH          input log database (default data/reflexor.db),\n"
    "                         ':memory:' keeps nothing across restarts;\n"
    "                         postgresql://... keeps it in PostgreSQL, shared by\n"
    "                         every server on it (a cluster, config/README.md)\n"
    "      --gc               apply the retention policy to the database of a\n"
    "                         stopped server once, report what was removed, exit\n"
    "      --web DIR          static files of the web UI (default build/web)\n"
    "      --brain NAME       'builtin' (embedded, offline) or 'openai'\n"
    "      --no-effects       fold inputs but carry out no effect (benchmarks)\n"
    "      --log-level LEVEL  debug, info, warn or error (default info)\n"
    "  -h, --help             this text\n"
    "\n"
    "Users (auth.mode \"keys\", config/README.md): 'users add' prints a new user's\n"
    "API key once; 'remove' and 'rotate' end the old key on every server of the\n"
    "database by the time they return. They work on a running server's database.\n"
    "\n"
    "Environment: OPENAI_API_KEY or REFLEXOR_LLM_BASE_URL select the openai brain\n"
    "(REFLEXOR_LLM_MODEL picks the model); REFLEXOR_LISTEN, REFLEXOR_DB,\n"
    "REFLEXOR_AUTH_TOKEN and REFLEXOR_BRAIN override the config file.\n"
    "MCP servers (tools the agent may use) come from the config's mcpServers\n"
    "block, in the shape Claude Desktop uses; GET <prefix>/tools lists them.\n"
    "Besides the native API (api_prefix, /api/reflexor) the server speaks the\n"
    "OpenAI chat completions API under /v1 and the LangGraph Agent Server API\n"
    "under /api/langgraph (config: openai.prefix, langgraph.prefix; \"\" = off).\n"
    "AG-UI clients POST their runs to /api/ag-ui (config: agui.prefix).\n"
    "A2A (JSON-RPC, 1.0 and 0.3) is under /api/a2a, its agent card at\n"
    "/.well-known/agent-card.json (config: a2a.prefix; \"\" = off).\n"
    "SIGINT or SIGTERM stop the server gracefully; SIGHUP re-reads the config\n"
    "(the auth token, limits and mcpServers apply to new work; a bad file keeps\n"
    "the old one).\n";

struct options {
    const char *config;
    const char *listen;
    const char *db;
    const char *web;
    const char *brain;
    const char *log_level;
    bool no_effects;
    bool gc;
    bool admin;   /* users add --admin */
    char **users; /* the operands after "users", or NULL */
    int n_users;
};

static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct option longs[] = {
        {"config", required_argument, NULL, 'c'},
        {"listen", required_argument, NULL, 'l'},
        {"db", required_argument, NULL, 'd'},
        {"web", required_argument, NULL, 'w'},
        {"brain", required_argument, NULL, 'b'},
        {"log-level", required_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"no-effects", no_argument, NULL, 'n'},
        {"gc", no_argument, NULL, 'g'},
        {"admin", no_argument, NULL, 'a'},
        {NULL, 0, NULL, 0},
    };
    int c;

    while ((c = getopt_long(argc, argv, "c:l:h", longs, NULL)) != -1) {
        switch (c) {
        case 'c':
            o->config = optarg;
            break;
        case 'l':
            o->listen = optarg;
            break;
        case 'd':
            o->db = optarg;
            break;
        case 'w':
            o->web = optarg;
            break;
        case 'b':
            o->brain = optarg;
            break;
        case 'v':
            o->log_level = optarg;
            break;
        case 'n':
            o->no_effects = true;
            break;
        case 'g':
            o->gc = true;
            break;
        case 'a':
            o->admin = true;
            break;
        case 'h':
            fputs(usage, stdout);
            exit(0);
        default:
            fputs(usage, stderr);
            return -EINVAL;
        }
    }
    if (optind < argc && users_cmd_is(argv[optind])) {
        o->users = argv + optind + 1;
        o->n_users = argc - optind - 1;
        return 0;
    }
    if (optind < argc || o->admin) {
        fprintf(stderr, "reflexor: unexpected argument '%s'\n",
                optind < argc ? argv[optind] : "--admin");
        return -EINVAL;
    }
    return 0;
}

/* Settings: defaults < file < environment < flags. */
static int load_config(struct config *cfg, const struct options *o)
{
    struct rx_error err = {""};
    enum log_level level;

    if (config_init(cfg))
        return -ENOMEM;
    if ((o->config && config_load_file(cfg, o->config, &err)) ||
        config_load_env(cfg, &err) ||
        (o->listen && config_set_listen(cfg, o->listen, &err)))
        goto out_bad;
    if ((o->db && config_set_str(&cfg->db_path, o->db)) ||
        (o->web && config_set_str(&cfg->web_root, o->web)) ||
        (o->brain && config_set_str(&cfg->brain, o->brain)))
        goto out_nomem;
    if (o->no_effects)
        cfg->effects = false;
    if (strcmp(cfg->brain, "builtin") && strcmp(cfg->brain, "openai")) {
        snprintf(err.text, sizeof(err.text), "--brain: '%s' is not 'builtin' or 'openai'",
                 cfg->brain);
        goto out_bad;
    }
    if (o->log_level) {
        if (log_level_parse(o->log_level, &level)) {
            snprintf(err.text, sizeof(err.text), "--log-level: '%s' is not a level",
                     o->log_level);
            goto out_bad;
        }
        log_set_level(level);
    }
    return 0;

out_nomem:
    snprintf(err.text, sizeof(err.text), "out of memory");
out_bad:
    fprintf(stderr, "reflexor: %s\n", err.text);
    config_release(cfg);
    return -EINVAL;
}

static struct toolkit *make_tools(const struct config *cfg)
{
    struct toolkit *tk = toolkit_create();
    struct rx_error err = {""};
    json_t *tools = json_object_get(cfg->json, "tools");

    if (!tk || toolkit_add_builtins(tk))
        goto out_destroy;
    if (tools && toolkit_add_from_config(tk, tools, &err)) {
        fprintf(stderr, "reflexor: config 'tools': %s\n", err.text);
        goto out_destroy;
    }
    toolkit_set_result_max(tk, cfg->tool_result_max);
    toolkit_set_mcp_tools_max(tk, cfg->mcp_tools_max);
    /* Last: the MCP servers connect in the background from here on. */
    if (toolkit_add_mcp(tk, json_object_get(cfg->json, "mcpServers"), &err)) {
        fprintf(stderr, "reflexor: config: %s\n", err.text);
        goto out_destroy;
    }
    return tk;

out_destroy:
    if (tk)
        toolkit_destroy(tk);
    return NULL;
}

/* brain.builtin: every field an integer, each optional. */
static struct brain *make_builtin(json_t *section, char *err)
{
    static const char *const keys[] = {"chunk_chars", "chunk_delay_ms", "slow_factor",
                                       "compress_after", "compress_keep"};
    struct brain_builtin_config bc;
    int *fields[] = {&bc.chunk_chars, &bc.chunk_delay_ms, &bc.slow_factor,
                     &bc.compress_after, &bc.compress_keep};

    brain_builtin_config_init(&bc);
    if (section && !json_is_object(section)) {
        snprintf(err, 256, "must be an object");
        return NULL;
    }
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        json_t *v = json_object_get(section, keys[i]);

        if (!v)
            continue;
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > 1000000) {
            snprintf(err, 256, "'%s' must be an integer from 0 to 1000000", keys[i]);
            return NULL;
        }
        *fields[i] = (int)json_integer_value(v);
    }
    return brain_builtin_create(&bc);
}

static struct brain *make_brain(const struct config *cfg, const struct toolkit *tk)
{
    char err[256] = "";
    struct brain *b;

    if (!strcmp(cfg->brain, "openai")) {
        struct rx_error oa_err = {""};

        b = brain_openai_create(config_brain_section(cfg, "openai"), tk, &oa_err);
        if (!b)
            fprintf(stderr, "reflexor: brain 'openai': %s\n", oa_err.text);
        return b;
    }
    b = make_builtin(config_brain_section(cfg, "builtin"), err);
    if (!b)
        fprintf(stderr, "reflexor: brain 'builtin': %s\n", err);
    return b;
}

/* As many descriptors as connections need (each SSE client holds one). */
static void raise_fd_limit(int connections)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)connections + 256;

    if (getrlimit(RLIMIT_NOFILE, &rl))
        return;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl))
            log_warn("cannot raise the descriptor limit to %llu",
                     (unsigned long long)want);
    }
}

/*
 * The housekeeping thread: every second it looks for streams whose peer went
 * away (SPEC 4: noticed within seconds, not at the next ping); every
 * interval_ms it pings every open stream so proxies keep idle ones open; once
 * an hour it applies the retention policy. It also starts again the effects
 * a session could not start (out of memory: session_table_reconcile_due),
 * evicts idle sessions from memory (session_table_evict, SPEC 6.2), and on
 * a shared store reads the sessions' count once, after start-up.
 */
#define HOUSEKEEPING_TICK_MS 1000

struct pinger {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
    int interval_ms;
    struct session_table *sessions;
    int retention_days; /* 0: keep everything */
    int64_t next_sweep_ms;
    int64_t next_ping_ms;
};

static void sweep_if_due(struct pinger *p)
{
    int64_t now = now_wall_ms();

    if (!p->retention_days || now < p->next_sweep_ms)
        return;
    p->next_sweep_ms = now + 3600 * 1000;
    session_table_sweep(p->sessions, now - (int64_t)p->retention_days * 86400000);
}

static void housekeeping(struct pinger *p)
{
    int64_t now = now_mono_ms();
    long gone = sse_reap_gone();

    if (gone)
        log_info("%ld stream(s) closed: their peer went away", gone);
    if (now >= p->next_ping_ms) {
        p->next_ping_ms = now + p->interval_ms;
        sse_ping_everything();
    }
    sweep_if_due(p);
    session_table_reconcile_due(p->sessions);
    session_table_text_due(p->sessions);
    session_table_count_due(p->sessions);
    session_table_evict(p->sessions);
}

/* RX_FAIL_ALLOC (sanitizer build): stop counting, and say what was counted. */
static void log_fail_alloc(void)
{
    bool failed = false;
    long n = fail_alloc_disarm(&failed);

    if (n >= 0)
        log_info("fail-alloc: %ld allocations while serving; the one chosen %s", n,
                 failed ? "failed" : "never came");
}

static void *pinger_main(void *arg)
{
    struct pinger *p = arg;

    pthread_mutex_lock(&p->lock);
    p->next_ping_ms = now_mono_ms() + p->interval_ms;
    while (!p->stop) {
        struct timespec ts =
            now_deadline(CLOCK_REALTIME, HOUSEKEEPING_TICK_MS * NOW_NS_PER_MS);

        if (pthread_cond_timedwait(&p->wake, &p->lock, &ts) == ETIMEDOUT && !p->stop) {
            pthread_mutex_unlock(&p->lock);
            housekeeping(p);
            pthread_mutex_lock(&p->lock);
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* The default database lives under data/, made on first use. ":memory:"
   is no database at all: nothing is logged, nothing survives. */
static int open_store(const struct config *cfg, struct store **out)
{
    struct rx_error err;

    *out = NULL;
    if (!strcmp(cfg->db_path, ":memory:"))
        return 0;

    if (!strncmp(cfg->db_path, "data/", 5) && mkdir("data", 0755) && errno != EEXIST) {
        fprintf(stderr, "reflexor: cannot create 'data': %s\n", strerror(errno));
        return -errno;
    }
    *out = store_open(cfg->db_path, &err);
    if (!*out) {
        fprintf(stderr, "reflexor: database %s\n", err.text);
        return -EINVAL;
    }
    if (!cfg->store_fsync && store_set_durable(*out, false))
        log_warn("database %s: cannot turn fsync off; it stays on", cfg->db_path);
    /* The quota is the connection's, not the file's: set at every start. */
    if (cfg->store_max_bytes &&
        store_set_max_bytes(*out, (int64_t)cfg->store_max_bytes)) {
        fprintf(stderr, "reflexor: database %s: cannot set store.max_bytes\n",
                cfg->db_path);
        store_close(*out);
        *out = NULL;
        return -EINVAL;
    }
    return 0;
}

/* reflexor --gc: the retention policy, once. */
static int run_gc(const struct config *cfg)
{
    struct store *st;
    int64_t inputs = 0;
    int removed = 0, err;

    if (open_store(cfg, &st))
        return 1;
    if (!st) {
        printf("--db :memory: keeps nothing: nothing to remove\n");
        return 0;
    }
    if (!cfg->retention_max_age_days) {
        printf("retention.max_age_days is 0: nothing is ever removed\n");
        store_close(st);
        return 0;
    }
    err = store_gc(st, now_wall_ms() - (int64_t)cfg->retention_max_age_days * 86400000,
                   &removed, &inputs);
    if (err)
        fprintf(stderr, "reflexor: gc failed: %s\n", strerror(-err));
    else
        printf("removed %d session(s) and %lld input(s) older than %d day(s) from %s\n",
               removed, (long long)inputs, cfg->retention_max_age_days, cfg->db_path);
    store_close(st);
    return err ? 1 : 0;
}

/* reflexor users ...: the users of auth.mode "keys", in the database. */
static int run_users(const struct config *cfg, const struct options *o)
{
    struct rx_error err = {""}, beside = {""};
    struct store *st;
    int rc;

    if (!strcmp(cfg->db_path, ":memory:")) {
        fprintf(stderr, "reflexor: users live in the database: not with --db :memory:\n");
        return 2;
    }
    /* A running server holds its SQLite file: write beside it. */
    if (!(st = store_open(cfg->db_path, &err)) && strstr(err.text, "in use by another"))
        st = store_open_beside(cfg->db_path, &beside);
    if (!st) {
        fprintf(stderr, "reflexor: database %s\n",
                beside.text[0] ? beside.text : err.text);
        return 1;
    }
    rc = users_cmd_run(st, o->users, o->n_users, o->admin);
    store_close(st);
    return rc;
}

/* Signals main() waits for; everything else keeps its default. */
static const int handled[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM};

/*
 * SIGHUP: read the config again, as at start-up (file, environment, flags). A
 * bad file is reported and the running config kept; a good one applies the
 * auth token and the limits to new work (config_apply_reload says which).
 */
static void reload(struct config *cfg, const struct options *opts, struct toolkit *tools)
{
    struct rx_error err = {""};
    struct config fresh;

    if (load_config(&fresh, opts)) {
        log_error("SIGHUP: the config was not reloaded; the running config stays");
        return;
    }
    /* The MCP servers first: a bad entry keeps the whole running config. */
    toolkit_set_mcp_tools_max(tools, fresh.mcp_tools_max);
    if (toolkit_reload_mcp(tools, json_object_get(fresh.json, "mcpServers"), &err)) {
        toolkit_set_mcp_tools_max(tools, cfg->mcp_tools_max);
        log_error("SIGHUP: config: %s; the running config stays", err.text);
    } else if (config_apply_reload(cfg, &fresh))
        log_error("SIGHUP: out of memory; the running config stays");
    else
        log_info(
            "SIGHUP: config reloaded (auth token, limits and mcpServers; listen, db, "
            "brain and tools take effect at restart)");
    config_release(&fresh);
}

int main(int argc, char **argv)
{
    struct options opts = {0};
    struct config cfg;
    struct toolkit *tools = NULL;
    struct brain *brain = NULL;
    struct store *store = NULL;
    struct session_table *sessions = NULL;
    struct cluster *cluster = NULL;
    struct http_server srv;
    struct pinger pinger = {.lock = PTHREAD_MUTEX_INITIALIZER,
                            .wake = PTHREAD_COND_INITIALIZER};
    sigset_t sigs;
    int sig = 0, rc = 1;

    if (parse_args(argc, argv, &opts) || load_config(&cfg, &opts))
        return 2;
    if (opts.gc || opts.users) {
        rc = opts.gc ? run_gc(&cfg) : run_users(&cfg, &opts);
        config_release(&cfg);
        return rc;
    }
    /* Signals go to this thread only (sigwait below); workers inherit the mask.
       Those whose default would kill the process without a graceful stop are
       taken here too: SIGHUP reloads, the others are logged and ignored. */
    sigemptyset(&sigs);
    for (size_t i = 0; i < sizeof(handled) / sizeof(handled[0]); i++)
        sigaddset(&sigs, handled[i]);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    raise_fd_limit(cfg.max_connections);

    /* A bad tools or brain section is a config error: exit 2, like any other. */
    rc = 2;
    if (!(tools = make_tools(&cfg)) || !(brain = make_brain(&cfg, tools)))
        goto out_release;
    rc = 1;
    if (open_store(&cfg, &store))
        goto out_release;
    /* On PostgreSQL this node is one of a cluster (SPEC 6.1), maybe of one. */
    if (store && store_is_shared(store)) {
        struct rx_error why;

        if (cluster_start(&cfg, store, &cluster, &why)) {
            fprintf(stderr, "reflexor: %s\n", why.text);
            goto out_release;
        }
    }
    sessions = session_table_create(&(struct session_env){
        .cfg = &cfg,
        .brain = brain,
        .tools = tools,
        .store = store,
        .removed = lg_thread_removed,
        .relay = cluster ? cluster_relay : NULL,
        .may_act = cluster ? cluster_may_act : NULL,
        .touched = cluster ? cluster_touched : NULL,
        .cluster = cluster,
    });
    if (!sessions) {
        fprintf(stderr, "reflexor: out of memory\n");
        goto out_release;
    }
    /* Rebuild what the log holds before serving anyone; the seed's routes need
       the session "default". */
    if (session_table_load(sessions))
        goto out_release;
    rc = session_table_create_session(sessions, "default", NULL, NULL);
    if (rc && rc != -EEXIST) {
        fprintf(stderr, "reflexor: cannot create the default session: %s\n",
                strerror(-rc));
        rc = 1;
        goto out_release;
    }
    rc = 1;
    if (cluster && cluster_run(cluster, sessions)) {
        fprintf(stderr, "reflexor: cannot start the cluster's threads\n");
        goto out_release;
    }
    /* The protocols' records (SPEC 6.2) are the store's from the first request. */
    if (records_start(store)) {
        fprintf(stderr, "reflexor: cannot start the records' writer\n");
        goto out_release;
    }
    if (http_server_start(&srv, &cfg, sessions, cfg.brain))
        goto out_release;
    if (cluster) {
        if (cluster_advertise(cluster, srv.port)) {
            http_server_stop(&srv);
            goto out_release;
        }
        __atomic_store_n(&srv.door.cluster, cluster, __ATOMIC_RELEASE);
        reply_set_node(cluster_url(cluster));
    }
    pinger.interval_ms = cfg.sse_ping_ms;
    pinger.sessions = sessions;
    pinger.retention_days = cfg.retention_max_age_days;
    sweep_if_due(&pinger);
    if (pthread_create(&pinger.thread, NULL, pinger_main, &pinger)) {
        http_server_stop(&srv);
        goto out_release;
    }
    log_info("brain: %s; database: %s; web root: %s", cfg.brain, cfg.db_path,
             srv.web_root ? srv.web_root : "(none)");
    printf("Reflexor listening on http://%s:%d/ (brain: %s)\n", cfg.listen_host, srv.port,
           cfg.brain);
    fflush(stdout);
    fail_alloc_arm(); /* RX_FAIL_ALLOC: what is tested is serving, not starting */

    while (!sigwait(&sigs, &sig) && sig != SIGINT && sig != SIGTERM) {
        if (sig == SIGHUP)
            reload(&cfg, &opts, tools);
        else
            log_info("%s: ignored (SIGINT or SIGTERM stop the server, SIGHUP reloads)",
                     strsignal(sig));
    }
    log_info("%s: stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
    log_fail_alloc();
    /* Stop taking work, stop the work, end the streams, then close. */
    http_server_quiesce(&srv);
    session_table_cancel_all(sessions);
    sse_close_everything();
    pthread_mutex_lock(&pinger.lock);
    pinger.stop = true;
    pthread_cond_signal(&pinger.wake);
    pthread_mutex_unlock(&pinger.lock);
    pthread_join(pinger.thread, NULL);
    /* Connections still open would go on using the sessions: close them all
       before the table goes. */
    http_server_stop(&srv);
    /* The other nodes take this one's sessions over at their next scan. */
    cluster_stop(cluster);
    cluster = NULL;
    /* Runs hold their sessions: the protocols let go of them before the table goes. */
    run_shutdown();
    oai_shutdown();
    lg_shutdown();
    a2a_shutdown();
    records_stop(); /* what ended runs and chats queued, stored */
    session_table_destroy(sessions);
    sessions = NULL;
    log_info("stopped");
    rc = 0;

out_release:
    cluster_stop(cluster);
    session_table_destroy(sessions);
    records_stop();
    store_close(store); /* after every session: effects append until they end */
    if (brain)
        brain->destroy(brain);
    if (tools)
        toolkit_destroy(tools);
    curl_global_cleanup();
    config_release(&cfg);
    return rc;
}
