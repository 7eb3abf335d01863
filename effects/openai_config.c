/*
 * openai_config - the openai brain's config section. See openai_config.h.
 */
#include "effects/openai_config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CFG "brain.openai."

static int cfg_error(struct rx_error *err, const char *field, const char *why)
{
    return rx_error_set(err, -EINVAL, CFG "%s: %s", field, why);
}

static int cfg_str(json_t *cfg, const char *field, const char **out, struct rx_error *err)
{
    json_t *v = json_object_get(cfg, field);

    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return cfg_error(err, field, "must be a string");
    *out = json_string_value(v);
    return 0;
}

static int cfg_int(json_t *cfg, const char *field, long long min, long long max,
                   long long *out, struct rx_error *err)
{
    json_t *v = json_object_get(cfg, field);
    char why[96];

    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < min ||
        json_integer_value(v) > max) {
        snprintf(why, sizeof(why), "must be an integer from %lld to %lld", min, max);
        return cfg_error(err, field, why);
    }
    *out = json_integer_value(v);
    return 0;
}

static const char *env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);

    return v && *v ? v : fallback;
}

int openai_config_parse(json_t *config, struct openai_config *out, struct rx_error *err)
{
    const char *base = OPENAI_CONFIG_DEFAULT_URL, *model = OPENAI_CONFIG_DEFAULT_MODEL;
    const char *key = NULL, *key_env = "OPENAI_API_KEY";
    long long connect = 10000, stall = 60000, total = 600000, retries = 2, backoff = 500,
              backoff_max = 30000, max_tokens = 0, budget = 0, keep = 4;
    struct openai_config c = {0};
    json_t *temp, *cont;
    size_t blen;

    if (config && !json_is_null(config) && !json_is_object(config))
        return rx_error_set(err, -EINVAL, "brain.openai: must be an object");
    if (cfg_str(config, "base_url", &base, err) ||
        cfg_str(config, "model", &model, err) || cfg_str(config, "api_key", &key, err) ||
        cfg_str(config, "api_key_env", &key_env, err) ||
        cfg_int(config, "max_tokens", 1, INT_MAX, &max_tokens, err) ||
        cfg_int(config, "connect_timeout_ms", 1, 3600000, &connect, err) ||
        cfg_int(config, "stall_timeout_ms", 1, 86400000, &stall, err) ||
        cfg_int(config, "timeout_ms", 0, 86400000, &total, err) ||
        cfg_int(config, "retries", 0, 10, &retries, err) ||
        cfg_int(config, "backoff_ms", 0, 3600000, &backoff, err) ||
        cfg_int(config, "backoff_max_ms", 0, 3600000, &backoff_max, err) ||
        cfg_int(config, "context_budget", 0, LLONG_MAX / 8, &budget, err) ||
        cfg_int(config, "keep_recent", 1, 1000, &keep, err))
        return -EINVAL;
    cont = json_object_get(config, "continue");
    if (cont && !json_is_null(cont) && !json_is_boolean(cont))
        return cfg_error(err, "continue", "must be true or false");
    c.cont = cont && json_is_true(cont);
    temp = json_object_get(config, "temperature");
    if (temp && !json_is_null(temp) &&
        (!json_is_number(temp) || json_number_value(temp) < 0 ||
         json_number_value(temp) > 2))
        return cfg_error(err, "temperature", "must be a number from 0 to 2");
    base = env_or("REFLEXOR_LLM_BASE_URL", base);
    model = env_or("REFLEXOR_LLM_MODEL", model);
    if (strncmp(base, "http://", 7) && strncmp(base, "https://", 8))
        return cfg_error(err, "base_url", "must start with http:// or https://");
    if (!*model)
        return cfg_error(err, "model", "must not be empty");
    if (!key || !*key)
        key = *key_env ? env_or(key_env, NULL) : NULL;

    /* "http://host/v1/" and "http://host/v1" name the same API root. */
    blen = strlen(base);
    while (blen && base[blen - 1] == '/')
        blen--;
    if (asprintf(&c.url, "%.*s/chat/completions", (int)blen, base) < 0) {
        c.url = NULL;
        goto out_release;
    }
    c.model = strdup(model);
    if (!c.model)
        goto out_release;
    if (key && *key && asprintf(&c.auth, "Authorization: Bearer %s", key) < 0) {
        c.auth = NULL;
        goto out_release;
    }
    c.has_temperature = temp && json_is_number(temp);
    c.temperature = c.has_temperature ? json_number_value(temp) : 0;
    c.max_tokens = max_tokens;
    c.http = (struct openai_http_config){
        .url = c.url,
        .auth = c.auth,
        .connect_timeout_ms = (long)connect,
        .stall_timeout_ms = (long)stall,
        .timeout_ms = (long)total,
        .retries = (int)retries,
        .backoff_ms = (int)backoff,
        .backoff_max_ms = (int)backoff_max,
    };
    c.budget = (struct rx_context_budget){
        .unit = RX_CONTEXT_TOKENS,
        .limit = budget,
        .keep = (size_t)keep,
    };
    *out = c;
    return 0;

out_release:
    openai_config_release(&c);
    return rx_error_set(err, -ENOMEM, "brain.openai: out of memory");
}

void openai_config_release(struct openai_config *c)
{
    free(c->url);
    free(c->model);
    free(c->auth);
    memset(c, 0, sizeof(*c));
}
