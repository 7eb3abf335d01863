/*
 * oai_wire - the OpenAI Chat Completions wire, pure (SPEC 4.3): a request
 * checked and read, the conversation it carries normalized and fingerprinted
 * (continuity), the earlier turns made into an importable log, the tool
 * activity drawn as Open WebUI's <details type="tool_calls"> block, and the
 * JSON of chunks, completions, model lists and errors.
 *
 * Pure: no I/O, clock, threads or globals. Depends on jansson and
 * state_machine/ only (server/protocols/oai is the HTTP side).
 *
 * Continuity fingerprint: each message counts as (role, text) with the role
 * folded (developer = system, function = tool) and the text normalized:
 * content parts joined, every <details>...</details> block cut out (a client
 * may or may not resend the blocks it was shown) and runs of white space
 * made one space, trimmed. Two 64-bit FNV-1a hashes with different offsets
 * make a 128-bit fingerprint: not a defence against a forger (every client
 * holds the same token), only against accidents.
 *
 * Ownership: struct oai_request is caller-allocated (oai_request_parse fills
 * it, oai_request_release frees it) and owns its strings; the body is
 * borrowed. Encoders append to the caller's buffer and leave it as it was on
 * failure. oai_history_doc returns a NEW reference.
 */
#ifndef OAI_WIRE_H
#define OAI_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"
#include "state_machine/rx_state.h"

/* The most text one completion collects (its content, tool blocks included). */
#define OAI_CONTENT_MAX (16u << 20)
/* Bytes of the message of an error. */
#define OAI_ERR_LEN 512

enum oai_role { OAI_ROLE_SYSTEM, OAI_ROLE_USER, OAI_ROLE_ASSISTANT, OAI_ROLE_TOOL };

struct oai_message {
    enum oai_role role; /* folded: developer is SYSTEM, function is TOOL */
    char *text;         /* string content or text parts joined; "" for null */
};

struct oai_request {
    char *model;
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    struct oai_message *msgs;
    size_t n;
    /* The new turn: msgs[turn..n) are the trailing user messages (n > turn);
       msgs[0..turn) is the history the client resends. */
    size_t turn;
};

/* An answer in OpenAI's error shape, with its HTTP status. */
struct oai_error {
    unsigned status;
    const char *type;  /* static: "invalid_request_error", ... */
    const char *param; /* static or `param_buf`, or NULL */
    const char *code;  /* static, or NULL */
    char param_buf[48];
    char message[OAI_ERR_LEN];
};

/* Fill `e` (may be NULL); returns `err` (a negative errno) for `return` chains. */
int oai_error_set(struct oai_error *e, int err, unsigned status, const char *type,
                  const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/*
 * Read a POST /chat/completions body (`len` bytes, borrowed). Checked: JSON
 * object; `model` a string, one of `models` (404 model_not_found otherwise);
 * `messages` a non-empty array of objects with a known role (system,
 * developer, user, assistant, tool, function) and a content that is a string
 * or an array of {"type":"text","text":s} parts (null only for assistant,
 * tool and function); the last message from the user and not blank;
 * `stream` a boolean; `stream_options` an object whose include_usage is a
 * boolean. Anything else (tools, temperature, ...) is ignored: the agent runs
 * its own tools. 0 and *out filled; -EINVAL with `e` (400 or 404); -ENOMEM
 * (e: 500). On failure *out needs no release.
 */
int oai_request_parse(const char *body, size_t len, const char *const *models,
                      size_t n_models, struct oai_request *out,
                      struct oai_error *e) RX_WUR;
void oai_request_release(struct oai_request *r);

/*
 * The new turn's text: its user messages joined by a blank line (malloc'd).
 * The system prompt: every system message's text joined the same way, or
 * NULL when there is none. NULL on ENOMEM (for the prompt, *oom says which).
 */
char *oai_request_turn(const struct oai_request *r);
char *oai_request_system(const struct oai_request *r, bool *oom);
/* True when the history holds a user or assistant message (something to import). */
bool oai_request_has_turns(const struct oai_request *r);

/* Cut <details> blocks, fold white space, trim (see above). 0, -ENOMEM, -E2BIG. */
int oai_normalize(const char *text, struct rx_buf *out) RX_WUR;

struct oai_fp {
    uint64_t h[2];
};

void oai_fp_init(struct oai_fp *fp);
/* Count one message. 0 or -ENOMEM (fp unchanged). */
int oai_fp_add(struct oai_fp *fp, enum oai_role role, const char *text) RX_WUR;
/* The messages msgs[0..upto) of `r`, from a fresh fingerprint. 0 or -ENOMEM. */
int oai_fp_messages(const struct oai_request *r, size_t upto, struct oai_fp *fp) RX_WUR;
bool oai_fp_equal(const struct oai_fp *a, const struct oai_fp *b);

/*
 * NEW reference: an export document (server/session_import) that rebuilds
 * the history msgs[0..turn): a user-configure with `system` (NULL: none),
 * then each run of user messages as one user-send-message and each run of
 * assistant texts as one brain-send-message-complete answering it, tool
 * blocks cut out; tool messages and blank texts are skipped. Timestamps run
 * from `base_ms`, one millisecond apart. NULL on ENOMEM.
 */
json_t *oai_history_doc(const struct oai_request *r, const char *system, int64_t base_ms);

/*
 * Append one tool call as Open WebUI draws it: <details type="tool_calls"
 * done="true|false" id name arguments result> (attributes JSON strings,
 * HTML-escaped) with a <summary> and a plain list (tool, arguments, result)
 * that other clients show as text. A call waiting for a person says so
 * (done="false"). 0, -ENOMEM or -E2BIG (b as it was).
 */
int oai_render_tool(struct rx_buf *b, const struct rx_tool_call *c) RX_WUR;
/*
 * The sentence for a call waiting for a person (plain text, no block): what
 * waits (the tool, its arguments) and, from `where` (borrowed, appended as
 * is: oai_render_where makes it), where to answer it.
 */
int oai_render_waiting(struct rx_buf *b, const struct rx_tool_call *c,
                       const char *where) RX_WUR;

/* What every chunk and completion repeats. Borrowed strings. */
struct oai_head {
    const char *id;  /* "chatcmpl-..." */
    int64_t created; /* Unix seconds */
    const char *model;
};

struct oai_usage {
    int64_t prompt_tokens, completion_tokens;
};

enum oai_chunk_kind {
    OAI_CHUNK_ROLE,      /* delta {"role":"assistant","content":""} */
    OAI_CHUNK_CONTENT,   /* delta {"content": text} */
    OAI_CHUNK_REASONING, /* delta {"reasoning_content": text} */
    OAI_CHUNK_STOP,      /* delta {}, finish_reason "stop" */
};

/* Append a chat.completion.chunk (JSON only; the SSE frame is the caller's). */
int oai_chunk_encode(struct rx_buf *b, const struct oai_head *h, enum oai_chunk_kind kind,
                     const char *text, size_t len) RX_WUR;
/* The stream_options.include_usage chunk: "choices":[] and "usage". */
int oai_usage_chunk_encode(struct rx_buf *b, const struct oai_head *h,
                           const struct oai_usage *u) RX_WUR;
/* A chat.completion with one choice (finish_reason "stop") and usage. */
int oai_completion_encode(struct rx_buf *b, const struct oai_head *h, const char *content,
                          size_t len, const struct oai_usage *u) RX_WUR;
/* {"error":{"message","type","param","code"}}. */
int oai_error_encode(struct rx_buf *b, const struct oai_error *e) RX_WUR;
/* A model object, or the list of them, owned_by "reflexor". */
int oai_model_encode(struct rx_buf *b, const char *id, int64_t created) RX_WUR;
int oai_models_encode(struct rx_buf *b, const char *const *models, size_t n,
                      int64_t created) RX_WUR;

#endif
