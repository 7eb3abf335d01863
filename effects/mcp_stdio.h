/*
 * mcp_stdio - the stdio transport of an MCP server: a child process that
 * reads newline-delimited JSON-RPC on its stdin and writes it on its stdout.
 *
 * The program is started with posix_spawnp, with no shell: argv as given,
 * the server's environment plus the configured variables, default signal
 * dispositions and an empty signal mask, in a process group of its own so
 * that mcp_stdio_kill stops everything it started in that group. Its
 * stderr is read with its stdout and handed over line by line (to our log).
 *
 * Lines longer than MCP_STDIO_LINE_MAX are dropped whole (the reader says
 * so once per line and resynchronises at the next newline), so a server
 * cannot make us buffer without bound; stderr lines are cut at
 * MCP_STDIO_STDERR_LINE_MAX.
 *
 * Depends on POSIX (posix_spawn, poll, pipes) and state_machine/rx_buf;
 * knows nothing of JSON-RPC or of server/.
 * Threads: one thread runs mcp_stdio_read; any thread may mcp_stdio_send
 * (writes are serialised by the struct's own lock, so lines never mix);
 * the reader itself answers with mcp_stdio_try_send, which never waits;
 * mcp_stdio_kill may run while the reader reads (the reader then sees the
 * output end) and while a writer waits for room (it is woken and fails at
 * once: a kill never waits out a writer's timeout); mcp_stdio_close only
 * once the reader has returned.
 * Ownership: struct mcp_stdio is caller-allocated; it owns the child and
 * the three pipe ends. argv/env are borrowed during mcp_stdio_spawn.
 */
#ifndef MCP_STDIO_H
#define MCP_STDIO_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "state_machine/rx_common.h"

/* Longest JSON-RPC line read from a server. */
#define MCP_STDIO_LINE_MAX (8u << 20)
/* Longest stderr line passed on; the rest of it is cut. */
#define MCP_STDIO_STDERR_LINE_MAX 1024

struct mcp_stdio {
    pid_t pid; /* the program, leader of its process group; 0 when none */
    int in_fd, out_fd, err_fd;
    int wake_fd;  /* eventfd: mcp_stdio_kill wakes a writer waiting for room */
    bool closing; /* atomic: set by mcp_stdio_kill, cleared by _spawn */
    bool waiting; /* atomic: a writer waits for room (try_send gives up at once) */
    pthread_mutex_t write_lock;
};

/* What the reader hands over: a whole stdout line (NUL-terminated, without
   its newline; NULL with `n` its length when it was too long and dropped),
   or one stderr line. */
struct mcp_stdio_reader {
    void (*on_line)(void *ctx, const char *line, size_t n);
    void (*on_stderr)(void *ctx, const char *line, size_t n);
    void *ctx;
};

/* Set up an idle transport (no child). */
void mcp_stdio_init(struct mcp_stdio *io);

/*
 * Start argv[0] (looked up in PATH when it has no '/') with `env` (NULL-
 * terminated "NAME=value" strings added to, or replacing those of, our
 * environment; may be NULL). 0, or -errno with `err` naming the cause
 * ("cannot start 'npx': No such file or directory").
 */
int mcp_stdio_spawn(struct mcp_stdio *io, char *const argv[], char *const env[],
                    struct rx_error *err) RX_WUR;

/*
 * Write one message and its newline, waiting at most timeout_ms for a
 * program that does not read, and no longer than until `cancel_fd` (-1:
 * none) is readable. 0, -EPIPE (no child, or it closed its stdin),
 * -ETIMEDOUT, -ECANCELED.
 */
int mcp_stdio_send(struct mcp_stdio *io, const char *msg, size_t n, int timeout_ms,
                   int cancel_fd) RX_WUR;

/*
 * Write one short message and its newline only if that takes no wait: for
 * a thread that must never block (the reader, answering the server's own
 * requests). 0; -EAGAIN (the pipe is full, or another writer is waiting
 * for room: the message is dropped; a writer merely in the middle of a
 * write is waited for, a moment); -EMSGSIZE (longer than PIPE_BUF less
 * one: a pipe takes only that much whole); -EPIPE.
 */
int mcp_stdio_try_send(struct mcp_stdio *io, const char *msg, size_t n) RX_WUR;

/*
 * Read stdout and stderr until the program closes its stdout or `stop_fd`
 * becomes readable, handing each line to `rd`. 0 at end of stream, -EINTR
 * when stopped, -ECHILD when the program ended but its stdout stays open
 * (a process it started holds it; what was written before is read first,
 * for at most a second), -ENOMEM. The program is not reaped here.
 */
int mcp_stdio_read(struct mcp_stdio *io, const struct mcp_stdio_reader *rd,
                   int stop_fd) RX_WUR;

/*
 * Stop the program: close its stdin, SIGTERM its process group, SIGKILL it
 * after `grace_ms`, and reap it. Writes how it ended
 * ("exited with status 1", "killed by signal 9") into `how` (may be NULL).
 * Nothing happens without a child.
 */
void mcp_stdio_kill(struct mcp_stdio *io, int grace_ms, char *how, size_t size);

/* Close the output pipes, once the reader has returned. */
void mcp_stdio_close(struct mcp_stdio *io);

/* Release the lock; the child must be gone (mcp_stdio_kill, _close). */
void mcp_stdio_release(struct mcp_stdio *io);

#endif
