/* The checks a run makes before it trains, embedded or cluster, past the
 * config's own (config.c's check_config: every key alone and the keys
 * together): what the keys ask of this machine and this launch (the
 * checkpoint and run directories, data.eval readable, one process's
 * threads, the roles a cluster job needs), the master's verdict shared with
 * every rank, and every rank running the same config. A refusal of the
 * config names where each key at fault was set (ss_config_fail: file:line
 * or --set), as a single key's error does. Also `shadowsync check`. */
#include "job.h" /* SS_MAX_THREADS */

/* data.eval holds examples this config reads (its first batch; a file or a
 * directory, not a pipe, which the probe would drain): a file of another
 * format is found before training, not after it. A second pass names the
 * first bad lines (data.report_bad_lines). */
static int probe_eval(const struct ss_config *c, struct ss_err *e)
{
    struct stat st;
    struct schema s;
    if (stat(c->data.eval, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) ||
        schema_from_config(&s, c, c->data.eval, e) < 0)
        return 0; /* said where the eval runs */
    for (int pass = 0; pass < 2; pass++) {
        struct reader *rd;
        struct ss_err why = {0};
        if (reader_open(&rd, c->data.eval, &s, 0, pass ? c->data.report_bad_lines : 0, &why) < 0)
            return ss_fail(e, why.code, "data.eval: %s (checked before training)", why.msg);
        struct batch b;
        batch_init(&b, 256, s.n_dense, s.n_cat);
        int rc = reader_next(rd, &b, &why);
        struct reader_stats rs;
        reader_stats(rd, &rs);
        int none = rc == 0 && b.n == 0;
        batch_free(&b);
        reader_close(rd);
        if (rc < 0) /* its first batch cannot be read: nor would the eval's */
            return ss_fail(e, rc, "data.eval: %s (checked before training)", why.msg);
        if (!none)
            return 0;
        if (pass)
            return ss_config_fail(e, c, "data.eval data.format data.separator", "data.eval = %s "
                                  "holds no example this config reads (%lld bad lines%s): check "
                                  "data.format, data.separator, data.header and the columns "
                                  "(data.*_cols), or point data.eval at eval data (checked "
                                  "before training)", c->data.eval, (long long)rs.bad_lines,
                                  rs.bad_lines && c->data.report_bad_lines
                                      ? ", the first named above" : "");
    }
    return 0;
}

/* checkpoint.dir can take checkpoints, this run's alone: it is made, locked
 * (two runs would delete each other's), and holds no earlier run's (a
 * resume from another directory writes into it too). */
static int check_checkpoint_dir(const struct ss_config *c, const char *resume, struct ss_err *e)
{
    const char *dir = c->checkpoint.dir;
    struct ss_err why = {0};
    if (ss_mkdir_p(dir, &why) < 0 || access(dir, W_OK) != 0)
        return ss_config_fail(e, c, "checkpoint.dir", "checkpoint.dir = %s cannot hold "
                              "checkpoints: %s (checked before training)", dir,
                              *why.msg ? why.msg : strerror(errno));
    int rc = ss_dir_lock("checkpoint.dir", dir, ".lock", e); /* (and a live run's checkpoints
                                                             * are no earlier run's) */
    struct stat a, b;
    int same = resume && stat(resume, &a) == 0 && stat(dir, &b) == 0 && a.st_dev == b.st_dev &&
               a.st_ino == b.st_ino;
    struct ckpt_meta_set found;
    if (rc < 0 || same || (rc = ckpt_refuse_earlier(dir, &found, e)) == 0 || !resume)
        return rc;
    char from[4400];
    struct ckpt_meta_set m;
    int skipped;
    struct ss_err ignored = {0};
    double run = ckpt_meta_get(&found, "run", 0);
    if (run != 0 && ckpt_latest(resume, from, sizeof from, &m, &skipped, &ignored) == 0 &&
        ckpt_meta_get(&m, "run", 0) == run && /* this run's own, taken since: a requeue */
        ckpt_meta_get(&found, "examples", 0) > ckpt_meta_get(&m, "examples", 0))
        return ss_config_fail(e, c, "checkpoint.dir", "checkpoint.dir = %s holds this run's "
                              "newer checkpoints (written after %s was resumed): --resume %s "
                              "continues from them", dir, resume, dir);
    return ss_config_fail(e, c, "checkpoint.dir", "--resume %s writes its own checkpoints into "
                          "checkpoint.dir = %s, which holds another run's (they would be "
                          "numbered on and deleted): give an empty checkpoint.dir, or --set "
                          "checkpoint.dir= for none", resume, dir);
}

int trainer_prerun_checks(const struct ss_config *c, const char *resume, struct ss_err *e)
{
    int rc = 0;
    if (c->data.label_col < 0)
        return ss_config_fail(e, c, "data.label_col", "data.label_col = -1 (no label column) "
                              "is for scoring unlabeled data with `shadowsync eval "
                              "--predictions`; training needs a label column");
    if (*c->checkpoint.dir) /* else every checkpoint fails, the run goes on */
        rc = check_checkpoint_dir(c, resume, e);
    if (rc == 0 && c->data.eval && *c->data.eval)
        rc = reader_check_eval(c->data.train, c->data.eval, e);
    if (rc == 0 && c->data.eval && *c->data.eval)
        rc = probe_eval(c, e);
    if (rc == 0 && *c->output.dir) { /* the checks passed: before a cluster job's plan is */
        struct ss_err why = {0};     /* written there (the run makes it, or names why, later) */
        if (ss_mkdir_p(c->output.dir, &why) == 0)
            rc = ss_dir_lock("output.dir", c->output.dir, ".run.lock", e);
    }
    return rc;
}

int trainer_embedded_checks(const struct ss_config *c, struct ss_err *e)
{
    int64_t threads = (int64_t)c->job.trainers * (c->trainer.worker_threads + 1);
    if (threads > SS_MAX_THREADS)
        return ss_config_fail(e, c, "job.trainers trainer.worker_threads", "job.trainers = %d x "
                              "(trainer.worker_threads = %d + a shadow thread) is %lld threads "
                              "in one process, more than the %d one process of shadowsync runs: "
                              "fewer trainers or workers (a cluster job runs each trainer in its "
                              "own process)", c->job.trainers, c->trainer.worker_threads,
                              (long long)threads, SS_MAX_THREADS);
    return 0;
}

int trainer_cluster_checks(const struct ss_config *c, struct ss_err *e)
{
    int des = c->embedding.placement == EMB_ON_TRAINERS;
    if (!des && c->job.embedding_ps < 1)
        return ss_config_fail(e, c, "job.embedding_ps embedding.placement", "a cluster job needs "
                              "job.embedding_ps >= 1 (the tables live on the embedding PSs), or "
                              "embedding.placement = trainers");
    if (des && c->job.embedding_ps > 0)
        return ss_config_fail(e, c, "embedding.placement job.embedding_ps", "embedding.placement "
                              "= trainers keeps the tables on the trainers: set "
                              "job.embedding_ps = 0 (its %d ranks would hold nothing)",
                              c->job.embedding_ps);
    if (sync_algo_needs(c->sync.algo) == SYNC_NEEDS_CENTER && c->job.sync_ps < 1)
        return ss_config_fail(e, c, "sync.algo job.sync_ps", "sync.algo = %s in a cluster job "
                              "needs job.sync_ps >= 1 (its central copy lives there)",
                              c->sync.algo);
    int64_t rows[SS_MAX_TABLES];
    struct ss_err later = {0}; /* the model's own errors: the roles name them */
    int n_tables = des ? 0 : model_rows_parse(c, rows, &later); /* (auto: not yet sized) */
    if ((double)c->trainer.batch_size * n_tables * c->model.dim * 4 > SS_MAX_FIELD_BYTES)
        return ss_config_fail(e, c, "trainer.batch_size model.dim model.rows data.cat_cols",
                              "trainer.batch_size = %d x %d tables x model.dim = %d floats is "
                              "more than the %u bytes one message between a trainer and an "
                              "embedding PS holds: a smaller trainer.batch_size",
                              c->trainer.batch_size, n_tables, c->model.dim, SS_MAX_FIELD_BYTES);
    return 0;
}

/* model.rows as the master resolved it, on every rank (auto: its pass
 * over data.train held the start's deadline, and the others waited on it
 * polling, leaving it the cores). */
static void share_rows(struct job_plan *p, struct ss_config *c)
{
    int len = p->rank == 0 ? (int)strlen(c->model.rows) + 1 : 0;
    MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
    char *rows = p->rank == 0 ? c->model.rows : g_malloc(len);
    MPI_Bcast(rows, len, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (p->rank != 0) {
        g_free(c->model.rows);
        c->model.rows = rows;
    }
    stall_guard_hold(p->start_guard, 0);
}

/* The master's optim.schedule = auto fit, on every rank. */
static void share_schedule(struct job_plan *p, struct ss_config *c)
{
    if (c->optim.schedule != SCHED_AUTO)
        return;
    int64_t v[3] = {c->optim.decay_start, c->optim.decay_examples, c->optim.auto_examples};
    double to = c->optim.decay_to;
    MPI_Bcast(v, 3, MPI_INT64_T, 0, MPI_COMM_WORLD);
    MPI_Bcast(&to, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    c->optim.decay_start = v[0], c->optim.decay_examples = v[1], c->optim.auto_examples = v[2];
    c->optim.decay_to = to;
    stall_guard_hold(p->start_guard, 0);
}

int trainer_master_checks(struct job_plan *p, struct ss_config *c, const char *resume,
                          struct ss_err *e)
{
    struct ss_err shared = {0};
    struct ckpt_meta_set m;
    int rc = 0, sized = model_rows_auto(c); /* the same on every rank */
    if (sized || c->optim.schedule == SCHED_AUTO)
        stall_guard_hold(p->start_guard, 1);
    if (p->rank == 0 && resume) {
        int skipped;
        rc = ckpt_latest(resume, p->resume_from, sizeof p->resume_from, &m, &skipped, &shared);
    }
    if (p->rank == 0 && rc == 0)
        rc = trainer_prerun_checks(c, resume, &shared);
    if (p->rank == 0 && rc == 0)
        rc = trainer_resolve_rows(c, resume ? p->resume_from : NULL,
                                  c->output.quiet ? NULL : stdout, &shared);
    if (p->rank == 0 && rc == 0)
        rc = trainer_resolve_schedule(c, resume ? &m : NULL, c->output.quiet ? NULL : stdout,
                                      &shared);
    if (p->rank == 0 && rc == 0)
        reader_warn_collisions(c, stderr); /* as the embedded default warns */
    MPI_Request req;
    MPI_Ibcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
    peer_wait_req(&req, 100, NULL, "the master's checks", "rank 0", &shared);
    MPI_Bcast(shared.msg, sizeof shared.msg, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Bcast(p->resume_from, sizeof p->resume_from, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rc < 0)
        return ss_fail(e, rc, "%s", shared.msg);
    if (sized)
        share_rows(p, c);
    share_schedule(p, c);
    return 0;
}

int trainer_same_config(struct job_plan *p, const struct ss_config *c, struct ss_err *e)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    uint64_t h = SS_FNV_BASIS;
    struct ss_config k = *c; /* shallow: printed only */
    k.data.train = "";
    if (f) {
        ss_config_print(&k, f);
        fclose(f);
        h = ss_fnv1a(h, text, len);
        free(text);
    }
    uint64_t *all = ss_xcalloc((size_t)p->size, sizeof *all);
    MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    char odd[256] = "";
    int n_odd = 0;
    for (int r = 1; r < p->size; r++)
        if (all[r] != all[0] && n_odd++ < 8) {
            size_t at = strlen(odd);
            snprintf(odd + at, sizeof odd - at, "%s%d", at ? ", " : "", r);
        }
    free(all);
    if (!n_odd)
        return 0;
    return ss_fail(e, SS_EINVAL, "rank(s) %s%s resolved another config than rank 0's (the file "
                   "on their host, or their --set, differ): every rank must run the same CONFIG "
                   "and --set, data.train aside (tools/submit launches them alike)", odd,
                   n_odd > 8 ? ", ..." : "");
}

int trainer_check(const struct ss_config *c, FILE *out, struct ss_err *e)
{
    struct model_layout l = {0};
    struct ss_config k = *c; /* auto: its widths checked with a row a table, for now */
    char **parts = g_strsplit(c->model.rows, "auto", -1);
    k.model.rows = g_strjoinv("1", parts);
    g_strfreev(parts);
    int rc = model_layout_init(&l, &k, e), sized = model_rows_auto(c);
    if (rc == 0 && sized)
        fprintf(stderr, "shadowsync: note: model.rows = %s: the auto tables are sized from "
                "data.train when the job starts (at most model.rows_budget_mb = %g MiB), and "
                "their memory is checked then\n", c->model.rows, c->model.rows_budget_mb);
    if (rc == 0 && !sized)
        rc = trainer_check_memory(c, &l, e);
    if (rc == 0)
        rc = rpc_address_keys_ok(c, e);
    if (rc == 0)
        fprintf(out, "trainers %d embedding_ps %d sync_ps %d readers %d\n", c->job.trainers,
                c->job.embedding_ps, c->job.sync_ps, c->job.readers);
    model_layout_free(&l);
    g_free(k.model.rows);
    return rc;
}
