/* Text lines (plain or gzip) through the Criteo parser and a CSV schema with a header line
 * and a multi-hot column, via the reader (buffering, long lines, bad lines
 * counted). */
#include "fuzz_common.h"
#include "shadowsync/reader.h"

static int run(const struct schema *s, const char *path)
{
    struct reader *r;
    struct ss_err e;
    if (reader_open(&r, path, s, 0, 0, &e) < 0)
        return 0;
    struct batch b;
    batch_init(&b, 16, s->n_dense, s->n_cat);
    while (reader_next(r, &b, &e) == 0 && b.n > 0)
        ;
    batch_free(&b);
    reader_close(r);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    static struct schema crit, csv;
    static int ready;
    if (!ready) {
        struct ss_config c;
        struct ss_err e;
        ss_config_load(&c, NULL, NULL, 0, &e);
        c.data.format = FMT_CRITEO;
        schema_from_config(&crit, &c, "x.tsv", &e);
        char *sets[] = {"data.format=csv", "data.separator=,", "data.header=1",
                        "data.dense_cols=1-2", "data.cat_cols=3-5", "data.multihot_cols=5",
                        "data.multihot_sep=;", "data.cat_encoding=hash"};
        ss_config_free(&c);
        ss_config_load(&c, NULL, sets, 8, &e);
        schema_from_config(&csv, &c, "x.csv", &e);
        ss_config_free(&c);
        ready = 1;
    }
    const char *path = fuzz_file(data, n);
    run(&crit, path);
    return run(&csv, path);
}
