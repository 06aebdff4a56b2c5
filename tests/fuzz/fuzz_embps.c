/* Any bytes as a request to the embedding PS service (lookup, push, rows,
 * save, unknown methods): an answer or an error, and the service goes on. */
#include "fuzz_common.h"
#include "shadowsync/embps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    static struct embps_service *svc;
    if (!svc) {
        rpc_types_init();
        int64_t rows[2] = {50, 40}, table_rows[2] = {50, 90}, lo[2] = {0, 50};
        int32_t gid[2] = {0, 1}, shard_ids[2] = {0, 3};
        struct emb_opts o = {.n_tables = 2, .dim = 4, .rows = rows, .opt = OPT_ROWWISE_ADAGRAD,
                             .lr = 0.1f, .seed = 1, .global_ids = gid, .table_rows = table_rows,
                             .row_lo = lo, .clocks = 1};
        struct emb_tables *t;
        struct ss_err e;
        if (embps_create(&t, &o, &e) < 0)
            abort();
        svc = embps_service_create(t, shard_ids, 2, fuzz_token);
        embps_service_save_root(svc, "/tmp/ss_fuzz_saves", NULL); /* the seeds' save path */
    }
    fuzz_request(embps_service_processor(svc), data, n);
    return 0;
}
