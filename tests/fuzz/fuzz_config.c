/* The config loader on any bytes: loads or fails with a message, never
 * crashes or leaks. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    struct ss_config c;
    struct ss_err e;
    if (ss_config_load(&c, fuzz_file(data, n), NULL, 0, &e) == 0)
        ss_config_free(&c);
    return 0;
}
