/* Binary shards: a foreign, truncated or corrupt file is refused or its
 * records read, never a crash. */
#include "fuzz_common.h"
#include "shadowsync/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    struct schema s = {0};
    s.format = FMT_BINARY;
    struct reader *r;
    struct ss_err e;
    if (reader_open(&r, fuzz_file(data, n), &s, 0, 0, &e) < 0)
        return 0;
    struct batch b;
    batch_init(&b, 8, 2, 3);
    while (reader_next(r, &b, &e) == 0 && b.n > 0)
        ;
    batch_free(&b);
    reader_close(r);
    return 0;
}
