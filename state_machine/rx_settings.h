/*
 * rx_settings - a session's own brain settings (SPEC 3.1 `settings`, set by
 * the user-configure input of 3.2): the system prompt, the model and the
 * temperature a brain uses for the session's later asks, each absent when the
 * server's default applies.
 *
 * Pure: no I/O, clock, threads or globals. Depends on rx_buf, rx_alloc
 * (allocation) and jansson only.
 * rx_state.h and rx_input.h include this header: the struct is part of both.
 *
 * Invariants (rx_settings_check): `model` is NULL or 1 to RX_SETTINGS_MODEL_MAX
 * bytes; `temperature` is within 0..RX_SETTINGS_TEMPERATURE_MAX (and never -0)
 * when has_temperature, else 0. A `system_prompt` of "" is a choice (no system
 * prompt at all), not an absence.
 * Wire (rx_settings_encode): {"systemPrompt":s,"model":s,"temperature":n}, in
 * that order, a key only when set; the temperature in the shortest text that
 * reads back as the same double, so encode -> decode -> encode is exact.
 * Ownership: struct rx_settings is caller-allocated (rx_settings_init /
 * _release) and owns its strings. json_t values given to it are borrowed.
 */
#ifndef RX_SETTINGS_H
#define RX_SETTINGS_H

#include <stdbool.h>

#include <jansson.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"

/* Longest model name: a name, not a text. */
#define RX_SETTINGS_MODEL_MAX 256
/* The temperature's range (OpenAI's): 0 to this. */
#define RX_SETTINGS_TEMPERATURE_MAX 2.0

/* Which settings an input names (user-configure); a named one unset clears. */
enum {
    RX_SETTING_SYSTEM_PROMPT = 1 << 0,
    RX_SETTING_MODEL = 1 << 1,
    RX_SETTING_TEMPERATURE = 1 << 2,
};
#define RX_SETTINGS_ALL                                                                  \
    (RX_SETTING_SYSTEM_PROMPT | RX_SETTING_MODEL | RX_SETTING_TEMPERATURE)

struct rx_settings {
    char *system_prompt; /* NULL: the server's system prompt */
    char *model;         /* NULL: the brain's configured model */
    bool has_temperature;
    double temperature; /* when has_temperature; else the brain's own */
};

/* Everything absent. */
void rx_settings_init(struct rx_settings *st);
/* Free the strings; the settings are absent again. */
void rx_settings_release(struct rx_settings *st);
/* Deep copy into dst (initialised here). 0, or -ENOMEM with dst absent. */
int rx_settings_copy(const struct rx_settings *src, struct rx_settings *dst) RX_WUR;
/* True when both say the same (strings compared, absent == absent). */
bool rx_settings_equal(const struct rx_settings *a, const struct rx_settings *b);
/* True when nothing is set. */
bool rx_settings_is_empty(const struct rx_settings *st);

/*
 * The field of `change` that breaks an invariant among those `named`
 * ("systemPrompt" is never one), or NULL when they are fine.
 */
const char *rx_settings_invalid(const struct rx_settings *change, unsigned named);
/*
 * `base` with the `named` fields taken from `change` (absent there: cleared),
 * into dst (initialised here). 0, or -ENOMEM with dst absent.
 */
int rx_settings_merge(const struct rx_settings *base, const struct rx_settings *change,
                      unsigned named, struct rx_settings *dst) RX_WUR;

/*
 * Read "systemPrompt", "model" and "temperature" from the object `obj`
 * (borrowed): a key absent is not named, null is named and unset, a value is
 * named and set. 0 with *out (initialised here) and *named (may be NULL);
 * -EINVAL with *field (may be NULL) the offending key and `err` (may be NULL)
 * a sentence naming it; -ENOMEM. On failure *out needs no release.
 */
int rx_settings_read(json_t *obj, struct rx_settings *out, unsigned *named,
                     const char **field, struct rx_error *err) RX_WUR;
/*
 * The state's `settings` (borrowed): NULL (absent in snapshots older than
 * settings) or null gives none; else an object as rx_settings_read takes it.
 * 0, -EINVAL (err names the field) or -ENOMEM; on failure *out is absent.
 */
int rx_settings_decode(json_t *json, struct rx_settings *out,
                       struct rx_error *err) RX_WUR;

/* Append the wire object (see above). 0, -ENOMEM or -E2BIG (b as it was). */
int rx_settings_encode(const struct rx_settings *st, struct rx_buf *b) RX_WUR;
/*
 * Append `,"key":value` for each `named` field in wire order, null for one
 * unset (an input's clear). 0, -ENOMEM or -E2BIG (b as it was).
 */
int rx_settings_encode_named(const struct rx_settings *st, unsigned named,
                             struct rx_buf *b) RX_WUR;

/* True when the invariants above hold. */
bool rx_settings_check(const struct rx_settings *st);

#endif
