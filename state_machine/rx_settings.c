/*
 * rx_settings - a session's brain settings. See rx_settings.h.
 */
#include "state_machine/rx_settings.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state_machine/rx_alloc.h"

void rx_settings_init(struct rx_settings *st)
{
    memset(st, 0, sizeof(*st));
}

void rx_settings_release(struct rx_settings *st)
{
    rx_free(st->system_prompt);
    rx_free(st->model);
    rx_settings_init(st);
}

static int dup_opt(char **dst, const char *src)
{
    *dst = src ? rx_strdup(src) : NULL;
    return src && !*dst ? -ENOMEM : 0;
}

int rx_settings_copy(const struct rx_settings *src, struct rx_settings *dst)
{
    struct rx_settings t = *src;

    if (dup_opt(&t.system_prompt, src->system_prompt)) {
        rx_settings_init(dst);
        return -ENOMEM;
    }
    if (dup_opt(&t.model, src->model)) {
        rx_free(t.system_prompt);
        rx_settings_init(dst);
        return -ENOMEM;
    }
    *dst = t;
    return 0;
}

static bool str_equal(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

bool rx_settings_equal(const struct rx_settings *a, const struct rx_settings *b)
{
    return str_equal(a->system_prompt, b->system_prompt) &&
           str_equal(a->model, b->model) && a->has_temperature == b->has_temperature &&
           (!a->has_temperature || a->temperature == b->temperature);
}

bool rx_settings_is_empty(const struct rx_settings *st)
{
    return !st->system_prompt && !st->model && !st->has_temperature;
}

static bool temperature_ok(double t)
{
    /* Written as a range test so that a NaN fails it too. */
    return t >= 0 && t <= RX_SETTINGS_TEMPERATURE_MAX;
}

const char *rx_settings_invalid(const struct rx_settings *change, unsigned named)
{
    if ((named & RX_SETTING_MODEL) && change->model &&
        (!*change->model || strlen(change->model) > RX_SETTINGS_MODEL_MAX))
        return "model";
    if ((named & RX_SETTING_TEMPERATURE) && change->has_temperature &&
        !temperature_ok(change->temperature))
        return "temperature";
    return NULL;
}

int rx_settings_merge(const struct rx_settings *base, const struct rx_settings *change,
                      unsigned named, struct rx_settings *dst)
{
    struct rx_settings t;

    rx_settings_init(&t);
    if (dup_opt(&t.system_prompt, named & RX_SETTING_SYSTEM_PROMPT
                                      ? change->system_prompt
                                      : base->system_prompt) ||
        dup_opt(&t.model, named & RX_SETTING_MODEL ? change->model : base->model)) {
        rx_settings_release(&t);
        rx_settings_init(dst);
        return -ENOMEM;
    }
    if (named & RX_SETTING_TEMPERATURE) {
        t.has_temperature = change->has_temperature;
        t.temperature = change->has_temperature ? change->temperature : 0;
    } else {
        t.has_temperature = base->has_temperature;
        t.temperature = base->temperature;
    }
    *dst = t;
    return 0;
}

/* ---- reading ----------------------------------------------------------------- */

static int bad(const char **field, struct rx_error *err, const char *key, const char *why)
{
    if (field)
        *field = key;
    return rx_error_set(err, -EINVAL, "'%s' %s", key, why);
}

/* A string setting: absent (not named), null (named, unset) or a string. */
static int read_str(json_t *obj, const char *key, char **out, bool *named,
                    const char **field, struct rx_error *err)
{
    json_t *v = json_object_get(obj, key);

    *named = v != NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return bad(field, err, key, "must be a string or null");
    /* A NUL would cut the text silently once it is a C string. */
    if (strlen(json_string_value(v)) != json_string_length(v))
        return bad(field, err, key, "must not contain \\u0000");
    *out = rx_strndup(json_string_value(v), json_string_length(v));
    return *out ? 0 : -ENOMEM;
}

int rx_settings_read(json_t *obj, struct rx_settings *out, unsigned *named,
                     const char **field, struct rx_error *err)
{
    struct rx_settings t;
    json_t *temp = json_object_get(obj, "temperature");
    bool n_prompt, n_model;
    unsigned mask = 0;
    int rc;

    rx_settings_init(&t);
    rx_settings_init(out);
    if ((rc = read_str(obj, "systemPrompt", &t.system_prompt, &n_prompt, field, err)) ||
        (rc = read_str(obj, "model", &t.model, &n_model, field, err)))
        goto out_release;
    if (t.model && (!*t.model || strlen(t.model) > RX_SETTINGS_MODEL_MAX)) {
        rc = bad(field, err, "model", "must be 1 to 256 bytes long (null clears it)");
        goto out_release;
    }
    if (temp && !json_is_null(temp)) {
        if (!json_is_number(temp) || !temperature_ok(json_number_value(temp))) {
            rc = bad(field, err, "temperature", "must be a number from 0 to 2 or null");
            goto out_release;
        }
        t.has_temperature = true;
        /* -0 would encode as "-0" and read back as the integer 0. */
        t.temperature = json_number_value(temp) == 0 ? 0 : json_number_value(temp);
    }
    mask = (n_prompt ? RX_SETTING_SYSTEM_PROMPT : 0) | (n_model ? RX_SETTING_MODEL : 0) |
           (temp ? RX_SETTING_TEMPERATURE : 0);
    if (named)
        *named = mask;
    *out = t;
    return 0;

out_release:
    rx_settings_release(&t);
    return rc;
}

int rx_settings_decode(json_t *json, struct rx_settings *out, struct rx_error *err)
{
    rx_settings_init(out);
    if (!json || json_is_null(json))
        return 0;
    if (!json_is_object(json))
        return bad(NULL, err, "settings", "must be an object");
    return rx_settings_read(json, out, NULL, NULL, err);
}

/* ---- encoding ---------------------------------------------------------------- */

/*
 * The shortest decimal text that reads back as `v` (at most 17 digits
 * always do), with a '.' whatever the locale's decimal point.
 */
static int put_number(struct rx_buf *b, double v)
{
    char text[40];

    for (int digits = 1; digits <= 17; digits++) {
        snprintf(text, sizeof(text), "%.*g", digits, v);
        if (strtod(text, NULL) == v)
            break;
    }
    for (char *p = text; *p; p++)
        if (*p == ',')
            *p = '.';
    return rx_buf_puts(b, text);
}

static int put_key(struct rx_buf *b, bool *first, const char *key)
{
    int err = rx_buf_printf(b, "%s\"%s\":", *first ? "" : ",", key);

    *first = false;
    return err;
}

/* The `named` fields as members; unset ones as null only when `nulls`. */
static int put_fields(const struct rx_settings *st, unsigned named, bool nulls,
                      bool first, struct rx_buf *b)
{
    int err = 0;

    if ((named & RX_SETTING_SYSTEM_PROMPT) && (st->system_prompt || nulls) &&
        ((err = put_key(b, &first, "systemPrompt")) ||
         (err = st->system_prompt ? rx_buf_put_json_str(b, st->system_prompt)
                                  : rx_buf_puts(b, "null"))))
        return err;
    if ((named & RX_SETTING_MODEL) && (st->model || nulls) &&
        ((err = put_key(b, &first, "model")) ||
         (err = st->model ? rx_buf_put_json_str(b, st->model) : rx_buf_puts(b, "null"))))
        return err;
    if ((named & RX_SETTING_TEMPERATURE) && (st->has_temperature || nulls) &&
        ((err = put_key(b, &first, "temperature")) ||
         (err = st->has_temperature ? put_number(b, st->temperature)
                                    : rx_buf_puts(b, "null"))))
        return err;
    return 0;
}

int rx_settings_encode(const struct rx_settings *st, struct rx_buf *b)
{
    size_t start = b->len;
    int err;

    if ((err = rx_buf_putc(b, '{')) ||
        (err = put_fields(st, RX_SETTINGS_ALL, false, true, b)) ||
        (err = rx_buf_putc(b, '}'))) {
        rx_buf_truncate(b, start);
        return err;
    }
    return 0;
}

int rx_settings_encode_named(const struct rx_settings *st, unsigned named,
                             struct rx_buf *b)
{
    size_t start = b->len;
    int err = put_fields(st, named, true, false, b);

    if (err)
        rx_buf_truncate(b, start);
    return err;
}

bool rx_settings_check(const struct rx_settings *st)
{
    if (st->model && (!*st->model || strlen(st->model) > RX_SETTINGS_MODEL_MAX))
        return false;
    if (!st->has_temperature)
        return st->temperature == 0;
    return temperature_ok(st->temperature) && !signbit(st->temperature);
}
