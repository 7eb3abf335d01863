/*
 * mcp_server_stdio - the stdio transport of an MCP server: the program on
 * pipes (effects/mcp_stdio) and the thread that reads its output. See
 * mcp_server_internal.h for the table it fills.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "effects/log.h"
#include "effects/mcp_server_internal.h"
#include "effects/mcp_stdio.h"
#include "base/now.h"
#include "state_machine/rx_json.h"

/* stderr lines logged per window, so a chatty server cannot flood our log. */
#define STDERR_LINES_MAX 50
#define STDERR_WINDOW_MS 10000

struct stdio_link {
    struct mcp_stdio io;
    pthread_t reader;
    bool reader_running;
    int reader_stop; /* eventfd: makes the reader return */
};

static struct stdio_link *link_of(struct mcp_server *s)
{
    return s->link;
}

static int stdio_init(struct mcp_server *s, struct rx_error *err)
{
    struct stdio_link *l = calloc(1, sizeof(*l));

    if (!l)
        return rx_error_set(err, -ENOMEM, "out of memory");
    mcp_stdio_init(&l->io);
    l->reader_stop = -1;
    s->link = l;
    return 0;
}

static void stdio_release(struct mcp_server *s)
{
    struct stdio_link *l = link_of(s);

    if (!l)
        return;
    mcp_stdio_release(&l->io);
    free(l);
    s->link = NULL;
}

/* ------------------------------------------------------------ the reader */

static void on_line(void *ctx, const char *line, size_t n)
{
    struct mcp_server *s = ctx;
    json_t *msg = NULL;
    struct rx_error why = {"it is longer than the 8 MiB bound"};

    if (line && !line[strspn(line, " \t\r")])
        return; /* blank lines are harmless */
    if (line && rx_json_parse(line, n, RX_JSON_ALLOW_NUL, &msg, &why))
        msg = NULL;
    if (!msg) {
        pthread_mutex_lock(&s->lock);
        if (mcp_server_may_warn(s))
            log_warn("mcp %s: a line of %zu bytes dropped: %s", s->cfg.name, n, why.text);
        pthread_mutex_unlock(&s->lock);
        return;
    }
    if (json_is_array(msg)) { /* a batch, from a server of an older revision */
        for (size_t i = 0; i < json_array_size(msg); i++)
            mcp_server_handle_message(s, json_array_get(msg, i));
    } else {
        mcp_server_handle_message(s, msg);
    }
    json_decref(msg);
}

static void on_stderr(void *ctx, const char *line, size_t n)
{
    struct mcp_server *s = ctx;
    int64_t now = now_mono_ms();
    bool show;

    pthread_mutex_lock(&s->lock);
    if (now - s->stderr_window > STDERR_WINDOW_MS) {
        if (s->stderr_lines > STDERR_LINES_MAX)
            log_info("mcp %s: %u stderr lines not logged", s->cfg.name,
                     s->stderr_lines - STDERR_LINES_MAX);
        s->stderr_window = now;
        s->stderr_lines = 0;
    }
    show = s->stderr_lines++ < STDERR_LINES_MAX;
    pthread_mutex_unlock(&s->lock);
    if (show)
        log_info("mcp %s: %.*s", s->cfg.name, (int)n, line);
}

static void *reader_main(void *arg)
{
    struct mcp_server *s = arg;
    struct stdio_link *l = link_of(s);
    struct mcp_stdio_reader rd = {.on_line = on_line, .on_stderr = on_stderr, .ctx = s};
    int rc = mcp_stdio_read(&l->io, &rd, l->reader_stop);

    mcp_server_set_broken(s, rc == -ENOMEM ? "out of memory"
                                           : "the server closed its output");
    pthread_mutex_lock(&s->lock);
    mcp_server_fail_pending(s, rc == -EINTR ? "the server is stopping"
                                            : "the server exited");
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* --------------------------------------------------------------- the ops */

/* Start the program and its reader. */
static int stdio_open(struct mcp_server *s, struct rx_error *err)
{
    struct stdio_link *l = link_of(s);
    int rc;

    l->reader_stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->reader_stop < 0)
        return rx_error_set(err, -errno, "eventfd: %s", strerror(errno));
    rc = mcp_stdio_spawn(&l->io, s->cfg.argv, s->cfg.env, err);
    if (rc)
        goto out_close;
    rc = pthread_create(&l->reader, NULL, reader_main, s);
    if (rc) {
        mcp_stdio_kill(&l->io, 0, NULL, 0);
        mcp_stdio_close(&l->io);
        rc = rx_error_set(err, -rc, "cannot start a reader thread: %s", strerror(rc));
        goto out_close;
    }
    l->reader_running = true;
    return 0;

out_close:
    close(l->reader_stop);
    l->reader_stop = -1;
    return rc;
}

static void stdio_set_version(struct mcp_server *s, const char *version)
{
    (void)s;
    (void)version; /* nothing travels with each message on a pipe */
}

static int stdio_send(struct mcp_server *s, const char *text, int wait_ms,
                      struct rx_error *err)
{
    int rc =
        mcp_stdio_send(&link_of(s)->io, text, strlen(text), wait_ms, s->stop_pipe[0]);

    if (rc)
        rx_error_set(err, rc, "cannot write to the server: %s", strerror(-rc));
    return rc;
}

/* Wait for p's answer, which the reader signals. 0, -ECANCELED, -ETIMEDOUT. */
static int wait_answer(struct mcp_server *s, struct pending *p, int cancel_fd)
{
    for (;;) {
        struct pollfd fds[2] = {{.fd = p->evfd, .events = POLLIN},
                                {.fd = cancel_fd, .events = POLLIN}};
        eventfd_t v;
        int64_t left;
        bool done;

        pthread_mutex_lock(&s->lock);
        done = p->done;
        left = p->deadline - now_mono_ms();
        pthread_mutex_unlock(&s->lock);
        if (done)
            return 0;
        if (left <= 0)
            return -ETIMEDOUT;
        if (poll(fds, 2, (int)(left < 1000 ? left : 1000)) < 0 && errno != EINTR)
            return -errno;
        if (fds[1].revents)
            return -ECANCELED;
        if (fds[0].revents)
            eventfd_read(p->evfd, &v);
    }
}

static int stdio_exchange(struct mcp_server *s, struct pending *p, const char *text,
                          const char *method, int cancel_fd, struct rx_error *err)
{
    int evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), rc;
    bool done;

    (void)method;
    if (evfd < 0)
        return rx_error_set(err, -EIO, "eventfd: %s", strerror(errno));
    /* The reader signals it from now on; an answer that came before is in
       p->done, which the wait reads first. */
    pthread_mutex_lock(&s->lock);
    p->evfd = evfd;
    done = p->done;
    pthread_mutex_unlock(&s->lock);
    /* Already failed (the program died, and may have been started again
       meanwhile): not sent, or the new program would run a call we reported
       as failed. */
    rc = done ? 0
              : mcp_stdio_send(&link_of(s)->io, text, strlen(text), s->cfg.timeout_ms,
                               cancel_fd);
    if (rc && rc != -ECANCELED)
        rx_error_set(err, -EIO, "cannot write to the server: %s", strerror(-rc));
    rc = rc == -ECANCELED ? rc : rc ? -EIO : wait_answer(s, p, cancel_fd);
    pthread_mutex_lock(&s->lock);
    p->evfd = -1;
    pthread_mutex_unlock(&s->lock);
    close(evfd);
    return rc;
}

/* The reader's own answer: never a wait, so a server that floods us with
   requests and stops reading cannot stall the reader (nor, through it,
   a stop). What does not fit at once is dropped, and said once per flood. */
static void stdio_reply(struct mcp_server *s, json_t *reply, const char *method)
{
    char *text = json_dumps(reply, JSON_COMPACT);
    int rc = text ? mcp_stdio_try_send(&link_of(s)->io, text, strlen(text)) : -ENOMEM;

    free(text);
    if (!rc)
        return;
    pthread_mutex_lock(&s->lock);
    if (mcp_server_may_warn(s))
        log_warn("mcp %s: its '%s' not answered: %s", s->cfg.name, method,
                 rc == -EAGAIN ? "it does not read what we write" : strerror(-rc));
    pthread_mutex_unlock(&s->lock);
}

static void stdio_close(struct mcp_server *s, bool stopping, char *why, size_t size)
{
    struct stdio_link *l = link_of(s);
    char how[64] = "";

    (void)stopping;
    if (l->reader_running) {
        /* The program first; then the reader, which a descendant that kept
           the pipe open would otherwise keep waiting. */
        mcp_stdio_kill(&l->io, MCP_SERVER_KILL_GRACE_MS, how, sizeof(how));
        eventfd_write(l->reader_stop, 1);
        pthread_join(l->reader, NULL);
        l->reader_running = false;
        mcp_stdio_close(&l->io);
        close(l->reader_stop);
        l->reader_stop = -1;
    }
    if (how[0] && !strstr(why, "exited") && strlen(why) + strlen(how) + 3 < size) {
        strcat(why, " (");
        strcat(why, how);
        strcat(why, ")");
    } else if (how[0] && !strcmp(why, "the server closed its output")) {
        snprintf(why, size, "the server %s", how);
    }
}

const struct mcp_server_transport mcp_server_stdio_transport = {
    .name = "stdio",
    .init = stdio_init,
    .release = stdio_release,
    .open = stdio_open,
    .set_version = stdio_set_version,
    .send = stdio_send,
    .exchange = stdio_exchange,
    .reply = stdio_reply,
    .close = stdio_close,
};
