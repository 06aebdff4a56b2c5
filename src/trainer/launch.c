/* `shadowsync train` once main has parsed it (DESIGN §2): without mpirun
 * the embedded default, every role in this process; under mpirun the
 * cluster job, every rank taking its role from the plan (trainers first,
 * then the embedding PSs, the sync PSs and the readers) and running it
 * until the job ends, a rank that fails ending the whole job. What either
 * checks before it trains is precheck.c's. */
#include "job.h"
#include "shadowsync/syncps.h"

#include <glib.h>

/* path made absolute (from the working directory) with its "." and ".."
 * components resolved by name; g_free it. */
static char *absolute_path(const char *path)
{
    char *cwd = g_get_current_dir();
    char *joined = g_build_filename(path[0] == '/' ? "/" : cwd, path, NULL);
    g_free(cwd);
    gchar **parts = g_strsplit(joined, "/", -1);
    int n = 0; /* the kept components, in place */
    for (int i = 0; parts[i]; i++) {
        if (!strcmp(parts[i], "..")) {
            n -= n > 0;
        } else if (*parts[i] && strcmp(parts[i], ".")) {
            char *t = parts[n];
            parts[n++] = parts[i];
            parts[i] = t;
        }
    }
    GString *out = g_string_new("");
    for (int i = 0; i < n; i++)
        g_string_append_printf(out, "/%s", parts[i]);
    if (!n)
        g_string_append_c(out, '/');
    g_strfreev(parts);
    g_free(joined);
    return g_string_free(out, FALSE);
}

/* The sync PSs' center past the dense floats: the hot rows, which start
 * from the tables' values (syncps_tail). arg: the job's hot_set. */
static void hot_tail_init(void *arg, const struct ss_config *c, const struct model_layout *l,
                          float *out)
{
    hot_initial(c, l, arg, out);
}

static int run_role(struct job_plan *p, const struct ss_config *c, struct ss_err *e)
{
    struct syncps_tail tail = {.rows = p->hot ? p->hot->n : 0, .init = hot_tail_init,
                               .arg = p->hot};
    switch (p->role) {
    case ROLE_TRAINER: return trainer_role_run(c, p, e);
    case ROLE_EMBEDDING_PS: return embps_role_run(c, p, e);
    case ROLE_SYNC_PS: return syncps_role_run(c, p, &tail, e);
    case ROLE_READER: return reader_role_run(c, p, e);
    default: return ss_fail(e, SS_ESTATE, "rank %d has no role", p->rank);
    }
}

/* Every rank of the job: the plan, the checks (the master's shared with all),
 * the tables' placement and the hot rows, then its role. */
static int cluster_train(struct ss_config *c, const char *resume)
{
    if (rpc_path_has_dotdot(c->checkpoint.dir)) { /* services refuse a save path with ".." */
        char *abs = absolute_path(c->checkpoint.dir);
        if (resume == c->checkpoint.dir) /* a bare --resume: it names the same string */
            resume = abs;
        g_free(c->checkpoint.dir);
        c->checkpoint.dir = abs;
    }
    struct job_plan p;
    struct ss_err e = {0};
    int rc = rpc_bootstrap(&p, c, &e);
    if (rc == 0) /* every rank alike, before any thread calls MPI */
        p.pulse = rpc_pulse_new(&p, c->sync.timeout_s);
    if (rc == 0 && c->sync.timeout_s > 0) { /* the heartbeat starts with the roles */
        double limit = 2 * c->sync.timeout_s > 10 ? 2 * c->sync.timeout_s : 10;
        char me[128], msg[512];
        rpc_rank_name(&p, p.rank, me, sizeof me);
        snprintf(msg, sizeof msg, "%s: the job's start (its checks, placement, services and "
                 "connections) has not ended in %g s (2 x sync.timeout_s, at least 10): a rank "
                 "has stalled (stopped, hung or swapped out); ending the job", me, limit);
        p.start_guard = stall_guard_arm(limit, msg);
    }
    ss_halt_on_signals(0); /* SIGUSR1 (mpirun passes it to every rank): the trainers stop */
    p.end_wait_s = 2 * c->sync.timeout_s;
    if (rc == 0 && (rc = trainer_same_config(&p, c, &e)) < 0 && p.rank != 0)
        rc = 0, p.role = -1; /* the master names the ranks; the others leave quietly */
    if (rc == 0 && p.role >= 0 && (rc = rpc_check_bind(c, &p, &e)) < 0 && p.rank != 0)
        rc = 0, p.role = -1; /* every rank knows; the master names it */
    if (rc == 0)
        rc = trainer_cluster_checks(c, &e);
    if (rc == 0 && p.rank == 0) {
        printf("# cluster job: %d ranks\n", p.size);
        for (int r = 0; r < p.size; r++) {
            int role, idx;
            rpc_assign_role(p.count, r, &role, &idx);
            printf("#   rank %d: %s %d on %s (%s)\n", r, rpc_role_name(role), idx, p.hosts[r],
                   p.addrs ? p.addrs[r] : "?");
        }
        if (c->job.sync_ps > 0 && sync_algo_needs(c->sync.algo) != SYNC_NEEDS_CENTER)
            printf("# job.sync_ps = %d: sync.algo = %s does not use the sync PSs (they hold "
                   "easgd's center), so they stay idle; job.sync_ps = 0 saves their ranks\n",
                   c->job.sync_ps, c->sync.algo);
        fflush(stdout);
    }
    if (rc == 0 && p.rank != 0)
        c->output.quiet = 1; /* the master prints the job's figures */
    if (rc == 0 && p.role >= 0 && (rc = trainer_master_checks(&p, c, resume, &e)) < 0 &&
        p.rank != 0)
        rc = 0, p.role = -1; /* the master names the failure; the others leave quietly */
    struct placement pl = {0};
    if (rc == 0 && p.role >= 0 && (rc = placement_for_job(c, &p, &pl, &e)) < 0 && p.rank != 0)
        rc = 0, p.role = -1; /* the master names the failure; the others leave quietly */
    p.placement = &pl;
    p.hot = NULL;
    if (rc == 0 && p.role >= 0 && (rc = hot_for_job(c, &p, &e)) < 0 && p.rank != 0)
        rc = 0, p.role = -1;
    if (rc == 0 && p.role >= 0) {
        if ((rc = run_role(&p, c, &e)) < 0) {
            /* A rank that fails ends the whole job at once: the others may be
             * inside a collective that now never completes. */
            char me[128];
            rpc_rank_name(&p, p.rank, me, sizeof me);
            fprintf(stderr, "shadowsync: %s: %s\n", me, e.msg);
            job_abort();
        }
        rpc_report_roles(&p, c->output.dir); /* every role ran to the job's end */
    } else if (p.rank == 0) {
        fprintf(stderr, "shadowsync: %s\n", e.msg);
        rc = rc < 0 ? rc : SS_EINVAL;
    }
    placement_free(&pl);
    hot_free(p.hot);
    fflush(NULL); /* a status of the master's below ends the ranks mpirun still has */
    rpc_finalize(&p);
    /* a stopped job: the master's status alone (every trainer has seen the stop) */
    return rc < 0 ? 1 : p.rank == 0 && ss_halt_signal() ? SS_EXIT_HALTED : 0;
}

/* model.rows = auto and optim.schedule = auto into numbers: the rows and
 * the size of the checkpoint a resume continues from, else from
 * data.train (its parts are hashed once, by the run's resume, unless the
 * rows must be read first). */
static int resolve_auto(struct ss_config *c, const char *resume, struct ss_err *e)
{
    char from[4300];
    struct ckpt_meta_set m;
    int skipped, rc = 0;
    FILE *say = c->output.quiet ? NULL : stdout;
    if (model_rows_auto(c) && resume)
        rc = ckpt_latest(resume, from, sizeof from, &m, &skipped, e);
    if (rc == 0 && model_rows_auto(c))
        rc = trainer_resolve_rows(c, resume ? from : NULL, say, e);
    int resumed = rc == 0 && resume && ckpt_newest_meta(resume, &m) == 0;
    if (rc == 0)
        rc = trainer_resolve_schedule(c, resumed ? &m : NULL, say, e);
    return rc;
}

/* The embedded default: the checks, the tables' rows, the resolved config,
 * the run. */
static int embedded_train(struct ss_config *c, const char *resume)
{
    struct ss_err e = {0};
    int rc;
    if ((rc = trainer_embedded_checks(c, &e)) < 0 ||
        (rc = reader_check_train(c->data.train, &e)) < 0 ||
        (rc = trainer_prerun_checks(c, resume, &e)) < 0 || (rc = resolve_auto(c, resume, &e)) < 0) {
        fprintf(stderr, "shadowsync: %s\n", e.msg);
        return 1;
    }
    if (!c->output.quiet) {
        printf("# shadowsync %s — resolved config:\n", SS_VERSION);
        ss_config_print(c, stdout);
        if (c->job.embedding_ps > 0 || c->job.sync_ps > 0 || c->job.readers > 0)
            printf("# job.embedding_ps = %d, job.sync_ps = %d, job.readers = %d are the ranks of "
                   "a cluster job (tools/submit, or mpirun): without mpirun this is the embedded "
                   "default, the tables, the EASGD center and the reader in this process\n",
                   c->job.embedding_ps, c->job.sync_ps, c->job.readers);
        fflush(stdout);
    }
    reader_warn_collisions(c, stderr); /* after the config, where it is seen */
    ss_halt_on_signals(1);
    if (trainer_run(c, resume, &e) < 0) {
        fprintf(stderr, "shadowsync: %s\n", e.msg);
        return 1;
    }
    return ss_halt_signal() ? SS_EXIT_HALTED : 0;
}

int trainer_launch(struct ss_config *c, const char *resume)
{
    return rpc_under_mpirun() ? cluster_train(c, resume) : embedded_train(c, resume);
}
