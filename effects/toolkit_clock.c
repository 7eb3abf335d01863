/*
 * toolkit_clock - the built-in `clock` tool. See toolkit_clock.h.
 */
#include "effects/toolkit_clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/now.h"
#include "effects/toolkit_result.h"

/* "UTC", "Z", "GMT", or an offset "+02:00" / "-0530" / "+2", maybe after UTC/GMT. */
static int parse_timezone(const char *tz, int *offset_min)
{
    int sign, h = 0, m = 0, n = 0;

    if (!strncasecmp(tz, "UTC", 3) || !strncasecmp(tz, "GMT", 3))
        tz += 3;
    else if (!strcasecmp(tz, "Z"))
        tz++;
    if (!*tz) {
        *offset_min = 0;
        return 0;
    }
    if (*tz != '+' && *tz != '-')
        return -EINVAL;
    sign = *tz++ == '-' ? -1 : 1;
    while (*tz >= '0' && *tz <= '9' && n < 2)
        h = h * 10 + (*tz++ - '0'), n++;
    if (!n)
        return -EINVAL;
    if (*tz == ':')
        tz++;
    if (*tz) {
        if (!(tz[0] >= '0' && tz[0] <= '5' && tz[1] >= '0' && tz[1] <= '9' && !tz[2]))
            return -EINVAL;
        m = (tz[0] - '0') * 10 + (tz[1] - '0');
    }
    if (h > 14 || (h == 14 && m))
        return -EINVAL;
    *offset_min = sign * (h * 60 + m);
    return 0;
}

int toolkit_clock_at(int64_t now_ms, json_t *args, char **result, bool *is_error)
{
    const char *tz = json_string_value(json_object_get(args, "timezone"));
    char iso[64], label[16];
    int64_t ms = now_ms % 1000;
    struct tm tm;
    time_t t;
    int off = 0, rc;
    char *text;
    json_t *o;

    if (tz && parse_timezone(tz, &off))
        return toolkit_result_errorf(
            result, is_error,
            "unsupported timezone '%.64s' (use UTC or an offset like +02:00)", tz);
    /* Floor division: a time before 1970 still has 0..999 milliseconds. */
    ms = ms < 0 ? ms + 1000 : ms;
    t = (time_t)((now_ms - ms) / 1000 + off * 60);
    if (!gmtime_r(&t, &tm))
        return toolkit_result_errorf(result, is_error,
                                     "the system clock is out of range");
    if (off)
        snprintf(label, sizeof(label), "%c%02d:%02d", off < 0 ? '-' : '+', abs(off) / 60,
                 abs(off) % 60);
    else
        snprintf(label, sizeof(label), "UTC");
    snprintf(iso, sizeof(iso), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)ms);
    if (off) /* replace the Z by the offset */
        snprintf(iso + strlen(iso) - 1, sizeof(iso) - strlen(iso) + 1, "%s", label);
    o = json_pack("{s:s, s:I, s:s}", "iso", iso, "epoch_ms", (json_int_t)now_ms,
                  "timezone", label);
    text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text)
        return -ENOMEM;
    rc = toolkit_result_set(result, is_error, false, text, strlen(text));
    free(text);
    return rc;
}

int toolkit_clock_run(json_t *args, char **result, bool *is_error)
{
    return toolkit_clock_at(now_wall_ms(), args, result, is_error);
}
