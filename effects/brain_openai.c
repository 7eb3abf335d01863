/*
 * brain_openai - the OpenAI-compatible brain over libcurl. See brain_openai.h.
 */
#include "effects/brain_openai.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/idgen.h"
#include "effects/log.h"
#include "base/now.h"
#include "effects/openai_config.h"
#include "effects/openai_http.h"
#include "effects/openai_stream.h"
#include "effects/toolkit.h"
#include "state_machine/rx_alloc.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_context.h"
#include "state_machine/rx_machine.h"
#include "state_machine/rx_json.h"

/* A model that keeps loading old calls instead of answering is stopped here. */
#define LOAD_ROUNDS_MAX 8

#define SUMMARY_SYSTEM                                                                   \
    "You summarise conversations between a user and an assistant so that the "           \
    "assistant can continue them without the original messages."
#define SUMMARY_REQUEST                                                                  \
    "Summarise the conversation above in a few short paragraphs. Keep every fact, "      \
    "name, number, decision, open question and tool result that may matter later. "      \
    "Reply with the summary only."
#define LOAD_TOOL_DESCRIPTION                                                            \
    "Load an earlier tool call that is listed as not loaded, with its result, back "     \
    "into the conversation."

struct brain_openai {
    struct brain base; /* first: a struct brain * is a struct brain_openai * */
    const struct toolkit *tools;
    struct openai_config cfg;
};

/* One ask: its own copy of the ask's view, with the inputs it dispatched applied. */
struct oa_ask {
    struct brain_openai *b;
    struct brain_ask *ask;
    struct rx_state st;
    char msg_id[RX_ID_MAX + 1]; /* the message being streamed, "" before the first text */
    struct rx_buf text;         /* its whole text so far */
    struct rx_buf reasoning;    /* its reasoning so far */
    struct rx_usage usage;      /* tokens of the answer's requests, summed */
    bool has_first_token_at;
    int64_t first_token_at; /* now_wall_ms() of its first text or reasoning */
    json_t *notes;          /* system notes for follow-up requests (bad load ids) */
    bool relay;             /* this request's text is the answer (not a summary) */
    bool prefix;    /* continue `text` (the text shown, SPEC 3.7): a trailing assistant */
    bool restarted; /* asked again after the text shown: the message says so */
};

/* ---- the brain ------------------------------------------------------------ */

static bool env_set(const char *name)
{
    const char *v = getenv(name);

    return v && *v;
}

bool brain_openai_env_selected(void)
{
    return env_set("OPENAI_API_KEY") || env_set("REFLEXOR_LLM_BASE_URL");
}

static void oa_destroy(struct brain *self)
{
    struct brain_openai *b = (struct brain_openai *)self;

    if (!b)
        return;
    openai_config_release(&b->cfg);
    free(b);
}

static int oa_ask(struct brain *self, struct brain_ask *ask);

struct brain *brain_openai_create(json_t *config, const struct toolkit *tools,
                                  struct rx_error *err)
{
    struct brain_openai *b = calloc(1, sizeof(*b));

    if (!b) {
        rx_error_set(err, -ENOMEM, "brain.openai: out of memory");
        return NULL;
    }
    if (openai_config_parse(config, &b->cfg, err)) {
        free(b);
        return NULL;
    }
    b->base.name = "openai";
    b->base.view_messages = rx_context_view_messages(&b->cfg.budget);
    b->base.ask = oa_ask;
    b->base.destroy = oa_destroy;
    b->tools = tools;
    return &b->base;
}

/* ---- inputs ---------------------------------------------------------------- */

/*
 * Hand an input to the session, then apply it to our copy of the state with
 * the same pure transition, so the next request of this ask is built from
 * what the session now holds. The local timestamp only has to be monotonic:
 * items after signals_cut_at never enter this ask's context anyway.
 */
static int dispatch(struct oa_ask *ax, struct rx_input *in)
{
    struct rx_outcome outcome;
    int rc;

    in->called_brain_at = ax->ask->signals_cut_at;
    rc = ax->ask->dispatch(ax->ask, in);
    if (rc)
        return rc;
    in->timestamp = ax->st.updated_at > in->cut_at ? ax->st.updated_at : in->cut_at;
    in->has_timestamp = true;
    if (rx_machine_apply(&ax->st, in, &outcome))
        return -ENOMEM;
    return 0;
}

static int dispatch_start(struct oa_ask *ax)
{
    struct rx_input in = {.type = RX_IN_BRAIN_SEND_MESSAGE_START};
    char id[37];
    int rc;

    idgen_uuid(id);
    rc = rx_input_set_str(&in.message_id, id);
    rc = rc ? rc : dispatch(ax, &in);
    rx_input_release(&in);
    if (!rc)
        snprintf(ax->msg_id, sizeof(ax->msg_id), "%s", id);
    return rc;
}

static bool has_resume(const struct oa_ask *ax)
{
    return ax->ask->resume_message_id && *ax->ask->resume_message_id;
}

/*
 * Complete the message being streamed (or the resumed one, which must end
 * even when this reply has no text), or append a complete one (no start).
 */
static int dispatch_complete(struct oa_ask *ax, const char *content)
{
    struct rx_input in = {.type = RX_IN_BRAIN_SEND_MESSAGE_COMPLETE};
    char id[37];
    int rc;

    if (!*ax->msg_id && has_resume(ax)) {
        snprintf(ax->msg_id, sizeof(ax->msg_id), "%s", ax->ask->resume_message_id);
    } else if (!*ax->msg_id) {
        idgen_uuid(id);
        snprintf(ax->msg_id, sizeof(ax->msg_id), "%s", id);
    }
    rc = rx_input_set_str(&in.message_id, ax->msg_id);
    rc = rc ? rc : rx_input_set_str(&in.content, content);
    /* What the answer cost and thought go with it (SPEC 3.1). */
    if (!rc && ax->reasoning.len)
        rc = rx_input_set_str(&in.reasoning, ax->reasoning.data);
    in.usage = ax->usage;
    in.has_first_token_at = ax->has_first_token_at;
    in.first_token_at = ax->first_token_at;
    in.restarted = ax->restarted;
    rc = rc ? rc : dispatch(ax, &in);
    rx_input_release(&in);
    return rc;
}

/* The first text of an answer opens its message (or resumes the known one). */
static int open_message(struct oa_ask *ax)
{
    if (*ax->msg_id)
        return 0;
    if (has_resume(ax)) {
        snprintf(ax->msg_id, sizeof(ax->msg_id), "%s", ax->ask->resume_message_id);
        return 0;
    }
    return dispatch_start(ax);
}

/* End the answer with "[Error] why", after whatever text was streamed. */
static int finish_error(struct oa_ask *ax, const char *why)
{
    struct rx_buf suffix;
    int rc;

    /* The person sees it in the answer; the operator must see it in the log
       (a bad key, a refused connection, a model that does not exist). */
    log_warn("openai brain: %s", why);
    rx_buf_init(&suffix, RX_BUF_SMALL_MAX);
    rc = rx_buf_printf(&suffix, "%s[Error] %s", ax->text.len ? "\n\n" : "", why);
    if (!rc && *ax->msg_id &&
        ax->ask->chunk(ax->ask, ax->msg_id, suffix.data) == -ECANCELED)
        rc = -ECANCELED;
    rc = rc ? rc : rx_buf_append(&ax->text, suffix.data, suffix.len);
    rc = rc ? rc : dispatch_complete(ax, ax->text.data);
    rx_buf_release(&suffix);
    return rc == -E2BIG ? -ENOMEM : rc;
}

/* ---- one HTTP exchange: relaying the answer ------------------------------------ */

/* The first text or reasoning of the answer: its message opens, the clock is read. */
static int first_text(struct oa_ask *ax)
{
    if (!ax->has_first_token_at) {
        ax->has_first_token_at = true;
        ax->first_token_at = now_wall_ms();
    }
    return open_message(ax);
}

/* Text or reasoning: kept for the complete, relayed live on its own channel.
   -ENOENT from the relay (nobody buffers this message) is not our failure. */
static int relay(struct oa_ask *ax, struct rx_buf *keep, const char *delta, size_t len,
                 int (*send)(struct brain_ask *, const char *, const char *))
{
    int rc;

    if (!ax->relay)
        return 0;
    rc = first_text(ax);
    if (rc)
        return rc;
    rc = rx_buf_append(keep, delta, len);
    if (rc || !send)
        return rc;
    return send(ax->ask, ax->msg_id, delta) == -ECANCELED ? -ECANCELED : 0;
}

static int on_content(void *ctx, const char *delta, size_t len)
{
    struct oa_ask *ax = ctx;

    return relay(ax, &ax->text, delta, len, ax->ask->chunk);
}

static int on_reasoning(void *ctx, const char *delta, size_t len)
{
    struct oa_ask *ax = ctx;

    return relay(ax, &ax->reasoning, delta, len, ax->ask->reasoning);
}

/* Add a reply's "usage" (prompt_tokens, completion_tokens) to the answer's. */
static void add_usage(struct oa_ask *ax, json_t *usage)
{
    json_t *p = json_object_get(usage, "prompt_tokens");
    json_t *c = json_object_get(usage, "completion_tokens");

    if (!json_is_integer(p) || !json_is_integer(c) || json_integer_value(p) < 0 ||
        json_integer_value(c) < 0)
        return;
    ax->usage.present = true;
    ax->usage.prompt_tokens += json_integer_value(p);
    ax->usage.completion_tokens += json_integer_value(c);
}

/*
 * POST `req` (borrowed). *x is initialised here and released by the caller
 * in every case. 0, -ECANCELED, -ENOMEM, or -EIO with `why` the reason for
 * the "[Error]" answer.
 */
static int request(struct oa_ask *ax, json_t *req, struct openai_http *x,
                   struct rx_error *why)
{
    char *body = json_dumps(req, JSON_COMPACT);
    int rc;

    openai_http_init(x, on_content, ax);
    openai_http_on_reasoning(x, on_reasoning);
    if (!body)
        return -ENOMEM;
    rc = openai_http_post(x, &ax->b->cfg.http, ax->ask, body, why);
    free(body);
    return rc;
}

/* ---- requests ------------------------------------------------------------------- */

/* The tools array: the toolkit's schemas, plus load_tool_call when useful. */
static json_t *tools_json(struct oa_ask *ax)
{
    json_t *tools = ax->b->tools ? toolkit_schemas(ax->b->tools) : json_array();

    if (tools && rx_context_has_unloaded(&ax->st, ax->ask->signals_cut_at) &&
        json_array_append_new(
            tools,
            json_pack("{s:s, s:{s:s, s:s, s:{s:s, s:{s:{s:s, s:s}}, s:[s]}}}", "type",
                      "function", "function", "name", BRAIN_OPENAI_LOAD_TOOL,
                      "description", LOAD_TOOL_DESCRIPTION, "parameters", "type",
                      "object", "properties", "toolCallId", "type", "string",
                      "description", "the id of the earlier tool call", "required",
                      "toolCallId"))) {
        json_decref(tools);
        return NULL;
    }
    return tools;
}

/*
 * The request body around `msgs` (stolen). With `summary`, the tools are
 * still declared (the history may hold tool calls, which some servers only
 * accept next to their declarations) but tool_choice "none" forbids calls.
 */
static json_t *request_json(struct oa_ask *ax, json_t *msgs, bool summary)
{
    const struct openai_config *b = &ax->b->cfg;
    const struct rx_settings *set = &ax->st.settings;
    /* The session's settings (user-configure) over the configured ones. */
    bool has_temperature = set->has_temperature || b->has_temperature;
    double temperature = set->has_temperature ? set->temperature : b->temperature;
    json_t *req =
        json_pack("{s:s, s:o, s:b, s:{s:b}}", "model", set->model ? set->model : b->model,
                  "messages", msgs, "stream", 1, "stream_options", "include_usage", 1);
    json_t *tools;

    if (!req)
        return NULL;
    if ((has_temperature &&
         json_object_set_new(req, "temperature", json_real(temperature))) ||
        (b->max_tokens &&
         json_object_set_new(req, "max_tokens", json_integer(b->max_tokens))))
        goto out_decref;
    tools = tools_json(ax);
    if (!tools)
        goto out_decref;
    if (!json_array_size(tools)) {
        json_decref(tools);
        return req;
    }
    if (json_object_set_new(req, "tools", tools) ||
        (summary && json_object_set_new(req, "tool_choice", json_string("none"))))
        goto out_decref;
    return req;

out_decref:
    json_decref(req);
    return NULL;
}

static int build_context(struct oa_ask *ax, int64_t cut, json_t **out)
{
    json_t *msgs;
    int rc = rx_context_build(&ax->st, ax->ask->system_prompt, cut, &msgs);

    if (rc)
        return rc;
    if (json_array_extend(msgs, ax->notes) ||
        (ax->prefix && ax->relay &&
         json_array_append_new(msgs,
                               json_pack("{s:s, s:s%}", "role", "assistant", "content",
                                         ax->text.data, ax->text.len)))) {
        json_decref(msgs);
        return -ENOMEM;
    }
    *out = msgs;
    return 0;
}

/* ---- context compression -------------------------------------------------------- */

/*
 * When the policy of rx_context says so (estimated tokens of the history over
 * context_budget), summarise what is before its cut and dispatch
 * brain-compress-history.
 * A summary that cannot be had (provider error, empty reply) is not fatal:
 * the answer goes ahead on the whole context and reports its own errors.
 */
static int maybe_compress(struct oa_ask *ax)
{
    json_t *msgs = NULL, *req = NULL;
    struct rx_input in = {.type = RX_IN_BRAIN_COMPRESS_HISTORY};
    struct openai_http x;
    struct rx_error why = {""};
    int64_t cut;
    int rc;

    rc =
        rx_context_choose_cut(&ax->st, ax->ask->signals_cut_at, &ax->b->cfg.budget, &cut);
    if (rc || cut == RX_CONTEXT_NO_CUT)
        return rc;
    rc = rx_context_build(&ax->st, NULL, cut, &msgs);
    if (rc)
        return rc;
    if (json_array_insert_new(
            msgs, 0,
            json_pack("{s:s, s:s}", "role", "system", "content", SUMMARY_SYSTEM)) ||
        json_array_append_new(
            msgs, json_pack("{s:s, s:s}", "role", "user", "content", SUMMARY_REQUEST))) {
        json_decref(msgs);
        return -ENOMEM;
    }
    req = request_json(ax, msgs, true);
    if (!req)
        return -ENOMEM;
    ax->relay = false;
    rc = request(ax, req, &x, &why);
    ax->relay = true;
    if (rc == -EIO || (!rc && !x.stream.content.len)) {
        rc = 0;
        goto out_release;
    }
    if (rc)
        goto out_release;
    in.cut_at = cut;
    rc = rx_input_set_str(&in.text, x.stream.content.data);
    rc = rc ? rc : dispatch(ax, &in);
    /* A rejected compression (the session moved on) leaves the context whole. */
    if (rc == -EPROTO)
        rc = 0;
    rx_input_release(&in);

out_release:
    openai_http_release(&x);
    json_decref(req);
    return rc;
}

/* ---- answering --------------------------------------------------------------------- */

/*
 * A provider id we can use: unique in this reply and in the session. The view
 * holds only recent calls, so an id it does not know is looked up in the
 * session itself (one indexed lookup under its lock).
 */
static bool id_usable(const struct oa_ask *ax, const struct rx_input *in, const char *id)
{
    if (!id || !*id || strlen(id) > RX_ID_MAX || rx_state_find_tool(&ax->st, id))
        return false;
    for (size_t i = 0; i < in->n_calls; i++)
        if (!strcmp(in->calls[i].id, id))
            return false;
    return !ax->ask->tool_exists || !ax->ask->tool_exists(ax->ask, id);
}

static int add_call(struct oa_ask *ax, struct rx_input *in,
                    const struct openai_stream_call *c)
{
    struct rx_input_call *calls, call = {0};
    char gen[42] = "call_";
    bool usable = id_usable(ax, in, c->id);

    if (!usable)
        idgen_uuid(gen + 5);
    call.id = rx_strdup(usable ? c->id : gen);
    call.name = rx_strdup(c->name ? c->name : "");
    /* Blank arguments mean none; anything else goes as sent, valid or not. */
    call.parameters = rx_strdup(c->args.len ? c->args.data : "{}");
    calls = rx_realloc(in->calls, in->n_calls * sizeof(*calls),
                       (in->n_calls + 1) * sizeof(*calls));
    if (!call.id || !call.name || !call.parameters || !calls) {
        rx_free(call.id);
        rx_free(call.name);
        rx_free(call.parameters);
        if (calls)
            in->calls = calls;
        return -ENOMEM;
    }
    in->calls = calls;
    in->calls[in->n_calls++] = call;
    return 0;
}

/*
 * A load_tool_call: dispatch brain-load-tool-call for an id of the view (the
 * context lists the older calls it holds); for any other, tell the model in a
 * note of the follow-up request instead of loading what the context would not
 * show.
 */
static int load_call(struct oa_ask *ax, const struct openai_stream_call *c)
{
    json_t *args = NULL;
    const char *id;
    struct rx_input in = {.type = RX_IN_BRAIN_LOAD_TOOL_CALL};
    char note[RX_ID_MAX + 96];
    int rc;

    if (rx_json_parse(c->args.data, c->args.len, 0, &args, NULL))
        args = NULL; /* no id: the note below says so */
    id = json_string_value(json_object_get(args, "toolCallId"));

    if (!id || !rx_state_find_tool(&ax->st, id)) {
        snprintf(note, sizeof(note),
                 "load_tool_call: there is no earlier tool call '%.*s'", RX_ID_MAX,
                 id ? id : (c->args.data ? c->args.data : ""));
        json_decref(args);
        return json_array_append_new(
                   ax->notes, json_pack("{s:s, s:s}", "role", "system", "content", note))
                   ? -ENOMEM
                   : 0;
    }
    rc = rx_input_set_str(&in.tool_call_id, id);
    rc = rc ? rc : dispatch(ax, &in);
    rx_input_release(&in);
    json_decref(args);
    return rc;
}

/*
 * One request of the answer. *again is set when the reply only loaded old
 * calls: the caller asks again with them in the context.
 */
static int answer_round(struct oa_ask *ax, bool *again)
{
    struct rx_input in = {.type = RX_IN_BRAIN_CALL_TOOLS};
    json_t *msgs, *req;
    struct openai_http x;
    struct rx_error why = {""};
    size_t loads = 0;
    int rc;

    *again = false;
    rc = build_context(ax, ax->ask->signals_cut_at, &msgs);
    if (rc)
        return rc;
    req = request_json(ax, msgs, false);
    if (!req)
        return -ENOMEM;
    rc = request(ax, req, &x, &why);
    if (rc == -EIO) {
        rc = finish_error(ax, why.text);
        goto out_release;
    }
    if (rc)
        goto out_release;
    add_usage(ax, x.stream.usage);
    for (size_t i = 0; i < x.stream.n_calls && !rc; i++) {
        const struct openai_stream_call *c = &x.stream.calls[i];

        if (c->name && !strcmp(c->name, BRAIN_OPENAI_LOAD_TOOL)) {
            loads++;
            rc = load_call(ax, c);
        } else {
            rc = add_call(ax, &in, c);
        }
    }
    if (rc)
        goto out_release;
    if (loads && !in.n_calls) {
        *again = true; /* the message (if any) stays open for the next reply */
        goto out_release;
    }
    if (*ax->msg_id || has_resume(ax) || (!in.n_calls && ax->text.len)) {
        rc = dispatch_complete(ax, ax->text.data ? ax->text.data : "");
    } else if (!in.n_calls) {
        rc = finish_error(ax, "the model returned an empty reply");
    }
    if (!rc && in.n_calls) {
        /* Said here, where the reason is known: the session would only refuse. */
        bool deep = !rx_input_calls_depth_ok(&in);

        rc = deep ? -EPROTO : dispatch(ax, &in);
        if (rc == -EPROTO) {
            *ax->msg_id = '\0';
            rx_buf_reset(&ax->text);
            rc = deep ? finish_error(ax, "the model's tool arguments nest deeper than "
                                         "64 levels; not run")
                      : finish_error(ax, "the session refused the tool calls (they do "
                                         "not apply to its state)");
        }
    }

out_release:
    rx_input_release(&in);
    openai_http_release(&x);
    json_decref(req);
    return rc;
}

/* What a restarted answer shows before its new text (brain.openai.continue false). */
#define RESTART_MARK "\n\n--- restarted after an interruption ---\n\n"

/*
 * An answer cut off by a crash or a takeover (SPEC 3.7) keeps the text
 * shown: the answer's text starts with it. With `continue`, the model is
 * asked to continue it (a trailing assistant message, build_context);
 * otherwise it answers again after a visible mark.
 */
static int resume(struct oa_ask *ax)
{
    const struct brain_ask *ask = ax->ask;
    int rc;

    if (!has_resume(ax) || !ask->resume_text || !ask->resume_len)
        return 0;
    snprintf(ax->msg_id, sizeof(ax->msg_id), "%s", ask->resume_message_id);
    if ((rc = rx_buf_append(&ax->text, ask->resume_text, ask->resume_len)))
        return rc == -E2BIG ? -ENOMEM : rc;
    if (ax->b->cfg.cont) {
        ax->prefix = true;
        return 0;
    }
    /* The message says so ("restarted": true), and so does its text. */
    ax->restarted = true;
    if ((rc = rx_buf_append(&ax->text, RESTART_MARK, strlen(RESTART_MARK))))
        return rc == -E2BIG ? -ENOMEM : rc;
    return ax->ask->chunk(ax->ask, ax->msg_id, RESTART_MARK) == -ECANCELED ? -ECANCELED
                                                                           : 0;
}

static int oa_ask(struct brain *self, struct brain_ask *ask)
{
    struct oa_ask ax = {.b = (struct brain_openai *)self, .ask = ask, .relay = true};
    bool again = true;
    int rc;

    rx_buf_init(&ax.text, OPENAI_STREAM_CONTENT_MAX);
    rx_buf_init(&ax.reasoning, OPENAI_STREAM_CONTENT_MAX);
    /* The view is small (rx_context_view): copying it is not copying the session. */
    rc = rx_state_copy(ask->view, &ax.st);
    if (rc)
        return rc;
    ax.notes = json_array();
    rc = ax.notes ? maybe_compress(&ax) : -ENOMEM;
    if (!rc)
        rc = resume(&ax);
    for (int round = 0; !rc && again; round++) {
        if (round == LOAD_ROUNDS_MAX) {
            rc = finish_error(&ax, "the model kept loading earlier tool calls");
            break;
        }
        rc = answer_round(&ax, &again);
    }
    json_decref(ax.notes);
    rx_buf_release(&ax.text);
    rx_buf_release(&ax.reasoning);
    rx_state_release(&ax.st);
    /* A dispatch refused because the ask was cancelled is a cancel too. */
    return rc == -ECANCELED ? -ECANCELED : rc;
}
