/* Setting a run up and taking it down: the model's layout, the embedding
 * tables or their clients, hot rows, DES shards, each trainer's dense
 * buffers (on a GPU where it has one), shadow threads and worker threads. */
#include "job.h"

/* The bytes of the model's embedding tables, each row with its optimizer's
 * state. */
static double tables_bytes(const struct model_layout *l, const struct ss_config *c)
{
    double bytes = 0, stride = l->dim + (c->optim.emb == OPT_ROWWISE_ADAGRAD);
    for (int t = 0; t < l->n_tables; t++)
        bytes += (double)l->rows[t] * stride * 4;
    return bytes;
}

/* The model is saved at the end: a disk short of it would fail the run
 * after its training, so that is said before the tables are even made.
 * The room counts what an earlier run's model there frees (clear_stale
 * removes it); a file system that gives no figures passes. */
int job_check_room(const struct ss_config *c, struct ss_err *e)
{
    struct model_layout l;
    struct ss_err ignored = {0};
    struct statvfs fs;
    if (!c->output.save_model || !*c->output.dir || ss_mkdir_p(c->output.dir, &ignored) < 0 ||
        statvfs(c->output.dir, &fs) != 0 || fs.f_blocks == 0 ||
        model_layout_init(&l, c, &ignored) < 0) /* their own errors come later */
        return 0;
    double need = (double)l.n_params * 4 + tables_bytes(&l, c);
    model_layout_free(&l);
    double room = (double)fs.f_bavail * fs.f_frsize + job_stale_files(c->output.dir, MODEL_FILES, 0);
    if (room < need)
    {
        int d = need < 100 * 1048576.0 ? 2 : 0; /* small figures told apart, not both "1 MB" */
        return ss_fail(e, SS_EIO, "output.dir = %s has %.*f MB free, and the model saved there "
                       "at the end needs %.*f MB (its tables and dense part): free some space, "
                       "or name another output.dir (checked before training)", c->output.dir,
                       d, room / 1048576, d, need / 1048576);
    }
    return 0;
}

/* embedding.placement = trainers: the plan over the trainers (the cluster
 * job's, made on its master) and this process's trainers' shards. */
static int setup_des(struct job *j, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    if (c->hot_embeddings.memory_mb > 0)
        return ss_fail(e, SS_EINVAL, "embedding.placement = trainers with "
                       "hot_embeddings.memory_mb > 0: not supported (each row lives on one "
                       "trainer; set hot_embeddings.memory_mb = 0 or embedding.placement = ps)");
    if (c->embedding_cache.rows > 0)
        return ss_fail(e, SS_EINVAL, "embedding.placement = trainers with embedding_cache.rows "
                       "> 0: not supported (DES is synchronous: there is nothing stale to "
                       "cache; set embedding_cache.rows = 0 or embedding.placement = ps)");
    int rc = 0, count = j->env ? j->env->count : j->n_tr, first = j->env ? j->env->index : 0;
    double t0 = ss_now();
    if (j->env) {
        j->des = j->env->des.plan;
    } else if ((rc = placement_for_config(c, &j->l, count, 0, &j->des_plan, NULL, e)) < 0) {
        return rc;
    } else {
        j->des = &j->des_plan;
    }
    struct emb_opts eo = emb_opts_from_config(c, j->l.n_tables, j->l.dim, j->l.rows);
    j->shards = ss_xcalloc(j->n_tr, sizeof *j->shards);
    for (int t = 0; rc == 0 && t < j->n_tr; t++) {
        int32_t *ids, k;
        rc = embps_create_for_ps(&eo, j->des, first + t, &j->shards[t], &ids, &k, e);
        free(ids);
    }
    const struct placement *pl = j->des;
    double most = 0, *held = ss_xcalloc(pl->n_ps, sizeof *held);
    for (int i = 0; i < pl->n_shards; i++) { /* rows with their optimizer state */
        const struct shard *sh = &pl->shards[i];
        held[sh->ps] += (double)(sh->hi - sh->lo) * (eo.dim + (eo.opt == OPT_ROWWISE_ADAGRAD)) * 4;
        most = held[sh->ps] > most ? held[sh->ps] : most;
    }
    free(held);
    if (rc == 0 && j->is_master && !c->output.quiet)
        printf("# DES: %d tables in %d shards over %d trainers (placement.strategy = %s, "
               "imbalance %.3f, at most %.1f MB of rows on a trainer), pooled all-to-all (%.1f s)\n",
               pl->n_tables, pl->n_shards, count, placement_strategy_name(pl->strategy),
               pl->imbalance, most / 1e6, ss_now() - t0), fflush(stdout);
    return rc;
}

/* The dense part's room here (a width past the memory aborted on its
 * allocation): each trainer's vector, optimizer state and sync copies,
 * each worker's gradient, and a batch's activations through the widths,
 * forward and back. */
int job_dense_room(const struct ss_config *c, const struct model_layout *l, int n_tr,
                   int n_wk, struct ss_err *e)
{
    double widths = 0, trainers = n_tr > 0 ? n_tr : 1, workers = trainers * (n_wk > 0 ? n_wk : 1);
    for (int i = 0; i <= l->n_bot; i++)
        widths += l->bot[i];
    for (int i = 0; i <= l->n_top; i++)
        widths += l->top[i];
    double need = 4.0 * (double)l->n_params * (4 * trainers + 2 * workers) +
                  4.0 * 4 * widths * c->trainer.batch_size * workers;
    int64_t avail = ss_mem_available();
    if (avail >= 0 && need > (double)avail)
        return ss_fail(e, SS_ENOMEM, "the dense model here needs about %.0f MB (%zu parameters "
                       "of model.bottom = %s and model.top = %s, for %g trainer(s) x %g "
                       "worker(s), and their activations at trainer.batch_size = %d), more than "
                       "the %lld MB of memory free here: narrower layers, or fewer workers",
                       need / 1048576, l->n_params, c->model.bottom, c->model.top, trainers,
                       workers / trainers, c->trainer.batch_size, (long long)(avail >> 20));
    return 0;
}

int trainer_check_memory(const struct ss_config *c, const struct model_layout *l,
                         struct ss_err *e)
{
    int cluster = c->job.embedding_ps > 0 || c->job.sync_ps > 0 || c->job.readers > 0;
    int bins = placement_bins(c, c->job.embedding_ps, c->job.trainers), rc = 0;
    if (!cluster) /* the embedded default: all here (a cluster's hosts are not this one) */
        rc = job_dense_room(c, l, c->job.trainers, c->trainer.worker_threads, e);
    if (rc == 0 && !cluster && bins < 1)
        rc = embps_check_room(tables_bytes(l, c), l->dim, e);
    if (rc < 0 || bins < 1)
        return rc;
    struct table_profile *tp = ss_xcalloc((size_t)l->n_tables, sizeof *tp);
    struct placement pl = {0};
    placement_assume(l, c, tp);
    rc = placement_make_on(&pl, c->embedding.placement == EMB_ON_TRAINERS,
                           placement_strategy(c->placement.strategy), tp, l->n_tables, bins,
                           (double)c->embedding_ps.memory_mb, c->placement.pin, e);
    if (rc == 0)
        rc = placement_check_memory(&pl, e);
    placement_free(&pl);
    free(tp);
    return rc;
}

/* The embedding tables in this process (the embedded default, the eval
 * command), said first where they take a while to make. */
int job_local_tables(const struct ss_config *c, const struct model_layout *l, FILE *say,
                     struct emb_tables **out, struct ss_err *e)
{
    struct emb_opts eo = emb_opts_from_config(c, l->n_tables, l->dim, l->rows);
    double mb = tables_bytes(l, c) / 1e6;
    if (mb > 200 && !c->output.quiet)
        fprintf(say, "# initializing %d embedding tables (%.0f MB)...\n", l->n_tables, mb),
            fflush(say);
    return embps_create(out, &eo, e);
}

int job_setup_model(struct job *j, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    int rc = model_layout_init(&j->l, c, e);
    if (rc < 0 || (rc = job_dense_room(c, &j->l, j->n_tr, j->n_wk, e)) < 0)
        return rc;
    if (c->embedding.placement == EMB_ON_TRAINERS)
        return setup_des(j, e);
    if (j->env) /* the tables live on the embedding PSs */
        return j->env->make_emb(j->env->arg, 1, &j->emb, e); /* (eval, hot rows: exact) */
    if ((rc = job_local_tables(c, &j->l, stdout, &j->tables, e)) < 0)
        return rc;
    j->emb = emb_client_local(j->tables);
    return 0;
}

/* The hot rows: a resumed checkpoint's (its replicas match them), else
 * found by profiling data.train when hot_embeddings.memory_mb > 0; in a
 * cluster job, the master's (hot_for_job). */
int job_setup_hot(struct job *j, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    char p[4500];
    int rc = 0, from_ckpt = 0;
    double t0 = ss_now();
    j->n_sync = j->l.n_params;
    if (j->env) {
        const struct hot_set *h = j->env->hot.set;
        from_ckpt = j->env->hot.from_ckpt;
        if (h) {
            j->hot = hot_from_list(h->n_tables, h->dim, h->table_rows, h->n, h->table, h->row);
            j->hot->profiled_share = h->profiled_share;
        }
    } else if (j->resumed_from[0]) {
        snprintf(p, sizeof p, "%s/hot-rows.bin", j->resumed_from);
        if ((from_ckpt = access(p, F_OK) == 0) && (rc = hot_load(&j->hot, p, &j->l, e)) < 0)
            return rc;
        if (!from_ckpt && c->hot_embeddings.memory_mb > 0 && j->is_master && !c->output.quiet)
            printf("# hot embeddings: none, as in %s (hot_embeddings.memory_mb applies to a "
                   "fresh run)\n", j->resumed_from);
    } else if ((rc = hot_find(c, &j->l, &j->hot, e)) < 0) {
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg);
        return ss_fail(e, rc, "hot_embeddings: %s", why);
    }
    if (j->hot && c->embedding.placement == EMB_ON_TRAINERS)
        return ss_fail(e, SS_EINVAL, "%s: the checkpoint keeps %lld hot rows replicated on "
                       "every trainer, which embedding.placement = trainers (DES) does not "
                       "support (each row lives on one trainer): resume it with "
                       "embedding.placement = ps", j->resumed_from[0] ? j->resumed_from
                       : "the resumed checkpoint", (long long)j->hot->n);
    if (!j->hot) {
        double row_mb = 4.0 * j->l.dim / 1048576.0; /* one row's replica */
        int say = c->hot_embeddings.memory_mb > 0 && !j->resumed_from[0] && j->is_master &&
                  !c->output.quiet;
        if (say && c->hot_embeddings.memory_mb < row_mb)
            printf("# hot embeddings: hot_embeddings.memory_mb = %g holds no row (one takes "
                   "%.6f MiB); none replicated\n", c->hot_embeddings.memory_mb, row_mb);
        else if (say)
            printf("# hot embeddings: no row is looked up %d times in the %d profiled batches of "
                   "data.train; none replicated (lower hot_embeddings.min_lookups?)\n",
                   c->hot_embeddings.min_lookups, c->hot_embeddings.profile_batches);
        return 0;
    }
    j->n_sync += (size_t)j->hot->n * j->l.dim;
    if (j->is_master && !c->output.quiet)
        printf("# hot embeddings: %lld rows (%.2f MB) replicated on every trainer, %s (%.1f s)\n",
               (long long)j->hot->n, j->hot->n * j->l.dim * 4.0 / 1048576.0,
               from_ckpt ? "as in the checkpoint" : "found by profiling data.train", ss_now() - t0);
    if (!from_ckpt && j->is_master && !c->output.quiet)
        printf("# hot embeddings: %.1f %% of the profiled lookups fall on them\n",
               100.0 * j->hot->profiled_share);
    if ((j->env ? j->env->count : j->n_tr) > 1 && sync_algo_needs(c->sync.algo) ==
        SYNC_NEEDS_NOTHING && j->is_master && !c->output.quiet)
        printf("# hot embeddings: sync.algo = %s never syncs them: each trainer trains its own "
               "copy, and the model keeps %s\n", c->sync.algo,
               c->sync.output == OUT_AVERAGE ? "their average" : "trainer 0's");
    if (!j->env && j->is_master && !c->output.quiet) /* measured: docs/benchmarks.md, Hot embeddings */
        printf("# hot embeddings: the tables are in this process, so the hot rows save no "
               "wire here and cost a second lookup per id (they pay in a cluster job, whose "
               "tables are on the embedding PSs)\n");
    fflush(stdout);
    return 0;
}

void job_teardown_model(struct job *j)
{
    for (int t = 0; j->shards && t < j->n_tr; t++)
        embps_free(j->shards[t]);
    free(j->shards);
    placement_free(&j->des_plan);
    hot_free(j->hot);
    if (j->emb)
        j->emb->ops->free(j->emb);
    embps_free(j->tables);
    model_layout_free(&j->l);
}

/* key's data (its schema s: a text config's columns, or binary shards'
 * header) fits the model, checked before training. */
int job_check_schema(const struct schema *s, const struct model_layout *l, const char *key,
                     const char *path, struct ss_err *e)
{
    if (s->format != FMT_BINARY && s->dense_cols[0] < 0 && l->n_dense != 1)
        return ss_fail(e, SS_EINVAL, "%s = %s: data.dense_cols names no dense column, so the "
                       "model's bottom MLP takes one constant input: start model.bottom at 1 "
                       "(model.bottom = 1-%d, say), not %d", key, path, l->dim, l->n_dense);
    if (s->n_dense != l->n_dense || s->n_cat != l->n_tables)
        return ss_fail(e, SS_EINVAL,
                       "%s = %s: the data has %d dense and %d categorical features, the model "
                       "(model.bottom, model.rows / data.cat_cols) expects %d and %d", key,
                       path, s->n_dense, s->n_cat, l->n_dense, l->n_tables);
    return 0;
}

/* Arrays saved in the resumed checkpoint as NAME.bin (one) or NAME-K.bin
 * (several), each of the model's n floats, into out[] (allocated once,
 * reused); returns how many were there. */
static int load_saved(struct job *j, const char *name, float **out, int max, struct ss_err *e)
{
    size_t n = j->n_sync;
    int k = 0;
    for (; k < max; k++) {
        char p[4500];
        if (max == 1)
            snprintf(p, sizeof p, "%s/%s", j->resumed_from, name);
        else
            snprintf(p, sizeof p, "%s/%s-%d.bin", j->resumed_from, name, k);
        if (access(p, F_OK) != 0)
            break;
        if (!out[k])
            out[k] = ss_aligned(n * sizeof(float));
        int rc = dense_load(out[k], n, &j->l, p, e);
        if (rc < 0)
            return rc;
    }
    return k;
}

int trainer_device(const struct ss_config *c, int verbose, int local, int *dev, int *count,
                   struct ss_err *e)
{
    *dev = -1;
    *count = 0;
    if (c->trainer.device == DEV_CPU)
        return 0;
    char why[256];
    int n = gpu_probe(why, sizeof why);
    if (n <= 0 && c->trainer.device == DEV_CUDA)
        return ss_fail(e, SS_EINVAL, "trainer.device = cuda: %s; use cpu, or auto to fall back",
                       why);
    if (n <= 0) {
        if (verbose)
            printf("# trainer.device = auto: %s; training on the CPU\n", why);
        return 0;
    }
    *dev = local % n;
    *count = n;
    if (verbose)
        printf("# trainer.device = %s: the dense layers on CUDA device %d of %s\n",
               c->trainer.device == DEV_CUDA ? "cuda" : "auto", *dev, why);
    return 0;
}

/* The shadow thread's staging copy of a GPU trainer (shadow_opts.pull/push):
 * the device copy as it is before a round, then the round's change added
 * to it, so the workers' steps meanwhile are kept. */
static int stage_pull(void *arg, struct ss_err *e)
{
    struct trainer *tr = arg;
    int rc = gpu_dense_read(tr->gpu, tr->stage, NULL, e);
    if (rc == 0)
        memcpy(tr->snap, tr->stage, tr->job->l.n_params * sizeof(float));
    return rc;
}

static int stage_push(void *arg, struct ss_err *e)
{
    struct trainer *tr = arg;
    size_t n = tr->job->l.n_params;
    for (size_t i = 0; i < n; i++)
        tr->snap[i] = tr->stage[i] - tr->snap[i];
    return gpu_dense_add(tr->gpu, tr->snap, e);
}

/* Trainer tr's model into w (and its optimizer state into state, or
 * NULL): a GPU trainer's dense part from the device, its hot rows from
 * beside the staging copy; a CPU trainer's from tr->w. Hogwild reads while
 * the workers train. */
int job_model_of(struct job *j, struct trainer *tr, float *w, float *state, struct ss_err *e)
{
    size_t np = j->l.n_params;
    if (!tr->gpu) {
        if (w != tr->w)
            ss_copy(w, tr->w, j->n_sync);
        return 0;
    }
    int rc = gpu_dense_read(tr->gpu, w, state, e);
    if (rc == 0)
        ss_copy(w + np, tr->stage + np, j->n_sync - np);
    return rc;
}

/* A GPU trainer's w and state brought up to date from the device
 * (workers paused or done). */
int job_read_back(struct job *j, struct ss_err *e)
{
    for (int t = 0; t < j->n_tr; t++) {
        int rc = job_model_of(j, &j->tr[t], j->tr[t].w, j->tr[t].state, e);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Trainer tr's replica of the hot rows, stepped by the tables' optimizer:
 * in its dense buffer, after the dense parameters the shadow thread syncs.
 * A GPU trainer's lookups pool on the host, so its replica lives there too,
 * after the device copy's staging copy: the shadow thread syncs it in
 * place, as a CPU trainer's, and only the dense part crosses PCIe. */
struct hot_replica job_replica_of(struct job *j, struct trainer *tr)
{
    struct emb_opts eo = emb_opts_from_config(j->c, j->l.n_tables, j->l.dim, j->l.rows);
    size_t np = j->l.n_params;
    float *w = tr->gpu ? tr->stage : tr->w;
    return (struct hot_replica){j->hot, w + np, tr->state + np, eo.opt, eo.lr, eo.eps};
}

/* A resumed trainer's saved vector (what: dense or state): trainer t of the
 * job takes the saved one t mod their count. */
int job_resumed_vector(struct job *j, int t, const char *what, float *v, struct ss_err *e)
{
    char p[4400];
    int gi = ((j->env ? j->env->index : 0) + t) % j->resumed_trainers;
    snprintf(p, sizeof p, "%s/%s-%d.bin", j->resumed_from, what, gi);
    return dense_load(v, j->n_sync, &j->l, p, e);
}

/* A shadow thread's round failed (a lost sync PS, a collective's error):
 * a cluster job ends at once naming it (env->fatal); in one process the
 * workers stop, the other trainers' rounds fail rather than wait on it,
 * and the first error ends the run (finish_trainers). Either way no
 * worker trains on unsynced to the end of its data first. */
static void shadow_failed(void *arg, const struct ss_err *e)
{
    struct job *j = arg;
    if (j->env && j->env->fatal)
        j->env->fatal(j->env->arg, e);
    __atomic_store_n(&j->stop, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&j->mu);
    if (!j->sync_err.code) /* the first: the others' then only say a peer's failed */
        j->sync_err = *e;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (j->coll) /* the other trainers' rounds wait on this one */
        collective_local_break(j->coll[0]);
}

/* Trainer t's dense buffers: the model's init (one for every trainer) or
 * the resumed checkpoint's, the hot rows as the tables hold them, and on a
 * GPU its live copy with the shadow thread's page-locked staging copies. */
static int make_trainer(struct job *j, int t, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    struct trainer *tr = &j->tr[t];
    size_t n = j->n_sync, np = j->l.n_params, hot = n - np;
    tr->job = j;
    tr->id = t;
    tr->w = ss_aligned(n * sizeof(float));
    tr->state = ss_aligned(n * sizeof(float));
    model_init_params(&j->l, tr->w, (uint64_t)c->job.seed);
    for (size_t i = 0; i < n; i++)
        tr->state[i] = (float)c->optim.init_acc;
    int rc = 0;
    if (hot && t > 0) /* the hot rows start as the tables' */
        memcpy(tr->w + np, j->tr[0].w + np, hot * sizeof(float));
    else if (hot)
        rc = hot_replica_fill(j->emb, j->hot, tr->w + np, e);
    if (rc == 0 && j->resumed_from[0] &&
        ((rc = job_resumed_vector(j, t, "dense", tr->w, e)) < 0 ||
         (rc = job_resumed_vector(j, t, "state", tr->state, e)) < 0))
        return rc;
    tr->workers = ss_xcalloc(j->n_wk, sizeof *tr->workers);
    tr->workers_left = j->n_wk;
    if (rc < 0 || j->gpu_dev < 0)
        return rc;
    /* the live copy goes to the device; w is read back from it */
    int dev = t == 0 ? j->gpu_dev : (j->gpu_dev + t) % j->gpu_count; /* cluster: t 0 */
    if ((rc = gpu_dense_create(&tr->gpu, &j->l, dev, tr->w, tr->state, e)) < 0)
        return rc;
    /* pages of their own: CUDA refuses to lock a page twice, and another
     * buffer may share a heap page */
    tr->stage = ss_pages(n * sizeof(float));
    tr->snap = ss_pages(n * sizeof(float));
    memcpy(tr->stage, tr->w, n * sizeof(float));
    tr->pinned = gpu_host_register(tr->stage, n * sizeof(float)) == 0;
    if (tr->pinned && gpu_host_register(tr->snap, n * sizeof(float)) < 0)
        gpu_host_unregister(tr->stage), tr->pinned = 0;
    if (!tr->pinned)
        fprintf(stderr, "shadowsync: trainer %d: its staging copy could not be page-locked "
                "(the locked-memory limit, ulimit -l?): the shadow thread's copies go through "
                "pageable memory\n", j->env ? j->env->index : t);
    return 0;
}

/* Trainer t's shadow thread, its sync state the resumed checkpoint's
 * (saved, k arrays) where there is one. */
static int start_shadow(struct job *j, int t, float **saved, int k, struct ss_err *e)
{
    struct trainer *tr = &j->tr[t];
    size_t n = j->n_sync;
    struct shadow_opts so = {
        .cfg = j->c,
        .w = tr->gpu ? tr->stage : tr->w,
        .n = n,
        .coll = j->env ? j->env->coll : j->coll ? j->coll[t] : NULL,
        .center = j->env ? j->env->center : j->center,
        .trainers = j->env ? j->env->count : j->n_tr,
        .cpu_allowance = j->shadow_cpu,
        .restore = {.arrays = saved, .n = k},
        .stage = {.pull = tr->gpu ? stage_pull : NULL, .push = tr->gpu ? stage_push : NULL,
                  .arg = tr},
        .tail = {.n = n - j->l.n_params, /* the hot rows: summed */
                 .resumed = j->resumed_from[0] != 0},
        .failed = {.call = shadow_failed, .arg = j},
    };
    return shadow_start(&tr->shadow, &so, e); /* on failure: no thread of a later trainer yet */
}

/* Every trainer's shadow thread (and in one process the group they sync
 * through: a collective's, or EASGD's center). A failure ends those started
 * before their buffers are freed. */
static int start_shadows(struct job *j, struct ss_err *e)
{
    const char *algo = j->c->sync.algo;
    float *saved[4] = {NULL};   /* a resumed checkpoint's center or algorithm state */
    int rc = 0;
    if (!j->env && sync_algo_needs(algo) == SYNC_NEEDS_CENTER) {
        j->center = center_local_create(j->tr[0].w, j->n_sync);
        if (j->resumed_from[0] && (rc = load_saved(j, "center.bin", saved, 1, e)) > 0)
            j->center->ops->set(j->center, saved[0]);
    }
    /* no core to spare for the shadow threads: each may take its share */
    double cores = ss_host_cores(), want = j->n_tr * (j->n_wk + 1.0);
    j->shadow_cpu = 0;
    if (j->c->sync.mode == SYNC_SHADOW && strcmp(algo, "none") && j->c->sync.shadow_cpu_share > 0 &&
        cores < want) {
        j->shadow_cpu = j->c->sync.shadow_cpu_share * cores / j->n_tr;
        if (!j->env || j->env->index == 0)
            printf("# shadow thread%s: paced to take at most %.0f %% of the host's %.3g cores, "
                   "which have none to spare beside %d worker(s) (sync.shadow_cpu_share)\n",
                   j->n_tr > 1 ? "s" : "", 100 * j->c->sync.shadow_cpu_share, cores,
                   j->n_tr * j->n_wk);
    }
    for (int t = 0; rc >= 0 && t < j->n_tr; t++) {
        char name[64];
        snprintf(name, sizeof name, "sync-%d", ((j->env ? j->env->index : 0) + t) %
                 (j->resumed_trainers ? j->resumed_trainers : 1));
        int k = j->resumed_from[0] ? load_saved(j, name, saved, 4, e) : 0;
        rc = k < 0 ? k : start_shadow(j, t, saved, k, e);
    }
    for (int i = 0; i < 4; i++)
        free(saved[i]);
    if (rc >= 0)
        return 0;
    if (j->coll) /* their rounds would wait on the trainers not started */
        collective_local_break(j->coll[0]);
    for (int t = 0; t < j->n_tr; t++)
        if (j->tr[t].shadow) {
            shadow_data_done(j->tr[t].shadow);
            shadow_join(j->tr[t].shadow, NULL, NULL);
            j->tr[t].shadow = NULL;
        }
    return rc;
}

/* Worker wk's embedding client: the job's, its own to the PSs, or its DES
 * group's member (x: taken), under its cache and hot rows where they are on. */
static int worker_client(struct job *j, struct worker *wk, int t, struct exchange **x,
                         struct ss_err *e)
{
    const struct ss_config *c = j->c;
    int k = wk->id, rc;
    wk->emb = j->emb;
    if (j->des) {
        /* foreground: worker 0's group asks for the rounds, all its members at once, so
         * every trainer's shadow runs one round per ask */
        int gap = k ? 0 : sync_foreground_gap(c); /* steps a round */
        struct des_hooks pz = {&j->pause, job_des_wait, wk, gap ? job_des_sync : NULL, gap};
        wk->emb = emb_client_des(*x, j->des, j->l.dim, j->shards[t], &pz, &wk->des);
        *x = NULL;
    } else if (j->env && (rc = j->env->make_emb(j->env->arg, 0, &wk->emb, e)) < 0) {
        return rc; /* before any worker thread of this trainer runs */
    }
    int own = j->env != NULL || j->des; /* whether wk->emb is this worker's own */
    if (c->embedding_cache.rows > 0) {
        struct emb_client *cc = emb_client_cache(wk->emb, own, c, &j->l, c->trainer.batch_size,
                                                 &wk->cache);
        if (!cc)
            return ss_fail(e, SS_EINVAL, "embedding_cache.rows > 0: the %s client serves no "
                           "rows", wk->emb->ops->name);
        wk->emb = cc, own = 1;
    }
    if (j->hot) {
        struct hot_replica r = job_replica_of(j, wk->tr);
        wk->emb = emb_client_hot(wk->emb, own, &r, c->trainer.batch_size, &wk->hot);
    }
    return 0;
}

/* The worker threads, each with its client (DES: worker k of trainer t in
 * exchange group k). */
static int start_workers(struct job *j, struct ss_err *e)
{
    int rc = 0;
    struct exchange **xg = NULL; /* DES: xg[k * n_tr + t] */
    if (j->des) {
        xg = ss_xcalloc((size_t)j->n_tr * j->n_wk, sizeof *xg);
        for (int k = 0; rc == 0 && k < j->n_wk; k++)
            if (j->env)
                rc = j->env->des.make_exchange(j->env->arg, &xg[k], e);
            else
                exchange_local_group(xg + (size_t)k * j->n_tr, j->n_tr, &j->stop);
    }
    for (int t = 0; rc == 0 && t < j->n_tr; t++)
        for (int k = 0; rc == 0 && k < j->n_wk; k++) {
            struct worker *wk = &j->tr[t].workers[k];
            wk->tr = &j->tr[t];
            wk->id = k;
            if ((rc = worker_client(j, wk, t, xg ? &xg[(size_t)k * j->n_tr + t] : NULL, e)) < 0)
                break;
            pthread_mutex_init(&wk->mu, NULL);
            if (pthread_create(&wk->th, NULL, job_worker_main, wk) != 0) {
                fprintf(stderr, "shadowsync: cannot start worker thread %d of trainer %d "
                        "(the system's limit on threads: fewer job.trainers or "
                        "trainer.worker_threads)\n", k, t);
                abort();
            }
        }
    free(xg); /* collective: every trainer fails alike */
    return rc;
}

/* The trainers, their shadow threads and workers; the run's clock starts. */
int job_start_trainers(struct job *j, struct ss_err *e)
{
    j->tr = ss_xcalloc(j->n_tr, sizeof *j->tr);
    if (!j->env && sync_algo_needs(j->c->sync.algo) == SYNC_NEEDS_COLLECTIVE) {
        j->coll = ss_xcalloc(j->n_tr, sizeof *j->coll);
        collective_local_group(j->coll, j->n_tr, j->n_sync + 1);
    }
    int rc = 0;
    for (int t = 0; rc == 0 && t < j->n_tr; t++)
        rc = make_trainer(j, t, e);
    if (rc < 0 || (rc = start_shadows(j, e)) < 0)
        return rc;
    j->workers_left = j->n_tr * j->n_wk;
    j->t0 = ss_now() - j->base.elapsed;
    j->start = ss_now();
    j->frac0 = j->reader ? reader_fraction(j->reader) : -1; /* a feed's: at its first line */
    if (j->reader) {
        struct reader_stats rs0;
        reader_stats(j->reader, &rs0);
        j->sched_at0 = rs0.examples;
    }
    return start_workers(j, e);
}


void job_free_trainers(struct job *j)
{
    for (int t = 0; j->tr && t < j->n_tr; t++) {
        for (int k = 0; j->tr[t].workers && k < j->n_wk; k++) { /* none: failed before them */
            struct worker *wk = &j->tr[t].workers[k];
            pthread_mutex_destroy(&wk->mu);
            gpu_worker_free(wk->gpu);
            if (wk->emb && wk->emb != j->emb)
                wk->emb->ops->free(wk->emb);
        }
        free(j->tr[t].workers);
        free(j->tr[t].w);
        free(j->tr[t].state);
        gpu_dense_free(j->tr[t].gpu);
        if (j->tr[t].pinned)
            gpu_host_unregister(j->tr[t].stage), gpu_host_unregister(j->tr[t].snap);
        free(j->tr[t].stage);
        free(j->tr[t].snap);
        if (j->tr[t].shadow) /* ended (finish_trainers) */
            shadow_join(j->tr[t].shadow, NULL, NULL);
    }
    free(j->tr);
    for (int t = 0; j->coll && t < j->n_tr; t++)
        j->coll[t]->ops->free(j->coll[t]);
    free(j->coll);
    if (j->center)
        j->center->ops->free(j->center);
}
