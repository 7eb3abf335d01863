/*
 * rx_uuid - random ids. See rx_uuid.h.
 */
#include "graph/rx_uuid.h"

#include <uuid/uuid.h>

void rx_uuid_new(char out[RX_UUID_LEN])
{
    uuid_t u;

    uuid_generate_random(u);
    uuid_unparse_lower(u, out);
}
