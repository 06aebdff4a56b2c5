/* Any bytes as a request to the sync PS service (elastic, save). */
#include "fuzz_common.h"
#include "shadowsync/syncps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    static struct syncps_service *svc;
    if (!svc) {
        rpc_types_init();
        float init[16] = {0};
        svc = syncps_service_create(init, 32, 16, 32, fuzz_token);
        syncps_service_save_root(svc, "/tmp/ss_fuzz_saves"); /* the seeds' save path */
    }
    fuzz_request(syncps_service_processor(svc), data, n);
    return 0;
}
