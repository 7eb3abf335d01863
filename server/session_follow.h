/*
 * session_follow - a session another node owns (SPEC 6.1, server/cluster):
 * a replica of its state fed from the committed log, published to this
 * node's subscribers exactly as the owner publishes it (same seq, same event
 * ids), with no effect running; and the two moves between follower and
 * owner.
 *
 * A session is a follower from the moment it is loaded or learnt of on a
 * node of a cluster (session_env.followers) until the node takes it
 * (session_take); a node that loses it (session_drop) follows it again.
 * Inputs from clients are refused on a follower (-EREMOTE): the caller
 * forwards them to the owner (server/api).
 *
 * Depends on server/session, store/store (reads of the log). Each call
 * takes the session's lock (never the table's); reads of the log are made
 * under it, which is fine: a follower takes no input of its own.
 * Ownership: text passed in is borrowed for the call.
 */
#ifndef SESSION_FOLLOW_H
#define SESSION_FOLLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state_machine/rx_common.h"

struct session;
struct session_table;

/* Whether another node owns it (its inputs go there). */
bool session_is_follower(struct session *s);

/*
 * Input `seq` of the log, committed (rx_log): applied and published when it
 * is the next one (text, len: its text; NULL when the notification did not
 * carry it); a later one first catches up from the log; one already here is
 * ignored, as is everything on a session this node owns. 0, or -EPROTO (the
 * log does not fold: the session is reloaded), -EIO, -ENOMEM.
 */
int session_follow_input(struct session *s, int64_t seq, const char *text,
                         size_t len) RX_WUR;
/* Apply whatever the log holds past what this follower has. 0 or an errno. */
int session_follow_catchup(struct session *s) RX_WUR;
/*
 * A streamed delta of answer `mid` from its owner (rx_tok), at byte `offset`
 * of the text (or of the reasoning): what lies past this node's length is
 * appended and sent to its followers; a gap is ignored (the completed answer
 * comes through the log).
 */
void session_follow_token(struct session *s, const char *mid, bool reasoning,
                          size_t offset, const char *delta, size_t len);

/*
 * This node owns it now (its claim committed; or it owned it, and a write
 * that failed while the log could not be read left it broken): reload or
 * catch up from the log, give
 * streaming answers their buffer again (so the brain resumes them under
 * their id) and start the effects its state wants. 0 or an errno (it stays a
 * follower).
 */
int session_take(struct session *s) RX_WUR;
/*
 * This node no longer owns it: cancel its effects and follow the log. Inputs
 * on their way fail their fence and are undone by the pipeline.
 */
void session_drop(struct session *s);

/*
 * The table's side (session_table.c), for rx_sess notifications: a session
 * made on another node is read from the log and listed as a follower (0,
 * -EEXIST when already here, or an errno); one deleted there leaves this
 * table (no store call); a rename is read again from the log.
 */
int session_table_adopt(struct session_table *t, const char *sid) RX_WUR;
void session_table_forget(struct session_table *t, const char *sid);
void session_table_retitle(struct session_table *t, const char *sid);
/*
 * Call fn on every listed session, with a reference held and no table lock
 * (fn may block); the list is taken at the call. 0 or -ENOMEM.
 */
int session_table_each(struct session_table *t, void (*fn)(struct session *, void *),
                       void *arg) RX_WUR;

#endif
