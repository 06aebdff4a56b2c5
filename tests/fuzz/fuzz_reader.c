/* Any bytes as a request to the reader service (next_batch, save). */
#include "fuzz_common.h"
#include "shadowsync/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    static struct reader_service *svc;
    if (!svc) {
        rpc_types_init();
        char file[4200];
        snprintf(file, sizeof file, "%s", fuzz_tmp("ss_fuzz_reader.XXXXXX"));
        int fd = mkstemp(file);
        for (int i = 0; i < 64; i++)
            dprintf(fd, "%d\t1\t2\ta%d\tb\n", i % 2, i);
        close(fd);
        struct ss_config c;
        struct ss_err e;
        char *sets[] = {"data.format=csv", "data.dense_cols=1-2", "data.cat_cols=3-4"};
        ss_config_load(&c, NULL, sets, 3, &e);
        struct schema s;
        struct reader *r;
        schema_from_config(&s, &c, file, &e);
        if (reader_open(&r, file, &s, 0, 0, &e) < 0)
            abort();
        ss_config_free(&c);
        svc = reader_service_create(r, s.n_dense, s.n_cat, fuzz_token);
        reader_service_save_root(svc, "/tmp/ss_fuzz_saves"); /* the seeds' save path */
    }
    fuzz_request(reader_service_processor(svc), data, n);
    return 0;
}
