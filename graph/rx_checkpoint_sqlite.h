/*
 * rx_checkpoint_sqlite - the durable checkpointer of SPEC 8: struct
 * rx_checkpoint over one SQLite file (libsqlite3), with the semantics of
 * rx_checkpoint.h.
 *
 * What it promises beyond the memory store:
 * - It survives a crash. Every put, and every task result rx_graph stores as
 *   the task finishes (put_writes), is one transaction in WAL mode, so after
 *   kill -9 a new process finds every checkpoint and every finished task of
 *   the step that was running; rx_graph does not run those tasks again.
 * - It stores what changed. A checkpoint row holds its parent's id and the
 *   difference of its state from the parent's: keys whose value changed
 *   (set), keys removed, and for lists that grew at the end (add_messages,
 *   append) only the new items. A key that did not change is not written
 *   again, so a chat thread grows with its messages, not with messages x
 *   steps. The rest of a checkpoint (next, joins, pending, interrupts) is
 *   small and stored whole. Task results are dropped once the checkpoint
 *   they led to is stored.
 * - Reading a checkpoint replays the differences from the nearest state it
 *   remembers (a small cache of the last states per thread, so continuing
 *   a thread reads one row), else from the thread's first checkpoint.
 * - delete_thread removes a thread and its subgraphs' namespaces.
 *
 * Depends on state_machine/, graph/rx_checkpoint and libsqlite3; it does
 * file I/O (that is its job) and takes a lock per call. Tables it owns in
 * the file: rx_checkpoints and rx_writes (created when missing).
 * Ownership: as rx_checkpoint.h; the store owns its database connection,
 * closed by rx_checkpoint_destroy.
 * Errors: as rx_checkpoint.h; -EBADMSG for a row that is not what this
 * store wrote (corrupt), -EIO for other database errors.
 */
#ifndef RX_CHECKPOINT_SQLITE_H
#define RX_CHECKPOINT_SQLITE_H

#include "graph/rx_checkpoint.h"
#include "state_machine/rx_common.h"

/*
 * Open (or create) the database file `path` as a checkpointer; free it with
 * rx_checkpoint_destroy. NULL on failure, with err (NULL allowed) saying
 * why (a NULL path, a file that cannot be opened or is not a database).
 */
struct rx_checkpoint *rx_checkpoint_sqlite_open(const char *path,
                                                struct rx_error *err) RX_WUR;

#endif
