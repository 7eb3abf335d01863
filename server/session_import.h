/*
 * session_import - a session's exported log (GET .../export, SPEC 4) checked
 * and replayed through the machine before it becomes a session: every input
 * is parsed and applied with rx_machine_apply, as store_load folds a log, and
 * must be accepted; the first one that is not is named (its index and why)
 * and nothing is made. Also the rule for a title a person gives (rename and
 * import).
 *
 * Depends on state_machine/, store/store (struct store_text) and the
 * toolkit's policies only: no session, lock or I/O; session_table_import
 * makes the session from it.
 * Ownership: struct session_import is caller-allocated, filled by
 * session_import_replay and released by session_import_release (even after
 * a failure); it owns its state (unless `state_moved`), texts and title. The
 * document is borrowed.
 */
#ifndef SESSION_IMPORT_H
#define SESSION_IMPORT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "store/store.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"
#include "state_machine/rx_input.h"
#include "state_machine/rx_state.h"

/* The document GET .../export writes and POST .../import reads. */
#define SESSION_EXPORT_FORMAT  "reflexor-session"
#define SESSION_EXPORT_VERSION 1
/* The longest title a person may give, in characters (code points). */
#define SESSION_TITLE_MAX 200

/* Why an import was refused: the first input refused, or the document. */
struct session_import_error {
    long index;         /* the input's index in "inputs", or -1: the document */
    const char *reason; /* static: "invalid", "unchanged", or the machine's reason */
    const char *field;  /* static, or NULL */
    char message[RX_ERR_LEN];
};

struct toolkit;

struct session_import {
    struct rx_state state;       /* every input applied */
    bool state_moved;            /* handed on: release leaves it */
    size_t n;                    /* inputs */
    char *title;                 /* the document's title, or NULL */
    const struct toolkit *tools; /* borrowed: today's policies stamp each call */
    bool keep_log;
    /* Asked every 1024 inputs: nonzero (a negative errno) stops the replay. */
    int (*check)(void *arg);
    void *check_arg;
    /* With `keep_log`: each input as the log stores it, and the final state. */
    struct store_text *inputs; /* n of them, pointing into `texts` */
    struct store_text snapshot;
    struct rx_buf texts, snap;
    size_t *offs, offs_cap; /* where each input starts in `texts` */
};

/*
 * Ready an import: policies from `tools` (borrowed, must outlive it); with
 * keep_log, each input and the final state are also encoded for the store.
 * 0 or -ENOMEM; release it either way.
 */
int session_import_init(struct session_import *imp, const struct toolkit *tools,
                        bool keep_log) RX_WUR;
/*
 * Check `doc` ({"format":"reflexor-session","version":1,"title":...,
 * "inputs":[{"seq":N,"input":{...}}...]}) and replay its inputs from the
 * initial state. A "seq", when given, must be the input's place (1, 2, ...).
 * Every brain-call-tools is stamped with today's policies first (SPEC 3.6,
 * session_stamp_policies), whatever the document says: an import never runs
 * a call the live API would have asked about or denied.
 * 0; -EINVAL with `e` filled (nothing made); -ENOMEM; or what `check` said.
 */
int session_import_replay(json_t *doc, struct session_import *imp,
                          struct session_import_error *e) RX_WUR;
/*
 * The same from the document's text (`n` bytes, borrowed), read one input at
 * a time: no tree of the whole document is ever built, so the memory an
 * import takes is its text, the log it makes and the state.
 */
int session_import_replay_text(const char *text, size_t n, struct session_import *imp,
                               struct session_import_error *e) RX_WUR;
void session_import_release(struct session_import *imp);

/*
 * Stamp each call of a brain-call-tools `in` with its policy (SPEC 3.6): the
 * session's override in `st`, else the tool's configured one in `tools`
 * (NULL: none), else auto. Whatever a sender put there is overwritten, and the log keeps
 * the stamp, so a replay creates the same records after the config changed.
 * Other inputs are left as they are. The pipeline and the import both use it.
 */
void session_stamp_policies(const struct rx_state *st, const struct toolkit *tools,
                            struct rx_input *in);

/* A title a person may give: not blank, at most SESSION_TITLE_MAX characters. */
bool session_title_is_valid(const char *title);

#endif
