/*
 * rx_json - nesting depth without recursion. See rx_json.h.
 */
#include "state_machine/rx_json.h"

#include <string.h>

size_t rx_json_depth(const char *text, size_t len)
{
    size_t depth = 0, deepest = 0;
    bool in_string = false;

    for (size_t i = 0; i < len; i++) {
        char c = text[i];

        if (in_string) {
            if (c == '\\')
                i++; /* the escaped character cannot end the string */
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest)
                deepest = depth;
        } else if ((c == ']' || c == '}') && depth) {
            depth--;
        }
    }
    return deepest;
}

bool rx_json_depth_ok(const char *text)
{
    return rx_json_depth(text, strlen(text)) <= RX_JSON_DEPTH_MAX;
}
