/* shadowsync sync PS: the EASGD central copy w_PS (DESIGN §2, §3). The
 * dense vector (and the hot embedding rows after it) is split into
 * contiguous partitions balanced by bytes over job.sync_ps (ss_partition);
 * each sync PS holds one and applies the elastic exchange atomically per
 * request. */
#ifndef SHADOWSYNC_SYNCPS_H
#define SHADOWSYNC_SYNCPS_H

#include "core.h"

typedef struct _ThriftProcessor ThriftProcessor;
struct syncps_stats {
    int64_t syncs, refused;
    int64_t reads;              /* requests of alpha 0: the center read, not moved */
};
struct syncps_service;
/* Holds center[lo, hi) of n floats, starting from init (the slice's
 * values, copied). */
struct syncps_service *syncps_service_create(const float *init, size_t n, size_t lo, size_t hi,
                                             const char *token);
/* Center files (checkpoints): a header (magic, n, lo, hi) and the slice.
 * Loading fills [lo, hi) from any set of slices that covers it (another
 * count of sync PSs works). */
int syncps_save(struct syncps_service *s, size_t n, const char *path, struct ss_err *e);
int syncps_load(float *slice, size_t n, size_t lo, size_t hi, char *const *paths, int k,
                struct ss_err *e);
/* One request's exchange on n floats: center <- (1-a) center + a w, the
 * new center also into out (what `plan` times as a sync PS's cost). */
void syncps_elastic_apply(float *center, const float *w, float *out, size_t n, float a);
ThriftProcessor *syncps_service_processor(struct syncps_service *s);
/* Where save requests may write: below dir (the job's checkpoint.dir). */
void syncps_service_save_root(struct syncps_service *s, const char *dir);
void syncps_service_stats(struct syncps_service *s, struct syncps_stats *st);
void syncps_service_free(struct syncps_service *s);

/* The center past the dense parameters: the hot embedding rows (rows of
 * model.dim floats; 0: none), which start from the tables' own values:
 * init writes them into out (the caller knows the tables). */
struct syncps_tail {
    int64_t rows;
    void (*init)(void *arg, const struct ss_config *c, const struct model_layout *l, float *out);
    void *arg;
};
/* The sync PS role of a cluster job (role.c): holds its partition of the
 * center, starting from the model's initial dense vector (job.seed) and
 * tail's rows (NULL: none), serves it until the job ends, prints its
 * figures. */
struct job_plan;
int syncps_role_run(const struct ss_config *c, struct job_plan *p, const struct syncps_tail *tail,
                    struct ss_err *e);

#endif
