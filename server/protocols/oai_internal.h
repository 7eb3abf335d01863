/*
 * oai_internal - what server/protocols/oai.c (routes, sessions, continuity) and
 * server/protocols/oai_chat.c (one chat completion: its run, its stream or its park)
 * share. Private to server/protocols/oai*.
 * Depends on libmicrohttpd, server/door, server/park,
 * server/protocols/oai_memo and oai_wire, and state_machine/.
 *
 * Ownership: `in` given to oai__chat_start is moved in (released on every
 * path); the session, the request and the memo are borrowed.
 */
#ifndef OAI_INTERNAL_H
#define OAI_INTERNAL_H

#include <microhttpd.h>

#include "server/door.h"
#include "server/protocols/oai_memo.h"
#include "server/protocols/oai_wire.h"
#include "server/park.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_input.h"

/* The header that names a session, in a request and in every chat answer. */
#define OAI_SESSION_HEADER "X-Reflexor-Session"

/* An error in OpenAI's shape with e->status; `sid` (may be NULL) as the header. */
enum MHD_Result oai__reply_error(struct MHD_Connection *conn, const struct oai_error *e,
                                 const char *sid);
/* JSON bytes in `b` (taken, left empty) with `status`; `sid` as above. */
enum MHD_Result oai__reply_buf(struct MHD_Connection *conn, unsigned status,
                               struct rx_buf *b, const char *sid);

/*
 * Run the `n` inputs on `s` and answer the request with the run's content:
 * a stream of chunks at once (req->stream), or, parked until the run ends,
 * one chat.completion. When the run ends, the conversation (the request's
 * messages, fingerprinted in `fp`, and the answer) is remembered in `memo`.
 */
/* 429 in OpenAI's shape (rate_limit_error), with Retry-After: retry_s. */
enum MHD_Result oai__too_many(struct MHD_Connection *conn, const char *why, int retry_s);

enum MHD_Result oai__chat_start(struct door *srv, struct MHD_Connection *conn,
                                struct session *s, struct oai_memo *memo,
                                const struct oai_request *req, const struct oai_fp *fp,
                                struct rx_input *in, size_t n, struct park **slot);

#endif
